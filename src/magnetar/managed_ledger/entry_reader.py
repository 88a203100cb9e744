"""``EntryReader``: reads entries of a managed ledger's ledgers, with two bounded caches.

* Entry cache: recently appended payloads (``MANAGED_LEDGER_CACHE_BYTES_MAX``, oldest evicted
  first), so consumers at the tail never go to a bookie — as Pulsar's entry cache. Entries are
  remembered in log order (the pipeline's acknowledged positions only grow), so the cache is a
  list of ``_CachedRun``s: the payloads of consecutive entries of one ledger in a list, found by
  entry id, the oldest given up from the head (no ordered-dict node, position hash or ``popitem``
  per message: once per message at a steady rate, when the cache is full). The managed
  ledgers of one factory share a ``CacheBudget`` (``MANAGED_LEDGER_CACHE_TOTAL_BYTES_MAX``, as
  Pulsar's broker-wide managedLedgerCacheSizeMB): beyond it the entry cache written to least
  recently gives up its oldest entries first, so thousands of topics cannot add up to gigabytes.
* Reader cache: ``LedgerReader``s opened *without recovery* (never fencing: reading must not
  disturb the writer), LRU-bounded by ``MANAGED_LEDGER_READERS_CACHED_COUNT_MAX``.

Offloaded ledgers (``offload`` given to ``read``): while the bookies still hold a copy it is read
from them, falling back to ``offloaded_reader`` (the object store) if they fail; once the copy is
deleted, only the object store is read. Both give the same stored bytes.

A reader of a ledger still OPEN may know a LAC behind what our writer acknowledged (the LAC of
the newest entry rides only on the next one); then it re-reads the LAC and, for our own current
ledger, first publishes it with an explicit-LAC write. Callers only ask for acknowledged entries.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Awaitable, Callable
from typing import Protocol

from magnetar.base.entry import Entry
from magnetar.base.errors import MagnetarError, NotFoundError
from magnetar.base.invariant import invariant
from magnetar.base.limits import (
    MANAGED_LEDGER_CACHE_BYTES_MAX,
    MANAGED_LEDGER_CACHE_TOTAL_BYTES_MAX,
    MANAGED_LEDGER_READERS_CACHED_COUNT_MAX,
)
from magnetar.base.types import Position
from magnetar.ledger.handle import LedgerHandle
from magnetar.ledger.manager import LedgerManager
from magnetar.ledger.reader import LedgerReader
from magnetar.metadata.records import OffloadContext

#: (ledger id, its offload context, first, last) -> the stored entries, from the object store.
OffloadedReader = Callable[[int, OffloadContext, int, int], Awaitable[list[bytes]]]


class CacheHolder(Protocol):
    """An entry cache under a ``CacheBudget`` (an ``EntryReader``, a read-only managed ledger)."""

    def evict_oldest(self) -> bool:
        """Drop the oldest cached entry, taking its size off the budget's ``bytes``; whether there was one."""
        ...


class CacheBudget:
    """Bytes of entry cache all ``EntryReader``s sharing it may hold together."""

    def __init__(self, bytes_max: int = MANAGED_LEDGER_CACHE_TOTAL_BYTES_MAX) -> None:
        self.bytes_max = bytes_max
        self.bytes = 0
        self._holders: OrderedDict[CacheHolder, None] = OrderedDict()  # least recently written first
        #: The last of ``_holders`` (None: unknown): a holder written to again keeps its place
        #: without two ordered-dict operations (one topic at a steady rate: every charge).
        self._last: CacheHolder | None = None

    def charged(self, holder: CacheHolder, size: int) -> None:
        self.bytes += size
        if holder is not self._last:
            self._holders[holder] = None
            self._holders.move_to_end(holder)
            self._last = holder
        while self.bytes > self.bytes_max and self._holders:
            victim = next(iter(self._holders))  # the least recently written
            if not victim.evict_oldest():
                del self._holders[victim]
                if victim is self._last:
                    self._last = None

    def released(self, holder: CacheHolder, size: int, *, empty: bool) -> None:
        self.bytes -= size
        if empty:
            self._holders.pop(holder, None)
            if holder is self._last:
                self._last = None


