"""``ManagedCursor.delete`` of many positions at once (issue 22, the acknowledgement pass).

An ACK command of the official client carries ~200 ids; the cursor applies them as runs of
consecutive entries (one ``add_run`` each), one advance of the mark-delete position and one
persistence decision. The check: for ACKs in any order, with repeats, across ledger boundaries,
beside batch-index acks, one ``delete`` of all ids leaves the cursor exactly where ``delete`` of
each id on its own does (mark-delete position, ranges, batch acks, backlog). Its negative
control: the same comparison against a cursor that lost one id fails. (That a sliced ACK's ids
reach the cursor in order is ``tests/broker/test_ack_slices.py``.)
"""

from __future__ import annotations

import pytest

from magnetar.base.rng import SeededRng
from magnetar.base.types import Position
from magnetar.managed_ledger import InvalidCursorPositionError, ManagedCursor, ManagedLedger
from tests.managed_ledger.harness import TOPIC, config, make_world

ENTRIES = 23  # over five ledgers of at most 5 entries


async def _log_and_cursors(names: list[str]) -> tuple[ManagedLedger, list[Position], list[ManagedCursor]]:
    world = make_world()
    ml = await (await world.broker(config(max_entries_per_ledger=5))).open(TOPIC)
    cursors = [await ml.open_cursor(name, initial_position=ml.first_position) for name in names]
    positions = [await ml.add_entry(f"m{i}".encode()) for i in range(ENTRIES)]
    return ml, positions, cursors


def _state(cursor: ManagedCursor, positions: list[Position]) -> tuple[object, ...]:
    return (cursor.mark_delete_position, cursor.individually_deleted_ranges(),
            [sorted(cursor.batch_acked_indexes(p)) for p in positions], cursor.get_number_of_entries_in_backlog(),
            [cursor.is_deleted(p) for p in positions])


def _acks(rng: SeededRng, positions: list[Position]) -> list[list[Position]]:
    """A few ACK commands: runs of consecutive entries and strays, shuffled, with repeats."""
    commands = []
    for _ in range(4):
        start = rng.randint(0, len(positions) - 1)
        ids = positions[start:start + rng.randint(1, 9)]
        ids += [positions[rng.randint(0, len(positions) - 1)] for _ in range(rng.randint(0, 4))]
        if rng.randint(0, 1):
            rng.shuffle(ids)
        commands.append(ids)
    return commands


async def _apply(batched: ManagedCursor, each: ManagedCursor, commands: list[list[Position]],
                 positions: list[Position], *, lose: bool = False) -> None:
    for number, ids in enumerate(commands):
        await batched.delete(ids)
        for k, position in enumerate(ids):
            if lose and number == 0 and k == 0:
                continue  # the negative control's lost ack
            await each.delete([position])
        assert _state(batched, positions) == _state(each, positions), f"after ACK {number}: {ids}"


async def test_one_delete_of_many_ids_equals_one_delete_per_id() -> None:
    for seed in range(40):
        rng = SeededRng(seed)
        ml, positions, (batched, each) = await _log_and_cursors(["batched", "each"])
        half = positions[rng.randint(0, 6)]
        for cursor in (batched, each):  # batch-index acks that a whole-entry ack must clear
            await cursor.delete_batch_indexes(half, [0], batch_size=3)
        await _apply(batched, each, _acks(rng, positions), positions)
        await ml.close()


async def test_the_comparison_catches_a_lost_ack() -> None:
    """Negative control: the per-id cursor missing one id of the first ACK fails the comparison."""
    ml, positions, (batched, each) = await _log_and_cursors(["batched", "each"])
    commands = [[positions[1], positions[0], positions[2]], [positions[4], positions[3]]]
    with pytest.raises(AssertionError, match="after ACK 0"):
        await _apply(batched, each, commands, positions, lose=True)
    await ml.close()


async def test_a_position_after_the_last_entry_applies_none_of_the_ack() -> None:
    ml, positions, (cursor,) = await _log_and_cursors(["sub"])
    beyond = Position(positions[-1].ledger_id, positions[-1].entry_id + 3)
    with pytest.raises(InvalidCursorPositionError):
        await cursor.delete([positions[0], positions[1], beyond])
    assert cursor.mark_delete_position < positions[0]
    assert cursor.get_number_of_entries_in_backlog() == ENTRIES
    await ml.close()


async def test_in_order_acks_move_the_mark_delete_position_and_leave_no_range() -> None:
    ml, positions, (cursor,) = await _log_and_cursors(["sub"])
    await cursor.delete(positions[:12])  # across two ledger boundaries
    assert cursor.mark_delete_position == positions[11]
    assert cursor.individually_deleted_ranges() == []
    await cursor.delete(positions[13:20])
    assert cursor.individually_deleted_ranges() == [(positions[13], positions[19])]
    await cursor.delete([positions[12]])
    assert cursor.mark_delete_position == positions[19]
    assert cursor.get_number_of_entries_in_backlog() == ENTRIES - 20
    await ml.close()
