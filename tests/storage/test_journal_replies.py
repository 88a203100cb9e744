"""The journal answers its synced groups fairly (issue 22, latency isolation): per ledger in
submission order, the shortest ledger lane first (one busy ledger's hundreds of answers do not
delay another ledger's one, also across groups), at most ``reply_slice_count`` answers per loop
pass (the loop runs other callbacks between slices), every answer after the sync that covers its
record, the reply gates in group order, a held ``bookie.after_reply`` holding the answers, and
``stop`` or a failure answering the durable records before it fails the rest.
On the simulated loop and disk (virtual time)."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable, Coroutine
from typing import Any

import pytest

from magnetar import faults
from magnetar.faults import breaks
from magnetar.sim import SimDisk, SimDiskConfig, run
from magnetar.storage.journal import (
    Journal,
    add_record,
    add_record_from,
    add_record_prefix,
    fence_record,
    journal_path,
    lac_record,
    pad_record,
)
from magnetar.storage.journal_replies import NO_LEDGER, GroupReplies, ReplyLanes, queued_lane
from tests.storage.harness import CONFIG, KEY, Parts, entry

HEAVY, LIGHT = 7, 9  # ledger ids
SLICE = 32


@pytest.fixture(autouse=True)
def _clean() -> Any:
    faults.disarm_all()
    yield
    faults.disarm_all()
    breaks.disable_all()


class Log:
    """Submits adds; records every answer (ledger, entry, error) and the loop ticks between them,
    and whether each answered record's bytes were durable on the simulated disk when it ran."""

    def __init__(self, parts: Parts, journal: Journal) -> None:
        self.parts, self.journal = parts, journal
        self.events: list[tuple[str, int, int]] = []  # ("ack" | "error", ledger, entry) | ("tick", 0, 0)
        self.durable: dict[tuple[int, int], bool] = {}
        self.on_ack: Callable[[int, int], None] | None = None
        self.groups_count = 0

    def submit(self, ledger: int, entry_id: int) -> None:
        raw = entry(ledger, entry_id).raw

        def done(error: BaseException | None) -> None:
            self.events.append(("ack" if error is None else "error", ledger, entry_id))
            if error is None:
                file = self.parts.disk.open(journal_path(self.journal._file_id), create=False)
                at = file.read_at(0, file.size()).find(raw)
                self.durable[(ledger, entry_id)] = at >= 0 and file.durable_size() >= at + len(raw)
                if self.on_ack is not None:
                    self.on_ack(ledger, entry_id)

        self.journal.submit(add_record(KEY, raw), done)

    def answered(self) -> list[tuple[str, int, int]]:
        return [event for event in self.events if event[0] != "tick"]

    def acks(self, ledger: int) -> list[int]:
        return [e for kind, led, e in self.events if kind == "ack" and led == ledger]

    def tick_while(self, more: Callable[[], bool]) -> None:
        """A plain callback once per loop pass (as a socket read would be) while ``more()``.
        Started from an answer: a callback in every pass would keep the simulated loop from
        ever going idle, so its virtual time (and the disk's sync) would never advance."""

        def tick() -> None:
            if more():
                self.events.append(("tick", 0, 0))
                asyncio.get_running_loop().call_soon(tick)

        asyncio.get_running_loop().call_soon(tick)

    async def settle(self, count: int) -> None:
        while len(self.answered()) < count:
            await self.parts.clock.sleep(0.0001)  # virtual time (simulated clock/loop): no real wait


def _parts(**changes: Any) -> Parts:
    disk = SimDisk(SimDiskConfig(sync_latency_us_min=200, sync_latency_us_max=200))
    return Parts(dataclasses.replace(CONFIG, journal_group_wait_ms_max=0, **changes), disk=disk)


def _scenario(body: Callable[[Parts, Journal, Log], Coroutine[Any, Any, None]], slice_count: int = SLICE,
              **changes: Any) -> Log:
    async def scenario() -> Log:
        parts = _parts(**changes)
        journal = await parts.start()
        journal.reply_slice_count = slice_count
        log = Log(parts, journal)
        await body(parts, journal, log)
        await journal.stop()
        return log

    return run(scenario())


