"""Trimming: only ledgers every durable cursor consumed, only as retention allows, never the current."""

from __future__ import annotations

from magnetar.base.types import Position
from magnetar.managed_ledger import ManagedLedgerFactory
from tests.managed_ledger.harness import TOPIC, config, make_world


async def fill(ml, count: int) -> list[Position]:  # type: ignore[no-untyped-def]
    return [await ml.add_entry(b"x" * 10) for _ in range(count)]


async def test_trim_respects_the_slowest_cursor_and_keeps_the_current_ledger() -> None:
    world = make_world()
    ml = await (await world.broker(config(max_entries_per_ledger=2, retention_time_s=0, retention_size_bytes=0))).open(TOPIC)
    fast = await ml.open_cursor("fast", initial_position=ml.first_position)
    slow = await ml.open_cursor("slow", initial_position=ml.first_position)
    p = await fill(ml, 10)  # ledgers of 2 entries
    await fast.mark_delete(p[-1])
    await slow.mark_delete(p[4])  # first entry of the third ledger
    deleted = await ml.trim_consumed_ledgers()
    assert deleted == [p[0].ledger_id, p[2].ledger_id]
    live = set(await ml.manager.list_ledgers())
    assert not live & set(deleted)
    assert ml.ledger_ids[0] == p[4].ledger_id
    assert [e.position for e in await ml.read_entries(Position(-1, -1), 100)] == p[4:]
    await slow.mark_delete(p[-1])
    await ml.trim_consumed_ledgers()
    assert ml.ledger_ids == [ml.current_ledger_id]  # the current ledger is never deleted
    assert ml.current_ledger_id in set(await ml.manager.list_ledgers())


async def test_non_durable_cursors_do_not_hold_back_trimming() -> None:
    world = make_world()
    ml = await (await world.broker(config(max_entries_per_ledger=2, retention_time_s=0, retention_size_bytes=0))).open(TOPIC)
    ml.new_non_durable_cursor(ml.first_position)
    cursor = await ml.open_cursor("sub", initial_position=ml.first_position)
    p = await fill(ml, 6)
    await cursor.mark_delete(p[3])
    assert len(await ml.trim_consumed_ledgers()) == 2


async def test_retention_time_keeps_consumed_ledgers_until_they_expire() -> None:
    world = make_world()
    ml = await (await world.broker(config(max_entries_per_ledger=2, retention_time_s=3600, retention_size_bytes=-1))).open(TOPIC)
    cursor = await ml.open_cursor("sub", initial_position=ml.first_position)
    p = await fill(ml, 6)
    await cursor.mark_delete(p[-1])
    assert await ml.trim_consumed_ledgers() == []
    await world.clock.sleep(3601)
    assert len(await ml.trim_consumed_ledgers()) >= 2


async def test_retention_size_keeps_the_newest_consumed_ledgers() -> None:
    world = make_world()
    ml = await (await world.broker(config(max_entries_per_ledger=2, retention_time_s=-1, retention_size_bytes=40))).open(TOPIC)
    cursor = await ml.open_cursor("sub", initial_position=ml.first_position)
    p = await fill(ml, 8)  # 4 ledgers of 20 bytes; the last ledger is full, a new current one exists
    await cursor.mark_delete(p[-1])
    await ml.trim_consumed_ledgers()
    assert ml.total_size_bytes <= 40
    assert sum(1 for i in ml.ledger_infos() if i.entries_count) == 2


async def test_no_retention_keeps_everything() -> None:
    world = make_world()
    ml = await (await world.broker(config(max_entries_per_ledger=2))).open(TOPIC)
    cursor = await ml.open_cursor("sub", initial_position=ml.first_position)
    p = await fill(ml, 6)
    await cursor.mark_delete(p[-1])
    assert await ml.trim_consumed_ledgers() == []
    assert ml.number_of_entries == 6


async def test_factory_delete_removes_ledgers_cursors_and_metadata() -> None:
    world = make_world()
    factory: ManagedLedgerFactory = await world.broker(config(max_entries_per_ledger=2))
    ml = await factory.open(TOPIC)
    cursor = await ml.open_cursor("sub", initial_position=ml.first_position)
    p = await fill(ml, 5)
    await cursor.mark_delete(p[1])
    assert await ml.manager.list_ledgers()
    await factory.delete(TOPIC)
    assert await ml.manager.list_ledgers() == []
    assert not await ml.store.exists(ml.path)
    reopened = await factory.open(TOPIC)
    assert reopened.number_of_entries == 0 and reopened.cursors == {}


def test_retention_rule_table() -> None:
    from magnetar.managed_ledger.retention import trimmable_ledgers
    from magnetar.metadata.records import LedgerInfo

    infos = [LedgerInfo(1, 2, 100, 0), LedgerInfo(4, 2, 100, 1000), LedgerInfo(7, 0, 0, 2000)]
    done = Position(7, -1)
    assert trimmable_ledgers(infos, done, 5000, 0, 0) == [1, 4]
    assert trimmable_ledgers(infos, Position(4, 0), 5000, 0, 0) == [1]  # ledger 4 half consumed
    assert trimmable_ledgers(infos, done, 5000, -1, -1) == []  # keep forever
    assert trimmable_ledgers(infos, done, 5000, 4.5, -1) == [1]  # only ledger 1 is 4.5 s old
    assert trimmable_ledgers(infos, done, 5000, -1, 150) == [1]  # 200 bytes > 150: drop one
    assert trimmable_ledgers(infos, done, 5000, -1, 200) == []
    assert trimmable_ledgers(infos[-1:], done, 5000, 0, 0) == []  # never the current ledger
