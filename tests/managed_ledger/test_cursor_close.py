"""A cursor's close persists its state in the metadata snapshot alone (Pulsar's
``persistPositionWhenClosing`` into ``ManagedCursorInfo``), and the next owner recovers it from the
snapshot with one CAS and no cursor ledger (issue 24: a moved topic's cursors cost ~4 ms of CPU
each when every close created, wrote and closed a cursor ledger).

Checked: a close writes nothing to any bookie and leaves the snapshot naming no ledger, with the
whole state (mark-delete position, individually deleted ranges, batch-index acks, properties);
the recovery opens no ledger; crashes around the close and the recovery never move the cursor
behind a persisted ack nor ahead of an acknowledged one; two owners never both advance the cursor
(the recovery's CAS bumps the node's version, so the old owner's close loses). Negative controls:
a recovery without the takeover CAS lets the old owner's close overwrite the new owner's cursor;
a close that persists one entry too far is caught by the same checker.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

import pytest

from magnetar.base.types import BookieId, Position
from magnetar.faults import breaks
from magnetar.ledger.metadata_ops import LedgerMetadataStore
from magnetar.managed_ledger import ManagedCursor, ManagedLedgerFactory, ManagedLedgerFencedError
from magnetar.metadata.records import CursorInfo, PositionRecord, decode, encode
from tests.ledger.fakes import FakeBookie, FakeTransport, MemoryVersionedStore
from tests.managed_ledger.harness import TOPIC, World, config, crash, make_world, until


class CountingTransport(FakeTransport):
    """Counts every bookie request by kind."""

    def __init__(self, bookies: dict[BookieId, FakeBookie]) -> None:
        super().__init__(bookies)
        self.ops: Counter[str] = Counter()

    async def _run(self, bookie, op, entry_id, call):  # type: ignore[no-untyped-def]
        self.ops[op] += 1
        return await super()._run(bookie, op, entry_id, call)


def counting_world() -> tuple[World, CountingTransport]:
    world = make_world()
    transport = CountingTransport(world.bookies)
    world.transport = transport
    return world, transport


async def snapshot(ml, name: str = "sub") -> CursorInfo:  # type: ignore[no-untyped-def]
    found = await ml.store.get(ml.cursors[name]._path)
    assert found is not None
    return decode(CursorInfo, found.value)


def state(cursor: ManagedCursor, batch_at: Position) -> tuple[Any, ...]:
    return (cursor.mark_delete_position, cursor.individually_deleted_ranges(),
            cursor.batch_acked_indexes(batch_at), cursor.properties)


async def acked_cursor(world: World, flush_interval_ms: int = 0):  # type: ignore[no-untyped-def]
    """A managed ledger with 12 entries and cursor ``sub``: flushed once (so it has a cursor
    ledger), then more acks left unflushed when ``flush_interval_ms`` is long."""
    ml = await (await world.broker(config(cursor_flush_interval_ms=flush_interval_ms))).open(TOPIC)
    cursor = await ml.open_cursor("sub", initial_position=ml.first_position)
    p = [await ml.add_entry(f"m{i}".encode()) for i in range(12)]
    await cursor.mark_delete(p[1])
    await cursor.flush()
    await cursor.mark_delete(p[2], properties={"k": 7})
    await cursor.delete([p[5], p[6], p[9]])
    await cursor.delete_batch_indexes(p[7], [0, 2], batch_size=4)
    return ml, cursor, p


async def test_close_writes_the_state_to_the_snapshot_only_and_the_next_owner_reads_no_ledger() -> None:
    world, transport = counting_world()
    ml, cursor, p = await acked_cursor(world, flush_interval_ms=3_600_000)
    expected = state(cursor, p[7])
    cursor_ledger = cursor.cursor_ledger_id
    assert cursor_ledger >= 0  # the first flush created one
    before = Counter(transport.ops)
    await cursor.close()
    assert transport.ops == before, transport.ops - before  # no bookie request at all
    info = await snapshot(ml)
    assert info.cursor_ledger_id == -1
    assert cursor_ledger not in await ml.manager.list_ledgers()  # released: nothing names it
    await ml.close()

    ids_before = set(await ml.manager.list_ledgers())
    before = Counter(transport.ops)
    ml2 = await (await world.broker(config(cursor_flush_interval_ms=3_600_000))).open(TOPIC)
    again = ml2.cursors["sub"]
    assert state(again, p[7]) == expected
    assert again.cursor_ledger_id == -1
    # The new owner created its data ledger and nothing for the cursor; read no cursor entry.
    assert len(set(await ml2.manager.list_ledgers()) - ids_before) == 1
    assert transport.ops["read"] - before["read"] == 0, transport.ops - before
    # It goes on: its first flush creates a cursor ledger and the snapshot names it.
    await again.delete([p[3], p[4]])
    await again.flush()
    assert again.mark_delete_position == p[6]
    assert (await snapshot(ml2)).cursor_ledger_id == again.cursor_ledger_id >= 0


async def test_an_unchanged_cursor_without_a_ledger_closes_without_any_write() -> None:
    world, transport = counting_world()
    ml, _cursor, _positions = await acked_cursor(world)
    await ml.close()
    ml2 = await (await world.broker(config())).open(TOPIC)
    version = (await ml2.store.get(ml2.cursors["sub"]._path)).version  # type: ignore[union-attr]
    before = Counter(transport.ops)
    await ml2.cursors["sub"].close()
    assert (await ml2.store.get(ml2.cursors["sub"]._path)).version == version  # type: ignore[union-attr]
    assert transport.ops == before


async def check_close_and_recovery(*, take_over: bool = True, monkeypatch: Any = None) -> list[str]:
    """Owner A (not closed, still running) and owner B, which recovered the cursor meanwhile.
    Reports every way the two both advanced the cursor or B lost its cursor to A."""
    world = make_world()
    cfg = config(cursor_flush_interval_ms=3_600_000)
    _a, cursor_a, p = await acked_cursor(world, flush_interval_ms=3_600_000)
    await cursor_a.flush()
    store = await world.metadata.connect()
    if not take_over:
        # B's store answers the recovery's CAS of the cursor snapshot without writing it (the
        # version B holds stays the one it read), as a recovery without the takeover CAS.
        put = store.put

        async def no_cas(path: str, value: bytes, expected_version: int) -> int:
            return expected_version if path.rsplit("/", 1)[-1] == "sub" else await put(path, value, expected_version)
        monkeypatch.setattr(store, "put", no_cas)
    b = await ManagedLedgerFactory(manager=world.manager(), store=store, clock=world.clock, config=cfg).open(TOPIC)
    if not take_over:
        monkeypatch.undo()
    cursor_b = b.cursors["sub"]
    problems = []
    recovered = cursor_b.mark_delete_position
    if recovered != p[2]:
        problems.append(f"B recovered {recovered}, not A's persisted {p[2]}")
    # A, still running, acknowledges more and closes: it must lose.
    await cursor_a.mark_delete(p[10])
    await cursor_a.close()
    info = await snapshot(b)
    if (info.mark_delete.ledger_id, info.mark_delete.entry_id) == (p[10].ledger_id, p[10].entry_id):
        problems.append("the old owner's close advanced the cursor after the takeover")
    try:
        await cursor_b.delete([p[3], p[4]])
        await cursor_b.flush()
    except ManagedLedgerFencedError:
        problems.append("the new owner was fenced out of its own cursor")
    else:
        if cursor_b.persisted_mark_delete_position != p[6]:
            problems.append(f"B persisted {cursor_b.persisted_mark_delete_position}, not {p[6]}")
    return problems


async def test_two_owners_the_old_owners_close_loses_to_the_recovery() -> None:
    assert await check_close_and_recovery() == []


async def test_negative_control_recovery_without_the_takeover_cas_is_caught(monkeypatch: Any) -> None:
    problems = await check_close_and_recovery(take_over=False, monkeypatch=monkeypatch)
    assert any("advanced the cursor" in p for p in problems), problems
    assert any("fenced out" in p for p in problems), problems


class HeldLedgerWrites(MemoryVersionedStore):
    """Ledger metadata whose writes to ``held`` (a ledger's path) wait until the process dies."""

    def __init__(self) -> None:
        super().__init__()
        self.held: str | None = None
        self.waiting = 0

    async def put(self, path: str, value: bytes, expected_version: int) -> int:
        if path == self.held:
            self.waiting += 1
            await asyncio.Event().wait()  # never set: the task is cancelled when the process dies
        return await super().put(path, value, expected_version)


async def test_a_crash_after_the_close_cas_recovers_the_closed_state() -> None:
    world = make_world()
    ledgers = HeldLedgerWrites()
    world.ledger_store = LedgerMetadataStore(ledgers)
    ml, cursor, p = await acked_cursor(world, flush_interval_ms=3_600_000)
    expected = state(cursor, p[7])
    # The closed cursor ledger's close (its CLOSED metadata) waits: the process dies there, after
    # the close CAS and before the cursor ledger is deleted.
    ledgers.held = world.ledger_store.path(cursor.cursor_ledger_id)
    closing = asyncio.ensure_future(ml.close())
    await until(lambda: cursor._persisted_md == cursor.mark_delete_position and ledgers.waiting == 1)
    crash(ml, closing)
    ledgers.held = None
    ml2 = await (await world.broker(config())).open(TOPIC)
    assert state(ml2.cursors["sub"], p[7]) == expected
    # A crash right after that recovery (before any flush) recovers the same state again.
    crash(ml2)
    ml3 = await (await world.broker(config())).open(TOPIC)
    assert state(ml3.cursors["sub"], p[7]) == expected


async def workload_problems(seed: int, *, overshoot: bool = False) -> list[str]:
    """Rounds of acks ending in a close or a crash, alternating by seed; after each reopen the
    cursor must be at least at what was persisted (everything, after a close) and at most at what
    was acknowledged. ``overshoot``: the negative control, a close that persists one entry too far."""
    world = make_world()
    cfg = config(cursor_flush_interval_ms=3_600_000, max_entries_per_ledger=50)
    problems: list[str] = []
    floor, ceiling = Position(-1, -1), Position(2**62, 0)
    for round_ in range(6):
        ml = await (await world.broker(cfg)).open(TOPIC)
        cursor = ml.cursors.get("sub") or await ml.open_cursor("sub", initial_position=ml.first_position)
        md = cursor.mark_delete_position
        if md < floor:
            problems.append(f"round {round_}: cursor at {md}, behind the persisted {floor}")
        if md > ceiling:
            problems.append(f"round {round_}: cursor at {md}, ahead of every ack {ceiling}")
        p = [await ml.add_entry(f"{round_}-{i}".encode()) for i in range(4)]
        await cursor.mark_delete(p[(seed + round_) % 3])
        if (seed + round_) % 3 == 0:
            await cursor.flush()
        await cursor.delete([p[3]])
        if (seed >> round_) & 1:
            await ml.close()
            floor = ceiling = cursor.mark_delete_position
            if overshoot:
                await persist_one_too_far(ml, cursor)
        else:
            floor, ceiling = cursor.persisted_mark_delete_position, cursor.mark_delete_position
            crash(ml)
    return problems


async def persist_one_too_far(ml: Any, cursor: ManagedCursor) -> None:
    """The closed cursor's snapshot as a close that persisted one entry too far would leave it."""
    found = await ml.store.get(cursor._path)
    info = decode(CursorInfo, found.value)
    md = info.mark_delete
    ahead = CursorInfo(-1, PositionRecord(md.ledger_id, md.entry_id + 1), [], None, info.properties)
    await ml.store.put(cursor._path, encode(ahead), found.version)


@pytest.mark.parametrize("seed", range(8))
async def test_closes_and_crashes_never_move_the_cursor_past_the_acks(seed: int) -> None:
    assert await workload_problems(seed) == []


async def test_negative_control_a_close_persisting_too_far_is_caught() -> None:
    problems = await workload_problems(0b111111, overshoot=True)
    assert any("ahead of every ack" in p for p in problems), problems


async def close_behind_a_held_flush(wait_behind_flush: bool = False) -> list[str]:
    """A flush whose cursor-ledger add is held at every bookie (a busy bookie) while the cursor
    closes. Reports what goes wrong: the close waiting for the flush, the state it leaves.
    ``wait_behind_flush``: ``Break.CLOSE_WAITS_FOR_FLUSH``, the close as first written (negative
    control)."""
    if wait_behind_flush:
        breaks.enable(breaks.Break.CLOSE_WAITS_FOR_FLUSH)
    try:
        return await _close_behind_a_held_flush()
    finally:
        breaks.disable_all()


async def _close_behind_a_held_flush() -> list[str]:
    world = make_world()
    ml, cursor, p = await acked_cursor(world, flush_interval_ms=3_600_000)
    cursor_ledger = cursor.cursor_ledger_id
    held = [world.transport.rule(b, "add") for b in world.bookies]
    flushing = asyncio.ensure_future(cursor.flush())  # the add to the cursor ledger is held
    await until(lambda: sum(r.hits for r in held) > 0)
    await cursor.mark_delete(p[4])  # acknowledged after the flush started: the close must keep it
    expected = cursor.mark_delete_position  # p[6]: 5 and 6 were acknowledged individually
    problems = []
    closing = asyncio.ensure_future(cursor.close())
    await asyncio.wait([closing], timeout=5.0)  # virtual seconds
    if not closing.done():
        problems.append("the close waited for the held flush")
    else:
        info = await snapshot(ml)
        md = Position(info.mark_delete.ledger_id, info.mark_delete.entry_id)
        if info.cursor_ledger_id != -1 or md != expected:
            problems.append(f"closing snapshot names ledger {info.cursor_ledger_id} at {md}, not -1 at {expected}")
    for rule in held:
        rule.release()
    await asyncio.wait([flushing, closing], timeout=5.0)
    flushing.cancel()
    if cursor._release_task is not None:
        await cursor._release_task
    if cursor_ledger in await ml.manager.list_ledgers():
        problems.append(f"cursor ledger {cursor_ledger} not released after the flush ended")
    crash(ml)
    again = (await (await world.broker(config())).open(TOPIC)).cursors["sub"]
    if again.mark_delete_position != expected:
        problems.append(f"recovered at {again.mark_delete_position}, not the closing {expected}")
    return problems


async def test_a_close_does_not_wait_behind_a_flush_and_keeps_every_ack() -> None:
    assert await close_behind_a_held_flush() == []


async def test_negative_control_a_close_queued_behind_the_flush_is_caught() -> None:
    problems = await close_behind_a_held_flush(wait_behind_flush=True)
    assert "the close waited for the held flush" in problems, problems
