"""``Bookie``: the storage node's facade. Request handling (adds, reads, fencing, explicit LAC)
over the ledger states, the bookie's state machine, and the composition of its parts:

* ``checkpointer.Checkpointer``: the write cache's two halves, their flush to the entry log and
  the index, flush pacing and the checkpoint mark;
* ``restart``: journal replay on start and the repair of ``last_entry``;
* ``garbage.GarbageCollector``: ledger deletion, removal and compaction of dead entry logs;
* ``disk_monitor.DiskMonitor``: free-space thresholds (read-only mode).

They share the ledger states (``ledgers``), the ledgers each entry log holds (``log_ledgers``)
and the counters (``BookieStats``), each passed to them explicitly; the facade owns the states
and the status, the parts report a disk failure through ``on_failure``.

Add path: check (state, size, digest, master key, fence) -> note the entry in the ledger state
-> put it in the write cache -> queue its journal record. The caller's ``on_done(Status.OK)``
runs only after the journal fsync covering the record (see ``journal``): nothing is
acknowledged that is not on disk. ``add_entries`` does the same for a run (the standalone's
local transport): the ledger checked once per run, the run's records one journal submit, one
journal answer per run.

Restart: load ledger states, replay the journal from the mark into the write cache (a torn tail
ends replay), checkpoint, repair ``last_entry`` where the crash left it naming an entry that
never became durable.

Explicit LAC (``write_lac``) is journaled like a fence and answered after its fsync.

Fencing: ``fence()`` sets FENCED at once (later normal adds fail), journals a FENCE record and
returns only after its fsync. Reads never answer NO_SUCH_ENTRY for an entry this bookie may have
acknowledged: every acknowledged entry is in the journal, the write cache or the index.

State machine (one table): CREATED -> REPLAYING -> WRITABLE <-> READ_ONLY -> STOPPING -> STOPPED,
and any running state -> FAILED when the disk fails (then every add answers UNAVAILABLE).
"""

from __future__ import annotations

import asyncio
import enum
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from mypy_extensions import mypyc_attr

from magnetar import faults
from magnetar.base.clock import Clock
from magnetar.base.errors import CorruptDataError
from magnetar.base.invariant import invariant
from magnetar.base.io import Bytes, Disk, KeyValueStore
from magnetar.base.limits import BOOKIE_LEDGERS_COUNT_MAX, BOOKIE_MASTER_KEY_BYTES_MAX
from magnetar.protocol.bookie import ENTRY_HEADER_BYTES, EncodedEntry, Status
from magnetar.protocol.bookie.codec import entry_view
from magnetar.storage.bookie_ledger import BookieLedger, LedgerStatus
from magnetar.storage.caches import ReadCache
from magnetar.storage.checkpointer import Checkpointer
from magnetar.storage.config import BookieConfig
from magnetar.storage.disk_monitor import DiskMonitor
from magnetar.storage.entry_log import EntryLogger, log_ids
from magnetar.storage.garbage import GarbageCollector, LiveLedgers
from magnetar.storage.index import Index
from magnetar.storage.journal import (
    Journal,
    add_record,
    add_record_from,
    add_record_prefix,
    fence_record,
    journal_file_ids,
    lac_record,
)
from magnetar.storage.journal_submit import NO_OTHERS, Run
from magnetar.storage.restart import repair_last_entries, replay_journal
from magnetar.storage.stats import BookieStats
from magnetar.storage.waits import watch_task

log = logging.getLogger(__name__)

OnDone = Callable[[Status], None]
#: How ``add_entries`` answers: ``(indexes into the run, their status)``, once per index.
OnRunDone = Callable[[Sequence[int], Status], None]
#: One run of ``Bookie.add_entries_runs``: (entries, master key, recovery, on_done).
AddRun = tuple[Sequence[EncodedEntry], bytes, bool, OnRunDone]


class BookieStatus(enum.Enum):
    CREATED = "created"
    REPLAYING = "replaying"
    WRITABLE = "writable"
    READ_ONLY = "read_only"
    STOPPING = "stopping"
    STOPPED = "stopped"
    FAILED = "failed"


