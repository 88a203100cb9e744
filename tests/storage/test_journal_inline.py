"""A modest steady rate (issue 22): the journal writes a group on the loop's thread when adds
arrive sparsely and the disk's syncs are short (``GroupWaitPolicy.inline``), and a burst handed
over in one pass does not pay a fruitless wait round after round. On the simulated loop and disk
(virtual time) and, for the disk's inline path, the real disk."""

from __future__ import annotations

import asyncio
import dataclasses
import threading
from pathlib import Path

import pytest

from magnetar import faults
from magnetar.runtime import disk as runtime_disk
from magnetar.runtime.disk import LocalDisk
from magnetar.sim import SimDisk, SimDiskConfig, run
from magnetar.storage.journal_wait import (
    SPARSE_GAP_NS_MIN,
    SYNC_NS_MAX,
    SYNC_PROBE_GROUPS,
    GroupWaitPolicy,
)
from tests.storage.harness import CONFIG, Parts
from tests.storage.test_journal_group_wait import Acks

US = 1_000
MS = 1_000_000


def _stream(policy: GroupWaitPolicy, gap_ns: int, count: int, now: int = 0) -> int:
    for _ in range(count):
        now += gap_ns
        policy.arrived(now, False)
    return now


def test_sparse_arrivals_on_a_fast_disk_go_inline_and_dense_ones_do_not() -> None:
    sparse = GroupWaitPolicy(1 * MS)
    _stream(sparse, 500 * US, 20)  # 2,000 adds/s
    assert sparse.inline()
    dense = GroupWaitPolicy(1 * MS)
    _stream(dense, 50 * US, 20)  # 20,000 adds/s: the writer threads overlap the syncs
    assert not dense.inline()
    # The first add alone says nothing about the rate: it is not taken as sparse.
    first = GroupWaitPolicy(1 * MS)
    first.arrived(0, False)
    assert not first.inline()
    # Independent of the group wait: with the wait off, sparse adds still go inline.
    unbounded = GroupWaitPolicy(0)
    _stream(unbounded, 2 * SPARSE_GAP_NS_MIN, 20)
    assert unbounded.inline()


def test_slow_syncs_stop_inline_writes_except_a_probe_and_a_fast_probe_resumes_them() -> None:
    policy = GroupWaitPolicy(1 * MS)
    _stream(policy, 500 * US, 20)
    for _ in range(12):
        policy.synced_inline(4 * MS)  # a busy disk: the loop would block 4 ms per group
    decisions = [policy.inline() for _ in range(3 * SYNC_PROBE_GROUPS)]
    assert decisions.count(True) == 3  # one probe per SYNC_PROBE_GROUPS candidates
    # Syncs longer than the gaps between adds (4,000 adds/s, 400 us syncs): also not inline.
    share = GroupWaitPolicy(1 * MS)
    _stream(share, 250 * US, 20)
    for _ in range(12):
        share.synced_inline(min(SYNC_NS_MAX, 400 * US))
    assert not share.inline()
    # Control: the same syncs at 2,000 adds/s (500 us gaps) do go inline.
    _stream(share, 500 * US, 20, now=20 * 250 * US)
    assert share.inline()
    # The disk is fast again: the probes' short syncs bring the average down, inline resumes.
    for _ in range(12):
        policy.synced_inline(100 * US)
    assert policy.inline()


@dataclasses.dataclass
class _Run:
    acks: Acks
    groups: int
    waits: int
    inline: int


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
        file = journal._file
        inline = getattr(file, "inline_writes_count", 0)
        outcome = _Run(acks, journal.groups_count - before, journal.waits_count, inline)
        await journal.stop()
        return outcome

    return run(scenario())


def _in_order_and_durable(outcome: _Run, count: int) -> None:
    assert outcome.acks.order == list(range(1, count + 1))
    assert all(outcome.acks.durable.values()) and len(outcome.acks.durable) == count


def test_a_modest_stream_is_written_inline_and_acked_after_its_sync() -> None:
    outcome = _journal_run([500] * 200)  # 2,000 adds/s
    _in_order_and_durable(outcome, 200)  # every ack after its record is durable, in order
    assert outcome.inline >= outcome.groups * 9 // 10
    # Control: a dense stream (25,000 adds/s) keeps the writer threads.
    dense = _journal_run([40] * 200)
    _in_order_and_durable(dense, 200)
    assert dense.inline == 0


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


def _refusing_workers(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(_self: object, _job: object) -> None:
        raise RuntimeError("no writer thread")

    monkeypatch.setattr(runtime_disk, "_sync_workers", lambda: type("Refusing", (), {"submit": refuse})())


def test_an_inline_write_syncs_on_the_callers_thread_and_answers_on_a_later_pass(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _refusing_workers(monkeypatch)  # any hand-off to a writer thread would raise

    async def scenario() -> None:
        file = LocalDisk(str(tmp_path)).open("f")
        answers: list[tuple[BaseException | None, bool]] = []
        answered = asyncio.Event()

        def done(error: BaseException | None) -> None:
            answers.append((error, threading.current_thread() is threading.main_thread()))
            answered.set()

        assert file.append_and_sync_then([b"abc", b"defg"], done, inline=True) == 0
        assert answers == []  # not from inside the call: from the loop's next pass
        await asyncio.wait_for(answered.wait(), 10)
        assert answers == [(None, True)]
        assert file.read_at(0, 7) == b"abcdefg" and file.inline_writes_count == 1
        # Control: the same call without ``inline`` hands the write to a (refusing) thread.
        with pytest.raises(RuntimeError, match="no writer thread"):
            file.append_and_sync_then([b"x"], done)
        file.close()

    asyncio.run(scenario())


def test_an_armed_write_point_keeps_the_write_off_the_loop(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A blocking fault point between the write and the sync would block the loop itself: with
    # it armed, an inline request still goes to a writer thread (refusing here: it raises).
    _refusing_workers(monkeypatch)
    faults.arm("bookie.after_write_before_fsync", "pass")
    try:
        async def scenario() -> None:
            file = LocalDisk(str(tmp_path)).open("f")
            with pytest.raises(RuntimeError, match="no writer thread"):
                file.append_and_sync_then([b"abc"], lambda _e: None, inline=True,
                                          unsynced_point="bookie.after_write_before_fsync")
            assert file.inline_writes_count == 0
            file.close()

        asyncio.run(scenario())
    finally:
        faults.disarm_all()


def test_the_writer_threads_shorten_the_switch_interval_once_made(monkeypatch: pytest.MonkeyPatch) -> None:
    # A writer thread's answer waits for the GIL while the loop works a pass; with the writer
    # threads the process switches at most every SYNC_SWITCH_INTERVAL_S (CPython's 5 ms before).
    import sys

    before = sys.getswitchinterval()
    monkeypatch.setattr(runtime_disk, "_workers", None)
    try:
        sys.setswitchinterval(0.005)
        runtime_disk._sync_workers()
        assert sys.getswitchinterval() == pytest.approx(runtime_disk.SYNC_SWITCH_INTERVAL_S)
        # A process already switching more often is left as it is.
        monkeypatch.setattr(runtime_disk, "_workers", None)
        sys.setswitchinterval(0.0001)
        runtime_disk._sync_workers()
        assert sys.getswitchinterval() == pytest.approx(0.0001)
    finally:
        sys.setswitchinterval(before)
