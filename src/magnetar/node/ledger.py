"""The ledger client node wiring (both worlds): ``open_ledger_manager`` / ``close_ledger_manager``.

Wires a ``LedgerManager`` from one metadata-store session: ledger metadata under ``/ledgers``
(``MetadataStoreAdapter``), the live writable bookies from ``/ledgers/available``
(``MetadataBookieDirectory``), rack-aware placement (``ledger.rack_placement``; random among equals, from the given ``Rng``), and pooled bookie
connections over the given ``Network`` (``BookieClientTransport``). It does no I/O of its own,
so the simulator composes the client the same way with its simulated network and clock.
The caller keeps owning ``store``; ``close_ledger_manager`` closes only the bookie connections.

``LocalFirstTransport``: a process that runs bookies itself (``magnetar standalone``) reaches
them by direct calls into their storage core, as BookKeeper's client does for bookies in its own
JVM (``LocalBookiesRegistry``): no frames encoded and decoded twice, no loopback socket, no event
loop passes for the socket in each direction. The storage core is the same one the bookie
server calls, so every status (fenced, read-only, unauthorized, too large), the journal fsync
before an OK and every storage fault point are unchanged, and entries read back are digest
checked as over the network. Every other bookie is reached over the network.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Mapping, Sequence
from functools import partial
from typing import Any, Protocol

from magnetar.base.clock import Clock
from magnetar.base.errors import MagnetarError
from magnetar.base.io import Network
from magnetar.base.loop_ref import LoopRef
from magnetar.base.rng import Rng
from magnetar.base.types import BookieId
from magnetar.ledger._deadline import keep_in_background
from magnetar.ledger.bookie_client import checked_entry
from magnetar.ledger.bookie_transport import BookieClientTransport, entry_of, last_entry_of, status_error
from magnetar.ledger.config import LedgerClientConfig
from magnetar.ledger.directory import MetadataBookieDirectory
from magnetar.ledger.errors import BookieUnavailableError
from magnetar.ledger.handle import RunReplies
from magnetar.ledger.manager import LedgerManager
from magnetar.ledger.metadata_adapter import MetadataStoreAdapter
from magnetar.ledger.metadata_ops import LedgerMetadataStore
from magnetar.ledger.rack_placement import RackAwarePlacement
from magnetar.ledger.racks import RackedBookieDirectory
from magnetar.ledger.transport import AddReplyCallback, LastEntryReply
from magnetar.metadata.api import MetadataStore
from magnetar.protocol.bookie.codec import EncodedEntry, ReadResponse, Status
from magnetar.storage import Bookie
from magnetar.storage.bookie import AddRun, ReadResult


class LocalBookie(Protocol):
    """What ``LocalFirstTransport`` calls on a bookie's storage core (``storage.Bookie``): the
    operations the bookie server serves, without frames."""

    def needs_backpressure(self) -> bool: ...

    async def wait_for_room(self) -> None: ...

    def add_entries_runs(self, runs: Sequence[AddRun]) -> None: ...

    def read_entry_or_last(self, ledger_id: int, entry_id: int | None) -> ReadResult: ...

    async def fence_and_read(self, ledger_id: int, entry_id: int | None, master_key: bytes) -> ReadResult: ...

    async def write_lac(self, ledger_id: int, lac: int, master_key: bytes) -> tuple[Status, int]: ...


class _LocalRun:
    """One ``add_run`` (or ``add``) to a local bookie: its entries, how it is stored
    (``recovery``, ``master_key``) and who is told each entry's outcome, ``on_reply(index,
    error)``. The bookie answers it by calling it (``done``; ``Bookie.add_entries_runs``: a run of
    indexes per call; the run itself is the callback, no bound method per run), never from
    inside the caller's ``add_run`` (the runs are handed to the
    bookie from the transport's own callback, or the first one of a pass right away with
    ``handing_over`` set to the running loop: an answer given then, a refusal, waits for the
    next loop pass on it)."""

    __slots__ = ("bookie", "entries", "handing_over", "master_key", "on_reply", "recovery")

    def __init__(self, bookie: BookieId, entries: Sequence[EncodedEntry], recovery: bool, master_key: bytes,
                 on_reply: AddReplyCallback) -> None:
        self.bookie = bookie
        self.entries = entries
        self.recovery = recovery
        self.master_key = master_key
        self.on_reply = on_reply
        #: The running loop while the run is being handed over (the transport's ``LoopRef``: no
        #: ``getpid`` per lookup), else None.
        self.handing_over: asyncio.AbstractEventLoop | None = None

    def __call__(self, indexes: Sequence[int], status: Status) -> None:
        self.done(indexes, status)

    def done(self, indexes: Sequence[int], status: Status) -> None:
        handing_over = self.handing_over
        if handing_over is not None:
            handing_over.call_soon(self._answer, indexes, status)
        elif status is Status.OK:  # the journal's answer, once per group: no call more than needed
            self._stored(indexes)
        else:
            self._answer(indexes, status)

    def _stored(self, indexes: Sequence[int]) -> None:
        on_reply = self.on_reply
        if isinstance(on_reply, RunReplies):
            on_reply.stored(indexes)  # a writer's run: one call for the run's stored entries
            return
        for index in indexes:
            on_reply(index, None)

    def _answer(self, indexes: Sequence[int], status: Status) -> None:
        if status is Status.OK:
            self._stored(indexes)
            return
        on_reply = self.on_reply
        for index in indexes:
            entry = self.entries[index]
            on_reply(index, status_error(self.bookie, status, f"add {entry.ledger_id}:{entry.entry_id}"))


class _LocalSlot:
    """A local bookie as ``add_run`` finds it: its storage core (None once the transport closed)
    and the runs of this loop pass gathered for it (None: none went yet in this pass). Found by a
    scan of a few slots by identity, then equality: no ``BookieId`` hash (a tuple built and
    hashed) per run, where a dict keyed by bookie took three per run."""

    __slots__ = ("bookie", "core", "gathered", "seen")

    def __init__(self, bookie: BookieId, core: LocalBookie) -> None:
        self.bookie = bookie
        #: The last other instance equal to ``bookie`` that a run named (the ensembles' instance,
        #: parsed from the bookie's registration): found by identity from then on, not by
        #: ``BookieId.__eq__`` per run (~450 cycles per message at 10,000 topics, session 23).
        self.seen = bookie
        self.core: LocalBookie | None = core
        self.gathered: list[_LocalRun] | None = None


def _settle_local(result: asyncio.Future[None], _index: int, error: BaseException | None) -> None:
    if result.done():
        return
    if error is None:
        result.set_result(None)
    else:
        result.set_exception(error)
        result.exception()


class LocalFirstTransport:
    """``BookieTransport``: the bookies in ``local`` by direct calls into
    their storage core, every other one through ``remote``."""

    def __init__(self, local: Mapping[BookieId, LocalBookie], remote: BookieClientTransport) -> None:
        self._local = dict(local)
        self._slots = [_LocalSlot(bookie, core) for bookie, core in self._local.items()]
        self._remote = remote
        self._waiting: dict[BookieId, deque[_LocalRun]] = {}
        #: The slots with runs of this loop pass not yet handed to their bookie (``add_run``),
        #: and the callback that hands them over together.
        self._gathering: list[_LocalSlot] = []
        self._flush_handle: asyncio.Handle | None = None
        self._flush_then = self._flush  # bound once (compiled: ``self._flush`` as a value is a new object per pass)
        #: The running loop, looked up once (``asyncio.get_running_loop`` makes a ``getpid``
        #: system call per lookup: this transport's were ~0.8 per message at a steady 2,000 msg/s).
        self._loop_ref = LoopRef()
        self.gathered_runs_count = 0  # runs handed over by ``_flush`` (tests, the performance notes)
        self._background: set[asyncio.Task[Any]] = set()

    @property
    def local_bookies(self) -> frozenset[BookieId]:
        return frozenset(self._local)

    async def close(self) -> None:
        if self._flush_handle is not None:
            self._flush_handle.cancel()
            self._flush_handle = None
        gathering, self._gathering = self._gathering, []
        for slot in self._slots:
            slot.core = None
        self._slots = []
        for slot in gathering:  # not handed over: the bookie is no longer reachable
            runs, slot.gathered = slot.gathered or [], None
            for run in runs:
                run.done(range(len(run.entries)), Status.UNAVAILABLE)
        for task in list(self._background):
            task.cancel()
        self._local.clear()  # the bookies are their runner's to stop
        await self._remote.close()

    def add(self, bookie: BookieId, entry: EncodedEntry, recovery: bool, master_key: bytes) -> asyncio.Future[None]:
        """The one add operation: ``add_run`` of one entry, as a future."""
        if bookie not in self._local:
            return self._remote.add(bookie, entry, recovery, master_key)
        result: asyncio.Future[None] = self._loop_ref.get().create_future()
        self.add_run(bookie, (entry,), recovery, master_key, partial(_settle_local, result))
        return result

    def add_run(self, bookie: BookieId, entries: Sequence[EncodedEntry], recovery: bool, master_key: bytes,
                on_reply: AddReplyCallback) -> None:
        """A local bookie stores the runs of one loop pass (the SENDs of a receive for many
        topics: a run per ledger) in one call (``Bookie.add_entries_runs``: each run checked,
        noted and journaled as its own run, one answer per run per journal group): the first run
        of a pass for a bookie goes at once and schedules ``_flush``, the later ones wait for it
        (one call for all of them; ``_flush`` runs before the journal's look that the first
        run scheduled, so they share its group and no answer comes later than it would have).
        A bookie without room takes nothing: the runs wait in line behind the runs before
        them, as the server stops reading while the bookie is full, and go whole once it has
        room again. Per ledger (per caller) the runs reach the bookie in call order."""
        slot = None
        for local in self._slots:  # a few: identity first, equality only for another instance
            if local.seen is bookie or local.bookie is bookie:
                slot = local
                break
            if local.bookie == bookie:
                local.seen = bookie
                slot = local
                break
        core = slot.core if slot is not None else None
        if slot is None or core is None:
            self._remote.add_run(bookie, entries, recovery, master_key, on_reply)
            return
        run = _LocalRun(bookie, entries, recovery, master_key, on_reply)
        gathered = slot.gathered
        if gathered is not None:
            gathered.append(run)  # handed over by ``_flush`` with the pass's other runs
            return
        loop = self._loop_ref.get()
        if self._flush_handle is None:  # scheduled before the first run's journal look
            self._flush_handle = loop.call_soon(self._flush_then)
        slot.gathered = []
        self._gathering.append(slot)
        if (self._waiting and bookie in self._waiting) or core.needs_backpressure():
            self._wait_for_room(core, bookie, run)
            return
        run.handing_over = loop  # a refusal is answered from the next pass, not from in here
        core.add_entries_runs(((entries, master_key, recovery, run),))
        run.handing_over = None

    def _flush(self) -> None:
        """Hand the runs gathered in the last pass to their bookies, one call per bookie."""
        self._flush_handle = None
        gathering, self._gathering = self._gathering, []
        taken: list[tuple[_LocalSlot, list[_LocalRun]]] = []
        for slot in gathering:  # all taken first: a run added from a hand-over below is the next pass's
            runs, slot.gathered = slot.gathered, None
            if runs:
                taken.append((slot, runs))
        for slot, runs in taken:
            self.gathered_runs_count += len(runs)
            bookie, core = slot.bookie, slot.core
            if core is None:  # closed meanwhile
                for run in runs:
                    run.done(range(len(run.entries)), Status.UNAVAILABLE)
            elif (self._waiting and bookie in self._waiting) or core.needs_backpressure():
                for run in runs:
                    self._wait_for_room(core, bookie, run)
            else:
                core.add_entries_runs([(run.entries, run.master_key, run.recovery, run) for run in runs])

    def _wait_for_room(self, core: LocalBookie, bookie: BookieId, run: _LocalRun) -> None:
        waiting = self._waiting.get(bookie)
        if waiting is None:
            waiting = self._waiting[bookie] = deque()
            task = self._loop_ref.get().create_task(self._add_when_room(core, bookie, waiting))
            keep_in_background(task, self._background)
        waiting.append(run)

    async def _add_when_room(self, core: LocalBookie, bookie: BookieId, waiting: deque[_LocalRun]) -> None:
        try:
            while waiting:
                if core.needs_backpressure():
                    await core.wait_for_room()
                    continue
                run = waiting.popleft()
                core.add_entries_runs(((run.entries, run.master_key, run.recovery, run),))
        finally:
            if self._waiting.get(bookie) is waiting:
                del self._waiting[bookie]
            for run in waiting:  # cancelled: the transport closed
                run.done(range(len(run.entries)), Status.UNAVAILABLE)

    async def read(self, bookie: BookieId, ledger_id: int, entry_id: int, *, fence: bool,
                   master_key: bytes) -> EncodedEntry:
        core = self._local.get(bookie)
        if core is None:
            return await self._remote.read(bookie, ledger_id, entry_id, fence=fence, master_key=master_key)
        what = f"read {ledger_id}:{entry_id}"
        return entry_of(bookie, what, await _read_local(core, bookie, what, ledger_id, entry_id, fence, master_key))

    async def read_last_entry(self, bookie: BookieId, ledger_id: int, *, fence: bool,
                              master_key: bytes) -> LastEntryReply:
        core = self._local.get(bookie)
        if core is None:
            return await self._remote.read_last_entry(bookie, ledger_id, fence=fence, master_key=master_key)
        what = f"read_last_entry {ledger_id}"
        return last_entry_of(bookie, what, await _read_local(core, bookie, what, ledger_id, None, fence, master_key))

    async def write_lac(self, bookie: BookieId, ledger_id: int, lac: int, *, master_key: bytes) -> None:
        core = self._local.get(bookie)
        if core is None:
            await self._remote.write_lac(bookie, ledger_id, lac, master_key=master_key)
            return
        status, _ = await core.write_lac(ledger_id, lac, master_key)
        if status is not Status.OK:
            raise status_error(bookie, status, f"write_lac {ledger_id}")


async def _read_local(core: LocalBookie, bookie: BookieId, what: str, ledger_id: int, entry_id: int | None,
                      fence: bool, master_key: bytes) -> ReadResponse:
    """The storage core's answer as the bookie server gives it, checked as ``BookieClient``
    checks a received one (ids, digest): a damaged entry is the bookie's failure."""
    try:
        if fence:
            result = await core.fence_and_read(ledger_id, entry_id, master_key)
        else:
            result = core.read_entry_or_last(ledger_id, entry_id)
        raw = result.raw
        # a view of a mapped entry log is copied here: the broker keeps entries (its cache)
        entry = EncodedEntry.parse(raw if isinstance(raw, bytes) else bytes(raw)) if raw is not None else None
        response = ReadResponse(0, result.status, ledger_id, result.entry_id, result.known_lac, entry)
        checked_entry(response, ledger_id, entry_id)
    except MagnetarError as exc:
        raise BookieUnavailableError(f"{what}: bookie {bookie}: {exc}") from exc
    return response


async def open_ledger_manager(
    store: MetadataStore,
    *,
    network: Network,
    clock: Clock,
    rng: Rng,
    config: LedgerClientConfig | None = None,
    master_key: bytes = b"",
    local_bookies: Mapping[BookieId, Bookie] | None = None,
) -> LedgerManager:
    """A ``LedgerManager`` over real bookies found through ``store``; close with
    ``close_ledger_manager``. ``local_bookies``: bookies this process runs (see
    ``LocalFirstTransport``)."""
    config = config or LedgerClientConfig()
    remote = BookieClientTransport(network, clock, config)
    transport: BookieClientTransport | LocalFirstTransport = (
        LocalFirstTransport(local_bookies, remote) if local_bookies else remote)
    directory = RackedBookieDirectory(MetadataBookieDirectory(store), store)
    return LedgerManager(
        store=LedgerMetadataStore(MetadataStoreAdapter(store)),
        transport=transport,
        directory=directory,
        placement=RackAwarePlacement(rng, directory),
        clock=clock,
        config=config,
        master_key=master_key,
        on_close=transport.close,
    )


async def close_ledger_manager(manager: LedgerManager) -> None:
    """Close the manager's bookie connections (the metadata store stays the caller's)."""
    await manager.close()