_TRANSITIONS: dict[BookieStatus, frozenset[BookieStatus]] = {
    BookieStatus.CREATED: frozenset({BookieStatus.REPLAYING, BookieStatus.STOPPED}),
    BookieStatus.REPLAYING: frozenset(
        {BookieStatus.WRITABLE, BookieStatus.READ_ONLY, BookieStatus.FAILED, BookieStatus.STOPPING}
    ),
    BookieStatus.WRITABLE: frozenset({BookieStatus.READ_ONLY, BookieStatus.STOPPING, BookieStatus.FAILED}),
    BookieStatus.READ_ONLY: frozenset({BookieStatus.WRITABLE, BookieStatus.STOPPING, BookieStatus.FAILED}),
    BookieStatus.FAILED: frozenset({BookieStatus.STOPPING}),
    BookieStatus.STOPPING: frozenset({BookieStatus.STOPPED}),
    BookieStatus.STOPPED: frozenset(),
}
_SERVING = frozenset({BookieStatus.WRITABLE, BookieStatus.READ_ONLY})
# A failed disk stops adds; what is stored stays readable.
_READABLE = frozenset({BookieStatus.WRITABLE, BookieStatus.READ_ONLY, BookieStatus.FAILED})


@dataclass(frozen=True, slots=True)
class ReadResult:
    status: Status
    entry_id: int
    known_lac: int
    #: The entry in wire form: ``bytes``, or a read-only view of an entry log mapped into memory
    #: (``EntryLogger.view``) that stays valid while referenced. Callers that keep entries beyond
    #: answering a read take ``bytes(raw)``.
    raw: Bytes | None = None


class _RunJournaled:
    """The journal's callback of one run's records (``Bookie._add_checked_run``): tells
    ``on_done`` the run's ``indexes`` OK once durable, or UNAVAILABLE (the disk failed, and the
    bookie with it). One native object per run, called natively by the journal's reply lanes,
    where a ``functools.partial`` of a bound method was two objects and two generic calls per
    run (session 23)."""

    __slots__ = ("bookie", "indexes", "on_done")

    def __init__(self, bookie: Bookie, indexes: list[int], on_done: OnRunDone) -> None:
        self.bookie = bookie
        self.indexes = indexes
        self.on_done = on_done

    def __call__(self, error: BaseException | None) -> None:
        if error is not None:
            self.bookie._on_disk_failure(error)
            self.on_done(self.indexes, Status.UNAVAILABLE)
        else:
            self.on_done(self.indexes, Status.OK)