class _CachedRun:
    """Cached payloads of consecutive entries of ledger ``ledger_id``: entry ``first + i`` is
    ``payloads[i]`` for ``head <= i < len(payloads)`` (the ones before ``head`` were given up:
    their slots hold ``b""`` until the list is compacted)."""

    __slots__ = ("first", "head", "ledger_id", "payloads")

    def __init__(self, ledger_id: int, first: int, payload: bytes) -> None:
        self.ledger_id = ledger_id
        self.first = first
        self.head = 0
        self.payloads = [payload]

    def get(self, entry_id: int) -> bytes | None:
        index = entry_id - self.first
        if self.head <= index < len(self.payloads):
            return self.payloads[index]
        return None

    def drop_head(self) -> bytes:
        """Give up the oldest payload (the run must hold one); compacts the list once at least
        half of it was given up (``_RUN_COMPACT_MIN`` or more slots): amortized O(1) per entry."""
        payloads, head = self.payloads, self.head
        data = payloads[head]
        payloads[head] = b""
        head += 1
        if head >= _RUN_COMPACT_MIN and 2 * head >= len(payloads):
            del payloads[:head]
            self.first += head
            head = 0
        self.head = head
        return data


#: Given-up slots at the head of a ``_CachedRun`` before its list is compacted.
_RUN_COMPACT_MIN = 256


