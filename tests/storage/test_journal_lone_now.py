"""A lone record that arrives right after another ledger's items, with nothing queued, starts its
express group from its own submission (``JournalSubmitter._lone_now``, issue 22 latency
isolation): it no longer waits for the rest of the loop pass, whose other sockets' adds (a busy
producer's) then joined its group. Measured in the isolation bench before the change: such a light
add waited p50 1.4 ms for its group to start, the disk idle (docs/performance.md, session 20).

One ledger's own stream, a submission of several runs, and a lone record after an idle spell keep
the old path (the look at the pass's end, the group wait). Durability and order are those of every
express group (``tests/storage/test_journal_express.py``). Each behaviour has a control with the
lever off (``Journal.lone_starts_at_submit``); on the simulated loop and disk (virtual time)."""

from __future__ import annotations

from typing import Any

import pytest

from magnetar import faults
from magnetar.sim import run
from tests.storage.harness import entry
from tests.storage.test_journal_express import HEAVY, LIGHT, SYNC_US, Trace, _parts, _run_parts


@pytest.fixture(autouse=True)
def _clean() -> Any:
    faults.disarm_all()
    yield
    faults.disarm_all()


class Outcome:
    def __init__(self) -> None:
        self.groups_at_submit = 0  # groups started by the light add's own ``submit`` call
        self.express = 0
        self.trace: Trace | None = None
        self.groups = 0


def _light_after_heavy(lever: bool, idle_s: float = 0.0, light_before: bool = False) -> Outcome:
    """A busy ledger's run of 10 adds is written and answered (``light_before``: then one add of
    the light ledger, answered too); ``idle_s`` later (virtual) the light ledger's next add
    arrives, then in the same loop pass the busy ledger's next run of 10."""

    async def scenario() -> Outcome:
        parts = _parts()
        journal = await parts.start()
        journal.lone_starts_at_submit = lever
        trace = Trace(parts, journal)
        out = Outcome()
        heavy_answers: list[int] = []

        def heavy_run(first: int) -> None:
            run_parts = _run_parts([entry(HEAVY, e).raw for e in range(first, first + 10)])
            journal.submit_run(run_parts, sum(len(p) for p in run_parts), lambda error: heavy_answers.append(first),
                               HEAVY)

        heavy_run(0)
        for _ in range(1000):
            if heavy_answers:
                break
            await parts.clock.sleep(0.00005)  # virtual time (simulated clock/loop)
        assert heavy_answers == [0] and not journal._queue and not journal._inflight
        light = 0
        if light_before:  # the item queued last before the next light add is the light ledger's own
            trace.submit(LIGHT, light)
            light += 1
            await trace.settle(1)
        if idle_s:
            await parts.clock.sleep(idle_s)  # virtual time: an idle spell
        before, express = len(trace.group_offsets), journal.express_groups_count
        trace.submit(LIGHT, light)
        out.groups_at_submit = len(trace.group_offsets) - before
        heavy_run(10)  # the same loop pass: another socket's adds, read after the light one
        await trace.settle(light + 1)
        for _ in range(1000):
            if len(heavy_answers) == 2:
                break
            await parts.clock.sleep(0.00005)  # virtual time (simulated clock/loop)
        assert heavy_answers == [0, 10]
        out.express, out.groups, out.trace = journal.express_groups_count - express, journal.groups_count - light, trace
        await journal.stop()
        return out

    return run(scenario())


def test_a_lone_add_after_another_ledgers_adds_starts_its_group_at_its_submission() -> None:
    out = _light_after_heavy(lever=True)
    assert out.groups_at_submit == 1 and out.express == 1
    assert out.groups == 3  # the first run, the light add alone, the second run
    trace = out.trace
    assert trace is not None
    # Its group holds only its record, written before the busy ledger's second run; answered after
    # its own sync, durable, with no earlier group unsynced.
    assert trace.latency_us[(LIGHT, 0)] < 1.5 * SYNC_US
    assert trace.durable[(LIGHT, 0)] and trace.unsynced_earlier[(LIGHT, 0)] == 0
    second_run = trace.group_offsets[-1]
    assert trace.record_offset[(LIGHT, 0)] < second_run
    # The same when the item queued last was the light ledger's own previous add: the busy
    # ledger's item before it is recent (its adds come in bursts, between the light ones).
    again = _light_after_heavy(lever=True, light_before=True)
    assert again.groups_at_submit == 1 and again.express == 1 and again.groups == 3
    # Control (the rule off, as before this change): nothing starts at the submission; the look at
    # the pass's end puts the light add and the run read after it in one group.
    control = _light_after_heavy(lever=False)
    assert control.groups_at_submit == 0 and control.express == 0
    assert control.groups == 2


def test_a_lone_add_after_an_idle_spell_keeps_the_old_path() -> None:
    # The busy ledger's last item is older than ``OTHERS_ACTIVE_NS``: nothing says another ledger
    # is at work, so the light add waits for the look (its group then holds the run read after it).
    out = _light_after_heavy(lever=True, idle_s=0.05)
    assert out.groups_at_submit == 0 and out.express == 0 and out.groups == 2


def test_one_ledgers_own_stream_never_starts_a_group_at_submission() -> None:
    # A synchronous producer alone: each add is lone and alone in the queue, but no other ledger
    # is at work; its adds take the look at the pass's end (and the group wait) as before.
    async def scenario() -> tuple[int, int]:
        parts = _parts()
        journal = await parts.start()
        trace = Trace(parts, journal)
        started_at_submit = 0
        for entry_id in range(20):
            before = len(trace.group_offsets)
            trace.submit(LIGHT, entry_id)
            started_at_submit += len(trace.group_offsets) - before
            await trace.settle(entry_id + 1)
        groups = journal.express_groups_count
        await journal.stop()
        return started_at_submit, groups

    assert run(scenario()) == (0, 0)


def test_a_submission_of_several_runs_stays_one_group() -> None:
    # ``submit_runs`` of a light ledger's one add and a busy ledger's run, right after the busy
    # ledger's items: one submission is one group (``journal_submit``), the lone run included.
    async def scenario() -> tuple[int, int]:
        parts = _parts()
        journal = await parts.start()
        answers: list[str] = []
        first = _run_parts([entry(HEAVY, e).raw for e in range(10)])
        journal.submit_run(first, sum(len(p) for p in first), lambda error: answers.append("first"), HEAVY)
        for _ in range(1000):
            if answers:
                break
            await parts.clock.sleep(0.00005)  # virtual time (simulated clock/loop)
        light = _run_parts([entry(LIGHT, 0).raw])
        second = _run_parts([entry(HEAVY, e).raw for e in range(10, 20)])
        journal.submit_runs([
            (light, sum(len(p) for p in light), lambda error: answers.append("light"), LIGHT, 1, frozenset[int]()),
            (second, sum(len(p) for p in second), lambda error: answers.append("second"), HEAVY, 10,
             frozenset[int]()),
        ])
        for _ in range(1000):
            if len(answers) == 3:
                break
            await parts.clock.sleep(0.00005)  # virtual time (simulated clock/loop)
        assert answers == ["first", "light", "second"]
        result = journal.groups_count, journal.express_groups_count
        await journal.stop()
        return result

    assert run(scenario()) == (2, 0)
