"""What scenario ``cluster`` checks beyond the queue checker: what only the simulator can see.

``MetadataWatch`` reads every ledger's metadata from the metadata store while the run goes on and
reports (``docs/faults.md``):

* invariant 5, metadata only moves forward: a ledger's state goes back (CLOSED -> OPEN, ...), a
  closed ledger's last entry changes
* invariant 2, closed ledgers cover every acknowledged entry: a SEND_RECEIPT names an entry past
  the end its ledger was closed at
* invariant 6, fencing is durable: after the run, every ledger that was ever seen IN_RECOVERY and
  then CLOSED is probed with a normal add past its end on each bookie of its last ensemble as it
  was when recovery began (the old writer's view)
  (``probe_recovered_ledgers``); unless enough of them refuse it as fenced that no write set can
  complete it (``ledger.quorum.fencing_covered``), an old writer could still be acknowledged

The watch sets a metadata watch on ``/ledgers`` and on every ledger and reads a ledger as soon as
it changes, so the short IN_RECOVERY state is seen; ``poll`` reads them all once more at the end.

``verdict_of`` joins these with ``magnetar.sim.checker``'s anomalies (lost, moved, duplicated with
deduplication on, reordered, unexpected, divergent, unstable, undelivered) and the run's own
failures (a node's ``main`` raising, a phase that never finished) into one ``Verdict``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field

from magnetar.base.errors import FencedError, MagnetarError
from magnetar.ledger.bookie_transport import BookieClientTransport
from magnetar.ledger.ledger_metadata import TRANSITIONS, LedgerMetadata, LedgerState
from magnetar.ledger.metadata_adapter import MetadataStoreAdapter
from magnetar.ledger.metadata_ops import LedgerMetadataStore
from magnetar.ledger.quorum import fencing_covered
from magnetar.metadata.api import MetadataStore, WatchEvent
from magnetar.metadata.memory import MemoryMetadataServer
from magnetar.protocol.bookie.codec import Entry
from magnetar.sim.checker import CheckResult
from magnetar.sim.history import History, OpType, Outcome
from magnetar.sim.scenarios.base import Verdict

WATCH_SESSION_TIMEOUT_MS = 3_600_000
VIOLATIONS_SHOWN_MAX = 20


@dataclass
class MetadataWatch:
    """Every ledger's last seen (state, last entry id), and what went backwards."""

    seen: dict[int, tuple[LedgerState, int]] = field(default_factory=dict)
    #: Ledgers ever seen IN_RECOVERY, with their metadata as first seen so.
    recovered: dict[int, LedgerMetadata] = field(default_factory=dict)
    #: Where each of them was closed (last entry id).
    closed_at: dict[int, int] = field(default_factory=dict)
    violations: list[str] = field(default_factory=list)
    polls_count: int = 0
    _watched: set[int] = field(default_factory=set)
    _changed: Callable[[WatchEvent], None] | None = None
    _store: LedgerMetadataStore | None = None
    _session: MetadataStore | None = None
    _tasks: set[asyncio.Task[None]] = field(default_factory=set)

    async def run(self, meta: MemoryMetadataServer) -> None:
        """Watch ``/ledgers`` and every ledger in it; read what changed, when it changed."""
        session = await meta.connect(session_timeout_ms=WATCH_SESSION_TIMEOUT_MS)
        store = LedgerMetadataStore(MetadataStoreAdapter(session))
        self._store = store
        self._session = session
        root = store.path(0).rsplit("/", 1)[0]

        def changed(event: WatchEvent) -> None:
            work = self.poll(new_only=True) if event.path == root else self._read(event.path)
            task = asyncio.get_running_loop().create_task(work)
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

        self._changed = changed
        await session.watch(root, changed)
        await self.poll()

    async def poll(self, *, new_only: bool = False) -> None:
        """Read every ledger (and watch the new ones); ``new_only``: only those not watched yet
        (a watched ledger is read on each of its own changes)."""
        store = self._store
        if store is None:
            return
        self.polls_count += 1
        try:
            ids = await store.list_ids()
        except MagnetarError:
            return
        for ledger_id in ids:
            if ledger_id not in self._watched and self._changed is not None and self._session is not None:
                self._watched.add(ledger_id)
                await self._session.watch(store.path(ledger_id), self._changed)
            elif new_only:
                continue
            await self._read_id(ledger_id)

    async def _read(self, path: str) -> None:
        name = path.rsplit("/", 1)[-1]
        digits = name.lstrip("L")
        if digits.isdigit():
            await self._read_id(int(digits))

    async def _read_id(self, ledger_id: int) -> None:
        if self._store is None:
            return
        try:
            metadata = (await self._store.read(ledger_id)).metadata
        except MagnetarError:
            return  # deleted since listed
        self.observe(ledger_id, metadata.state, metadata.last_entry_id)
        # The ensemble is kept as first seen IN_RECOVERY: it is the old writer's view, the one the
        # fences must cover. AutoRecovery may replace a bookie right after the close, and a copy
        # made after the close needs no fence (nobody may write the ledger any more).
        if metadata.state is LedgerState.IN_RECOVERY and ledger_id not in self.recovered:
            self.recovered[ledger_id] = metadata
        if metadata.state is LedgerState.CLOSED and ledger_id in self.recovered:
            self.closed_at.setdefault(ledger_id, metadata.last_entry_id)

    def observe(self, ledger_id: int, state: LedgerState, last_entry_id: int) -> None:
        before = self.seen.get(ledger_id)
        self.seen[ledger_id] = (state, last_entry_id)
        if before is None:
            return
        old_state, old_last = before
        if state not in TRANSITIONS[old_state]:
            self.violations.append(f"ledger {ledger_id}: state went {old_state.value} -> {state.value}")
        elif old_state is LedgerState.CLOSED and last_entry_id != old_last:
            self.violations.append(f"ledger {ledger_id}: closed at {old_last}, later at {last_entry_id}")


