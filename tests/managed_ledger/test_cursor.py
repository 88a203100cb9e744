"""Cursors: acks, backlog, persistence across reopen, flush throttling, crash mid-flush.

``check_cursor_crash`` is the invariant-9 checker for a flush interrupted at
``managed_ledger.cursor.mid_flush``: after the reopen the cursor must be exactly at the last
state whose cursor-ledger entry was written (never behind what was persisted, never ahead of
what was acknowledged). Its negative control recovers from the metadata snapshot only.
"""

from __future__ import annotations

import asyncio

import pytest

from magnetar import faults
from magnetar.base.types import Position
from magnetar.ledger.metadata_ops import LedgerMetadataStore
from magnetar.managed_ledger import CursorRecovery, InvalidCursorPositionError, ManagedLedgerFencedError
from magnetar.metadata.records import CursorInfo, decode
from tests.ledger.fakes import MemoryVersionedStore
from tests.managed_ledger.harness import TOPIC, config, crash, make_world, until
from tests.manual_clock import settle


async def fill(ml, count: int) -> list[Position]:  # type: ignore[no-untyped-def]
    return [await ml.add_entry(f"m{i}".encode()) for i in range(count)]


async def test_mark_delete_and_individual_acks_advance_over_contiguous_ranges() -> None:
    world = make_world()
    ml = await (await world.broker(config(max_entries_per_ledger=5))).open(TOPIC)
    cursor = await ml.open_cursor("sub", initial_position=ml.first_position)
    p = await fill(ml, 12)
    assert cursor.get_number_of_entries_in_backlog() == 12
    await cursor.delete([p[1], p[2], p[6]])
    assert cursor.mark_delete_position < p[0]
    assert cursor.get_number_of_entries_in_backlog() == 9
    await cursor.delete([p[0]])
    assert cursor.mark_delete_position == p[2]
    await cursor.delete([p[4], p[3]])  # p[4] is the last entry of the first ledger, p[5] the first of the next
    assert cursor.mark_delete_position == p[4]
    await cursor.delete([p[5]])
    assert cursor.mark_delete_position == p[6]  # across the ledger boundary
    assert cursor.get_number_of_entries_in_backlog() == 5
    await cursor.mark_delete(p[3])  # older: nothing moves back
    assert cursor.mark_delete_position == p[6]
    await cursor.mark_delete(p[9])
    assert cursor.get_number_of_entries_in_backlog() == 2
    with pytest.raises(InvalidCursorPositionError):
        await cursor.mark_delete(Position(p[-1].ledger_id, p[-1].entry_id + 5))


async def test_batch_index_acks() -> None:
    world = make_world()
    ml = await (await world.broker(config())).open(TOPIC)
    cursor = await ml.open_cursor("sub", initial_position=ml.first_position)
    p = await fill(ml, 3)
    await cursor.delete_batch_indexes(p[0], [0, 2], batch_size=4)
    assert cursor.batch_acked_indexes(p[0]) == {0, 2}
    assert cursor.mark_delete_position < p[0]
    await cursor.delete_batch_indexes(p[0], [1, 3], batch_size=4)
    assert cursor.mark_delete_position == p[0]
    assert cursor.batch_acked_indexes(p[0]) == frozenset()


async def test_cursor_reads_skip_acknowledged_entries_and_seek() -> None:
    world = make_world()
    ml = await (await world.broker(config(max_entries_per_ledger=3))).open(TOPIC)
    cursor = await ml.open_cursor("sub", initial_position=ml.first_position)
    p = await fill(ml, 7)
    await cursor.delete([p[2], p[3]])
    got = await cursor.read_entries(10)
    assert [e.position for e in got] == [p[0], p[1], p[4], p[5], p[6]]
    assert not cursor.has_more_entries()
    cursor.seek(p[1])
    assert [e.position for e in await cursor.read_entries(2)] == [p[1]]  # p[2] is acknowledged
    await cursor.reset(p[1])  # explicit rewind: the only way back
    assert cursor.mark_delete_position == Position(p[1].ledger_id, p[1].entry_id - 1)
    assert cursor.get_number_of_entries_in_backlog() == 6