# Compiled (magnetar/_compiled.py); the simulation's ack-before-fsync negative control subclasses it.
@mypyc_attr(allow_interpreted_subclasses=True)
class Bookie:
    """One bookie's storage; every I/O goes through the injected disk, store and clock.

    ``checkpointer`` (write cache, checkpoints, backpressure) and ``collector`` (deletion, GC,
    compaction) are its parts; requests go through the facade's own methods.
    """

    def __init__(
        self,
        disk: Disk,
        kv: KeyValueStore,
        clock: Clock,
        config: BookieConfig,
        *,
        live_ledgers: LiveLedgers | None = None,
    ) -> None:
        self._clock = clock
        self.config = config
        # Read per add, as native ints (compiled, a config field is a generic lookup; session 23).
        self._entry_bytes_max = config.entry_bytes_max
        self._group_bytes_max = config.journal_group_bytes_max
        self._index = Index(kv)
        self._entry_log = EntryLogger(disk, config.entry_log_bytes_max)
        self._journal: Journal | None = None
        self._ledgers: dict[int, BookieLedger] = {}
        # The ADD records' body prefix (``add_record_prefix``) of the master key last seen, and its
        # CRC: one writer's ledgers share a key, so a run's records are framed without making
        # them again per ``add_entries_runs`` call (once per lone add before; session 23).
        self._prefix_key: bytes | None = None
        self._prefix = b""
        self._prefix_crc = 0
        log_ledgers: dict[int, set[int]] = {}
        self._log_ledgers = log_ledgers
        self._read_cache = ReadCache(config.read_cache_bytes_max)
        self.stats = BookieStats()
        self.checkpointer = Checkpointer(
            self._entry_log, self._index, clock, config, ledgers=self._ledgers, log_ledgers=log_ledgers, stats=self.stats
        )
        self.collector = GarbageCollector(
            disk,
            self._index,
            self._entry_log,
            self.checkpointer,
            clock,
            config,
            ledgers=self._ledgers,
            log_ledgers=log_ledgers,
            read_cache=self._read_cache,
            stats=self.stats,
            live_ledgers=live_ledgers,
        )
        self._disk_monitor = DiskMonitor(disk, clock, config)
        self._disk = disk
        self._tasks: list[asyncio.Task[None]] = []
        self.status = BookieStatus.CREATED

    # --- state ---------------------------------------------------------------------------------

    def _transition(self, to: BookieStatus) -> None:
        if to is self.status:
            return
        invariant(to in _TRANSITIONS[self.status], f"bookie: illegal transition {self.status} -> {to}")
        log.info("bookie %s -> %s", self.status.value, to.value)
        self.status = to

    @property
    def clock(self) -> Clock:
        return self._clock

    @property
    def read_only(self) -> bool:
        return self.status is BookieStatus.READ_ONLY

    @property
    def ledger_count(self) -> int:
        return sum(1 for s in self._ledgers.values() if s.status is not LedgerStatus.DELETED)

    def free_bytes(self) -> int:
        return self._disk_monitor.free_bytes()

    def bookie_ledger(self, ledger_id: int) -> BookieLedger | None:
        return self._ledgers.get(ledger_id)

    def has_data(self) -> bool:
        """Whether the data directory already holds bookie data (for the cookie check)."""
        return bool(journal_file_ids(self._disk) or log_ids(self._disk) or not self._index.is_empty())

    # --- start and replay ----------------------------------------------------------------------

    async def start(self) -> None:
        """Load the ledger states, replay the journal (``restart``), start a new journal file,
        checkpoint, repair ``last_entry``, then serve and start the background loops."""
        self._transition(BookieStatus.REPLAYING)
        for state in self._index.states():
            self._ledgers[state.ledger_id] = state
        self._log_ledgers.update(self._index.log_ledgers())
        await self._entry_log.start()
        self.stats.replayed_records_count = await replay_journal(
            self._disk, self._index, self._ledgers, self.checkpointer
        )
        existing = journal_file_ids(self._disk)
        self._journal = Journal(self._disk, self._clock, self.config, (existing[-1] + 1) if existing else 1)
        await self._journal.start()
        self.checkpointer.use_journal(self._journal)
        await self.checkpointer.checkpoint()
        repair_last_entries(self._index, self._ledgers)
        self._transition(BookieStatus.READ_ONLY if self._disk_monitor.low() else BookieStatus.WRITABLE)
        loop = asyncio.get_running_loop()
        serving, failed = self._serving, self._on_disk_failure
        self._tasks = [
            watch_task(loop.create_task(self.checkpointer.run(serving, failed), name="bookie-checkpoint"), log),
            watch_task(loop.create_task(self._disk_monitor.run(serving, self.check_disk), name="bookie-disk-monitor"), log),
        ]
        if self.collector.live_ledgers is not None and self.config.gc_interval_ms > 0:
            self._tasks.append(watch_task(loop.create_task(self.collector.run(serving, failed), name="bookie-gc"), log))

    def _serving(self) -> bool:
        return self.status in _SERVING

    # --- add -----------------------------------------------------------------------------------

    def add_entry(self, entry: EncodedEntry, master_key: bytes, recovery: bool, on_done: OnDone) -> None:
        """Store ``entry``; ``on_done(status)`` runs once, with OK only after the journal fsync."""
        status = self._check_add(entry, master_key, recovery)
        if status is not Status.OK:
            self.stats.add_rejects_count += 1
            on_done(status)
            return
        state = self._ledgers[entry.ledger_id]
        state.note_entry(entry.entry_id, entry.lac)
        self.checkpointer.put(entry.ledger_id, entry.entry_id, entry.raw)
        self.stats.adds_count += 1
        journal = self._journal
        assert journal is not None

        def _journaled(error: BaseException | None) -> None:
            if error is not None:
                self._on_disk_failure(error)
                on_done(Status.UNAVAILABLE)
            else:
                on_done(Status.OK)

        journal.submit(add_record(master_key, entry.raw), _journaled)

    def add_entries(self, entries: Sequence[EncodedEntry], master_key: bytes, recovery: bool,
                    on_done: OnRunDone) -> None:
        """``add_entry`` for a run (the local transport's ``add_run``): every entry is checked as
        ``add_entry`` checks it, its ledger once per run; a refused entry is answered with its
        status before this returns, the others are noted, cached and go to the journal as one
        record list (``Journal.submit_run``: one group part, one callback) per
        ``journal_group_bytes_max`` of records. ``on_done(indexes, status)`` tells each index of
        the run its status exactly once, OK only after the journal fsync covering it."""
        self.add_entries_runs(((entries, master_key, recovery, on_done),))

    def add_entries_runs(self, runs: Sequence[AddRun]) -> None:
        """``add_entries`` for several runs in one call, ``(entries, master_key, recovery,
        on_done)`` each, in order (a local transport's runs of one loop pass, of many ledgers):
        the bookie's state is read once, each run is checked and noted as ``add_entries`` does
        it, and all of them go to the journal in one submission (``Journal.submit_runs``: one
        arrival, one wake), each with its own records, its own callback and its ledger's reply
        lane (replies stay per ledger and in order) and the other ledgers its records hold (a
        mixed run's, which the journal's express slot must not pass). The refusals of every run
        are answered after the journal has them all (one run's refusal neither fails nor delays
        another run)."""
        refused: list[tuple[OnRunDone, int, Status]] = []
        bookie_status = self._bookie_add_status()
        if bookie_status is not Status.OK:
            for entries, _, _, on_done in runs:
                refused.extend((on_done, index, bookie_status) for index in range(len(entries)))
        else:
            journal = self._journal
            assert journal is not None
            submission: list[Run] = []
            key, prefix, prefix_crc = self._prefix_key, self._prefix, self._prefix_crc
            for entries, master_key, recovery, on_done in runs:
                if master_key != key:  # once per key (one writer's runs share theirs)
                    key = master_key
                    prefix, prefix_crc = (add_record_prefix(master_key) if len(master_key) <= BOOKIE_MASTER_KEY_BYTES_MAX
                                          else (b"", 0))
                    self._prefix_key, self._prefix, self._prefix_crc = key, prefix, prefix_crc
                self._add_checked_run(submission, entries, master_key, recovery, on_done, refused, prefix, prefix_crc)
            journal.submit_runs(submission)
        if refused:
            self.stats.add_rejects_count += len(refused)
            for on_done, index, status in refused:
                on_done((index,), status)

    def _add_checked_run(self, submission: list[Run], entries: Sequence[EncodedEntry], master_key: bytes,
                         recovery: bool, on_done: OnRunDone, refused: list[tuple[OnRunDone, int, Status]],
                         prefix: bytes, prefix_crc: int) -> None:
        """Check and note one run's entries; its records join ``submission`` as one journal run
        per ``journal_group_bytes_max`` (each with its ledger, its records and its other ledgers)."""
        checkpointer = self.checkpointer  # called natively (a bound ``put`` was a generic call per entry)
        ledgers = self._ledgers
        limit = self._group_bytes_max
        checked_ledger, ledger_status = -1, Status.OK  # the last ledger checked, and its status
        parts: list[Bytes] = []
        indexes: list[int] = []
        size = 0
        run_ledger = -1
        mixed: set[int] | None = None  # the run's other ledgers (a mixed run's), if any
        rejected = 0
        for index, entry in enumerate(entries):
            ledger_id = entry.ledger_id
            status = self._check_entry(entry, master_key)
            if status is Status.OK:
                # Once per ledger of the run: nothing changes a ledger's answer during this call.
                if ledger_id != checked_ledger:
                    checked_ledger = ledger_id
                    ledger_status = self._check_ledger(checked_ledger, master_key, recovery)
                status = ledger_status
            if status is not Status.OK:
                refused.append((on_done, index, status))
                rejected += 1
                continue
            raw = entry.raw
            header = add_record_from(prefix, prefix_crc, raw)
            record_size = len(header) + len(raw)
            if parts and size + record_size > limit:
                submission.append((parts, size, _RunJournaled(self, indexes, on_done), run_ledger,
                                   len(indexes), NO_OTHERS if mixed is None else mixed))
                parts, indexes, size, mixed = [], [], 0, None
            if not parts:
                run_ledger = ledger_id  # the run's reply lane: its first record's ledger
            elif ledger_id != run_ledger:
                if mixed is None:
                    mixed = set()
                mixed.add(ledger_id)
            ledgers[ledger_id].note_entry(entry.entry_id, entry.lac)
            checkpointer.put(ledger_id, entry.entry_id, raw)
            parts.append(header)
            parts.append(raw)
            indexes.append(index)
            size += record_size
        self.stats.adds_count += len(entries) - rejected
        if parts:
            submission.append((parts, size, _RunJournaled(self, indexes, on_done), run_ledger, len(indexes),
                               NO_OTHERS if mixed is None else mixed))

    def _check_add(self, entry: EncodedEntry, master_key: bytes, recovery: bool) -> Status:
        status = self._bookie_add_status()
        if status is Status.OK:
            status = self._check_entry(entry, master_key)
        if status is Status.OK:
            status = self._check_ledger(entry.ledger_id, master_key, recovery)
        return status

    def _bookie_add_status(self) -> Status:
        if self.status is not BookieStatus.WRITABLE:
            return Status.READ_ONLY if self.status is BookieStatus.READ_ONLY else Status.UNAVAILABLE
        return Status.OK

    def _check_entry(self, entry: EncodedEntry, master_key: bytes) -> Status:
        if entry.payload_bytes > self._entry_bytes_max:
            return Status.TOO_LARGE
        if entry.entry_id < 0 or len(master_key) > BOOKIE_MASTER_KEY_BYTES_MAX:
            return Status.BAD_REQUEST
        if not entry.digest_ok():
            return Status.BAD_DIGEST
        return Status.OK

    def _check_ledger(self, ledger_id: int, master_key: bytes, recovery: bool) -> Status:
        state = self._ledgers.get(ledger_id)
        if state is None:
            if len(self._ledgers) >= BOOKIE_LEDGERS_COUNT_MAX:
                return Status.UNAVAILABLE
            self._ledgers[ledger_id] = BookieLedger(ledger_id, master_key=master_key)
            return Status.OK
        if state.status is LedgerStatus.DELETED:
            return Status.NO_SUCH_LEDGER
        if state.master_key != master_key:
            return Status.UNAUTHORIZED
        if state.status is LedgerStatus.FENCED and not recovery:
            return Status.FENCED
        return Status.OK

    async def add(self, entry: EncodedEntry, master_key: bytes = b"", recovery: bool = False) -> Status:
        """``add_entry`` as a coroutine (tests, tools): returns the final status."""
        future: asyncio.Future[Status] = asyncio.get_running_loop().create_future()

        def _done(status: Status) -> None:
            if not future.done():
                future.set_result(status)

        self.add_entry(entry, master_key, recovery, _done)
        return await future

    async def wait_for_room(self) -> None:
        """Backpressure for the server: wait while the journal queue or the write cache is full."""
        journal = self._journal
        if journal is not None:
            await journal.wait_for_room()
        await self.checkpointer.room.wait()

    def needs_backpressure(self) -> bool:
        journal = self._journal
        full_journal = journal is not None and journal.queued_bytes >= self.config.journal_queue_bytes_max
        return full_journal or not self.checkpointer.room.is_set()

    # --- fencing -------------------------------------------------------------------------------

    async def fence(self, ledger_id: int, master_key: bytes) -> Status:
        """Fence ``ledger_id``; returns OK only once the fence is durable in the journal."""
        if self.status not in _SERVING:
            return Status.UNAVAILABLE
        state = self._ledgers.get(ledger_id)
        if state is None:
            if len(self._ledgers) >= BOOKIE_LEDGERS_COUNT_MAX:
                return Status.UNAVAILABLE
            state = self._ledgers[ledger_id] = BookieLedger(ledger_id, master_key=master_key)
        if state.status is LedgerStatus.DELETED:
            return Status.NO_SUCH_LEDGER
        if state.master_key != master_key:
            return Status.UNAUTHORIZED
        state.transition(LedgerStatus.FENCED)
        await faults.point("bookie.fence.before_journal")
        journal = self._journal
        assert journal is not None
        try:
            await journal.append(fence_record(ledger_id, master_key))
        except Exception as exc:
            self._on_disk_failure(exc)
            return Status.UNAVAILABLE
        return Status.OK

    # --- reads ---------------------------------------------------------------------------------

    def read_entry(self, ledger_id: int, entry_id: int) -> ReadResult:
        self.stats.reads_count += 1
        if self.status not in _READABLE:
            # Before replay finished, "no such entry" could be false (invariant 7 of docs/faults.md).
            return ReadResult(Status.UNAVAILABLE, entry_id, -1)
        state = self._ledgers.get(ledger_id)
        if state is None or state.status is LedgerStatus.DELETED:
            return ReadResult(Status.NO_SUCH_LEDGER, entry_id, -1)
        raw = self._lookup(ledger_id, entry_id)
        if raw is None:
            return ReadResult(Status.NO_SUCH_ENTRY, entry_id, state.lac)
        return ReadResult(Status.OK, entry_id, state.lac, raw)

    def read_entry_or_last(self, ledger_id: int, entry_id: int | None) -> ReadResult:
        """``read_entry``, or ``read_last_entry`` when ``entry_id`` is None."""
        return self.read_last_entry(ledger_id) if entry_id is None else self.read_entry(ledger_id, entry_id)

    async def fence_and_read(self, ledger_id: int, entry_id: int | None, master_key: bytes) -> ReadResult:
        """A fencing read (recovery): fence durably, then ``read_entry_or_last``; a fence that
        fails answers its own status."""
        status = await self.fence(ledger_id, master_key)
        if status is not Status.OK:
            return ReadResult(status, -1 if entry_id is None else entry_id, -1)
        return self.read_entry_or_last(ledger_id, entry_id)

    def read_lac(self, ledger_id: int) -> tuple[Status, int]:
        if self.status not in _READABLE:
            return Status.UNAVAILABLE, -1
        state = self._ledgers.get(ledger_id)
        if state is None or state.status is LedgerStatus.DELETED:
            return Status.NO_SUCH_LEDGER, -1
        return Status.OK, state.lac

    async def write_lac(self, ledger_id: int, lac: int, master_key: bytes) -> tuple[Status, int]:
        """Raise the known LAC of a ledger (explicit LAC for idle ledgers), durably.

        The LAC is journaled and OK is returned only after the journal fsync covering it, like
        an add: a reader that learned the LAC from this bookie still learns it after a crash.
        Returns the status and the bookie's known LAC afterwards.
        """
        if self.status not in _READABLE:
            return Status.UNAVAILABLE, -1
        state = self._ledgers.get(ledger_id)
        if state is None or state.status is LedgerStatus.DELETED:
            return Status.NO_SUCH_LEDGER, -1
        if state.master_key != master_key:
            return Status.UNAUTHORIZED, state.lac
        if lac < -1:
            return Status.BAD_REQUEST, state.lac
        if lac > state.lac:
            state.lac = lac
            state.dirty = True
        journal = self._journal
        assert journal is not None
        try:
            # Also when the LAC did not rise: an earlier raise may still wait for its fsync.
            await journal.append(lac_record(ledger_id, lac, master_key))
        except Exception as exc:
            self._on_disk_failure(exc)
            return Status.UNAVAILABLE, state.lac
        return Status.OK, state.lac

    def read_last_entry(self, ledger_id: int) -> ReadResult:
        """The highest entry this bookie stores for the ledger (NO_SUCH_ENTRY if it has none)."""
        if self.status not in _READABLE:
            return ReadResult(Status.UNAVAILABLE, -1, -1)
        state = self._ledgers.get(ledger_id)
        if state is None or state.status is LedgerStatus.DELETED:
            return ReadResult(Status.NO_SUCH_LEDGER, -1, -1)
        if state.last_entry < 0:
            return ReadResult(Status.NO_SUCH_ENTRY, -1, state.lac)
        return self.read_entry(ledger_id, state.last_entry)

    def _lookup(self, ledger_id: int, entry_id: int) -> Bytes | None:
        raw = self.checkpointer.get(ledger_id, entry_id)
        if raw is not None:
            return raw
        cached = self._read_cache.get(ledger_id, entry_id)
        if cached is not None:
            return cached
        location = self._index.location(ledger_id, entry_id)
        if location is None:
            return None
        log_id, offset, length = location
        stored = self._entry_log.view(log_id, offset, length)
        entry = entry_view(memoryview(stored))
        if entry.ledger_id != ledger_id or entry.entry_id != entry_id or not entry.digest_valid:
            raise CorruptDataError(f"entry log {log_id} offset {offset} does not hold a valid {ledger_id}:{entry_id}")
        self._read_ahead(ledger_id, entry_id, log_id, offset + length)
        return stored

    def _read_ahead(self, ledger_id: int, entry_id: int, log_id: int, next_offset: int) -> None:
        # Entries were flushed sorted, so the ledger's next entries usually follow in the same
        # log: one view of the span brings them into the read cache (as views: no copy).
        if self.config.read_cache_bytes_max <= 0:
            return
        span: list[tuple[int, int, int]] = []
        expected = next_offset + 4
        budget = self.config.read_ahead_bytes_max
        for entry, log, offset, length in self._index.locations_from(
            ledger_id, entry_id + 1, self.config.read_ahead_count_max
        ):
            if log != log_id or offset != expected or length > budget:
                break
            span.append((entry, offset, length))
            expected = offset + length + 4
            budget -= length + 4
        if not span:
            return
        start = span[0][1]
        data = memoryview(self._entry_log.view(log_id, start, span[-1][1] + span[-1][2] - start))
        for entry, offset, length in span:
            raw = data[offset - start : offset - start + length]
            if len(raw) == length and len(raw) >= ENTRY_HEADER_BYTES:
                self._read_cache.put(ledger_id, entry, raw)

    # --- deletion, GC, checkpoints, disk space (the parts) --------------------------------------

    async def delete_ledger(self, ledger_id: int) -> None:
        """Drop a ledger (its metadata was deleted): tombstone it, remove its index entries."""
        await self.collector.delete_ledger(ledger_id)

    async def collect_garbage(self) -> list[int]:
        """Remove entry logs that hold only deleted ledgers; returns their ids."""
        return await self.collector.collect_garbage()

    async def compact_logs(self) -> list[int]:
        """Compact mostly-dead entry logs; returns the ids of the logs compacted away."""
        return await self.collector.compact_logs()

    async def collect_deleted_ledgers(self) -> list[int]:
        """One GC round (``GarbageCollector.collect_deleted_ledgers``); nothing unless the
        bookie is readable. Returns the ledgers deleted."""
        if self.status not in _READABLE:
            return []
        return await self.collector.collect_deleted_ledgers()

    async def checkpoint(self) -> None:
        await self.checkpointer.checkpoint()

    def check_disk(self) -> None:
        """Enter read-only mode when the disk is nearly full; leave it at twice the threshold."""
        if self.status in _SERVING:
            read_only = self._disk_monitor.read_only_wanted(self.status is BookieStatus.READ_ONLY)
            self._transition(BookieStatus.READ_ONLY if read_only else BookieStatus.WRITABLE)

    def _on_disk_failure(self, error: BaseException) -> None:
        if self.status in _SERVING:
            log.error("bookie disk failure, refusing further adds: %r", error)
            self._transition(BookieStatus.FAILED)

    # --- stop ----------------------------------------------------------------------------------

    async def stop(self) -> None:
        if self.status in (BookieStatus.STOPPING, BookieStatus.STOPPED):
            return
        if self.status is BookieStatus.CREATED:
            self._transition(BookieStatus.STOPPED)
            return
        self._transition(BookieStatus.STOPPING)
        self.checkpointer.want_checkpoint()
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            try:
                await task
            except asyncio.CancelledError:
                pass
        if self._journal is not None:
            await self._journal.stop()
        self._entry_log.close()
        self._transition(BookieStatus.STOPPED)
