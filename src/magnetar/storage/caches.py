"""The write cache (entries not yet in an entry log) and the bounded LRU read cache.

Both are keyed by (ledger, entry) and hold the entry's wire form. The write cache is unbounded
by itself; the bookie bounds it (``write_cache_bytes_max``) by starting a checkpoint at half
and pausing new adds while a full half waits for the previous flush.
"""

from __future__ import annotations

import collections
from collections.abc import Callable, Iterator

from magnetar.base.io import Bytes


class WriteCache:
    """Entries by ledger, then entry id: a flush walks ledgers in order and each ledger's entries
    in order without sorting one big list (entries usually arrive in order, so the per-ledger
    sort is a linear pass)."""

    __slots__ = ("bytes", "count", "ledgers")

    def __init__(self) -> None:
        self.ledgers: dict[int, dict[int, bytes]] = {}
        self.bytes = 0
        self.count = 0

    def put(self, ledger_id: int, entry_id: int, raw: bytes) -> None:
        entries = self.ledgers.get(ledger_id)
        if entries is None:
            entries = self.ledgers[ledger_id] = {}
        old = entries.get(entry_id)
        if old is not None:
            self.bytes -= len(old)
            self.count -= 1
        entries[entry_id] = raw
        self.bytes += len(raw)
        self.count += 1

    def get(self, ledger_id: int, entry_id: int) -> bytes | None:
        entries = self.ledgers.get(ledger_id)
        return None if entries is None else entries.get(entry_id)

    def drop_ledger(self, ledger_id: int) -> None:
        entries = self.ledgers.pop(ledger_id, None)
        if entries is not None:
            self.bytes -= sum(len(raw) for raw in entries.values())
            self.count -= len(entries)

    def sorted_chunks(self, chunk_limits: Callable[[], tuple[int, int]]) -> Iterator[list[tuple[int, int, bytes]]]:
        """(ledger, entry, raw) in (ledger, entry) order, in lists of about ``bytes_max`` bytes
        and at most ``count_max`` entries, ``(bytes_max, count_max) = chunk_limits()`` asked
        again for every chunk (so a flush can change pace: the work a flush does per chunk on
        the event loop is per entry, so a paced flush of small entries makes short chunks).

        Lazy, so a flush can yield to the event loop between chunks; the cache must not change
        while the iterator is in use (a flush works on the frozen half).
        """
        chunk: list[tuple[int, int, bytes]] = []
        size = 0
        limit, count_max = chunk_limits()
        for ledger_id in sorted(self.ledgers):
            entries = self.ledgers[ledger_id]
            for entry_id in sorted(entries):
                raw = entries[entry_id]
                if chunk and (size + len(raw) > limit or len(chunk) >= count_max):
                    yield chunk
                    chunk, size = [], 0
                    limit, count_max = chunk_limits()
                chunk.append((ledger_id, entry_id, raw))
                size += len(raw)
        if chunk:
            yield chunk

    def __len__(self) -> int:
        return self.count


def pop_entries(entries: dict[int, bytes], count: int) -> None:
    """Remove ``count`` entries of ``entries`` (or all, if fewer), the last ones first."""
    for _ in range(min(count, len(entries))):
        entries.popitem()


def release_step(ledgers: dict[int, dict[int, bytes]], count: int) -> int:
    """Free about ``count`` entries of a flushed half's ``ledgers`` (one step of
    ``Checkpointer._release``): whole ledgers, the last ones first, while they fit in what is
    left of ``count``, then the last entries of the next one. Per step, not per ledger: with
    entries spread over many ledgers (100,000 topics, one entry each) a step per ledger was one
    event-loop pass per entry. Returns the entries freed."""
    freed = 0
    while ledgers and freed < count:
        ledger_id, entries = ledgers.popitem()  # its entries go with it, if they fit
        if len(entries) <= count - freed:
            freed += len(entries)
        else:
            pop_entries(entries, count - freed)
            ledgers[ledger_id] = entries  # the rest in a later step
            freed = count
    return freed


class ReadCache:
    """LRU over entries read from entry logs, bounded by ``bytes_max``. An entry is ``bytes`` or a
    read-only view of its log mapped into memory (``EntryLogger.view``: it counts its length; the
    page cache holds the bytes). A view keeps its log's mapping alive, so the bookie clears the
    cache when it removes logs (``clear``)."""

    __slots__ = ("_bytes", "_entries", "bytes_max", "hits", "misses")

    def __init__(self, bytes_max: int) -> None:
        self.bytes_max = bytes_max
        self._entries: collections.OrderedDict[tuple[int, int], Bytes] = collections.OrderedDict()
        self._bytes = 0
        self.hits = 0
        self.misses = 0

    def get(self, ledger_id: int, entry_id: int) -> Bytes | None:
        raw = self._entries.get((ledger_id, entry_id))
        if raw is None:
            self.misses += 1
            return None
        self.hits += 1
        self._entries.move_to_end((ledger_id, entry_id))
        return raw

    def put(self, ledger_id: int, entry_id: int, raw: Bytes) -> None:
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

    def clear(self) -> None:
        self._entries.clear()
        self._bytes = 0

    def drop_ledger(self, ledger_id: int) -> None:
        for key in [k for k in self._entries if k[0] == ledger_id]:
            self._bytes -= len(self._entries.pop(key))

    @property
    def bytes(self) -> int:
        return self._bytes
