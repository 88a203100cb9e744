"""``EntryReader``: reads entries of a managed ledger's ledgers, with two bounded caches.

* Entry cache: recently appended payloads (``MANAGED_LEDGER_CACHE_BYTES_MAX``, oldest evicted
  first), so consumers at the tail never go to a bookie — as Pulsar's entry cache.
* Reader cache: ``LedgerReader``s opened *without recovery* (never fencing: reading must not
  disturb the writer), LRU-bounded by ``MANAGED_LEDGER_READERS_CACHED_COUNT_MAX``.

A reader of a ledger still OPEN may know a LAC behind what our writer acknowledged (the LAC of
the newest entry rides only on the next one); then it re-reads the LAC and, for our own current
ledger, first publishes it with an explicit-LAC write. Callers only ask for acknowledged entries.
"""

from __future__ import annotations

from collections import OrderedDict

from magnetar.base.errors import NotFound
from magnetar.base.limits import MANAGED_LEDGER_CACHE_BYTES_MAX, MANAGED_LEDGER_READERS_CACHED_COUNT_MAX
from magnetar.base.types import Position
from magnetar.ledger.handle import LedgerHandle
from magnetar.ledger.manager import LedgerManager
from magnetar.ledger.reader import LedgerReader
from magnetar.managed_ledger.entry import ManagedEntry


class EntryReader:
    def __init__(self, manager: LedgerManager) -> None:
        self._manager = manager
        self._cache: OrderedDict[Position, bytes] = OrderedDict()
        self._cache_bytes = 0
        self._readers: OrderedDict[int, LedgerReader] = OrderedDict()

    def remember(self, position: Position, data: bytes) -> None:
        self._cache[position] = data
        self._cache_bytes += len(data)
        while self._cache_bytes > MANAGED_LEDGER_CACHE_BYTES_MAX and self._cache:
            _, evicted = self._cache.popitem(last=False)
            self._cache_bytes -= len(evicted)

    def forget_ledger(self, ledger_id: int) -> None:
        self._readers.pop(ledger_id, None)
        for position in [p for p in self._cache if p.ledger_id == ledger_id]:
            self._cache_bytes -= len(self._cache.pop(position))

    async def read(self, ledger_id: int, first: int, last: int, writer: LedgerHandle | None) -> list[ManagedEntry]:
        """Entries ``first..last`` of ``ledger_id`` (all acknowledged); ``writer``: our current ledger's."""
        cached = [self._cache.get(Position(ledger_id, e)) for e in range(first, last + 1)]
        if all(data is not None for data in cached):
            return [ManagedEntry(Position(ledger_id, first + i), data) for i, data in enumerate(cached) if data is not None]
        reader = await self._reader_for(ledger_id, last, writer)
        entries = await reader.read_entries(first, last)
        return [ManagedEntry(Position(ledger_id, e.entry_id), e.payload) for e in entries]

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
            raise NotFound(f"entry {ledger_id}:{last} is not readable yet (LAC {reader.last_add_confirmed})")
        return reader
