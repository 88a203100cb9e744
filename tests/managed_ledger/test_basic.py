"""Append and read across rollovers, positions, helpers."""

from __future__ import annotations

from magnetar.base.types import Position
from magnetar.managed_ledger import MLState
from tests.managed_ledger.harness import TOPIC, config, make_world


async def test_append_and_read_across_rollovers() -> None:
    world = make_world()
    factory = await world.broker(config(max_entries_per_ledger=3))
    ml = await factory.open(TOPIC)
    assert ml.state is MLState.LEDGER_OPENED
    positions = [await ml.add_entry(f"m{i}".encode()) for i in range(10)]
    assert positions == sorted(positions) and len(set(positions)) == 10
    assert len({p.ledger_id for p in positions}) == 4  # 3 + 3 + 3 + 1
    assert ml.ledger_ids == sorted(ml.ledger_ids)
    entries = await ml.read_entries(Position(-1, -1), 100)
    assert [e.data for e in entries] == [f"m{i}".encode() for i in range(10)]
    assert [e.position for e in entries] == positions
    assert ml.number_of_entries == 10
    assert ml.last_confirmed_entry == positions[-1]
    assert ml.position_after_n(Position(-1, -1), 4) == positions[3]
    assert ml.position_after_n(positions[2], 5) == positions[7]
    assert ml.position_after_n(positions[2], 500) == positions[-1]
    assert ml.count_entries(positions[1], positions[8]) == 7
    assert ml.next_position(positions[2]) == positions[3]
    # Page through from the middle.
    page = await ml.read_entries(positions[4], 3)
    assert [e.position for e in page] == positions[4:7]
    await ml.close()


async def test_concurrent_appends_get_increasing_positions_in_call_order() -> None:
    import asyncio

    world = make_world()
    factory = await world.broker(config(max_entries_per_ledger=7))
    ml = await factory.open(TOPIC)
    results = await asyncio.gather(*(ml.add_entry(bytes([i])) for i in range(50)))
    assert results == sorted(results) and len(set(results)) == 50
    entries = await ml.read_entries(Position(-1, -1), 100)
    assert [e.data for e in entries] == [bytes([i]) for i in range(50)]


async def test_reads_of_closed_ledgers_go_to_bookies_not_only_the_cache() -> None:
    world = make_world()
    factory = await world.broker(config(max_entries_per_ledger=2))
    ml = await factory.open(TOPIC)
    for i in range(5):
        await ml.add_entry(f"x{i}".encode())
    await ml.close()
    reopened = await (await world.broker()).open(TOPIC)  # a new owner: empty cache
    entries = await reopened.read_entries(Position(-1, -1), 10)
    assert [e.data for e in entries] == [f"x{i}".encode() for i in range(5)]


async def test_rollover_by_time_on_an_idle_ledger() -> None:
    world = make_world()
    factory = await world.broker(config(rollover_time_s_max=60.0))
    ml = await factory.open(TOPIC)
    first = await ml.add_entry(b"a")
    await world.clock.sleep(30)
    assert ml.current_ledger_id == first.ledger_id
    await world.clock.sleep(45)
    assert ml.current_ledger_id > first.ledger_id
    second = await ml.add_entry(b"b")
    assert second.ledger_id == ml.current_ledger_id


async def test_size_rollover_waits_for_min_age() -> None:
    world = make_world()
    factory = await world.broker(config(max_size_bytes_per_ledger=10, rollover_time_s_min=5.0))
    ml = await factory.open(TOPIC)
    a = await ml.add_entry(b"x" * 20)
    b = await ml.add_entry(b"y")
    assert a.ledger_id == b.ledger_id  # full but too young
    await world.clock.sleep(6)
    c = await ml.add_entry(b"z")
    assert c.ledger_id > b.ledger_id


async def test_find_newest_matching() -> None:
    world = make_world()
    factory = await world.broker(config(max_entries_per_ledger=4))
    ml = await factory.open(TOPIC)
    positions = [await ml.add_entry(str(i).encode()) for i in range(13)]
    found = await ml.find_newest_matching(lambda e: int(e.data) <= 8)
    assert found == positions[8]
    assert await ml.find_newest_matching(lambda e: False) is None
    assert await ml.find_newest_matching(lambda e: True) == positions[-1]


async def test_bounded_queue_backpressure() -> None:
    import asyncio

    world = make_world()
    factory = await world.broker(config(add_queue_count_max=4))
    ml = await factory.open(TOPIC)
    bookie = next(iter(world.bookies))
    holds = [world.transport.rule(b, "add") for b in world.bookies]
    tasks = [asyncio.ensure_future(ml.add_entry(bytes([i]))) for i in range(10)]
    for _ in range(50):
        await asyncio.sleep(0)
    assert ml.pending_add_count == 4  # the other six wait outside the queue
    assert not any(t.done() for t in tasks)
    for rule in holds:
        rule.release()
    results = await asyncio.gather(*tasks)
    assert results == sorted(results) and len(set(results)) == 10
    assert bookie in world.bookies