async def test_cursor_state_survives_a_crash_and_reopen() -> None:
    world = make_world()
    cfg = config(max_entries_per_ledger=4)
    ml = await (await world.broker(cfg)).open(TOPIC)
    cursor = await ml.open_cursor("sub", initial_position=ml.first_position)
    p = await fill(ml, 14)
    await cursor.mark_delete(p[2], properties={"k": 7})
    await cursor.delete([p[5], p[6], p[9], p[12]])
    await cursor.delete_batch_indexes(p[7], [1, 3], batch_size=5)
    expected = (
        cursor.mark_delete_position,
        cursor.individually_deleted_ranges(),
        cursor.batch_acked_indexes(p[7]),
        cursor.get_number_of_entries_in_backlog(),
        cursor.properties,
    )
    crash(ml)
    ml2 = await (await world.broker(cfg)).open(TOPIC)
    again = ml2.cursors["sub"]
    got = (
        again.mark_delete_position,
        again.individually_deleted_ranges(),
        again.batch_acked_indexes(p[7]),
        again.get_number_of_entries_in_backlog(),
        again.properties,
    )
    assert got == expected
    await again.delete([p[3], p[4]])
    assert again.mark_delete_position == p[6]
    delivered = [e.position for e in await again.read_entries(20)]
    assert delivered == [p[7], p[8], p[10], p[11], p[13]]
    # The old owner's cursor is fenced: its next flush loses.
    with pytest.raises(ManagedLedgerFencedError):
        await cursor.mark_delete(p[10])


async def check_cursor_crash(recovery: CursorRecovery) -> list[str]:
    world = make_world()
    cfg = config(cursor_recovery=recovery)
    ml = await (await world.broker(cfg)).open(TOPIC)
    cursor = await ml.open_cursor("sub", initial_position=ml.first_position)
    p = await fill(ml, 10)
    await cursor.mark_delete(p[2])  # a complete flush
    faults.arm("managed_ledger.cursor.mid_flush", "hang")
    interrupted = asyncio.ensure_future(cursor.mark_delete(p[5]))  # entry written, snapshot not
    await until(lambda: faults.hits("managed_ledger.cursor.mid_flush") == 1)
    unpersisted = asyncio.ensure_future(cursor.mark_delete(p[7]))  # acknowledged, waits to flush
    await until(lambda: cursor.mark_delete_position == p[7])
    crash(ml, interrupted, unpersisted)
    faults.disarm_all()
    ml2 = await (await world.broker(cfg)).open(TOPIC)
    recovered = ml2.cursors["sub"].mark_delete_position
    problems = []
    if recovered < p[5]:
        problems.append(f"cursor went back to {recovered}, behind the persisted {p[5]}")
    if recovered > p[7]:
        problems.append(f"cursor at {recovered}, ahead of every acknowledgement")
    if recovered != p[5]:
        problems.append(f"cursor at {recovered}, not the last written state {p[5]}")
    return problems


async def test_cursor_flush_interrupted_mid_flush_recovers_last_written_state() -> None:
    assert await check_cursor_crash(CursorRecovery.NEWEST) == []


async def test_negative_control_snapshot_only_recovery_is_caught() -> None:
    problems = await check_cursor_crash(CursorRecovery.SNAPSHOT_ONLY)
    assert any("went back" in p for p in problems), problems


async def test_flush_is_throttled_by_interval_and_bounded_by_unpersisted_changes() -> None:
    world = make_world()
    ml = await (await world.broker(config(cursor_flush_interval_ms=1000, cursor_unpersisted_changes_max=5))).open(TOPIC)
    cursor = await ml.open_cursor("sub", initial_position=ml.first_position)
    p = await fill(ml, 20)
    store = ml.store

    async def snapshot_md() -> Position:
        found = await store.get(cursor._path)
        assert found is not None
        record = decode(CursorInfo, found.value)
        return Position(record.mark_delete.ledger_id, record.mark_delete.entry_id)

    persisted_before = await snapshot_md()
    await cursor.mark_delete(p[0])
    await cursor.mark_delete(p[1])
    assert await snapshot_md() == persisted_before  # throttled
    await world.clock.sleep(1.5)
    assert await snapshot_md() == p[1]  # the interval flush
    for i in range(2, 7):  # the fifth unpersisted change flushes inline
        await cursor.mark_delete(p[i])
    assert await snapshot_md() == p[6]
    assert cursor.persisted_mark_delete_position == p[6]


