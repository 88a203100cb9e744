"""A modest steady rate (issue 22): a burst of adds handed over in one pass does not pay a
fruitless group wait round after round (simulated loop and disk, virtual time), and a process
with the disk's writer threads switches the GIL often enough that a finished group's answer does
not wait for the loop's whole pass."""

from __future__ import annotations

import dataclasses
import sys

import pytest

from magnetar.runtime import disk_threads
from magnetar.sim import SimDisk, SimDiskConfig, run
from tests.storage.harness import CONFIG, Parts
from tests.storage.test_journal_group_wait import Acks


@dataclasses.dataclass
class _Run:
    acks: Acks
    groups: int
    waits: int


def _journal_run(gaps_us: list[int], *, burst: int = 0, rounds: int = 0) -> _Run:
    """Open-loop adds after ``gaps_us`` (virtual), or ``rounds`` bursts of ``burst`` adds each
    handed over together right after the previous burst's acks (a ledger's window of adds)."""

    async def scenario() -> _Run:
        disk = SimDisk(SimDiskConfig(sync_latency_us_min=200, sync_latency_us_max=200))
        parts = Parts(dataclasses.replace(CONFIG, journal_group_wait_ms_max=1), disk=disk)
        journal = await parts.start()
        acks = Acks(parts, journal)
        before = journal.groups_count
        entry_id = 0
        for gap_us in gaps_us:
            await parts.clock.sleep(gap_us / 1_000_000)  # virtual time (simulated clock/loop): no real wait
            entry_id += 1
            acks.submit(entry_id)
        for _ in range(rounds):
            for _ in range(burst):
                entry_id += 1
                acks.submit(entry_id)
            await acks.settle(entry_id)
        await acks.settle(entry_id)
        outcome = _Run(acks, journal.groups_count - before, journal.waits_count)
        await journal.stop()
        return outcome

    return run(scenario())


def _in_order_and_durable(outcome: _Run, count: int) -> None:
    assert outcome.acks.order == list(range(1, count + 1))
    assert all(outcome.acks.durable.values()) and len(outcome.acks.durable) == count


def test_a_burst_handed_over_at_once_does_not_wait_round_after_round() -> None:
    # 30 rounds of 8 adds, each round right after the previous one's acks (a ledger whose window
    # of 8 is full): nothing can arrive during a wait, so after the first fruitless waits the
    # rounds go at once (before: each round waited the whole bound, its adds queued together
    # counting as a gain).
    outcome = _journal_run([], burst=8, rounds=30)
    _in_order_and_durable(outcome, 240)
    assert outcome.waits <= 4
    # Control: a stream at 4,000 adds/s, where adds do arrive during the waits, keeps waiting.
    stream = _journal_run([250] * 240)
    _in_order_and_durable(stream, 240)
    assert stream.waits >= 40


def test_the_writer_threads_shorten_the_switch_interval_once_made(monkeypatch: pytest.MonkeyPatch) -> None:
    # A writer thread's answer waits for the GIL while the loop works a pass; with the writer
    # threads the process switches at most every SYNC_SWITCH_INTERVAL_S (CPython's 5 ms before).
    before = sys.getswitchinterval()
    monkeypatch.setattr(disk_threads, "_workers", None)
    try:
        sys.setswitchinterval(0.005)
        disk_threads._sync_workers()
        assert sys.getswitchinterval() == pytest.approx(disk_threads.SYNC_SWITCH_INTERVAL_S)
        # A process already switching more often is left as it is.
        monkeypatch.setattr(disk_threads, "_workers", None)
        sys.setswitchinterval(0.0001)
        disk_threads._sync_workers()
        assert sys.getswitchinterval() == pytest.approx(0.0001)
    finally:
        sys.setswitchinterval(before)
