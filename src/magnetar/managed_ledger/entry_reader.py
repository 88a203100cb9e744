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

from abc import abstractmethod
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from typing import Final

from mypy_extensions import mypyc_attr

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


@mypyc_attr(allow_interpreted_subclasses=True)  # ReadOnlyManagedLedger (managed_ledger/read_only.py)
class CacheHolder:
    """An entry cache under a ``CacheBudget`` (an ``EntryReader``, a read-only managed ledger).
    ``budget_at`` is the budget's: where its last write is in the budget's order (-1: not in
    it). A base class, not a protocol: compiled, the budget reads and writes ``budget_at`` per
    write as a native field, not by name."""

    budget_at: int = -1

    @abstractmethod
    def evict_oldest(self) -> bool:
        """Drop the oldest cached entry, taking its size off the budget's ``bytes``; whether there was one."""


class CacheBudget:
    """Bytes of entry cache all ``EntryReader``s sharing it may hold together.

    The holders in the order of their last write (least recently written first) are a list:
    a write appends its holder and records the index on the holder (``budget_at``); the
    holder's earlier entry stays behind, stale (its index is no longer the holder's), and is
    skipped when the head reaches it; the list is compacted once it holds more stale entries
    than live ones. So a write touches the holder and the list's tail only: with 10,000 topics
    round robin, an ordered dict's ``move_to_end`` per write touched a table slot and three
    nodes of other topics (cache misses per message)."""

    def __init__(self, bytes_max: int = MANAGED_LEDGER_CACHE_TOTAL_BYTES_MAX) -> None:
        self.bytes_max = bytes_max
        self.bytes = 0
        #: ``_order[_head:]``: the holders by last write, oldest first, with stale entries.
        self._order: list[CacheHolder] = []
        self._head = 0
        self._live = 0  # holders in the order (each has one live entry)

    def charged(self, holder: CacheHolder, size: int) -> None:
        self.bytes += size
        order = self._order
        at = holder.budget_at
        if at != len(order) - 1 or at < 0:  # not the last written already: goes last
            if at < 0:
                self._live += 1
            holder.budget_at = len(order)
            order.append(holder)
            if len(order) > 2 * self._live + _ORDER_SLACK_COUNT:
                self._compact()
        while self.bytes > self.bytes_max and self._live:
            victim = self._oldest()  # the least recently written
            if not victim.evict_oldest():
                self._leave(victim)

    def released(self, holder: CacheHolder, size: int, *, empty: bool) -> None:
        self.bytes -= size
        if empty and holder.budget_at >= 0:
            self._leave(holder)

    def holders(self) -> list[CacheHolder]:
        """The holders in the order, least recently written first (tests, diagnostics)."""
        order = self._order
        return [holder for at, holder in enumerate(order) if at >= self._head and holder.budget_at == at]

    def _leave(self, holder: CacheHolder) -> None:
        holder.budget_at = -1  # its entry is stale from now on
        self._live -= 1

    def _oldest(self) -> CacheHolder:
        """The first live entry's holder (stale ones before it are passed for good); the caller
        checked that one is live."""
        order, head = self._order, self._head
        while True:
            holder = order[head]
            if holder.budget_at == head:
                self._head = head
                return holder
            head += 1

    def _compact(self) -> None:
        live = self.holders()
        for at, holder in enumerate(live):
            holder.budget_at = at
        self._order = live
        self._head = 0


#: Stale entries a ``CacheBudget``'s order may hold beyond as many as it has live ones (``Final``:
#: compiled, a constant, not a lookup in the module's dict per write).
_ORDER_SLACK_COUNT: Final = 64


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


