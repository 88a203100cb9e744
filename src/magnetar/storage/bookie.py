"""``Bookie``: the storage node core. Adds, reads, fencing, checkpoints, restart replay, GC.

Add path: check (state, size, digest, master key, fence) -> note the entry in the ledger state
-> put it in the write cache -> queue its journal record. The caller's ``on_done(Status.OK)``
runs only after the journal fsync covering the record (see ``journal``): nothing is
acknowledged that is not on disk.

Checkpoint (``checkpoint()``, run when half the write cache is used or every
``checkpoint_interval_ms``): swap the write cache halves, take the journal position as the
mark, append the frozen half sorted by (ledger, entry) to the entry log in synced chunks, write
every location plus dirty ledger states to the index (unsynced batches, then a synced last one),
and only then persist the mark and delete journal files before it. The flush yields to the event
loop between chunks, so adds and their journal fsyncs proceed while it runs; the background
checkpoint is also paced (small chunks with pauses, index batches synced one by one) unless adds
would wait for it, so its disk writes do not pile up ahead of the journal's fsyncs.
Restart: load ledger states, replay the journal from the mark
into the write cache (a torn tail ends replay), repair ``last_entry`` where the crash left it
naming an entry that never became durable, and checkpoint.

Explicit LAC (``write_lac``) is journaled like a fence and answered after its fsync.

GC (``collect_deleted_ledgers``, every ``gc_interval_ms`` when a ``LiveLedgers`` provider is
given): ledgers missing from the metadata are deleted, entry logs holding only deleted ledgers
removed, and logs whose live bytes fell below ``compaction_live_percent_max`` percent compacted
(live entries copied to the current log, then the old log removed; see ``storage.compaction``).

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
from collections.abc import Awaitable, Callable, Collection
from dataclasses import dataclass

from magnetar import faults
from magnetar.base.clock import Clock
from magnetar.base.errors import CorruptDataError
from magnetar.base.invariant import invariant
from magnetar.base.io import Bytes, Disk, KeyValueStore
from magnetar.base.limits import BOOKIE_LEDGERS_COUNT_MAX, BOOKIE_MASTER_KEY_BYTES_MAX
from magnetar.protocol.bookie import ENTRY_HEADER_BYTES, Entry, Status
from magnetar.protocol.bookie.codec import entry_view
from magnetar.storage.caches import ReadCache, WriteCache
from magnetar.storage.compaction import LiveEntry, checked_raw, chunks, live_bytes, live_entries
from magnetar.storage.config import BookieConfig
from magnetar.storage.entry_log import LOG_DIR, EntryLogger, log_ids
from magnetar.storage.index import MARK_KEY, Index, entry_key, location_value, log_key, state_key
from magnetar.storage.journal import (
    KIND_ADD,
    KIND_LAC,
    Journal,
    JournalPosition,
    JournalRecord,
    add_record,
    fence_record,
    journal_file_ids,
    lac_record,
    replay,
)
from magnetar.storage.ledger_state import LedgerState, LedgerStatus
from magnetar.storage.waits import wait_event_or_timeout, watch_task

log = logging.getLogger(__name__)

OnDone = Callable[[Status], None]
#: Entries a flushed write-cache half frees per event-loop step (``Bookie._release``).
_RELEASE_STEP_ENTRIES = 2048
#: Returns the ids of every ledger whose metadata exists (the composition root reads them from
#: the metadata store); raising means "unknown right now" and skips that GC round.
LiveLedgers = Callable[[], Awaitable[Collection[int]]]


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


@dataclass(slots=True)
class BookieStats:
    adds_count: int = 0
    add_rejects_count: int = 0
    reads_count: int = 0
    checkpoints_count: int = 0
    entries_flushed_count: int = 0
    replayed_records_count: int = 0
    logs_collected_count: int = 0
    ledgers_collected_count: int = 0
    gc_rounds_count: int = 0
    gc_rounds_skipped_count: int = 0
    logs_compacted_count: int = 0
    compacted_bytes_count: int = 0


class Bookie:
    """One bookie's storage; every I/O goes through the injected disk, store and clock."""

    def __init__(
        self,
        disk: Disk,
        kv: KeyValueStore,
        clock: Clock,
        config: BookieConfig,
        *,
        live_ledgers: LiveLedgers | None = None,
    ) -> None:
        self._disk = disk
        self._live_ledgers = live_ledgers
        self._clock = clock
        self.config = config
        self._index = Index(kv)
        self._entry_log = EntryLogger(disk, config.entry_log_bytes_max)
        self._journal: Journal | None = None
        self._ledgers: dict[int, LedgerState] = {}
        self._log_ledgers: dict[int, set[int]] = {}
        self._active = WriteCache()
        self._active_since_ns = 0  # when the active half was last swapped in (fill rate)
        self._flushing = WriteCache()
        self._read_cache = ReadCache(config.read_cache_bytes_max)
        self._checkpoint_lock = asyncio.Lock()
        self._checkpoint_wanted = asyncio.Event()
        self._cache_room = asyncio.Event()
        self._cache_room.set()
        self._tasks: list[asyncio.Task[None]] = []
        self.status = BookieStatus.CREATED
        self.stats = BookieStats()

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
        return self._disk.free_bytes()

    def ledger_state(self, ledger_id: int) -> LedgerState | None:
        return self._ledgers.get(ledger_id)

    def has_data(self) -> bool:
        """Whether the data directory already holds bookie data (for the cookie check)."""
        return bool(journal_file_ids(self._disk) or log_ids(self._disk) or not self._index.is_empty())

    # --- start and replay ----------------------------------------------------------------------

    async def start(self) -> None:
        self._transition(BookieStatus.REPLAYING)
        for state in self._index.states():
            self._ledgers[state.ledger_id] = state
        self._log_ledgers = self._index.log_ledgers()
        await self._entry_log.start()
        mark = self._index.mark() or JournalPosition(0, 0)
        result = await replay(self._disk, mark)
        if result.torn_at is not None:
            log.warning("journal torn at file %d offset %d: replay ended there", result.torn_at.file_id, result.torn_at.offset)
        for _, record in result.records:
            self._apply_replayed(record)
            if self._active.bytes >= self.config.write_cache_bytes_max // 2:
                await self._flush_without_mark()
        self.stats.replayed_records_count = len(result.records)
        existing = journal_file_ids(self._disk)
        self._journal = Journal(self._disk, self._clock, self.config, (existing[-1] + 1) if existing else 1)
        await self._journal.start()
        await self._checkpoint()
        self._repair_last_entries()
        self._transition(BookieStatus.READ_ONLY if self._disk_low() else BookieStatus.WRITABLE)
        loop = asyncio.get_running_loop()
        self._tasks = [
            watch_task(loop.create_task(self._checkpoint_loop(), name="bookie-checkpoint"), log),
            watch_task(loop.create_task(self._disk_monitor_loop(), name="bookie-disk-monitor"), log),
        ]
        if self._live_ledgers is not None and self.config.gc_interval_ms > 0:
            self._tasks.append(watch_task(loop.create_task(self._gc_loop(), name="bookie-gc"), log))

    def _apply_replayed(self, record: JournalRecord) -> None:
        if record.kind == KIND_ADD:
            try:
                entry = Entry.parse(record.entry_raw)
            except CorruptDataError:
                log.error("journal ADD record with a malformed entry skipped")
                return
            state = self._ledgers.get(entry.ledger_id)
            if state is None:
                state = self._ledgers[entry.ledger_id] = LedgerState(entry.ledger_id, master_key=record.master_key)
            if state.status is LedgerStatus.DELETED:
                return
            state.note_entry(entry.entry_id, entry.lac)
            self._active.put(entry.ledger_id, entry.entry_id, record.entry_raw)
        else:
            state = self._ledgers.get(record.ledger_id)
            if state is None:
                state = self._ledgers[record.ledger_id] = LedgerState(record.ledger_id, master_key=record.master_key)
            if record.kind == KIND_LAC:
                if state.status is not LedgerStatus.DELETED and record.lac > state.lac:
                    state.lac = record.lac
                    state.dirty = True
            elif state.status is LedgerStatus.OPEN:
                state.transition(LedgerStatus.FENCED)

    def _repair_last_entries(self) -> None:
        # A crash can leave last_entry naming an add that was never made durable (states are
        # snapshotted at checkpoint time, ahead of the journal). Find the real highest entry.
        repaired = []
        for state in self._ledgers.values():
            if state.status is LedgerStatus.DELETED or state.last_entry < 0:
                continue
            if self._index.location(state.ledger_id, state.last_entry) is None:
                state.last_entry = self._index.last_stored_entry(state.ledger_id)
                state.dirty = True
                repaired.append(state)
        if repaired:
            self._index.kv.write([(state_key(s.ledger_id), s.encode()) for s in repaired], sync=True)
            for state in repaired:
                state.dirty = False

    # --- add -----------------------------------------------------------------------------------

    def add_entry(self, entry: Entry, master_key: bytes, recovery: bool, on_done: OnDone) -> None:
        """Store ``entry``; ``on_done(status)`` runs once, with OK only after the journal fsync."""
        status = self._check_add(entry, master_key, recovery)
        if status is not Status.OK:
            self.stats.add_rejects_count += 1
            on_done(status)
            return
        state = self._ledgers[entry.ledger_id]
        state.note_entry(entry.entry_id, entry.lac)
        self._active.put(entry.ledger_id, entry.entry_id, entry.raw)
        if self._active.bytes >= self.config.write_cache_bytes_max // 2:
            self._checkpoint_wanted.set()
            if self._flushing.bytes:
                self._cache_room.clear()
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

    def _check_add(self, entry: Entry, master_key: bytes, recovery: bool) -> Status:
        if self.status is not BookieStatus.WRITABLE:
            return Status.READ_ONLY if self.status is BookieStatus.READ_ONLY else Status.UNAVAILABLE
        if entry.payload_bytes > self.config.entry_bytes_max:
            return Status.TOO_LARGE
        if entry.entry_id < 0 or len(master_key) > BOOKIE_MASTER_KEY_BYTES_MAX:
            return Status.BAD_REQUEST
        if not entry.digest_ok():
            return Status.BAD_DIGEST
        state = self._ledgers.get(entry.ledger_id)
        if state is None:
            if len(self._ledgers) >= BOOKIE_LEDGERS_COUNT_MAX:
                return Status.UNAVAILABLE
            self._ledgers[entry.ledger_id] = LedgerState(entry.ledger_id, master_key=master_key)
            return Status.OK
        if state.status is LedgerStatus.DELETED:
            return Status.NO_SUCH_LEDGER
        if state.master_key != master_key:
            return Status.UNAUTHORIZED
        if state.status is LedgerStatus.FENCED and not recovery:
            return Status.FENCED
        return Status.OK

    async def add(self, entry: Entry, master_key: bytes = b"", recovery: bool = False) -> Status:
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
        await self._cache_room.wait()

    def needs_backpressure(self) -> bool:
        journal = self._journal
        full_journal = journal is not None and journal.queued_bytes >= self.config.journal_queue_bytes_max
        return full_journal or not self._cache_room.is_set()

    # --- fencing -------------------------------------------------------------------------------

    async def fence(self, ledger_id: int, master_key: bytes) -> Status:
        """Fence ``ledger_id``; returns OK only once the fence is durable in the journal."""
        if self.status not in _SERVING:
            return Status.UNAVAILABLE
        state = self._ledgers.get(ledger_id)
        if state is None:
            if len(self._ledgers) >= BOOKIE_LEDGERS_COUNT_MAX:
                return Status.UNAVAILABLE
            state = self._ledgers[ledger_id] = LedgerState(ledger_id, master_key=master_key)
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
            # Before replay finished, "no such entry" could be false (invariant 7 of FAULTS.md).
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
        raw = self._active.get(ledger_id, entry_id) or self._flushing.get(ledger_id, entry_id)
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

    # --- deletion and GC -----------------------------------------------------------------------

    async def delete_ledger(self, ledger_id: int) -> None:
        """Drop a ledger (its metadata was deleted): tombstone it, remove its index entries."""
        state = self._ledgers.get(ledger_id)
        if state is None:
            state = self._ledgers[ledger_id] = LedgerState(ledger_id)
        async with self._checkpoint_lock:
            state.transition(LedgerStatus.DELETED)
            self._active.drop_ledger(ledger_id)
            self._flushing.drop_ledger(ledger_id)
            self._read_cache.drop_ledger(ledger_id)
            puts: list[tuple[bytes, bytes | None]] = [(key, None) for key in self._index.entry_keys_of(ledger_id)]
            puts.append((state_key(ledger_id), state.encode()))
            self._index.kv.write(puts, sync=True)
            state.dirty = False

    def _remove_log(self, log_id: int) -> None:
        """Remove an entry log. The read cache is emptied too: its entries may be views of the
        log's mapping, which would keep the removed file's disk space until they are evicted."""
        self._entry_log.remove(log_id)
        self._read_cache.clear()

    async def collect_garbage(self) -> list[int]:
        """Remove entry logs that hold only deleted ledgers (or nothing indexed); returns their ids.

        Logs that still hold a live ledger are kept here; ``compact_logs`` copies the live
        entries out of mostly-dead ones.
        """
        removed = []
        async with self._checkpoint_lock:
            current = self._entry_log.current_log_id
            for log_id in log_ids(self._disk):
                if log_id >= current:
                    continue
                ledgers = self._log_ledgers.get(log_id, set())
                if all(self._is_deleted(ledger) for ledger in ledgers):
                    self._remove_log(log_id)
                    self._log_ledgers.pop(log_id, None)
                    removed.append(log_id)
            if removed:
                self._index.kv.write([(log_key(log_id), None) for log_id in removed], sync=True)
                await self._disk.sync_dir(LOG_DIR)
        self.stats.logs_collected_count += len(removed)
        return removed

    async def compact_logs(self) -> list[int]:
        """Compact every entry log but the current one whose live bytes are below
        ``compaction_live_percent_max`` percent of its size (see ``storage.compaction``: live
        entries copied to the current log and synced before the index names them, the old log
        removed last). Returns the ids of the logs compacted away."""
        percent = self.config.compaction_live_percent_max
        compacted: list[int] = []
        if percent <= 0:
            return compacted
        for log_id in sorted(self._log_ledgers):
            if log_id >= self._entry_log.current_log_id or log_id not in self._log_ledgers:
                continue
            live_ledgers = [ledger for ledger in self._log_ledgers[log_id] if not self._is_deleted(ledger)]
            if not live_ledgers:
                continue  # collect_garbage removes it whole
            entries = live_entries(self._index, log_id, live_ledgers)
            if live_bytes(entries) * 100 >= percent * self._entry_log.size_of(log_id):
                continue
            await self._compact_log(log_id, entries)
            compacted.append(log_id)
        return compacted

    async def _compact_log(self, log_id: int, entries: list[LiveEntry]) -> None:
        touched: set[int] = set()
        for chunk in chunks(entries, self.config.flush_chunk_bytes_max):
            async with self._checkpoint_lock:
                # Under the lock nothing else changes the index or appends to the entry log.
                moving = [
                    e
                    for e in chunk
                    if not self._is_deleted(e.ledger_id)
                    and self._index.location(e.ledger_id, e.entry_id) == (log_id, e.offset, e.length)
                ]
                if not moving:
                    continue
                raws = [checked_raw(self._entry_log.read(log_id, e.offset, e.length), e, log_id) for e in moving]
                places = await self._entry_log.append_many(raws, sync=True)
                puts: list[tuple[bytes, bytes | None]] = []
                for e, (new_log, new_offset) in zip(moving, places, strict=True):
                    puts.append((entry_key(e.ledger_id, e.entry_id), location_value(new_log, new_offset, e.length)))
                    self._log_ledgers.setdefault(new_log, set()).add(e.ledger_id)
                    touched.add(new_log)
                self._index.kv.write(puts, sync=False)
                self.stats.compacted_bytes_count += live_bytes(moving)
        async with self._checkpoint_lock:
            final: list[tuple[bytes, bytes | None]] = [
                (log_key(log), Index.log_ledgers_value(self._log_ledgers[log])) for log in sorted(touched)
            ]
            final.append((log_key(log_id), None))
            self._index.kv.write(final, sync=True)
            self._log_ledgers.pop(log_id, None)
            self._remove_log(log_id)
            await self._disk.sync_dir(LOG_DIR)
        self.stats.logs_compacted_count += 1

    async def collect_deleted_ledgers(self) -> list[int]:
        """One GC round: delete ledgers whose metadata is gone, then remove dead entry logs.

        The set of ledgers this bookie holds is taken *before* asking for the live ones: a
        ledger's metadata is created before any add reaches a bookie, so every ledger in the
        snapshot that is missing from the later listing was really deleted (a ledger created
        during the listing is not in the snapshot). If the listing fails the round does nothing.
        Returns the ledgers deleted.
        """
        provider = self._live_ledgers
        if provider is None or self.status not in _READABLE:
            return []
        held = [ledger for ledger, state in self._ledgers.items() if state.status is not LedgerStatus.DELETED]
        try:
            live = set(await provider())
        except Exception as exc:
            self.stats.gc_rounds_skipped_count += 1
            log.warning("bookie GC round skipped: live ledgers unknown: %r", exc)
            return []
        gone = [ledger for ledger in held if ledger not in live]
        for ledger in gone:
            await self.delete_ledger(ledger)
        await self.collect_garbage()
        await self.compact_logs()
        self.stats.ledgers_collected_count += len(gone)
        self.stats.gc_rounds_count += 1
        if gone:
            log.info("bookie GC deleted %d ledgers", len(gone))
        return gone

    async def _gc_loop(self) -> None:
        interval_s = self.config.gc_interval_ms / 1000
        while self.status in _SERVING:
            await self._clock.sleep(interval_s)
            if self.status not in _SERVING:
                return
            try:
                await self.collect_deleted_ledgers()
            except Exception as exc:
                self._on_disk_failure(exc)
                return

    def _is_deleted(self, ledger_id: int) -> bool:
        state = self._ledgers.get(ledger_id)
        return state is not None and state.status is LedgerStatus.DELETED

    # --- checkpoint ----------------------------------------------------------------------------

    async def checkpoint(self) -> None:
        await self._checkpoint()

    async def _checkpoint(self, *, paced: bool = False) -> None:
        async with self._checkpoint_lock:
            journal = self._journal
            assert journal is not None
            invariant(not self._flushing.count, "a checkpoint started while a flush is pending")
            self._flushing, self._active = self._active, WriteCache()
            self._active_since_ns = self._clock.monotonic_ns()
            mark = journal.position()
            urgent = await self._flush(self._flushing, paced=paced)
            await faults.point("bookie.index.before_checkpoint_mark")
            # Synced off the event loop while nothing waits for the checkpoint (a WAL fsync on
            # the loop held up every add meanwhile).
            await self._write_synced([(MARK_KEY, Index.mark_value(mark))], urgent=urgent and paced)
            flushed, self._flushing = self._flushing, WriteCache()
            self._cache_room.set()
            journal.remove_files_before(mark.file_id)
            self.stats.checkpoints_count += 1
        await self._release(flushed, paced=paced)

    async def _release(self, cache: WriteCache, *, paced: bool) -> None:
        """Free a flushed half ``_RELEASE_STEP_ENTRIES`` entries at a time, yielding (paced:
        pausing) in between. Dropping ~50,000 entries at once took 7-9 ms on the event loop
        (each a separate free); and a long run of loop steps makes the worker threads that
        finished a journal fsync wait for the GIL (2-6 ms each), so the paced checkpoint pauses."""
        pause_s = self.config.flush_pause_ms / 1000
        steps = -(-cache.count // _RELEASE_STEP_ENTRIES)
        paced_bytes_per_s = cache.bytes / (steps * pause_s) if steps and pause_s > 0 else float("inf")
        for entries in cache.ledgers.values():
            while entries:
                for _ in range(min(_RELEASE_STEP_ENTRIES, len(entries))):
                    entries.popitem()
                # Paced as the flush is, and like it at full speed while adds come in fast:
                # the next checkpoint waits for this one.
                slow = paced and not self._adds_would_wait(paced_bytes_per_s)
                await self._clock.sleep(pause_s if slow else 0)
        cache.ledgers.clear()

    async def _flush_without_mark(self) -> None:
        # Replay larger than the write cache: flush what was replayed so far; the mark stays.
        cache, self._active = self._active, WriteCache()
        self._active_since_ns = self._clock.monotonic_ns()
        await self._flush(cache, paced=False)
        await self._release(cache, paced=False)

    async def _flush(self, cache: WriteCache, *, paced: bool) -> bool:
        """Write ``cache`` to the entry log and the index; returns whether it ended at full
        speed (a paced flush that adds would wait for, or an unpaced one)."""
        # Incremental, so adds keep flowing during a checkpoint: the frozen half goes to the entry
        # log in chunks (``flush_chunk_bytes_min``/``_max``, at most ``flush_chunk_entries_max``),
        # written off the event loop; the loop's share of each chunk (framing, locations) is one
        # short step. On a buffered log each chunk is synced before the next: a bounded amount
        # of dirty entry-log data in the page cache ahead of the journal's fsyncs keeps add
        # latency bounded. A log written past the page cache (``write_alignment_bytes`` > 1) has
        # no such backlog, so it is synced once, after the last chunk: every device cache flush
        # also delays the journal's. Either way the log is synced before any index entry names
        # its offsets. Locations go to the index in batches of ``index_batch_keys_max`` unsynced
        # keys with a yield between them; the last batch is synced (off the event loop), which
        # (WAL order) makes every earlier batch durable too. Keys and values are kept in two
        # lists of bytes: no tuple per entry for the garbage collector to walk.
        #
        # ``paced`` (the background checkpoint): unless adds would wait for the flush
        # (``_adds_would_wait``), chunks are small, the flush pauses ``flush_pause_ms`` before
        # each one, and each index batch is synced on its own followed by a pause. The journal
        # and the entry log share the device: an entry-log write in flight delays the journal's
        # next write, and each journal fsync must also make durable every entry-log and WAL byte
        # written since the previous one; a long run of loop steps also makes the worker threads
        # that finished a journal fsync wait for the GIL. As one burst, every add during the
        # burst waited for it (paced 5,000 adds/s: p99 10-35 ms in each window holding a
        # checkpoint); spread out, each journal fsync meets little of it. When the adds come in
        # at half the rate a paced flush writes or faster, the flush runs at full speed instead
        # (large chunks, no pauses: throughput first; pausing would only make the next
        # checkpoint, and then the adds, wait).
        keys: list[bytes] = []
        values: list[bytes] = []
        touched_logs: set[int] = set()
        first = True
        flushed = 0
        sync_each = self._entry_log.write_alignment_bytes == 1
        config = self.config
        pause_s = config.flush_pause_ms / 1000
        batch_max = config.index_batch_keys_max
        # A paced flush takes one step (a small chunk or an index batch) per pause.
        steps = max(
            -(-cache.bytes // config.flush_chunk_bytes_min), -(-cache.count // config.flush_chunk_entries_max)
        ) + -(-cache.count // batch_max)
        paced_bytes_per_s = cache.bytes / (steps * pause_s) if steps and pause_s > 0 else float("inf")
        urgent = not paced

        def chunk_limits() -> tuple[int, int]:
            # Asked once per chunk, before it is formed: decides its size and the pause. At
            # full speed chunks are large whatever the entry size: every chunk is a worker-thread
            # round trip, which takes up to a GIL switch interval (5 ms) when the loop is busy.
            nonlocal urgent
            if paced:
                urgent = self._adds_would_wait(paced_bytes_per_s)
            if urgent:
                return config.flush_chunk_bytes_max, config.flush_chunk_bytes_max
            return config.flush_chunk_bytes_min, config.flush_chunk_entries_max

        for chunk in cache.sorted_chunks(chunk_limits):
            if not urgent and not first:
                await self._clock.sleep(pause_s)
            # A buffered log's chunk is written and synced in one step, except the first: the
            # mid_flush point sits between its write and its sync.
            places = await self._entry_log.append_many(
                [raw for _, _, raw in chunk], sync=sync_each and not first
            )
            ledger_logs = self._log_ledgers
            for (ledger_id, entry_id, raw), (log_id, offset) in zip(chunk, places, strict=True):
                keys.append(entry_key(ledger_id, entry_id))
                values.append(location_value(log_id, offset, len(raw)))
                ledgers = ledger_logs.get(log_id)
                if ledgers is None:
                    ledgers = ledger_logs[log_id] = set()
                ledgers.add(ledger_id)
                touched_logs.add(log_id)
            flushed += len(chunk)
            if first:
                first = False
                await faults.point("bookie.entrylog.mid_flush")
                if sync_each:
                    await self._entry_log.sync()
        if not sync_each and not first:
            await self._entry_log.sync()
        if first:
            await faults.point("bookie.entrylog.mid_flush")
        kv = self._index.kv
        at = 0
        while len(keys) - at > batch_max:
            batch = zip(keys[at : at + batch_max], values[at : at + batch_max], strict=True)
            at += batch_max
            if paced and not self._adds_would_wait(paced_bytes_per_s):
                await kv.write_durable(batch)
                await self._clock.sleep(pause_s)
            else:
                kv.write(batch, sync=False)
                await self._clock.sleep(0)
        puts: list[tuple[bytes, bytes | None]] = list(zip(keys[at:], values[at:], strict=True))
        for log_id in touched_logs:
            puts.append((log_key(log_id), Index.log_ledgers_value(self._log_ledgers[log_id])))
        for state in self._ledgers.values():
            if state.dirty:
                puts.append((state_key(state.ledger_id), state.encode()))
                state.dirty = False
        urgent = urgent or (paced and self._adds_would_wait(paced_bytes_per_s))
        if puts:
            await self._write_synced(puts, urgent=urgent and paced)
        self.stats.entries_flushed_count += flushed
        while keys:  # freed a slice at a time, as the flushed entries are (``_release``)
            del keys[-_RELEASE_STEP_ENTRIES:], values[-_RELEASE_STEP_ENTRIES:]
            slow = paced and not self._adds_would_wait(paced_bytes_per_s)
            await self._clock.sleep(pause_s if slow else 0)
        return urgent

    async def _write_synced(self, puts: list[tuple[bytes, bytes | None]], *, urgent: bool) -> None:
        # Off the event loop, unless adds wait for the background checkpoint: then a synced
        # write on the loop ends it sooner than a worker-thread round trip through a busy
        # loop's GIL (the next checkpoint, and then the adds, wait for this one).
        if urgent:
            self._index.kv.write(puts, sync=True)
        else:
            await self._index.kv.write_durable(puts)

    def _adds_would_wait(self, paced_bytes_per_s: float) -> bool:
        """Whether adds wait for the flush now (the active half is full), or come in so fast
        that a paced flush, writing ``paced_bytes_per_s``, would make them wait: the active half
        filled since it was swapped in at half that rate or more. Pacing then only delays the
        next checkpoint, which the adds then wait for."""
        if not self._cache_room.is_set():
            return True
        filled = self._active.bytes
        if filled >= self.config.write_cache_bytes_max // 2:
            return True
        if filled == 0:
            return False
        elapsed_ns = self._clock.monotonic_ns() - self._active_since_ns
        if elapsed_ns <= 0:
            return True  # filled in no time at all (a simulated clock): as fast as it gets
        return 2 * filled * 1e9 / elapsed_ns >= paced_bytes_per_s

    async def _checkpoint_loop(self) -> None:
        interval_s = self.config.checkpoint_interval_ms / 1000
        while self.status in _SERVING:
            await wait_event_or_timeout(self._clock, self._checkpoint_wanted, interval_s)
            self._checkpoint_wanted.clear()
            if self.status not in _SERVING:
                return
            try:
                await self._checkpoint(paced=True)
            except Exception as exc:
                self._on_disk_failure(exc)
                return

    # --- disk space ----------------------------------------------------------------------------

    def _disk_low(self) -> bool:
        return self._disk.free_bytes() < self.config.disk_free_bytes_min

    def check_disk(self) -> None:
        """Enter read-only mode when the disk is nearly full; leave it at twice the threshold."""
        free = self._disk.free_bytes()
        if self.status is BookieStatus.WRITABLE and free < self.config.disk_free_bytes_min:
            self._transition(BookieStatus.READ_ONLY)
        elif self.status is BookieStatus.READ_ONLY and free >= 2 * self.config.disk_free_bytes_min:
            self._transition(BookieStatus.WRITABLE)

    async def _disk_monitor_loop(self) -> None:
        while self.status in _SERVING:
            await self._clock.sleep(self.config.disk_check_interval_ms / 1000)
            if self.status in _SERVING:
                self.check_disk()

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
        self._checkpoint_wanted.set()
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