async def probe_recovered_ledgers(watch: MetadataWatch, transport: BookieClientTransport) -> list[str]:
    """Invariant 6 after the run: see the module docstring. Returns the violations."""
    out: list[str] = []
    for ledger_id, metadata in sorted(watch.recovered.items()):
        last_entry_id = watch.closed_at.get(ledger_id)
        if last_entry_id is None:
            continue  # not closed (yet)
        probe = Entry.build(ledger_id, last_entry_id + 1, last_entry_id, b"probe")
        fenced: set[int] = set()
        for index, bookie in enumerate(metadata.last_fragment.ensemble):
            try:
                await transport.add(bookie, probe, recovery=False, master_key=b"")
            except FencedError:
                fenced.add(index)
            except MagnetarError:
                fenced.add(index)  # unreachable now: it cannot complete a write set either
        if not fencing_covered(fenced, metadata.ensemble_size, metadata.write_quorum_size, metadata.ack_quorum_size):
            accepted = sorted(set(range(metadata.ensemble_size)) - fenced)
            out.append(f"ledger {ledger_id} recovered and closed at {last_entry_id}, yet bookies "
                       f"{accepted} of its ensemble at recovery accept a normal add past its end")
    return out


def _acks_beyond_close(history: History, watch: MetadataWatch) -> list[str]:
    out: list[str] = []
    for op in history.ops:
        if op.type is not OpType.SEND or op.outcome is not Outcome.OK or op.message_id is None:
            continue
        ledger_id, entry_id, _ = op.message_id
        seen = watch.seen.get(ledger_id)
        if seen is not None and seen[0] is LedgerState.CLOSED and entry_id > seen[1]:
            out.append(f"{op.value} acknowledged at {ledger_id}:{entry_id}, ledger closed at {seen[1]}")
    return out


def verdict_of(result: CheckResult, history: History, watch: MetadataWatch, failures: list[str],
               crashes_count: int, fencing: list[str]) -> Verdict:
    problems = [f"{a.kind.value}: {a.topic} {a.value}: {a.detail}" for a in result.violations]
    problems += [f"metadata: {line}" for line in watch.violations]
    problems += [f"fencing: {line}" for line in fencing]
    problems += [f"closed-ledger: {line}" for line in _acks_beyond_close(history, watch)]
    problems += [f"run: {line}" for line in failures]
    counts = result.counts
    summary = (f"sent {counts.get('values_sent', 0)} (ok {counts.get('values_ok', 0)}, "
               f"unknown stored {counts.get('values_unknown_stored', 0)}, "
               f"unknown lost {counts.get('values_unknown_not_stored', 0)}), stored {counts.get('stored', 0)}, "
               f"received {counts.get('received', 0)}, faults {len(history.faults)}, crashes {crashes_count}, "
               f"ledgers {len(watch.seen)} ({len(watch.recovered)} recovered)")
    if problems:
        summary += f", {len(problems)} violation(s)"
    return Verdict(not problems, summary, tuple(problems[:VIOLATIONS_SHOWN_MAX]))
