"""The checkpointer on its own (simulated disk, store and clock): the mark, the write-cache
halves, backpressure, pacing and the flush without a mark that a long replay uses.

* the mark is the journal position at the swap: an entry added while the flush runs stays in
  the active half, after the mark (held mid-flush with the ``bookie.entrylog.mid_flush`` hang);
* the mark is written only after every location is in the index, and journal files before it
  are deleted only then (``bookie.index.before_checkpoint_mark`` armed with an error);
* a half-full active half wakes the background checkpoint, and clears ``room`` only while a
  flush is still pending;
* paced, the flush of an idle bookie is spread out over many pauses of virtual time; with adds
  waiting for room it runs at full speed (negative control of each other).
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable, Iterator

import pytest

from magnetar import faults
from magnetar.faults import InjectedFaultError
from magnetar.sim import run
from magnetar.storage.journal import journal_file_ids
from tests.storage.harness import CONFIG, PACED, Parts, entry


@pytest.fixture(autouse=True)
def _disarm() -> Iterator[None]:
    yield
    faults.disarm_all()


async def _wait_for(condition: Callable[[], bool], parts: Parts, steps_max: int = 10_000) -> None:
    """Let the simulated loop run until ``condition()`` holds (bounded in steps)."""
    for _ in range(steps_max):
        if condition():
            return
        await parts.clock.sleep(0.0001)  # virtual time (simulated clock/loop): no real wait
    raise AssertionError("condition never held")


def test_mark_is_the_journal_position_at_the_swap() -> None:
    async def scenario() -> None:
        parts = Parts()
        journal = await parts.start()
        for i in range(20):
            await parts.add(entry(1, i))
        at_swap = journal.position()
        faults.arm("bookie.entrylog.mid_flush", "hang")
        checkpoint = asyncio.get_running_loop().create_task(parts.checkpointer.checkpoint())
        await _wait_for(lambda: faults.hits("bookie.entrylog.mid_flush") == 1, parts)
        await parts.add(entry(1, 20))  # while the frozen half is being flushed
        assert parts.checkpointer.get(1, 3) is not None  # the frozen half still answers reads
        faults.release("bookie.entrylog.mid_flush")
        await checkpoint
        assert parts.index.mark() == at_swap
        assert all(parts.indexed(1, i) for i in range(20))
        assert not parts.indexed(1, 20)  # after the mark: still only in the active half
        assert parts.checkpointer.get(1, 20) == entry(1, 20).raw
        assert parts.stats.checkpoints_count == 1 and parts.stats.entries_flushed_count == 20
        await parts.checkpointer.checkpoint()
        assert parts.indexed(1, 20) and parts.index.mark() == journal.position()
        await parts.stop()

    run(scenario())


def test_mark_and_journal_deletion_come_after_the_index() -> None:
    async def scenario() -> None:
        parts = Parts(dataclasses.replace(CONFIG, journal_file_bytes_max=64 * 1024))
        await parts.start()
        for i in range(40):  # 4 KiB each: the journal rotates to new files
            await parts.add(entry(2, i, b"j" * 4096))
        files_before = journal_file_ids(parts.disk)
        assert len(files_before) > 2
        faults.arm("bookie.index.before_checkpoint_mark", "error")
        with pytest.raises(InjectedFaultError):
            await parts.checkpointer.checkpoint()
        assert all(parts.indexed(2, i) for i in range(40))  # the locations are in the index...
        assert parts.index.mark() is None  # ...the mark is not...
        assert journal_file_ids(parts.disk) == files_before  # ...and no journal file was deleted
        await parts.stop()
        faults.disarm_all()
        # Negative control: the same checkpoint unarmed writes the mark and deletes old files.
        again = parts.again()
        await again.start()
        for i in range(40):
            await again.add(entry(3, i, b"j" * 4096))
        await again.checkpointer.checkpoint()
        mark = again.index.mark()
        assert mark is not None and journal_file_ids(parts.disk)[0] == mark.file_id
        await again.stop()

    run(scenario())


def test_half_full_active_half_wakes_the_checkpoint_and_backpressure_waits_for_the_flush() -> None:
    async def scenario() -> None:
        config = dataclasses.replace(CONFIG, write_cache_bytes_max=64 * 1024, entry_bytes_max=16 * 1024)  # halves of 32 KiB
        parts = Parts(config)
        await parts.start()
        serving = True
        failures: list[BaseException] = []
        loop = asyncio.get_running_loop().create_task(parts.checkpointer.run(lambda: serving, failures.append))
        big = b"b" * 4096
        for i in range(7):  # 28 KiB: below half, the interval (1,000 s) is far away
            await parts.add(entry(1, i, big))
        await parts.clock.sleep(1)  # virtual time (simulated clock/loop): no real wait
        assert parts.stats.checkpoints_count == 0
        faults.arm("bookie.entrylog.mid_flush", "hang")
        await parts.add(entry(1, 7, big))  # half full: the loop checkpoints now
        await _wait_for(lambda: faults.hits("bookie.entrylog.mid_flush") == 1, parts)
        assert parts.checkpointer.room.is_set()  # the new active half is empty
        for i in range(8, 16):
            parts.checkpointer.put(1, i, entry(1, i, big).raw)
        assert not parts.checkpointer.room.is_set()  # full again while the flush is pending
        faults.release("bookie.entrylog.mid_flush")
        await _wait_for(parts.checkpointer.room.is_set, parts)  # the flush ended: room again
        assert parts.stats.checkpoints_count >= 1 and not failures
        serving = False
        parts.checkpointer.want_checkpoint()
        await loop
        await parts.stop()

    run(scenario())


async def _paced_checkpoint_duration_ns(adds_waiting: bool) -> int:
    parts = Parts(dataclasses.replace(PACED, write_cache_bytes_max=4 * 1024 * 1024))
    await parts.start()
    for i in range(300):
        await parts.add(entry(1, i))
    checkpoint = asyncio.get_running_loop().create_task(parts.checkpointer.checkpoint(paced=True))
    await asyncio.sleep(0)  # the halves are swapped
    if adds_waiting:
        for i in range(600):  # ~4 KiB each: a full active half while the flush is pending
            parts.checkpointer.put(2, i, entry(2, i, b"w" * 4000).raw)
        assert not parts.checkpointer.room.is_set()
    started = parts.clock.monotonic_ns()
    await checkpoint
    elapsed = parts.clock.monotonic_ns() - started
    assert all(parts.indexed(1, i) for i in range(300))
    await parts.stop()
    return elapsed


def test_paced_flush_spreads_out_unless_adds_wait_for_it() -> None:
    async def scenario() -> None:
        pause_ns = PACED.flush_pause_ms * 1_000_000
        idle = await _paced_checkpoint_duration_ns(adds_waiting=False)
        # 300 entries: 19 chunks of 16 and 10 index batches of 32, a pause before most of them
        assert idle >= 20 * pause_ns
        # Negative control: with adds waiting for room the same flush takes no pauses at all.
        urgent = await _paced_checkpoint_duration_ns(adds_waiting=True)
        assert urgent < 4 * pause_ns < idle

    run(scenario())


def test_flush_without_mark_indexes_replayed_entries_and_keeps_the_mark() -> None:
    async def scenario() -> None:
        config = dataclasses.replace(CONFIG, write_cache_bytes_max=16 * 1024, entry_bytes_max=8 * 1024)
        parts = Parts(config)
        await parts.entry_log.start()  # replay runs before the journal starts
        full = False
        count = 0
        while not full:
            full = parts.checkpointer.put_replayed(5, count, entry(5, count, b"r" * 1000).raw)
            count += 1
        assert count == 8  # 8 KiB of entries fill half of 16 KiB
        await parts.checkpointer.flush_without_mark()
        assert all(parts.indexed(5, i) for i in range(count))
        assert parts.index.mark() is None and parts.stats.checkpoints_count == 0
        assert parts.checkpointer.get(5, 0) is None  # freed from the write cache
        assert parts.log_ledgers and all(ledgers == {5} for ledgers in parts.log_ledgers.values())
        parts.entry_log.close()

    run(scenario())


def test_drop_ledger_forgets_the_ledger_and_only_it() -> None:
    async def scenario() -> None:
        parts = Parts()
        await parts.start()
        for ledger in (7, 8):
            for i in range(3):
                await parts.add(entry(ledger, i))
        async with parts.checkpointer.lock:  # as the garbage collector calls it
            parts.checkpointer.drop_ledger(7)
        assert all(parts.checkpointer.get(7, i) is None for i in range(3))
        assert all(parts.checkpointer.get(8, i) == entry(8, i).raw for i in range(3))
        await parts.checkpointer.checkpoint()
        assert not any(parts.indexed(7, i) for i in range(3))  # nothing of it was flushed
        assert all(parts.indexed(8, i) for i in range(3))
        assert all(ledgers == {8} for ledgers in parts.log_ledgers.values())
        await parts.stop()

    run(scenario())
