"""The bookie's index in the injected ``KeyValueStore`` (RocksDB in production).

Keys (big-endian so the store's order is (ledger, entry) order)::

    b"E" + u64 ledger + u64 entry  ->  u64 log_id, u64 offset, u32 length   where an entry lives
    b"S" + u64 ledger              ->  BookieLedger.encode()                fenced, LAC, last entry, key
    b"G" + u64 log_id              ->  u64 ledger * n                       ledgers in an entry log (GC)
    b"M"                           ->  u64 file_id, u64 offset              checkpoint mark (journal)

Invariant: the mark is written (synced) only after the entry logs and every location and
ledger state it covers were synced, so replay from the mark never misses an acknowledged add.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Iterator

from magnetar.base.io import KeyValueStore
from magnetar.storage.bookie_ledger import BookieLedger
from magnetar.storage.journal import JournalPosition

#: An entry's key (``b"E"``, ledger, entry) and its location value (log, offset, length).
ENTRY_KEY = struct.Struct(">cQQ")
_LEDGER_KEY = struct.Struct(">cQ")
LOCATION = struct.Struct(">QQI")
_MARK = struct.Struct(">QQ")
_U64 = struct.Struct(">Q")
MARK_KEY = b"M"


def entry_key(ledger_id: int, entry_id: int) -> bytes:
    return ENTRY_KEY.pack(b"E", ledger_id, entry_id)


def location_value(log_id: int, offset: int, length: int) -> bytes:
    return LOCATION.pack(log_id, offset, length)


def state_key(ledger_id: int) -> bytes:
    return _LEDGER_KEY.pack(b"S", ledger_id)


def log_key(log_id: int) -> bytes:
    return _LEDGER_KEY.pack(b"G", log_id)


class Index:
    """Typed access to the key/value store; batches are applied atomically."""

    def __init__(self, kv: KeyValueStore) -> None:
        self.kv = kv

    def location(self, ledger_id: int, entry_id: int) -> tuple[int, int, int] | None:
        value = self.kv.get(entry_key(ledger_id, entry_id))
        if value is None:
            return None
        log_id, offset, length = LOCATION.unpack(value)
        return log_id, offset, length

    def locations_from(self, ledger_id: int, entry_id: int, count_max: int) -> Iterator[tuple[int, int, int, int]]:
        """(entry, log, offset, length) for stored entries of ``ledger_id`` from ``entry_id`` on."""
        end = entry_key(ledger_id + 1, 0)
        for n, (key, value) in enumerate(self.kv.scan(entry_key(ledger_id, entry_id), end)):
            if n >= count_max:
                return
            _, _, entry = ENTRY_KEY.unpack(key)
            yield (entry, *LOCATION.unpack(value))

    def last_stored_entry(self, ledger_id: int) -> int:
        """The highest entry id with a location (a full scan of the ledger's keys), or -1."""
        last = -1
        for key, _ in self.kv.scan(entry_key(ledger_id, 0), entry_key(ledger_id + 1, 0)):
            last = ENTRY_KEY.unpack(key)[2]
        return last

    def entry_keys_of(self, ledger_id: int) -> list[bytes]:
        return [key for key, _ in self.kv.scan(entry_key(ledger_id, 0), entry_key(ledger_id + 1, 0))]

    def states(self) -> Iterator[BookieLedger]:
        for key, value in self.kv.scan(b"S", b"T"):
            yield BookieLedger.decode(_LEDGER_KEY.unpack(key)[1], value)

    def log_ledgers(self) -> dict[int, set[int]]:
        result: dict[int, set[int]] = {}
        for key, value in self.kv.scan(b"G", b"H"):
            log_id = _LEDGER_KEY.unpack(key)[1]
            result[log_id] = {_U64.unpack_from(value, i)[0] for i in range(0, len(value), 8)}
        return result

    @staticmethod
    def log_ledgers_value(ledgers: Iterable[int]) -> bytes:
        ordered = sorted(ledgers)  # one pack call: a log of 100,000 ledgers is encoded per checkpoint
        return struct.pack(f">{len(ordered)}Q", *ordered)

    def mark(self) -> JournalPosition | None:
        value = self.kv.get(MARK_KEY)
        if value is None:
            return None
        file_id, offset = _MARK.unpack(value)
        return JournalPosition(file_id, offset)

    @staticmethod
    def mark_value(position: JournalPosition) -> bytes:
        return _MARK.pack(position.file_id, position.offset)

    def is_empty(self) -> bool:
        return next(iter(self.kv.scan(b"")), None) is None