def _longest_answer_run(events: list[tuple[str, int, int]]) -> int:
    longest = current = 0
    for kind, _, _ in events:
        current = 0 if kind == "tick" else current + 1
        longest = max(longest, current)
    return longest


def _one_group(slice_count: int = SLICE) -> Log:
    # 100 adds of a busy ledger, then one of another ledger, all queued before the journal task
    # runs: one group of 101, whose light add sits last in submission order.
    async def body(parts: Parts, journal: Journal, log: Log) -> None:
        for entry_id in range(100):
            log.submit(HEAVY, entry_id)
        log.submit(LIGHT, 0)

        def first_answer(ledger: int, entry_id: int) -> None:
            if len(log.answered()) == 1:
                log.tick_while(lambda: len(log.answered()) < 101)

        log.on_ack = first_answer
        await log.settle(101)
        log.groups_count = journal.groups_count

    return _scenario(body, slice_count)


def test_the_short_lane_is_answered_first_and_each_ledger_in_order() -> None:
    log = _one_group()
    assert log.groups_count == 1
    answered = log.answered()
    assert answered[0] == ("ack", LIGHT, 0)
    assert log.acks(HEAVY) == list(range(100))
    assert len(log.durable) == 101 and all(log.durable.values())


def test_a_large_group_is_answered_over_several_loop_passes() -> None:
    log = _one_group()
    assert log.journal.reply_slices_count == 3  # 101 answers: 32 + 32 + 32 + 5
    assert _longest_answer_run(log.events) == SLICE
    # Control: with slices larger than the group, all 101 run in one pass (no tick between), so
    # the check above can fail.
    whole = _one_group(slice_count=1000)
    assert _longest_answer_run(whole.events) == 101 and whole.journal.reply_slices_count == 0
    assert whole.answered()[0] == ("ack", LIGHT, 0)


async def _two_groups_held(parts: Parts, log: Log) -> None:
    """Group 1 (100 heavy adds) and group 2 (50 heavy + 1 light) written and synced, both held at
    ``bookie.after_fsync_before_reply`` (armed here; the caller releases it)."""
    faults.arm("bookie.after_fsync_before_reply", "hang")
    for entry_id in range(100):
        log.submit(HEAVY, entry_id)
    await parts.clock.sleep(0.0001)  # virtual time (simulated clock): group 1 is written and synced
    for entry_id in range(100, 150):
        log.submit(HEAVY, entry_id)
    log.submit(LIGHT, 0)
    await parts.clock.sleep(0.001)  # virtual time (simulated clock): group 2 is synced too


def test_a_later_groups_short_lane_goes_before_an_earlier_groups_long_one() -> None:
    async def body(parts: Parts, journal: Journal, log: Log) -> None:
        await _two_groups_held(parts, log)
        assert journal.groups_count == 2 and log.answered() == []
        faults.release("bookie.after_fsync_before_reply")
        await log.settle(151)

    log = _scenario(body)
    answered = log.answered()
    assert answered[0] == ("ack", LIGHT, 0)  # ahead of the 100 heavy answers of group 1
    assert log.acks(HEAVY) == list(range(150))
    assert all(log.durable.values()) and len(log.durable) == 151


def test_a_held_after_reply_gate_holds_the_answers_not_yet_run() -> None:
    # Group 1 (100 heavy) and group 2 (50 heavy + 1 light) both pass their first gate; the light
    # add and group 1's answers run (with, in group 1's last slice, the first of group 2's heavy
    # ones: one lane), then group 1's ``bookie.after_reply`` is held: the rest of group 2's
    # answers wait for its release (replies stay behind the held gate).
    async def body(parts: Parts, journal: Journal, log: Log) -> None:
        await _two_groups_held(parts, log)
        faults.arm("bookie.after_reply", "hang")
        faults.release("bookie.after_fsync_before_reply")
        await log.settle(101)
        held = len(log.answered())
        for _ in range(20):
            await parts.clock.sleep(0.001)  # virtual time: nothing more is answered while held
        assert faults.hits("bookie.after_reply") == 1
        assert len(log.answered()) == held < 151
        assert log.acks(HEAVY) == list(range(held - 1)) and log.acks(LIGHT) == [0]
        faults.release("bookie.after_reply")
        await log.settle(151)

    log = _scenario(body)
    assert log.acks(HEAVY) == list(range(150))


