"""The shared rollover timer (issue 22): one task for the age-based rollover of every managed
ledger of a factory instead of one per managed ledger; run in virtual time."""

from __future__ import annotations

import asyncio
import gc

from magnetar.managed_ledger.rollover_timer import RolloverTimer
from magnetar.sim import SimClock
from tests.managed_ledger.harness import TOPIC, config, make_world


class _Target:
    def __init__(self, clock: SimClock, every_s: float, times: int) -> None:
        self.clock, self.every_ns, self.left = clock, int(every_s * 1e9), times
        self.called_s: list[float] = []

    def check_age(self, now_ns: int) -> int | None:
        self.called_s.append(round(self.clock.monotonic_ns() / 1e9, 3))
        self.left -= 1
        return now_ns + self.every_ns if self.left > 0 else None


async def test_one_task_calls_each_target_when_due_and_again_at_the_time_it_returns() -> None:
    clock = SimClock()
    timer = RolloverTimer(clock)
    start_s = clock.monotonic_ns() / 1e9
    slow, fast = _Target(clock, 10, 2), _Target(clock, 3, 3)
    timer.schedule(clock.monotonic_ns() + 10_000_000_000, slow)
    timer.schedule(clock.monotonic_ns() + 2_000_000_000, fast)  # earlier than the sleep in progress
    await clock.sleep(30)  # virtual time (SimClock): no real wait
    assert [round(t - start_s) for t in fast.called_s] == [2, 5, 8]  # dropped after returning None
    assert [round(t - start_s) for t in slow.called_s] == [10, 20]
    assert len(timer) == 0
    timer.close()


async def test_a_dropped_target_is_discarded_and_close_stops_the_timer() -> None:
    clock = SimClock()
    timer = RolloverTimer(clock)
    dropped, kept = _Target(clock, 1, 5), _Target(clock, 1, 5)
    timer.schedule(clock.monotonic_ns() + 1_000_000_000, dropped)
    timer.schedule(clock.monotonic_ns() + 1_000_000_000, kept)
    del dropped  # held weakly: a closed managed ledger that is gone costs the timer nothing
    gc.collect()
    await clock.sleep(1.5)  # virtual time (SimClock): no real wait
    assert len(kept.called_s) == 1 and len(timer) == 1
    timer.close()
    await clock.sleep(5)  # virtual time (SimClock): no real wait
    assert len(kept.called_s) == 1  # control: nothing runs after close
    timer.schedule(clock.monotonic_ns(), kept)
    await asyncio.sleep(0)  # one loop pass (no time passes): a closed timer starts nothing
    assert len(timer) == 0


async def test_the_managed_ledgers_of_a_factory_share_one_timer_and_no_task_each() -> None:
    world = make_world()
    factory = await world.broker(config(rollover_time_s_max=60.0))
    ledgers = [await factory.open(f"{TOPIC}-{i}") for i in range(3)]
    assert len(factory.rollover_timer) == 3
    first = [await ml.add_entry(b"a") for ml in ledgers]
    await world.clock.sleep(75)  # virtual time (SimClock): every one rolls over by age, through the one timer
    assert all(ml.current_ledger_id > f.ledger_id for ml, f in zip(ledgers, first, strict=True))
    await factory.close()
