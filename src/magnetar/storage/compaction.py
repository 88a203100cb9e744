"""Compaction of entry logs that are mostly dead: copy their live entries, then remove them.

GC removes an entry log once every ledger in it is deleted; a log that still holds a little of
a live ledger would otherwise be kept whole forever. A log is compacted when its live bytes
(entries the index still locates in it, of ledgers not deleted) are below
``compaction_live_percent_max`` percent of its size.

Steps, and why a crash at any point loses nothing:

1. ``live_entries``: the live entries of the log, from the index, in (ledger, entry) order.
2. Chunk by chunk (about ``flush_chunk_bytes_max`` each), under the bookie's checkpoint lock:
   read the entries (digest checked), append them to the current entry log *and sync it*, then
   write their new locations to the index (unsynced batch). An entry whose location changed
   meanwhile (deleted ledger, re-added entry) is skipped. The lock is released between chunks,
   so checkpoints and adds go on.
3. Under the lock: one synced index batch records the ledgers of the logs written to and
   deletes the old log's ledger list (WAL order: every earlier batch is durable too).
4. The old log file is removed (and its directory synced).

Until step 3 the old log is still listed and still on disk, so an index entry pointing at it
(a lost unsynced batch) stays readable; the copies are synced before any location names them.
After step 3 a crash may leave the old file without a listing: GC removes such orphans.
"""

from __future__ import annotations

from dataclasses import dataclass

from magnetar.base.errors import CorruptDataError
from magnetar.protocol.bookie import EncodedEntry
from magnetar.storage.flush_rows import RECORD_HEADER_BYTES
from magnetar.storage.index import Index

#: Locations read from the index per ledger while listing a log's live entries (a log holds at
#: most ``entry_log_bytes_max`` of entries; this bounds one scan step, not the total).
_SCAN_BATCH_COUNT = 4096


@dataclass(frozen=True, slots=True)
class LiveEntry:
    ledger_id: int
    entry_id: int
    offset: int
    length: int


def live_entries(index: Index, log_id: int, ledgers: list[int]) -> list[LiveEntry]:
    """Entries of ``ledgers`` the index locates in log ``log_id``, in (ledger, entry) order."""
    found: list[LiveEntry] = []
    for ledger_id in sorted(ledgers):
        next_entry = 0
        while True:
            batch = list(index.locations_from(ledger_id, next_entry, _SCAN_BATCH_COUNT))
            for entry_id, log, offset, length in batch:
                if log == log_id:
                    found.append(LiveEntry(ledger_id, entry_id, offset, length))
            if len(batch) < _SCAN_BATCH_COUNT:
                break
            next_entry = batch[-1][0] + 1
    return found


def live_bytes(entries: list[LiveEntry]) -> int:
    """Bytes the entries take in a log, record headers included."""
    return sum(RECORD_HEADER_BYTES + entry.length for entry in entries)


def chunks(entries: list[LiveEntry], chunk_bytes: int) -> list[list[LiveEntry]]:
    """``entries`` in consecutive lists of about ``chunk_bytes`` (at least one entry each)."""
    result: list[list[LiveEntry]] = []
    current: list[LiveEntry] = []
    size = 0
    for entry in entries:
        if current and size + entry.length > chunk_bytes:
            result.append(current)
            current, size = [], 0
        current.append(entry)
        size += entry.length
    if current:
        result.append(current)
    return result


def checked_raw(raw: bytes, expected: LiveEntry, log_id: int) -> bytes:
    """``raw`` if it is the expected, intact entry; otherwise ``CorruptDataError`` (never copy garbage)."""
    entry = EncodedEntry.parse(raw)
    if entry.ledger_id != expected.ledger_id or entry.entry_id != expected.entry_id or not entry.digest_ok():
        raise CorruptDataError(
            f"entry log {log_id} offset {expected.offset} does not hold a valid {expected.ledger_id}:{expected.entry_id}"
        )
    return raw

