"""The add timeout: one ``AddTimeouts`` timer per ledger client, shared by its writers."""

from __future__ import annotations

import asyncio

from magnetar.ledger.config import LedgerClientConfig
from magnetar.ledger.handle import WriterState
from tests.ledger.fakes import make_cluster
from tests.manual_clock import settle

CONFIG = LedgerClientConfig(add_timeout_ms=1_000, speculative_read_timeout_ms=100)


async def test_a_silent_bookie_is_replaced_after_the_add_timeout_and_others_are_untouched() -> None:
    cluster = make_cluster(3, CONFIG)
    manager = cluster.manager()
    slow = await manager.create_ledger(1, 1, 1)
    quick = await manager.create_ledger(1, 1, 1)
    victim = slow.ensemble[0]
    if quick.ensemble[0] == victim:  # the quick ledger on another bookie
        quick = await manager.create_ledger(1, 1, 1)
    assert quick.ensemble[0] != victim
    cluster.transport.rule(victim, "add", None, "hold_before")  # never answers
    held = asyncio.ensure_future(slow.add_entry(b"held"))
    assert await quick.add_entry(b"q0") == 0
    await cluster.clock.advance(0.5)
    assert not held.done()  # control: within the timeout nothing happens
    assert slow.ensemble == (victim,)
    await cluster.clock.advance(0.6)  # overdue at this check ...
    await cluster.clock.advance(0.05)  # ... and still at the confirming one: replaced
    assert await asyncio.wait_for(held, 1) == 0
    assert slow.ensemble != (victim,) and slow.state is WriterState.OPEN
    assert await quick.add_entry(b"q1") == 1
    assert quick.ensemble[0] != victim or quick.metadata.fragments[0].ensemble == quick.ensemble


async def test_writers_share_one_timer_and_leave_the_watch_when_idle() -> None:
    cluster = make_cluster(3, CONFIG)
    manager = cluster.manager()
    handles = [await manager.create_ledger(1, 1, 1) for _ in range(20)]
    for round_ in range(3):
        for handle in handles:
            assert await handle.add_entry(b"x") == round_
        await cluster.clock.advance(1.1)  # the timer fires: every writer is idle, all leave
        assert manager.add_timeouts.watched_count == 0
    # One check per round for twenty writers, and no task of any writer for its timeout.
    assert manager.add_timeouts.ticks_count == 3
    assert all(not handle._tasks for handle in handles)


async def test_a_writer_busy_again_is_watched_again() -> None:
    cluster = make_cluster(2, CONFIG)
    manager = cluster.manager()
    handle = await manager.create_ledger(1, 1, 1)
    assert await handle.add_entry(b"a") == 0
    await cluster.clock.advance(1.1)
    assert manager.add_timeouts.watched_count == 0
    victim = handle.ensemble[0]
    cluster.transport.rule(victim, "add", None, "hold_before")
    held = asyncio.ensure_future(handle.add_entry(b"b"))
    await settle()
    assert manager.add_timeouts.watched_count == 1
    await cluster.clock.advance(1.05)
    await cluster.clock.advance(0.05)
    assert await asyncio.wait_for(held, 1) == 1
    assert victim not in handle.ensemble