class EntryReader(CacheHolder):
    def __init__(self, manager: LedgerManager, budget: CacheBudget | None = None) -> None:
        self._manager = manager
        self._budget = budget if budget is not None else CacheBudget()
        self._runs: list[_CachedRun] = []  # the entry cache, oldest first (log order)
        #: ``_runs[-1]`` (None: no run): ``remember`` reads it without the list (at 10,000
        #: topics one object less per message to bring into the cache).
        self._tail: _CachedRun | None = None
        self._cache_bytes = 0
        #: Readers of ledgers read from, least recently used first: made by the first read that
        #: misses the cache (an idle topic never reads: no 128-byte ``OrderedDict`` per topic).
        self._readers: OrderedDict[int, LedgerReader] | None = None
        self.offloaded_reader: OffloadedReader | None = None

    @property
    def cached_bytes(self) -> int:
        return self._cache_bytes

    def remember(self, position: Position, data: bytes) -> None:
        """Cache ``data`` as the entry at ``position``, which comes after every cached entry
        (the managed ledger's acknowledged positions strictly grow)."""
        ledger_id, entry_id = position.ledger_id, position.entry_id
        run = self._tail
        if run is not None:
            end = run.first + len(run.payloads)  # the entry id after the run's last
            if run.ledger_id == ledger_id and end == entry_id:
                run.payloads.append(data)
            else:
                if not (ledger_id > run.ledger_id or (ledger_id == run.ledger_id and entry_id > end)):
                    invariant(False, f"cached {position} not after {run.ledger_id}:{end - 1}")
                self._tail = run = _CachedRun(ledger_id, entry_id, data)
                self._runs.append(run)
        else:
            self._tail = run = _CachedRun(ledger_id, entry_id, data)
            self._runs.append(run)
        self._cache_bytes += len(data)
        while self._cache_bytes > MANAGED_LEDGER_CACHE_BYTES_MAX and self._runs:
            evicted = self._drop_oldest()
            self._budget.released(self, len(evicted), empty=False)
        self._budget.charged(self, len(data))

    def _drop_oldest(self) -> bytes:
        runs = self._runs
        run = runs[0]
        data = run.drop_head()
        if run.head == len(run.payloads):
            del runs[0]
            if not runs:
                self._tail = None
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

    def _drop_reader(self, ledger_id: int) -> None:
        """Forget ``ledger_id``'s cached reader, if one was ever made."""
        if self._readers is not None:
            self._readers.pop(ledger_id, None)

    def forget_ledger(self, ledger_id: int) -> None:
        self._drop_reader(ledger_id)
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
        self._tail = kept[-1] if kept else None
        self._cache_bytes -= size
        self._budget.released(self, size, empty=not kept)

    def clear(self) -> None:
        """Give back every cached entry (the managed ledger closed)."""
        size = self._cache_bytes
        self._runs = []
        self._tail = None
        self._cache_bytes = 0
        if self._readers is not None:
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
                    self._drop_reader(ledger_id)  # the copy is gone or its bookies failed
            stored = await offloaded_reader(ledger_id, offload, first, last)
            return [Entry(Position(ledger_id, first + i), data) for i, data in enumerate(stored)]
        return await self._read_bookies(ledger_id, first, last, writer)

    async def _read_bookies(self, ledger_id: int, first: int, last: int,
                            writer: LedgerHandle | None) -> list[Entry]:
        reader = await self._reader_for(ledger_id, last, writer)
        return await reader.read_entries(first, last)

    async def _reader_for(self, ledger_id: int, last: int, writer: LedgerHandle | None) -> LedgerReader:
        readers = self._readers
        if readers is None:  # the same dict from now on (``clear`` empties it)
            readers = self._readers = OrderedDict()
        reader = readers.get(ledger_id)
        if reader is None or (not reader.is_closed and reader.last_add_confirmed < last):
            reader = await self._manager.open_ledger_no_recovery(ledger_id)
            readers[ledger_id] = reader
            while len(readers) > MANAGED_LEDGER_READERS_CACHED_COUNT_MAX:
                readers.popitem(last=False)
        readers.move_to_end(ledger_id)
        if reader.last_add_confirmed < last and not reader.is_closed:
            await reader.read_lac()
            if reader.last_add_confirmed < last and writer is not None and writer.ledger_id == ledger_id:
                await writer.send_explicit_lac()
                await reader.read_lac()
        if reader.last_add_confirmed < last:
            raise NotFoundError(f"entry {ledger_id}:{last} is not readable yet (LAC {reader.last_add_confirmed})")
        return reader