def test_stop_answers_the_durable_records_whose_answers_were_still_queued() -> None:
    async def body(parts: Parts, journal: Journal, log: Log) -> None:
        stopping: list[asyncio.Task[None]] = []

        def stop_early(ledger: int, entry_id: int) -> None:
            if not stopping and len(log.answered()) == 10:  # in the first slice
                stopping.append(asyncio.get_running_loop().create_task(journal.stop()))

        log.on_ack = stop_early
        for entry_id in range(100):
            log.submit(HEAVY, entry_id)
        await log.settle(10)
        await stopping[0]
        assert log.acks(HEAVY) == list(range(100))  # all answered by stop, none failed

    log = _scenario(body)
    assert all(log.durable.values()) and len(log.durable) == 100


def test_a_failure_answers_the_durable_records_first_and_fails_the_queued_ones() -> None:
    async def body(parts: Parts, journal: Journal, log: Log) -> None:
        await _two_groups_held(parts, log)
        faults.arm("bookie.after_reply", "error")  # group 1's second gate fails the journal
        faults.release("bookie.after_fsync_before_reply")
        log.submit(LIGHT, 1)  # queued behind them: never written
        await log.settle(152)

    log = _scenario(body)
    assert log.acks(HEAVY) == list(range(150)) and log.acks(LIGHT) == [0]
    assert ("error", LIGHT, 1) in log.answered()
    assert all(log.durable.values())


def test_an_answer_before_the_sync_is_caught() -> None:
    # Negative control: with the ack-before-fsync break on, the durability check fails.
    breaks.enable(breaks.Break.ACK_BEFORE_FSYNC)
    log = _one_group()
    assert not all(log.durable.values())


def test_queued_lane_reads_the_ledger_and_weight_from_the_framing() -> None:
    assert queued_lane(add_record(KEY, entry(3, 0).raw)) == (3, 1)
    assert queued_lane(fence_record(11, KEY)) == (11, 1)
    assert queued_lane(lac_record(12, 4, KEY)) == (12, 1)
    assert queued_lane(b"") == (NO_LEDGER, 1)  # the stop marker
    prefix, crc = add_record_prefix(KEY)
    run_parts: list[Any] = []
    for entry_id in range(5):
        raw = entry(8, entry_id).raw
        run_parts += [add_record_from(prefix, crc, raw), raw]
    assert queued_lane(run_parts) == (8, 5)
    # Framing that names no ledger (cut short): the submission-order lane, not a wrong ledger.
    head, raw = add_record(KEY, entry(3, 0).raw)
    assert queued_lane((head, raw[:4])) == (NO_LEDGER, 1)
    assert queued_lane(pad_record(64)[0]) == (NO_LEDGER, 1)


def test_a_run_counts_its_records_against_the_slice_and_a_light_add_goes_first() -> None:
    # Four runs of 20 heavy records (one callback each, as the bookie's add_entries submits
    # them), then one light add, in one group: the light add first; the runs in order, at most
    # two per pass (a slice of 32 records: the second run crosses it).
    async def body(parts: Parts, journal: Journal, log: Log) -> None:
        prefix, crc = add_record_prefix(KEY)
        for run_index in range(4):
            run_parts: list[Any] = []
            for entry_id in range(run_index * 20, run_index * 20 + 20):
                raw = entry(HEAVY, entry_id).raw
                run_parts += [add_record_from(prefix, crc, raw), raw]

            def done(error: BaseException | None, first: int = run_index * 20) -> None:
                log.events.append(("ack" if error is None else "error", HEAVY, first))

            journal.submit_run(run_parts, sum(len(p) for p in run_parts), done)
        log.submit(LIGHT, 0)
        await log.settle(5)
        log.groups_count = journal.groups_count

    log = _scenario(body)
    assert log.groups_count == 1
    assert log.answered()[0] == ("ack", LIGHT, 0)
    assert log.acks(HEAVY) == [0, 20, 40, 60]
    assert log.journal.reply_slices_count == 1  # light + 2 runs (41 records), then 2 runs


