"""Journal replay on start (``storage.restart``) on its own, over the simulated disk and store:
what lies after the checkpoint mark comes back (adds into the write cache, fences, explicit
LACs), tombstones hold, a replay larger than the write cache is flushed without moving the mark,
and ``last_entry`` is repaired where it names an entry the index does not hold.
"""

from __future__ import annotations

import dataclasses

from magnetar.sim import run
from magnetar.storage import BookieLedger, LedgerStatus
from magnetar.storage.index import Index
from magnetar.storage.journal import KIND_ADD, KIND_FENCE, KIND_LAC, JournalRecord, fence_record, lac_record
from magnetar.storage.restart import apply_record, repair_last_entries, replay_journal
from tests.storage.harness import CONFIG, KEY, Parts, entry


async def _restarted(parts: Parts) -> Parts:
    """The next incarnation with the ledger states and log map loaded from the index, as
    ``Bookie.start`` loads them before it replays."""
    await parts.stop()
    again = parts.again()
    for state in again.index.states():
        again.ledgers[state.ledger_id] = state
    again.log_ledgers.update(again.index.log_ledgers())
    await again.entry_log.start()
    return again


def test_replay_brings_back_what_follows_the_mark() -> None:
    async def scenario() -> None:
        parts = Parts()
        journal = await parts.start()
        for i in range(5):
            await parts.add(entry(1, i, lac=i - 1))
        await parts.checkpointer.checkpoint()  # the mark: entries 1:0..4 are in the index
        for i in range(5, 8):
            await parts.add(entry(1, i, lac=i - 1))
        await parts.add(entry(2, 0))
        await journal.append(fence_record(2, KEY))
        await journal.append(lac_record(1, 7, KEY))
        again = await _restarted(parts)
        assert again.ledgers[1].last_entry == 4 and 2 not in again.ledgers  # as of the mark
        assert await replay_journal(again.disk, again.index, again.ledgers, again.checkpointer) == 6
        assert [again.checkpointer.get(1, i) for i in range(5, 8)] == [entry(1, i, lac=i - 1).raw for i in range(5, 8)]
        assert again.checkpointer.get(1, 4) is None and again.indexed(1, 4)  # before the mark: not replayed
        assert again.ledgers[1].last_entry == 7 and again.ledgers[1].lac == 7
        assert again.ledgers[2].status is LedgerStatus.FENCED
        again.entry_log.close()

    run(scenario())


def test_replayed_records_do_not_resurrect_a_deleted_ledger() -> None:
    async def scenario() -> None:
        parts = Parts()
        ledgers = parts.ledgers
        ledgers[3] = BookieLedger(3, LedgerStatus.DELETED, lac=1, last_entry=1, master_key=KEY)
        raw = entry(3, 2, lac=1).raw
        assert not apply_record(ledgers, parts.checkpointer, JournalRecord(KIND_ADD, KEY, entry_raw=raw))
        assert not apply_record(ledgers, parts.checkpointer, JournalRecord(KIND_LAC, KEY, ledger_id=3, lac=9))
        assert not apply_record(ledgers, parts.checkpointer, JournalRecord(KIND_FENCE, KEY, ledger_id=3))
        assert ledgers[3] == BookieLedger(3, LedgerStatus.DELETED, lac=1, last_entry=1, master_key=KEY)
        assert parts.checkpointer.get(3, 2) is None
        # Negative control: the same records for a ledger that is not deleted take effect.
        ledgers[4] = BookieLedger(4, master_key=KEY)
        apply_record(ledgers, parts.checkpointer, JournalRecord(KIND_ADD, KEY, entry_raw=entry(4, 2, lac=1).raw))
        apply_record(ledgers, parts.checkpointer, JournalRecord(KIND_LAC, KEY, ledger_id=4, lac=9))
        apply_record(ledgers, parts.checkpointer, JournalRecord(KIND_FENCE, KEY, ledger_id=4))
        assert (ledgers[4].status, ledgers[4].lac, ledgers[4].last_entry) == (LedgerStatus.FENCED, 9, 2)
        assert parts.checkpointer.get(4, 2) == entry(4, 2, lac=1).raw
        # A malformed entry in an ADD record is skipped, and creates no ledger.
        assert not apply_record(ledgers, parts.checkpointer, JournalRecord(KIND_ADD, KEY, entry_raw=b"\x00" * 64))
        assert set(ledgers) == {3, 4}

    run(scenario())


def test_replay_larger_than_the_write_cache_is_flushed_without_moving_the_mark() -> None:
    async def scenario() -> None:
        small = dataclasses.replace(CONFIG, write_cache_bytes_max=32 * 1024, entry_bytes_max=8 * 1024)
        parts = Parts(small)
        await parts.start()
        for i in range(40):  # 40 KiB of adds, no checkpoint
            await parts.add(entry(6, i, b"p" * 1024))
        again = await _restarted(parts)
        assert await replay_journal(again.disk, again.index, again.ledgers, again.checkpointer) == 40
        assert again.index.mark() is None  # flushed, but the mark did not move
        flushed = [i for i in range(40) if again.indexed(6, i)]
        assert flushed == list(range(len(flushed))) and len(flushed) >= 16  # in order, each half full
        cached = [i for i in range(40) if again.checkpointer.get(6, i) is not None]
        assert cached == list(range(len(flushed), 40))  # the rest waits in the write cache
        assert again.stats.entries_flushed_count == len(flushed)
        again.entry_log.close()

    run(scenario())


def test_repair_last_entries_lowers_a_last_entry_that_never_became_durable() -> None:
    async def scenario() -> None:
        parts = Parts()
        await parts.start()
        for ledger in (1, 2, 3):
            for i in range(5):
                await parts.add(entry(ledger, i))
        await parts.checkpointer.checkpoint()
        parts.ledgers[1].last_entry = 9  # snapshotted ahead of the journal: 5..9 were never durable
        parts.ledgers[3].last_entry = 9
        parts.ledgers[3].transition(LedgerStatus.DELETED)
        assert repair_last_entries(parts.index, parts.ledgers) == [1]
        assert parts.ledgers[1].last_entry == 4 and not parts.ledgers[1].dirty
        assert parts.ledgers[2].last_entry == 4  # its last entry is indexed: untouched
        assert parts.ledgers[3].last_entry == 9  # deleted: left alone
        persisted = {state.ledger_id: state for state in Index(parts.kv.reopen()).states()}
        assert persisted[1].last_entry == 4  # synced to the index
        assert repair_last_entries(parts.index, parts.ledgers) == []  # nothing left to repair
        await parts.stop()

    run(scenario())
