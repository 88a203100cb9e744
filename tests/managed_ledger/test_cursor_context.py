"""A cursor needs only its ``CursorContext``: here a plain list of entries stands in for the log
(no ``ManagedLedger`` at all), with the memory metadata store and fake bookies for persistence.
Acks, reads, backlog, a flush and a recovery all go through the context alone."""

from __future__ import annotations

from magnetar.base.entry import Entry
from magnetar.base.types import Position
from magnetar.managed_ledger.cursor import CursorContext, ManagedCursor
from tests.managed_ledger.harness import TOPIC, config, make_world

LEDGER_ID = 7


class ListLog:
    """One ledger's entries ``0..n-1`` in a list: the ``CursorLog`` a cursor reads."""

    def __init__(self, count: int) -> None:
        self.entries = [Entry(Position(LEDGER_ID, i), f"m{i}".encode()) for i in range(count)]
        self.reads = 0

    @property
    def last_confirmed_entry(self) -> Position:
        return self.entries[-1].position

    def next_position(self, position: Position) -> Position:
        return Position(LEDGER_ID, max(position.entry_id + 1, 0) if position.ledger_id == LEDGER_ID else 0)

    def first_at_or_after(self, position: Position) -> Position | None:
        entry_id = max(position.entry_id, 0) if position.ledger_id == LEDGER_ID else 0
        return Position(LEDGER_ID, entry_id) if entry_id < len(self.entries) else None

    def count_entries(self, after: Position, upto: Position) -> int:
        low = after.entry_id + 1 if after.ledger_id == LEDGER_ID else 0
        high = min(upto.entry_id, len(self.entries) - 1)
        return max(0, high - low + 1)

    async def read_entries(self, start: Position, count_max: int) -> list[Entry]:
        self.reads += 1
        first = self.first_at_or_after(start)
        if first is None:
            return []
        return self.entries[first.entry_id:first.entry_id + count_max]


async def test_a_durable_cursor_lives_on_its_context_alone() -> None:
    world = make_world()
    store = await world.metadata.connect()
    await store.put(f"/ml/{TOPIC}", b"", -1)  # the parent node of the cursor snapshots
    log = ListLog(10)
    forgotten: list[ManagedCursor] = []
    context = CursorContext(TOPIC, f"/ml/{TOPIC}", log=log, store=store, manager=world.manager(),
                            clock=world.clock, config=config(), forget=forgotten.append)
    cursor = await ManagedCursor.create(context, "sub", Position(LEDGER_ID, -1))
    assert [e.payload for e in await cursor.read_entries(3)] == [b"m0", b"m1", b"m2"]
    assert log.reads == 1
    await cursor.delete([Position(LEDGER_ID, 0), Position(LEDGER_ID, 1), Position(LEDGER_ID, 4)])
    assert cursor.mark_delete_position == Position(LEDGER_ID, 1)
    assert cursor.get_number_of_entries_in_backlog() == 7
    await cursor.close()
    assert forgotten == []  # durable cursors stay listed by their managed ledger

    again = await ManagedCursor.recover(context, "sub")  # another owner, same context
    assert again.mark_delete_position == Position(LEDGER_ID, 1)
    assert again.individually_deleted_ranges() == [(Position(LEDGER_ID, 4), Position(LEDGER_ID, 4))]
    await again.close()


async def test_a_closed_non_durable_cursor_is_forgotten_through_its_context() -> None:
    world = make_world()
    store = await world.metadata.connect()
    forgotten: list[ManagedCursor] = []
    context = CursorContext(TOPIC, f"/ml/{TOPIC}", log=ListLog(3), store=store, manager=world.manager(),
                            clock=world.clock, config=config(), forget=forgotten.append)
    cursor = ManagedCursor.non_durable(context, Position(LEDGER_ID, 0))
    assert [e.position.entry_id for e in await cursor.read_entries(10)] == [1, 2]
    await cursor.close()
    assert forgotten == [cursor]