def _lanes_answered(slices: list[int], adds: dict[int, list[tuple[int, int]]]) -> list[tuple[int, int]]:
    """(ledger, n) in the order ``ReplyLanes`` answers them: before slice i, the replies of
    ``adds[i]`` (ledger, records) join; slice i answers up to ``slices[i]`` records."""
    lanes = ReplyLanes()
    answered: list[tuple[int, int]] = []
    seen: dict[int, int] = {}
    for i, budget in enumerate(slices):
        joining = adds.get(i, [])
        if joining:
            def reply_for(ledger: int) -> Callable[[BaseException | None], None]:
                def reply(_error: BaseException | None) -> None:
                    seen[ledger] = seen.get(ledger, 0) + 1
                    answered.append((ledger, seen[ledger]))
                return reply
            group = GroupReplies(len(joining))
            lanes.add([reply_for(ledger) for ledger, _ in joining], joining, group)
        lanes.run(budget)
    assert not lanes and lanes.records(1) == 0
    return answered


def test_the_lanes_order_is_kept_between_slices_and_made_again_after_an_add() -> None:
    # Three lanes of 3, 2 and 1 records; slices of 2: the shortest first across slices, the
    # half-answered lane (ledger 2) finished before the longer one. A lane of one record that
    # joins between slices runs in the next slice, before the longer lanes left (the order is
    # made again after an add; kept, the new lane would wait behind ledger 1's records: control).
    first = [(1, 1), (1, 1), (1, 1), (2, 1), (2, 1), (3, 1)]
    assert _lanes_answered([2, 2, 2], {0: first}) == [(3, 1), (2, 1), (2, 2), (1, 1), (1, 2), (1, 3)]
    order = _lanes_answered([2, 2, 2, 2], {0: first, 1: [(4, 1)]})
    assert order[:5] == [(3, 1), (2, 1), (2, 2), (4, 1), (1, 1)]
    # Counted by weight: a run's one reply of 3 records is longer than two single adds.
    assert _lanes_answered([5], {0: [(7, 3), (8, 1), (8, 1)]}) == [(8, 1), (8, 2), (7, 1)]


def test_a_group_whose_lanes_do_not_match_its_replies_is_refused_and_one_lane_keeps_its_order() -> None:
    """``ReplyLanes.add`` walks a group's replies and lanes by index (session 23, where
    ``zip(..., strict=True)`` checked their lengths): a lane more or fewer than the replies is a
    bug and refused before any reply joins a lane (negative control: an index loop without the
    check takes two replies with three lanes and drops the third lane silently). One lane
    (``run`` sorts nothing then) answers in submission order."""
    from magnetar.base.invariant import InvariantViolationError

    ran: list[str] = []
    lanes = ReplyLanes()
    for lanes_of in ([(1, 1), (1, 1), (2, 1)], [(1, 1)]):
        with pytest.raises(InvariantViolationError):
            lanes.add([lambda _e: ran.append("x"), lambda _e: ran.append("y")], lanes_of, GroupReplies(2))
        assert not lanes
    group = GroupReplies(3)
    lanes.add([lambda _e, name=name: ran.append(name) for name in "abc"], [(7, 1)] * 3, group)
    assert lanes.run(2) == 2 and ran == ["a", "b"] and group.unanswered == 1
    assert lanes.run(2) == 1 and ran == ["a", "b", "c"] and not lanes
