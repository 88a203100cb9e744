"""``Checkpointer``: the write cache's two halves, their flush to the entry log and the index,
the flush's pacing, and the checkpoint mark.

Adds put their entries into the active half (``put``). A checkpoint (``checkpoint()``, run by
``run`` when half the write cache is used or every ``checkpoint_interval_ms``) swaps the halves,
takes the journal position as the mark, appends the frozen half sorted by (ledger, entry) to the
entry log in synced chunks, writes every location plus dirty ledger states to the index
(unsynced batches, then a synced last one), and only then persists the mark and deletes journal
files before it. While a full active half waits for the previous flush, ``room`` is clear and
adds wait (backpressure).

The flush is incremental, so adds keep flowing during a checkpoint: the frozen half goes to the
entry log in chunks (``flush_chunk_bytes_min``/``_max``, at most ``flush_chunk_entries_max``),
written off the event loop; the loop's share of each chunk (framing, locations) is one short
step. On a buffered log each chunk is synced before the next: a bounded amount of dirty
entry-log data in the page cache ahead of the journal's fsyncs keeps add latency bounded. A log
written past the page cache (``write_alignment_bytes`` > 1) has no such backlog, so it is synced
once, after the last chunk: every device cache flush also delays the journal's. Either way the
log is synced before any index entry names its offsets. Locations go to the index in batches of
``index_batch_keys_max`` unsynced keys with a yield between them; the last batch is synced (off
the event loop), which (WAL order) makes every earlier batch durable too. Keys and values are
kept in two lists of bytes: no tuple per entry for the garbage collector to walk.

Pacing (the background checkpoint): unless adds would wait for the flush (``_adds_would_wait``),
chunks are small, the flush pauses ``flush_pause_ms`` before each one, and each index batch is
synced on its own followed by a pause. The journal and the entry log share the device: an
entry-log write in flight delays the journal's next write, and each journal fsync must also make
durable every entry-log and WAL byte written since the previous one; a long run of loop steps
also makes the worker threads that finished a journal fsync wait for the GIL. As one burst,
every add during the burst waited for it (paced 5,000 adds/s: p99 10-35 ms in each window
holding a checkpoint); spread out, each journal fsync meets little of it. When the adds come in
at half the rate a paced flush writes or faster, the flush runs at full speed instead (large
chunks, no pauses: throughput first; pausing would only make the next checkpoint, and then the
adds, wait).

``lock`` is held by every writer of the entry log and the index: a checkpoint, and the garbage
collector's deletions, log removals and compactions.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping

from magnetar import faults
from magnetar.base.clock import Clock
from magnetar.base.invariant import invariant
from magnetar.base.lazy_event import LazyEvent
from magnetar.storage.bookie_ledger import BookieLedger
from magnetar.storage.caches import WriteCache, release_step
from magnetar.storage.config import BookieConfig
from magnetar.storage.entry_log import EntryLogger
from magnetar.storage.flush_rows import chunk_raws, index_rows
from magnetar.storage.index import MARK_KEY, Index, log_key, state_key
from magnetar.storage.journal import Journal
from magnetar.storage.stats import BookieStats
from magnetar.storage.waits import wait_event_or_timeout

#: Entries a flushed write-cache half frees per event-loop step (``Checkpointer._release``).
_RELEASE_STEP_ENTRIES = 2048


class _Pace:
    """How one flush goes: ``paced`` (the background checkpoint) or not, the rate a paced flush
    writes at (``bytes_per_s``), and whether it runs at full speed now (``urgent``)."""

    __slots__ = ("bytes_per_s", "paced", "pause_s", "urgent")

    def __init__(self, paced: bool, bytes_per_s: float, pause_s: float) -> None:
        self.paced = paced
        self.bytes_per_s = bytes_per_s
        self.pause_s = pause_s
        self.urgent = not paced


class Checkpointer:
    """The write cache's halves and their checkpoints over one entry log and index."""

    def __init__(
        self,
        entry_log: EntryLogger,
        index: Index,
        clock: Clock,
        config: BookieConfig,
        *,
        ledgers: Mapping[int, BookieLedger],
        log_ledgers: dict[int, set[int]],
        stats: BookieStats,
    ) -> None:
        """``ledgers``: every ledger state (the dirty ones are persisted with each flush);
        ``log_ledgers``: the ledgers each entry log holds, extended as entries are flushed."""
        self._entry_log = entry_log
        self._index = index
        self._clock = clock
        self._config = config
        self._ledgers = ledgers
        self._log_ledgers = log_ledgers
        self._stats = stats
        self._half_bytes = config.write_cache_bytes_max // 2
        self._journal: Journal | None = None
        self._active = WriteCache()
        self._active_since_ns = 0  # when the active half was last swapped in (fill rate)
        self._flushing = WriteCache()
        self._wanted = asyncio.Event()
        #: Held by every writer of the entry log and the index.
        self.lock = asyncio.Lock()
        #: Set while the write cache has room for adds; clear while a full active half waits
        #: for the previous flush (adds wait: backpressure). Asked per add run
        #: (``Bookie.needs_backpressure``): a compiled ``LazyEvent``, where ``asyncio.Event``'s
        #: ``is_set`` was an interpreted call (~0.9 per message at a steady 2,000 msg/s).
        self.room = LazyEvent(is_set=True)

    def use_journal(self, journal: Journal) -> None:
        """The started journal: a checkpoint takes its position as the mark and deletes the
        files before the mark. Replay flushes (``flush_without_mark``) come before it."""
        self._journal = journal

    # --- the write cache -----------------------------------------------------------------------

    def put(self, ledger_id: int, entry_id: int, raw: bytes) -> None:
        """An add's entry (the hot path): into the active half; a half-full active half wakes
        the checkpoint, and makes adds wait if the previous flush still runs."""
        active = self._active
        active.put(ledger_id, entry_id, raw)
        if active.bytes >= self._half_bytes:
            self._wanted.set()
            if self._flushing.bytes:
                self.room.clear()

    def put_replayed(self, ledger_id: int, entry_id: int, raw: bytes) -> bool:
        """A replayed entry: into the active half; returns whether the half is full (the
        replay then flushes it: ``flush_without_mark``)."""
        active = self._active
        active.put(ledger_id, entry_id, raw)
        return active.bytes >= self._half_bytes

    def get(self, ledger_id: int, entry_id: int) -> bytes | None:
        """An entry not yet in the index: in the active half or the half being flushed."""
        return self._active.get(ledger_id, entry_id) or self._flushing.get(ledger_id, entry_id)

    def drop_ledger(self, ledger_id: int) -> None:
        """Forget a deleted ledger's cached entries (call under ``lock``)."""
        self._active.drop_ledger(ledger_id)
        self._flushing.drop_ledger(ledger_id)

    def want_checkpoint(self) -> None:
        """Wake ``run`` now (a checkpoint, or the end of the loop when the bookie stops)."""
        self._wanted.set()

    # --- checkpoints ---------------------------------------------------------------------------

    async def run(self, serving: Callable[[], bool], on_failure: Callable[[BaseException], None]) -> None:
        """The background checkpoint, paced, while ``serving()``; a failure is reported to
        ``on_failure`` and ends the loop."""
        interval_s = self._config.checkpoint_interval_ms / 1000
        while serving():
            await wait_event_or_timeout(self._clock, self._wanted, interval_s)
            self._wanted.clear()
            if not serving():
                return
            try:
                await self.checkpoint(paced=True)
            except Exception as exc:
                on_failure(exc)
                return

    async def checkpoint(self, *, paced: bool = False) -> None:
        """Swap the halves, flush the frozen one, then persist the mark (the journal position
        at the swap) and delete the journal files before it."""
        async with self.lock:
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
            self.room.set()
            journal.remove_files_before(mark.file_id)
            self._stats.checkpoints_count += 1
        await self._release(flushed, paced=paced)

    async def flush_without_mark(self) -> None:
        """Replay larger than the write cache: flush what was replayed so far; the mark stays."""
        cache, self._active = self._active, WriteCache()
        self._active_since_ns = self._clock.monotonic_ns()
        await self._flush(cache, paced=False)
        await self._release(cache, paced=False)

    async def _release(self, cache: WriteCache, *, paced: bool) -> None:
        """Free a flushed half ``_RELEASE_STEP_ENTRIES`` entries at a time, yielding (paced:
        pausing) in between. Dropping ~50,000 entries at once took 7-9 ms on the event loop
        (each a separate free); and a long run of loop steps makes the worker threads that
        finished a journal fsync wait for the GIL (2-6 ms each), so the paced checkpoint pauses."""
        pause_s = self._config.flush_pause_ms / 1000
        steps = -(-cache.count // _RELEASE_STEP_ENTRIES)
        paced_bytes_per_s = cache.bytes / (steps * pause_s) if steps and pause_s > 0 else float("inf")
        ledgers = cache.ledgers
        while ledgers:
            release_step(ledgers, _RELEASE_STEP_ENTRIES)  # a step of entries, over as many ledgers
            # Paced as the flush is, and like it at full speed while adds come in fast:
            # the next checkpoint waits for this one.
            slow = paced and not self._adds_would_wait(paced_bytes_per_s)
            await self._clock.sleep(pause_s if slow else 0)

    # --- the flush -----------------------------------------------------------------------------

    async def _flush(self, cache: WriteCache, *, paced: bool) -> bool:
        """Write ``cache`` to the entry log and the index; returns whether it ended at full
        speed (a paced flush that adds would wait for, or an unpaced one)."""
        pace = self._pace(cache, paced)
        keys, values, touched_logs = await self._write_entry_log(cache, pace)
        await self._write_index(keys, values, touched_logs, pace)
        self._stats.entries_flushed_count += len(keys)
        while keys:  # freed a slice at a time, as the flushed entries are (``_release``)
            del keys[-_RELEASE_STEP_ENTRIES:], values[-_RELEASE_STEP_ENTRIES:]
            slow = paced and not self._adds_would_wait(pace.bytes_per_s)
            await self._clock.sleep(pace.pause_s if slow else 0)
        return pace.urgent

    def _pace(self, cache: WriteCache, paced: bool) -> _Pace:
        # A paced flush takes one step (a small chunk or an index batch) per pause.
        config = self._config
        pause_s = config.flush_pause_ms / 1000
        steps = max(
            -(-cache.bytes // config.flush_chunk_bytes_min), -(-cache.count // config.flush_chunk_entries_max)
        ) + -(-cache.count // config.index_batch_keys_max)
        bytes_per_s = cache.bytes / (steps * pause_s) if steps and pause_s > 0 else float("inf")
        return _Pace(paced, bytes_per_s, pause_s)

    async def _write_entry_log(self, cache: WriteCache, pace: _Pace) -> tuple[list[bytes], list[bytes], set[int]]:
        """Append ``cache`` to the entry log in chunks and sync it; returns the index keys and
        location values of the entries, and the logs written."""
        keys: list[bytes] = []
        values: list[bytes] = []
        touched_logs: set[int] = set()
        first = True
        sync_each = self._entry_log.write_alignment_bytes == 1
        config = self._config

        def chunk_limits() -> tuple[int, int]:
            # Asked once per chunk, before it is formed: decides its size and the pause. At
            # full speed chunks are large whatever the entry size: every chunk is a worker-thread
            # round trip, which takes up to a GIL switch interval (5 ms) when the loop is busy.
            if pace.paced:
                pace.urgent = self._adds_would_wait(pace.bytes_per_s)
            if pace.urgent:
                return config.flush_chunk_bytes_max, config.flush_chunk_bytes_max
            return config.flush_chunk_bytes_min, config.flush_chunk_entries_max

        for chunk in cache.sorted_chunks(chunk_limits):
            if not pace.urgent and not first:
                await self._clock.sleep(pace.pause_s)
            # A buffered log's chunk is written and synced in one step, except the first: the
            # mid_flush point sits between its write and its sync.
            log_id, offsets = await self._entry_log.append_chunk(chunk_raws(chunk), sync=sync_each and not first)
            ledgers = self._log_ledgers.get(log_id)
            if ledgers is None:
                ledgers = self._log_ledgers[log_id] = set()
            index_rows(chunk, log_id, offsets, keys, values, ledgers)  # one compiled pass
            touched_logs.add(log_id)
            if first:
                first = False
                await faults.point("bookie.entrylog.mid_flush")
                if sync_each:
                    await self._entry_log.sync()
        if not sync_each and not first:
            await self._entry_log.sync()
        if first:
            await faults.point("bookie.entrylog.mid_flush")
        return keys, values, touched_logs

    async def _write_index(self, keys: list[bytes], values: list[bytes], touched_logs: set[int], pace: _Pace) -> None:
        """Write the locations, the touched logs' ledger sets and the dirty ledger states to the
        index: unsynced batches (paced: each synced, with a pause), then one synced write."""
        batch_max = self._config.index_batch_keys_max
        kv = self._index.kv
        at = 0
        while len(keys) - at > batch_max:
            batch = zip(keys[at : at + batch_max], values[at : at + batch_max], strict=True)
            at += batch_max
            if pace.paced and not self._adds_would_wait(pace.bytes_per_s):
                await kv.write_durable(batch)
                await self._clock.sleep(pace.pause_s)
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
        pace.urgent = pace.urgent or (pace.paced and self._adds_would_wait(pace.bytes_per_s))
        if puts:
            await self._write_synced(puts, urgent=pace.urgent and pace.paced)

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
        if not self.room.is_set():
            return True
        filled = self._active.bytes
        if filled >= self._half_bytes:
            return True
        if filled == 0:
            return False
        elapsed_ns = self._clock.monotonic_ns() - self._active_since_ns
        if elapsed_ns <= 0:
            return True  # filled in no time at all (a simulated clock): as fast as it gets
        return 2 * filled * 1e9 / elapsed_ns >= paced_bytes_per_s
