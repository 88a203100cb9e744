"""The write cache (entries not yet in an entry log) and the bounded LRU read cache.

Both are keyed by (ledger, entry) and hold the entry's wire form. The write cache is unbounded
by itself; the bookie bounds it (``write_cache_bytes_max``) by starting a checkpoint at half
and pausing new adds while a full half waits for the previous flush.
"""

from __future__ import annotations

import collections


class WriteCache:
    __slots__ = ("bytes", "entries")

    def __init__(self) -> None:
        self.entries: dict[tuple[int, int], bytes] = {}
        self.bytes = 0

    def put(self, ledger_id: int, entry_id: int, raw: bytes) -> None:
        old = self.entries.get((ledger_id, entry_id))
        if old is not None:
            self.bytes -= len(old)
        self.entries[(ledger_id, entry_id)] = raw
        self.bytes += len(raw)

    def get(self, ledger_id: int, entry_id: int) -> bytes | None:
        return self.entries.get((ledger_id, entry_id))

    def drop_ledger(self, ledger_id: int) -> None:
        for key in [k for k in self.entries if k[0] == ledger_id]:
            self.bytes -= len(self.entries.pop(key))

    def sorted_items(self) -> list[tuple[tuple[int, int], bytes]]:
        return sorted(self.entries.items(), key=lambda item: item[0])

    def __len__(self) -> int:
        return len(self.entries)


class ReadCache:
    """LRU over entries read from entry logs, bounded by ``bytes_max``."""

    __slots__ = ("_bytes", "_entries", "bytes_max", "hits", "misses")

    def __init__(self, bytes_max: int) -> None:
        self.bytes_max = bytes_max
        self._entries: collections.OrderedDict[tuple[int, int], bytes] = collections.OrderedDict()
        self._bytes = 0
        self.hits = 0
        self.misses = 0

    def get(self, ledger_id: int, entry_id: int) -> bytes | None:
        raw = self._entries.get((ledger_id, entry_id))
        if raw is None:
            self.misses += 1
            return None
        self.hits += 1
        self._entries.move_to_end((ledger_id, entry_id))
        return raw

    def put(self, ledger_id: int, entry_id: int, raw: bytes) -> None:
        if len(raw) > self.bytes_max:
            return
        key = (ledger_id, entry_id)
        old = self._entries.pop(key, None)
        if old is not None:
            self._bytes -= len(old)
        self._entries[key] = raw
        self._bytes += len(raw)
        while self._bytes > self.bytes_max:
            _, evicted = self._entries.popitem(last=False)
            self._bytes -= len(evicted)

    def drop_ledger(self, ledger_id: int) -> None:
        for key in [k for k in self._entries if k[0] == ledger_id]:
            self._bytes -= len(self._entries.pop(key))

    @property
    def bytes(self) -> int:
        return self._bytes