class EntryReader:
    def __init__(self, manager: LedgerManager, budget: CacheBudget | None = None) -> None:
        self._manager = manager
        self._budget = budget if budget is not None else CacheBudget()
        self._runs: list[_CachedRun] = []  # the entry cache, oldest first (log order)
        self._cache_bytes = 0
        self._readers: OrderedDict[int, LedgerReader] = OrderedDict()
        self.offloaded_reader: OffloadedReader | None = None

    @property
    def cached_bytes(self) -> int:
        return self._cache_bytes

    def remember(self, position: Position, data: bytes) -> None:
        """Cache ``data`` as the entry at ``position``, which comes after every cached entry
        (the managed ledger's acknowledged positions strictly grow)."""
        runs = self._runs
        ledger_id, entry_id = position.ledger_id, position.entry_id
        if runs:
            run = runs[-1]
            end = run.first + len(run.payloads)  # the entry id after the run's last
            if run.ledger_id == ledger_id and end == entry_id:
                run.payloads.append(data)
            else:
                if not (ledger_id > run.ledger_id or (ledger_id == run.ledger_id and entry_id > end)):
                    invariant(False, f"cached {position} not after {run.ledger_id}:{end - 1}")
                runs.append(_CachedRun(ledger_id, entry_id, data))
        else:
            runs.append(_CachedRun(ledger_id, entry_id, data))
        self._cache_bytes += len(data)
        while self._cache_bytes > MANAGED_LEDGER_CACHE_BYTES_MAX and runs:
            evicted = self._drop_oldest()
            self._budget.released(self, len(evicted), empty=False)
        self._budget.charged(self, len(data))

    def _drop_oldest(self) -> bytes:
        runs = self._runs
        run = runs[0]
        data = run.drop_head()
        if run.head == len(run.payloads):
            del runs[0]
        self._cache_bytes -= len(data)
        return data

    def _get(self, ledger_id: int, entry_id: int) -> bytes | None:
        for run in self._runs:
            if run.ledger_id == ledger_id:
                data = run.get(entry_id)
                if data is not None:
                    return data
        return None

    def cached(self, ledger_id: int, first: int, last: int) -> list[bytes] | None:
        """Entries ``first..last`` of ``ledger_id`` if every one is in the cache, else None."""
        out: list[bytes] = []
        for entry_id in range(first, last + 1):
            data = self._get(ledger_id, entry_id)
            if data is None:
                return None
            out.append(data)
        return out

    def read_cached(self, start: Position, last_confirmed: Position, count_max: int) -> list[Entry] | None:
        """``read`` without a suspension, for the tail of the current ledger only: the entries
        ``start`` .. ``last_confirmed`` (at most ``count_max``) when ``start`` is in
        ``last_confirmed``'s ledger and every one of them is in the cache; else None (``read``
        decides: another ledger, a cache miss). ``[]`` when ``start`` is past it. The dispatcher's
        send in the pass an add completed (``Dispatcher.entries_added``)."""
        ledger_id, first = start.ledger_id, start.entry_id
        if ledger_id != last_confirmed.ledger_id or first < 0 or count_max < 1:
            return None
        last = min(last_confirmed.entry_id, first + count_max - 1)
        if last < first:
            return []
        out: list[Entry] = []
        for entry_id in range(first, last + 1):
            data = self._get(ledger_id, entry_id)
            if data is None:
                return None
            out.append(Entry(Position(ledger_id, entry_id), data))
        return out

    def evict_oldest(self) -> bool:
        """Drop the oldest cached entry (the shared budget is over); whether there was one."""
        if not self._runs:
            return False
        self._budget.bytes -= len(self._drop_oldest())
        return True

    def forget_ledger(self, ledger_id: int) -> None:
        self._readers.pop(ledger_id, None)
        kept: list[_CachedRun] = []
        size = 0
        for run in self._runs:
            if run.ledger_id == ledger_id:
                size += sum(len(data) for data in run.payloads[run.head:])
            else:
                kept.append(run)
        if len(kept) == len(self._runs):
            return
        self._runs = kept
        self._cache_bytes -= size
        self._budget.released(self, size, empty=not kept)

    def clear(self) -> None:
        """Give back every cached entry (the managed ledger closed)."""
        size = self._cache_bytes
        self._runs = []
        self._cache_bytes = 0
        self._readers.clear()
        self._budget.released(self, size, empty=True)

    async def read(self, ledger_id: int, first: int, last: int, writer: LedgerHandle | None,
                   offload: OffloadContext | None = None) -> list[Entry]:
        """Entries ``first..last`` of ``ledger_id`` (all acknowledged); ``writer``: our current ledger's;
        ``offload``: where the ledger was offloaded to, if it was."""
        cached = self.cached(ledger_id, first, last)
        if cached is not None:
            return [Entry(Position(ledger_id, first + i), data) for i, data in enumerate(cached)]
        offloaded_reader = self.offloaded_reader
        if offload is not None and offload.complete and offloaded_reader is not None:
            if not offload.bookie_deleted:
                try:
                    return await self._read_bookies(ledger_id, first, last, writer)
                except MagnetarError:
                    self._readers.pop(ledger_id, None)  # the copy is gone or its bookies failed
            stored = await offloaded_reader(ledger_id, offload, first, last)
            return [Entry(Position(ledger_id, first + i), data) for i, data in enumerate(stored)]
        return await self._read_bookies(ledger_id, first, last, writer)

    async def _read_bookies(self, ledger_id: int, first: int, last: int,
                            writer: LedgerHandle | None) -> list[Entry]:
        reader = await self._reader_for(ledger_id, last, writer)
        return await reader.read_entries(first, last)

    async def _reader_for(self, ledger_id: int, last: int, writer: LedgerHandle | None) -> LedgerReader:
        reader = self._readers.get(ledger_id)
        if reader is None or (not reader.is_closed and reader.last_add_confirmed < last):
            reader = await self._manager.open_ledger_no_recovery(ledger_id)
            self._readers[ledger_id] = reader
            while len(self._readers) > MANAGED_LEDGER_READERS_CACHED_COUNT_MAX:
                self._readers.popitem(last=False)
        self._readers.move_to_end(ledger_id)
        if reader.last_add_confirmed < last and not reader.is_closed:
            await reader.read_lac()
            if reader.last_add_confirmed < last and writer is not None and writer.ledger_id == ledger_id:
                await writer.send_explicit_lac()
                await reader.read_lac()
        if reader.last_add_confirmed < last:
            raise NotFoundError(f"entry {ledger_id}:{last} is not readable yet (LAC {reader.last_add_confirmed})")
        return reader
