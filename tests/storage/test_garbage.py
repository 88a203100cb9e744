"""``GarbageCollector`` on its own, beside the checkpointer it shares the storage lock with
(simulated disk, store and clock). GC rounds through a whole bookie, the metadata listing and
compaction under power cuts are in ``tests/storage/test_gc.py``.

* a deletion waits for a checkpoint in progress: the flush cannot bring back index entries of
  a ledger deleted meanwhile (held mid-flush with the ``bookie.entrylog.mid_flush`` hang);
* dead entry logs go, the current one and any log with a live ledger stay.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Iterator

import pytest

from magnetar import faults
from magnetar.sim import run
from magnetar.storage import LedgerStatus
from magnetar.storage.caches import ReadCache
from magnetar.storage.entry_log import log_ids
from magnetar.storage.garbage import GarbageCollector
from tests.storage.harness import CONFIG, Parts, entry


@pytest.fixture(autouse=True)
def _disarm() -> Iterator[None]:
    yield
    faults.disarm_all()


def _collector(parts: Parts) -> GarbageCollector:
    return GarbageCollector(
        parts.disk, parts.index, parts.entry_log, parts.checkpointer, parts.clock, parts.config,
        ledgers=parts.ledgers, log_ledgers=parts.log_ledgers, read_cache=ReadCache(1 << 20), stats=parts.stats,
    )


def _status(parts: Parts, ledger: int) -> LedgerStatus:
    return parts.ledgers[ledger].status


def test_deletion_waits_for_the_checkpoint_in_progress() -> None:
    async def scenario() -> None:
        parts = Parts()
        await parts.start()
        collector = _collector(parts)
        for i in range(10):
            await parts.add(entry(1, i))
        faults.arm("bookie.entrylog.mid_flush", "hang")
        checkpoint = asyncio.get_running_loop().create_task(parts.checkpointer.checkpoint())
        for _ in range(1000):
            if faults.hits("bookie.entrylog.mid_flush"):
                break
            await parts.clock.sleep(0.0001)  # virtual time (simulated clock/loop): no real wait
        deletion = asyncio.get_running_loop().create_task(collector.delete_ledger(1))
        await parts.clock.sleep(0.01)  # virtual time (simulated clock/loop): no real wait
        assert not deletion.done()  # waits for the storage lock
        assert _status(parts, 1) is LedgerStatus.OPEN
        faults.release("bookie.entrylog.mid_flush")
        await checkpoint
        await deletion
        assert _status(parts, 1) is LedgerStatus.DELETED
        assert not parts.index.entry_keys_of(1)  # the flush's locations were removed after it
        assert parts.checkpointer.get(1, 0) is None
        await parts.stop()

    run(scenario())


def test_dead_logs_go_live_and_current_ones_stay() -> None:
    async def scenario() -> None:
        parts = Parts(dataclasses.replace(CONFIG, entry_log_bytes_max=64 * 1024))
        await parts.start()
        collector = _collector(parts)
        for i in range(12):  # ledger 1 fills two logs of 64 KiB
            await parts.add(entry(1, i, b"d" * 10_000))
        await parts.checkpointer.checkpoint()
        for i in range(12):  # ledger 2 fills the next ones
            await parts.add(entry(2, i, b"l" * 10_000))
        await parts.checkpointer.checkpoint()
        logs_of_1 = sorted(log for log, ledgers in parts.log_ledgers.items() if ledgers == {1})
        assert logs_of_1 and parts.entry_log.current_log_id not in logs_of_1
        assert await collector.collect_garbage() == []  # nothing deleted: nothing to collect
        await collector.delete_ledger(1)
        assert await collector.collect_garbage() == logs_of_1
        assert parts.entry_log.current_log_id in log_ids(parts.disk)
        assert not set(logs_of_1) & set(log_ids(parts.disk)) and not set(logs_of_1) & set(parts.log_ledgers)
        assert all(parts.indexed(2, i) for i in range(12))
        assert parts.stats.logs_collected_count == len(logs_of_1)
        await parts.stop()

    run(scenario())


def test_a_log_worth_keeping_is_not_scanned_again_until_a_ledger_is_deleted(monkeypatch: pytest.MonkeyPatch) -> None:
    """``compact_logs`` scans a log's live ledgers in the index to weigh it; a log it kept is
    weighed again only after a deletion (nothing else lowers a closed log's live bytes).
    Negative control: without the memo the second round scans as much as the first."""
    async def scenario() -> None:
        parts = Parts(dataclasses.replace(CONFIG, entry_log_bytes_max=64 * 1024))
        await parts.start()
        collector = _collector(parts)
        for ledger in (1, 2, 3, 4):  # a checkpoint each: the log rotates between them
            for i in range(8):
                await parts.add(entry(ledger, i, b"k" * 10_000))
            await parts.checkpointer.checkpoint()
        assert len(parts.log_ledgers) >= 3
        scans: list[bytes] = []
        kv = parts.index.kv
        real_scan = kv.scan

        def counting_scan(start: bytes, end: bytes | None = None) -> Iterator[tuple[bytes, bytes]]:
            scans.append(start)
            return real_scan(start, end)

        monkeypatch.setattr(kv, "scan", counting_scan)
        assert await collector.compact_logs() == []  # every log is all live: kept
        first = len(scans)
        assert first > 0
        scans.clear()
        assert await collector.compact_logs() == []
        assert scans == []  # kept, and nothing deleted since: not weighed again
        await collector.delete_ledger(2)
        scans.clear()
        await collector.compact_logs()
        assert scans  # a deletion: every remaining log is weighed again
        await parts.stop()

    run(scenario())
