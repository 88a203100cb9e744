"""Journal replay on start: what the journal holds beyond the last checkpoint goes back into the
write cache and the ledger states, and ``last_entry`` is repaired where a crash left it naming
an entry that never became durable.

Replay runs from the checkpoint mark; a torn tail ends it (``journal.replay``). ADD records go
into the write cache (flushed without moving the mark whenever half of it fills: a replay
larger than the cache), FENCE records fence their ledger and LAC records raise its known LAC.
A deleted ledger stays deleted: its tombstone keeps a replayed add from resurrecting it.
"""

from __future__ import annotations

import logging
from collections.abc import MutableMapping

from magnetar.base.errors import CorruptDataError
from magnetar.base.io import Disk
from magnetar.protocol.bookie import Entry
from magnetar.storage.bookie_ledger import BookieLedger, LedgerStatus
from magnetar.storage.checkpointer import Checkpointer
from magnetar.storage.index import Index, state_key
from magnetar.storage.journal import KIND_ADD, KIND_LAC, JournalPosition, JournalRecord, replay

log = logging.getLogger(__name__)


async def replay_journal(
    disk: Disk, index: Index, ledgers: MutableMapping[int, BookieLedger], checkpointer: Checkpointer
) -> int:
    """Replay the journal from the checkpoint mark into ``ledgers`` and the checkpointer's write
    cache; returns the number of records replayed."""
    mark = index.mark() or JournalPosition(0, 0)
    result = await replay(disk, mark)
    if result.torn_at is not None:
        log.warning("journal torn at file %d offset %d: replay ended there", result.torn_at.file_id, result.torn_at.offset)
    for _, record in result.records:
        if apply_record(ledgers, checkpointer, record):
            await checkpointer.flush_without_mark()
    return len(result.records)


def apply_record(ledgers: MutableMapping[int, BookieLedger], checkpointer: Checkpointer, record: JournalRecord) -> bool:
    """Apply one replayed record; returns whether the write cache's active half is full now."""
    if record.kind == KIND_ADD:
        try:
            entry = Entry.parse(record.entry_raw)
        except CorruptDataError:
            log.error("journal ADD record with a malformed entry skipped")
            return False
        state = ledgers.get(entry.ledger_id)
        if state is None:
            state = ledgers[entry.ledger_id] = BookieLedger(entry.ledger_id, master_key=record.master_key)
        if state.status is LedgerStatus.DELETED:
            return False
        state.note_entry(entry.entry_id, entry.lac)
        return checkpointer.put_replayed(entry.ledger_id, entry.entry_id, record.entry_raw)
    state = ledgers.get(record.ledger_id)
    if state is None:
        state = ledgers[record.ledger_id] = BookieLedger(record.ledger_id, master_key=record.master_key)
    if record.kind == KIND_LAC:
        if state.status is not LedgerStatus.DELETED and record.lac > state.lac:
            state.lac = record.lac
            state.dirty = True
    elif state.status is LedgerStatus.OPEN:
        state.transition(LedgerStatus.FENCED)
    return False


def repair_last_entries(index: Index, ledgers: MutableMapping[int, BookieLedger]) -> list[int]:
    """Repair ``last_entry`` where it names an entry the index does not hold; returns the
    ledgers repaired (their states are persisted, synced).

    A crash can leave last_entry naming an add that was never made durable (states are
    snapshotted at checkpoint time, ahead of the journal). The real highest entry is the
    highest the index holds; call after the replay's checkpoint, when the index holds every
    replayed entry.
    """
    repaired = []
    for state in ledgers.values():
        if state.status is LedgerStatus.DELETED or state.last_entry < 0:
            continue
        if index.location(state.ledger_id, state.last_entry) is None:
            state.last_entry = index.last_stored_entry(state.ledger_id)
            state.dirty = True
            repaired.append(state)
    if repaired:
        index.kv.write([(state_key(s.ledger_id), s.encode()) for s in repaired], sync=True)
        for state in repaired:
            state.dirty = False
    return [state.ledger_id for state in repaired]
