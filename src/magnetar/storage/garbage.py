"""``GarbageCollector``: ledger deletion, removal of dead entry logs and compaction of mostly
dead ones.

A GC round (``collect_deleted_ledgers``, every ``gc_interval_ms`` when a ``LiveLedgers``
provider is given): ledgers missing from the metadata are deleted, entry logs holding only
deleted ledgers removed, and logs whose live bytes fell below ``compaction_live_percent_max``
percent compacted (live entries copied to the current log, then the old log removed; see
``storage.compaction``). Every change to the entry log and the index happens under the
checkpointer's ``lock``, so it never interleaves with a flush.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Collection

from magnetar.base.clock import Clock
from magnetar.base.io import Disk
from magnetar.storage.bookie_ledger import BookieLedger, LedgerStatus
from magnetar.storage.caches import ReadCache
from magnetar.storage.checkpointer import Checkpointer
from magnetar.storage.compaction import LiveEntry, checked_raw, chunks, live_bytes, live_entries
from magnetar.storage.config import BookieConfig
from magnetar.storage.entry_log import LOG_DIR, EntryLogger, log_ids
from magnetar.storage.index import Index, entry_key, location_value, log_key, state_key
from magnetar.storage.stats import BookieStats

log = logging.getLogger(__name__)

#: Returns the ids of every ledger whose metadata exists (the composition root reads them from
#: the metadata store); raising means "unknown right now" and skips that GC round.
LiveLedgers = Callable[[], Awaitable[Collection[int]]]


class GarbageCollector:
    """Deletes ledgers and reclaims the entry logs they leave behind."""

    def __init__(
        self,
        disk: Disk,
        index: Index,
        entry_log: EntryLogger,
        checkpointer: Checkpointer,
        clock: Clock,
        config: BookieConfig,
        *,
        ledgers: dict[int, BookieLedger],
        log_ledgers: dict[int, set[int]],
        read_cache: ReadCache,
        stats: BookieStats,
        live_ledgers: LiveLedgers | None = None,
    ) -> None:
        """``ledgers``: every ledger state (deletion tombstones them); ``log_ledgers``: the
        ledgers each entry log holds; ``live_ledgers``: the metadata's ledgers, for GC rounds."""
        self._disk = disk
        self._index = index
        self._entry_log = entry_log
        self._checkpointer = checkpointer
        self._clock = clock
        self._config = config
        self._ledgers = ledgers
        self._log_ledgers = log_ledgers
        self._read_cache = read_cache
        self._stats = stats
        self.live_ledgers = live_ledgers
        #: Ledgers deleted so far, and per entry log the count at which ``compact_logs`` last
        #: found it worth keeping: a log's live bytes fall only when a ledger in it is deleted (a
        #: log other than the current one never grows), so it is not scanned again until one is.
        #: Each scan walks the index of every live ledger in the log: with 100,000 topics a log
        #: holds 100,000 ledgers, and every GC round (60 s) scanned them all on the event loop.
        self._deleted_count = 0
        self._kept_at: dict[int, int] = {}

    async def delete_ledger(self, ledger_id: int) -> None:
        """Drop a ledger (its metadata was deleted): tombstone it, remove its index entries."""
        state = self._ledgers.get(ledger_id)
        if state is None:
            state = self._ledgers[ledger_id] = BookieLedger(ledger_id)
        async with self._checkpointer.lock:
            state.transition(LedgerStatus.DELETED)
            self._deleted_count += 1
            self._checkpointer.drop_ledger(ledger_id)
            self._read_cache.drop_ledger(ledger_id)
            puts: list[tuple[bytes, bytes | None]] = [(key, None) for key in self._index.entry_keys_of(ledger_id)]
            puts.append((state_key(ledger_id), state.encode()))
            self._index.kv.write(puts, sync=True)
            state.dirty = False

    def remove_log(self, log_id: int) -> None:
        """Remove an entry log. The read cache is emptied too: its entries may be views of the
        log's mapping, which would keep the removed file's disk space until they are evicted."""
        self._entry_log.remove(log_id)
        self._read_cache.clear()
        self._kept_at.pop(log_id, None)

    async def collect_garbage(self) -> list[int]:
        """Remove entry logs that hold only deleted ledgers (or nothing indexed); returns their ids.

        Logs that still hold a live ledger are kept here; ``compact_logs`` copies the live
        entries out of mostly-dead ones.
        """
        removed = []
        async with self._checkpointer.lock:
            current = self._entry_log.current_log_id
            for log_id in log_ids(self._disk):
                if log_id >= current:
                    continue
                ledgers = self._log_ledgers.get(log_id, set())
                if all(self._is_deleted(ledger) for ledger in ledgers):
                    self.remove_log(log_id)
                    self._log_ledgers.pop(log_id, None)
                    removed.append(log_id)
            if removed:
                self._index.kv.write([(log_key(log_id), None) for log_id in removed], sync=True)
                await self._disk.sync_dir(LOG_DIR)
        self._stats.logs_collected_count += len(removed)
        return removed

    async def compact_logs(self) -> list[int]:
        """Compact every entry log but the current one whose live bytes are below
        ``compaction_live_percent_max`` percent of its size (see ``storage.compaction``: live
        entries copied to the current log and synced before the index names them, the old log
        removed last). Returns the ids of the logs compacted away."""
        percent = self._config.compaction_live_percent_max
        compacted: list[int] = []
        if percent <= 0:
            return compacted
        for log_id in sorted(self._log_ledgers):
            if log_id >= self._entry_log.current_log_id or log_id not in self._log_ledgers:
                continue
            if self._kept_at.get(log_id) == self._deleted_count:
                continue  # nothing deleted since it was last found worth keeping
            live_ledgers = [ledger for ledger in self._log_ledgers[log_id] if not self._is_deleted(ledger)]
            if not live_ledgers:
                continue  # collect_garbage removes it whole
            entries = live_entries(self._index, log_id, live_ledgers)
            if live_bytes(entries) * 100 >= percent * self._entry_log.size_of(log_id):
                self._kept_at[log_id] = self._deleted_count
                continue
            await self._compact_log(log_id, entries)
            compacted.append(log_id)
        return compacted

    async def _compact_log(self, log_id: int, entries: list[LiveEntry]) -> None:
        touched: set[int] = set()
        lock = self._checkpointer.lock
        for chunk in chunks(entries, self._config.flush_chunk_bytes_max):
            async with lock:
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
                self._stats.compacted_bytes_count += live_bytes(moving)
        async with lock:
            final: list[tuple[bytes, bytes | None]] = [
                (log_key(log), Index.log_ledgers_value(self._log_ledgers[log])) for log in sorted(touched)
            ]
            final.append((log_key(log_id), None))
            self._index.kv.write(final, sync=True)
            self._log_ledgers.pop(log_id, None)
            self.remove_log(log_id)
            await self._disk.sync_dir(LOG_DIR)
        self._stats.logs_compacted_count += 1

    async def collect_deleted_ledgers(self) -> list[int]:
        """One GC round: delete ledgers whose metadata is gone, then remove dead entry logs.

        The set of ledgers this bookie holds is taken *before* asking for the live ones: a
        ledger's metadata is created before any add reaches a bookie, so every ledger in the
        snapshot that is missing from the later listing was really deleted (a ledger created
        during the listing is not in the snapshot). If the listing fails the round does nothing.
        Returns the ledgers deleted.
        """
        provider = self.live_ledgers
        if provider is None:
            return []
        held = [ledger for ledger, state in self._ledgers.items() if state.status is not LedgerStatus.DELETED]
        try:
            live = set(await provider())
        except Exception as exc:
            self._stats.gc_rounds_skipped_count += 1
            log.warning("bookie GC round skipped: live ledgers unknown: %r", exc)
            return []
        gone = [ledger for ledger in held if ledger not in live]
        for ledger in gone:
            await self.delete_ledger(ledger)
        await self.collect_garbage()
        await self.compact_logs()
        self._stats.ledgers_collected_count += len(gone)
        self._stats.gc_rounds_count += 1
        if gone:
            log.info("bookie GC deleted %d ledgers", len(gone))
        return gone

    async def run(self, serving: Callable[[], bool], on_failure: Callable[[BaseException], None]) -> None:
        """A GC round every ``gc_interval_ms`` while ``serving()``; a failure is reported to
        ``on_failure`` and ends the loop."""
        interval_s = self._config.gc_interval_ms / 1000
        while serving():
            await self._clock.sleep(interval_s)
            if not serving():
                return
            try:
                await self.collect_deleted_ledgers()
            except Exception as exc:
                on_failure(exc)
                return

    def _is_deleted(self, ledger_id: int) -> bool:
        state = self._ledgers.get(ledger_id)
        return state is not None and state.status is LedgerStatus.DELETED