async def test_cursor_ledger_rolls_over_and_old_ones_are_deleted() -> None:
    world = make_world()
    ml = await (await world.broker(config(cursor_ledger_entries_max=2))).open(TOPIC)
    cursor = await ml.open_cursor("sub", initial_position=ml.first_position)
    p = await fill(ml, 8)
    seen = set()
    for position in p:
        await cursor.mark_delete(position)
        seen.add(cursor.cursor_ledger_id)
    assert len(seen) >= 3
    live = set(await ml.manager.list_ledgers())
    assert live & seen == {cursor.cursor_ledger_id}


async def test_non_durable_cursor_persists_nothing() -> None:
    world = make_world()
    ml = await (await world.broker(config())).open(TOPIC)
    p = await fill(ml, 3)
    reader = ml.new_non_durable_cursor(ml.first_position)
    assert [e.position for e in await reader.read_entries(10)] == p
    await reader.mark_delete(p[1])
    assert reader.get_number_of_entries_in_backlog() == 1
    assert await ml.store.children(ml.path) == []


async def test_cursor_created_at_latest_and_deleted() -> None:
    world = make_world()
    ml = await (await world.broker(config())).open(TOPIC)
    await fill(ml, 3)
    cursor = await ml.open_cursor("late")
    assert cursor.get_number_of_entries_in_backlog() == 0
    await ml.add_entry(b"new")
    assert cursor.get_number_of_entries_in_backlog() == 1
    await ml.delete_cursor("late")
    assert await ml.store.children(ml.path) == []


class SlowLedgerDeletes(MemoryVersionedStore):
    """Ledger metadata whose deletes take a few loop passes (other tasks run meanwhile)."""

    async def delete(self, path: str, expected_version: int) -> None:
        await settle(3)  # three loop passes (no time passes): other tasks run
        await super().delete(path, expected_version)


async def test_concurrent_fenced_ledger_switches_each_raise_their_own_error() -> None:
    """Two cursors' first flushes both lose their snapshot CAS (another owner moved them) and
    delete the cursor ledger they created before raising, at the same time. Compiled (mypyc), the
    old ``except ...: await delete; raise`` re-raised the thread's shared exception state: the
    other cursor's error, then ``None`` (which corrupted the interpreter: cluster brokers died,
    issue 22 session 12). Each flush must raise its own fencing error, and both ledgers go."""
    world = make_world()
    world.ledger_store = LedgerMetadataStore(SlowLedgerDeletes())
    ml = await (await world.broker(config(cursor_flush_interval_ms=3_600_000))).open(TOPIC)
    positions = [await ml.add_entry(b"m%d" % i) for i in range(3)]
    cursors = [await ml.open_cursor(name, initial_position=ml.first_position) for name in ("a", "b")]
    ledgers_before = set(await ml.manager.list_ledgers())
    for cursor in cursors:
        await cursor.mark_delete(positions[1])
        found = await ml.store.get(cursor._path)  # another owner's CAS moves the snapshot's version
        assert found is not None
        await ml.store.put(cursor._path, found.value, found.version)
    outcomes = await asyncio.gather(*(cursor.flush() for cursor in cursors), return_exceptions=True)
    for cursor, outcome in zip(cursors, outcomes, strict=True):
        assert isinstance(outcome, ManagedLedgerFencedError), repr(outcome)
        assert f"cursor {cursor.name} " in str(outcome), (cursor.name, str(outcome))
    assert set(await ml.manager.list_ledgers()) == ledgers_before  # both new cursor ledgers deleted
    assert type(type(None)) is type
