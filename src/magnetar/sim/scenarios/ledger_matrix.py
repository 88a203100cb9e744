"""Scenario ``ledger-matrix``: one replicated ledger over real bookies, under one kind of fault.

Nodes: ``bookie0..bookieE`` (E + 1, one spare for ensemble changes) each run a real ``Bookie``
core on the node's ``SimDisk``/``SimKeyValueStore`` behind a bookie protocol server on
``SimNetwork`` (the server class is injected: ``magnetar.node.bookie.BookieServer`` in
tests and the CLI, a negative control may wrap it) and register under
``/ledgers/available`` in one shared memory metadata store on the simulated clock. A ``writer``
node runs ``LedgerManager``/``LedgerHandle`` over ``BookieClientTransport`` and writes
``entries_count`` entries (a few in flight at a time), logging every acknowledgement it gets.
Recoverer nodes ``rec1``/``rec2`` open the ledger with recovery afterwards (``rec2`` only if
``rec1`` died).

Faults (``MatrixOptions.fault``), all timings from the world's seeded ``Rng``:

* ``writer-point``   crash the writer at one of W1-W8 (W6/W7 with a bookie crash forcing an
  ensemble change; W8 at close)
* ``bookie-point``   crash an ensemble bookie at one of B1-B8, then restart it
* ``recovery-point`` crash the writer, then ``rec1`` at one of R1-R3; ``rec2`` recovers
* ``bookie-restart`` crash (power cut, torn disk) and restart random bookies while writing
* ``power-cut``      crash every bookie at once while writing, then restart them
* ``partition``      partition the writer from a random bookie for a while
* ``zombie``         hang the writer (W5), recover meanwhile, then let the writer resume
* ``lost-fence``     as ``zombie`` with the recoverer cut off from one ensemble bookie (the
  BookKeeper 2614 setting: one fence never arrives)

Then every bookie is power-cut and restarted (fences and entries must survive), and the
evidence is collected for the separate checker (``ledger_matrix_check``): the writer's acks,
every metadata state seen, two independent readings of the closed ledger, every bookie's copy
of every entry, and normal-add probes of the last ensemble. Breaks (negative controls):
``ack-before-fsync`` (bookies answer adds before the journal fsync), ``recovery-without-fencing``
and ``truncate-to-lac`` (``RecoveryMode`` switches of the recoverers).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from magnetar import faults
from magnetar.base.errors import FencedError, MagnetarError
from magnetar.base.io import Network
from magnetar.ledger.bookie_transport import BookieClientTransport
from magnetar.ledger.config import LedgerClientConfig
from magnetar.ledger.directory import MetadataBookieDirectory
from magnetar.ledger.errors import NoSuchEntryError
from magnetar.ledger.ledger_metadata import LedgerMetadata
from magnetar.ledger.manager import LedgerManager
from magnetar.ledger.metadata_adapter import MetadataStoreAdapter
from magnetar.ledger.metadata_ops import LedgerMetadataStore
from magnetar.ledger.placement import RandomPlacement
from magnetar.ledger.recovery import RecoveryMode
from magnetar.metadata.memory import MemoryMetadataServer
from magnetar.protocol.bookie.codec import EncodedEntry, Status
from magnetar.sim.clock import SimClock
from magnetar.sim.scenarios import ledger_matrix_check
from magnetar.sim.scenarios.base import Verdict
from magnetar.sim.scenarios.ledger_matrix_check import Evidence
from magnetar.sim.world import NodeContext, NodeMain, NodeState, SimWorld
from magnetar.storage import Bookie, BookieConfig, BookieStatus
from magnetar.storage.bookie import AddRun, OnRunDone

FAULTS = (
    "writer-point", "bookie-point", "recovery-point", "bookie-restart", "power-cut", "partition", "zombie",
    "lost-fence",
)
BREAK_ACK_BEFORE_FSYNC = "ack-before-fsync"
BREAK_RECOVERY_WITHOUT_FENCING = "recovery-without-fencing"
BREAK_TRUNCATE_TO_LAC = "truncate-to-lac"
BREAKS = frozenset({BREAK_ACK_BEFORE_FSYNC, BREAK_RECOVERY_WITHOUT_FENCING, BREAK_TRUNCATE_TO_LAC})

PORT = 3181
WRITER_WINDOW_COUNT_MAX = 4  # adds the writer keeps in flight
PHASE_S_MAX = 60.0  # virtual seconds any phase may take before the run is declared stuck
POLL_S = 0.005
RECOVERY_ATTEMPTS_MAX = 20
LOST_FENCE_HEAL_S = 1.0  # the recoverer's cut to one bookie lasts this long
WRITER_POINTS = [p for p in faults.REGISTRY if p.startswith("ledger.") and not p.startswith("ledger.recovery.")]
BOOKIE_POINTS = [p for p in faults.REGISTRY if p.startswith("bookie.")]
RECOVERY_POINTS = [p for p in faults.REGISTRY if p.startswith("ledger.recovery.")]
ZOMBIE_POINT = "ledger.before_send_next_entry"
CLIENT_CONFIG = LedgerClientConfig(
    add_timeout_ms=1_000, read_timeout_ms=1_000, speculative_read_timeout_ms=200, recovery_fence_timeout_ms=1_000
)
BOOKIE_CONFIG = BookieConfig(
    write_cache_bytes_max=2 * 1024 * 1024,
    entry_bytes_max=256 * 1024,
    journal_queue_bytes_max=1024 * 1024,
    journal_group_bytes_max=16 * 1024,
    journal_file_bytes_max=64 * 1024,
    entry_log_bytes_max=64 * 1024,
    checkpoint_interval_ms=30,
    disk_free_bytes_min=0,
)


class BookieService(Protocol):
    async def start(self, host: str, port: int) -> int: ...

    async def stop(self) -> None: ...


#: Builds the protocol server of one bookie (``magnetar.node.bookie.BookieServer``).
ServerFactory = Callable[[Bookie, Network], BookieService]


@dataclass(frozen=True, slots=True)
class MatrixOptions:
    ensemble_size: int = 3
    write_quorum_size: int = 3
    ack_quorum_size: int = 2
    fault: str = "bookie-restart"
    entries_count: int = 30
    breaks: frozenset[str] = field(default_factory=frozenset)


class _AckEarlyBookie(Bookie):
    """Negative control: answers an accepted add at once, before its journal fsync."""

    def add_entry(self, entry: EncodedEntry, master_key: bytes, recovery: bool, on_done: Callable[[Status], None]) -> None:
        answered: list[Status] = []

        def once(status: Status) -> None:
            if not answered:
                answered.append(status)
                on_done(status)

        super().add_entry(entry, master_key, recovery, once)
        once(Status.OK)

    def add_entries_runs(self, runs: Sequence[AddRun]) -> None:
        """The same for runs (``BookieServer`` hands a read's adds over as runs): every entry
        not refused is answered OK once the runs are queued, before any journal write."""
        early: list[AddRun] = []
        for entries, master_key, recovery, on_done in runs:
            early.append((entries, master_key, recovery, _answer_once(on_done)))
        super().add_entries_runs(early)
        for entries, _, _, once in early:
            once(range(len(entries)), Status.OK)


def _answer_once(on_done: OnRunDone) -> OnRunDone:
    """``on_done`` for each index at most once (a later answer for an answered index is dropped)."""
    answered: set[int] = set()

    def once(indexes: Sequence[int], status: Status) -> None:
        fresh = [index for index in indexes if index not in answered]
        if fresh:
            answered.update(fresh)
            on_done(fresh, status)

    return once


def run_matrix(world: SimWorld, options: MatrixOptions, serve: ServerFactory) -> Verdict:
    """Run one matrix cell in ``world``; the verdict comes from ``ledger_matrix_check``."""
    unknown = options.breaks - BREAKS
    if unknown or options.fault not in FAULTS:
        raise ValueError(f"unknown fault {options.fault!r} or breaks {sorted(unknown)}")
    run = _MatrixRun(world, options, serve)
    world.run(run.controller())
    run.evidence.writer_outcome = run.writer_done[0] if run.writer_done else "crashed"
    run.evidence.sim_failures = list(world.failures)
    return ledger_matrix_check.check(run.evidence)


class _MatrixRun:
    """One cell's nodes (bookies, the writer, recoverers, the evidence collector) and the
    controller that starts them, injects the cell's fault and waits for each phase."""

    def __init__(self, world: SimWorld, options: MatrixOptions, serve: ServerFactory) -> None:
        self.world = world
        self.options = options
        self.serve = serve
        self.rng = world.rng.fork("ledger-matrix")
        self.meta_server = MemoryMetadataServer(SimClock())
        self.evidence = Evidence(options.ensemble_size, options.write_quorum_size, options.ack_quorum_size)
        self.bookies: dict[str, Bookie] = {}
        self.names = [f"bookie{i}" for i in range(options.ensemble_size + 1)]
        self.mode = RecoveryMode.CORRECT
        if BREAK_RECOVERY_WITHOUT_FENCING in options.breaks:
            self.mode = RecoveryMode.NO_FENCING
        elif BREAK_TRUNCATE_TO_LAC in options.breaks:
            self.mode = RecoveryMode.TRUNCATE_TO_LAC
        self.writer_done: list[str] = []
        self.recovered: dict[str, LedgerMetadata] = {}

    # --- the nodes -------------------------------------------------------------------------------
    async def bookie_main(self, ctx: NodeContext) -> None:
        kind = _AckEarlyBookie if BREAK_ACK_BEFORE_FSYNC in self.options.breaks else Bookie
        bookie = kind(ctx.disk, ctx.kv("index"), ctx.clock, BOOKIE_CONFIG)
        await bookie.start()
        server = self.serve(bookie, ctx.network)
        port = await server.start(ctx.host, PORT)
        session = await self.meta_server.connect(session_timeout_ms=2_000)
        path = f"/ledgers/available/{ctx.host}:{port}"
        if await session.exists(path):
            await session.delete(path)  # the previous incarnation's node, until its session expires
        await session.create(path, b"{}", ephemeral=True)
        self.bookies[ctx.name] = bookie
        while bookie.status is BookieStatus.WRITABLE:
            await ctx.clock.sleep(3600)

    async def manager_for(self, ctx: NodeContext) -> LedgerManager:
        session = await self.meta_server.connect(session_timeout_ms=2_000)
        transport = BookieClientTransport(ctx.network, ctx.clock, CLIENT_CONFIG)
        return LedgerManager(
            store=LedgerMetadataStore(MetadataStoreAdapter(session)),
            transport=transport,
            directory=MetadataBookieDirectory(session),
            placement=RandomPlacement(ctx.rng.fork("placement")),
            clock=ctx.clock,
            config=CLIENT_CONFIG,
            on_close=transport.close,
        )

    async def writer_main(self, ctx: NodeContext) -> None:
        options, evidence = self.options, self.evidence
        manager = await self.manager_for(ctx)
        handle = await manager.create_ledger(options.ensemble_size, options.write_quorum_size, options.ack_quorum_size)
        evidence.ledger_id = handle.ledger_id
        evidence.first_ensemble = handle.ensemble
        # A list, not a set: a set of tasks iterates in address order, which differs between
        # processes (and with the garbage collector's timing), and the order the window is
        # awaited or cancelled in decides the loop's steps.
        window: list[asyncio.Task[int]] = []
        payload_rng = ctx.rng.fork("payloads")

        async def add(payload: bytes) -> int:
            entry_id = await handle.add_entry(payload)
            evidence.record_ack(entry_id, payload, ctx.clock.monotonic_ns())
            return entry_id

        try:
            for index in range(options.entries_count):
                payload = b"%d:" % index + payload_rng.randbytes(payload_rng.randint(1, 600))
                window.append(asyncio.ensure_future(add(payload)))
                if len(window) >= WRITER_WINDOW_COUNT_MAX:
                    await asyncio.wait(window, return_when=asyncio.FIRST_COMPLETED)
                    done = [t for t in window if t.done()]
                    window = [t for t in window if not t.done()]
                    failures = [t.exception() for t in done if t.exception() is not None]
                    if failures:
                        raise failures[0]  # type: ignore[misc]
            for task in window:
                await task
            await handle.close()
            self.writer_done.append("closed")
        except MagnetarError as exc:
            for task in window:
                task.cancel()
                task.add_done_callback(lambda t: None if t.cancelled() else t.exception())
            self.writer_done.append(f"failed: {type(exc).__name__}")
        finally:
            await manager.close()

    def recoverer_main(self, name: str) -> NodeMain:
        async def main(ctx: NodeContext) -> None:
            manager = await self.manager_for(ctx)
            ledger_id = self.evidence.ledger_id
            assert ledger_id is not None
            for _ in range(RECOVERY_ATTEMPTS_MAX):
                try:
                    self.recovered[name] = await manager.recover_ledger(ledger_id, mode=self.mode)
                    break
                except MagnetarError as exc:
                    ctx.trace("recovery-retry", f"{type(exc).__name__}: {exc}")
                    await ctx.clock.sleep(0.2)
            await manager.close()

        return main

    # --- waiting and world actions ---------------------------------------------------------------
    async def until(self, condition: Callable[[], bool], what: str) -> None:
        deadline = self.world.now_s() + PHASE_S_MAX
        while not condition():
            if self.world.now_s() > deadline:
                raise AssertionError(f"stuck waiting for {what}")
            await self.world.sleep(POLL_S)

    def writer_finished(self) -> bool:
        return bool(self.writer_done) or self.world.state("writer") is not NodeState.RUNNING

    def all_writable(self) -> bool:
        return all(
            self.world.state(n) is NodeState.RUNNING and n in self.bookies
            and self.bookies[n].status is BookieStatus.WRITABLE
            for n in self.names
        )

    def restart(self, name: str) -> None:
        self.bookies.pop(name, None)
        self.world.restart(name)

    def power_cut(self, name: str, why: str) -> None:
        if self.world.state(name) is NodeState.RUNNING:
            self.world.crash(name, why)
        self.restart(name)

    def ensemble_names(self) -> list[str]:
        return [b.host for b in self.evidence.first_ensemble]

    async def watch_metadata(self) -> None:
        session = await self.meta_server.connect(session_timeout_ms=600_000)
        store = LedgerMetadataStore(MetadataStoreAdapter(session))
        while True:
            if self.evidence.ledger_id is not None:
                try:
                    meta = (await store.read(self.evidence.ledger_id)).metadata
                    self.evidence.record_state(meta.state.value)
                except MagnetarError:
                    pass
            await self.world.sleep(POLL_S)

    async def heal_after(self, delay_s: float) -> None:
        await self.world.sleep(delay_s)
        self.world.network.heal()

    async def recover(self, fault: str) -> None:
        world = self.world
        if fault == "recovery-point":
            faults.arm(self.rng.choice(RECOVERY_POINTS), "crash", node="rec1")
        world.add_node("rec1", self.recoverer_main("rec1"))
        await self.until(lambda: "rec1" in self.recovered or world.state("rec1") is not NodeState.RUNNING, "rec1")
        faults.disarm_all()
        if "rec1" not in self.recovered:
            world.add_node("rec2", self.recoverer_main("rec2"))
            await self.until(lambda: "rec2" in self.recovered or world.state("rec2") is not NodeState.RUNNING, "rec2")

    # --- the controller --------------------------------------------------------------------------
    async def controller(self) -> None:
        world, fault = self.world, self.options.fault
        watcher = asyncio.ensure_future(self.watch_metadata())
        for name in self.names:
            world.add_node(name, self.bookie_main)
        await self.until(self.all_writable, "bookies")
        zombie = fault in ("zombie", "lost-fence")
        self._arm(fault, zombie)
        world.add_node("writer", self.writer_main)
        await self.until(lambda: self.evidence.ledger_id is not None or self.writer_finished(), "ledger creation")
        await self._disturb(fault)
        if zombie:
            await self._zombie_phase(fault)
        else:
            await self._recovery_phase(fault)
        faults.disarm_all()
        for name in self.names:
            self.power_cut(name, "final power cut")
        await self.until(self.all_writable, "bookies after the final power cut")
        world.add_node("checker", self.collect)
        await self.until(lambda: self.evidence.collected or world.state("checker") is not NodeState.RUNNING,
                         "collection")
        watcher.cancel()

    def _arm(self, fault: str, zombie: bool) -> None:
        """Arm the fault points of the cell before the writer starts."""
        rng, entries = self.rng, self.options.entries_count
        if fault == "writer-point":
            point = rng.choice(WRITER_POINTS)
            faults.arm(point, "crash", from_hit=rng.randint(1, max(1, entries // 2)), node="writer")
        elif fault == "bookie-point":
            faults.arm(rng.choice(BOOKIE_POINTS), "crash", from_hit=rng.randint(1, 40), node=f"bookie{rng.randint(0, 2)}")
        elif zombie:
            faults.arm(ZOMBIE_POINT, "hang", from_hit=rng.randint(2, max(2, entries - 2)), node="writer")

    async def _disturb(self, fault: str) -> None:
        """The cell's fault while the writer writes: crashes, a power cut, a partition."""
        world, rng = self.world, self.rng
        if fault == "writer-point" and rng.random() < 0.5:
            await world.sleep(rng.random() * 0.05)
            victim = rng.choice(self.ensemble_names())
            world.crash(victim, "force an ensemble change")
            self.restart(victim)
        elif fault == "bookie-restart":
            for _ in range(rng.randint(1, 3)):
                await world.sleep(rng.random() * 0.05)
                self.power_cut(rng.choice(self.names), "random bookie crash")
        elif fault == "power-cut":
            await world.sleep(rng.random() * 0.05)
            for name in self.names:
                world.crash(name, "power cut")
            for name in self.names:
                self.restart(name)
        elif fault == "partition":
            await world.sleep(rng.random() * 0.03)
            victim = rng.choice(self.ensemble_names())
            world.network.partition("writer", victim)
            await world.sleep(rng.random() * 2.0)
            world.network.heal("writer", victim)
        elif fault == "recovery-point":
            await world.sleep(rng.random() * 0.05)
            world.crash("writer", "writer dies before recovery")

    async def _zombie_phase(self, fault: str) -> None:
        """The writer hangs at the zombie point while another client recovers (fences) the ledger;
        then the zombie is released and must fail."""
        world = self.world
        await self.until(lambda: bool(faults.hits(ZOMBIE_POINT) >= faults.armed()[ZOMBIE_POINT].from_hit
                                      if ZOMBIE_POINT in faults.armed() else True) or self.writer_finished(),
                         "zombie hang")
        healer: asyncio.Future[None] | None = None
        if fault == "lost-fence":
            world.network.partition("rec1", self.rng.choice(self.ensemble_names()))
            # Heal later: with Qw = Qa a recovery that cannot write back to every bookie
            # of a write set must wait (correctly) until it can.
            healer = asyncio.ensure_future(self.heal_after(LOST_FENCE_HEAL_S))
        await self.recover(fault)
        if healer is not None:
            healer.cancel()
        world.network.heal()
        world.release(ZOMBIE_POINT)
        await self.until(self.writer_finished, "zombie writer")

    async def _recovery_phase(self, fault: str) -> None:
        """The writer finished (or died): bookies come back, then a client recovers the ledger."""
        await self.until(self.writer_finished, "writer")
        faults.disarm_all()
        for name in self.names:
            if self.world.state(name) is not NodeState.RUNNING:
                self.restart(name)
        await self.until(self.all_writable, "bookies back")
        await self.recover(fault)

    # --- the evidence ----------------------------------------------------------------------------
    async def collect(self, ctx: NodeContext) -> None:
        """Gather the checker's evidence (reads only, plus normal-add probes past the end)."""
        evidence = self.evidence
        managers = [await self.manager_for(ctx) for _ in range(2)]
        ledger_id = evidence.ledger_id
        assert ledger_id is not None
        closed = (await managers[0].store.read(ledger_id)).metadata
        evidence.closed = closed
        for manager in managers:
            evidence.readings.append(await _read_all(manager, ledger_id))
        transport = BookieClientTransport(ctx.network, ctx.clock, CLIENT_CONFIG)
        await self._collect_copies(transport, closed, ledger_id)
        await self._probe(transport, closed, ledger_id)
        await transport.close()
        for manager in managers:
            await manager.close()
        evidence.collected = True

    async def _collect_copies(self, transport: BookieClientTransport, closed: LedgerMetadata, ledger_id: int) -> None:
        """What each bookie of the ledger holds, entry by entry, up to two past the end."""
        evidence = self.evidence
        top = max([closed.last_entry_id, *evidence.acked]) + 2
        for bookie in sorted(closed.bookies(), key=str):
            for entry_id in range(top + 1):
                try:
                    entry = await transport.read(bookie, ledger_id, entry_id, fence=False, master_key=b"")
                    evidence.copies.setdefault(entry_id, {})[bookie] = entry.payload
                except NoSuchEntryError:
                    evidence.negatives.setdefault(entry_id, set()).add(bookie)
                except MagnetarError:
                    continue

    async def _probe(self, transport: BookieClientTransport, closed: LedgerMetadata, ledger_id: int) -> None:
        """A normal add past the end on each bookie of the last fragment: fenced ones refuse it."""
        probe = EncodedEntry.build(ledger_id, closed.last_entry_id + 1, closed.last_entry_id, b"probe")
        for index, bookie in enumerate(closed.last_fragment.ensemble):
            try:
                await transport.add(bookie, probe, recovery=False, master_key=b"")
                self.evidence.probe_accepted.add(index)
            except FencedError:
                self.evidence.probe_fenced.add(index)
            except MagnetarError:
                continue


async def _read_all(manager: LedgerManager, ledger_id: int) -> dict[int, bytes]:
    """Every readable entry of a closed ledger through a reader (an open one reads nothing)."""
    reader = await manager.open_ledger_no_recovery(ledger_id)
    reading: dict[int, bytes] = {}
    for entry_id in range(reader.last_add_confirmed + 1 if reader.is_closed else 0):
        try:
            reading[entry_id] = (await reader.read_entry(entry_id)).payload
        except MagnetarError:
            continue  # unreadable: the checker reports it
    return reading
