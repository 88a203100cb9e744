"""Append and read across rollovers, positions, helpers."""

from __future__ import annotations

import dataclasses

import pytest

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
    assert [e.payload for e in entries] == [f"m{i}".encode() for i in range(10)]
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
    assert [e.payload for e in entries] == [bytes([i]) for i in range(50)]


async def test_reads_of_closed_ledgers_go_to_bookies_not_only_the_cache() -> None:
    world = make_world()
    factory = await world.broker(config(max_entries_per_ledger=2))
    ml = await factory.open(TOPIC)
    for i in range(5):
        await ml.add_entry(f"x{i}".encode())
    await ml.close()
    reopened = await (await world.broker()).open(TOPIC)  # a new owner: empty cache
    entries = await reopened.read_entries(Position(-1, -1), 10)
    assert [e.payload for e in entries] == [f"x{i}".encode() for i in range(5)]


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


async def test_a_replaced_config_is_what_the_next_append_run_is_held_to() -> None:
    """The pipeline reads its limits from native copies of the config (per run, no attribute walk
    through the dataclass): replacing ``config`` (``set_retention`` does) must replace them too.
    Negative control: a setter that only stores the new config leaves the old 100-entry limit,
    and the third append stays on the first ledger."""
    world = make_world()
    factory = await world.broker(config(max_entries_per_ledger=100))
    ml = await factory.open(TOPIC)
    first = await ml.add_entry(b"a")
    ml.set_retention(3600.0, 1024)  # replaces the pipeline's config: the limits it read are unchanged
    assert ml._appends.config.retention_time_s == 3600.0 and ml._appends.config.max_entries_per_ledger == 100
    assert (await ml.add_entry(b"b")).ledger_id == first.ledger_id
    ml._appends.config = dataclasses.replace(ml._appends.config, max_entries_per_ledger=2, add_queue_count_max=1)
    assert ml.has_room() and not ml.has_room(2)  # the queue bound read from the new config too
    third = await ml.add_entry(b"c")
    assert third.ledger_id > first.ledger_id  # two entries started on the first: full, rolled over
    await ml.close()


async def test_find_newest_matching() -> None:
    world = make_world()
    factory = await world.broker(config(max_entries_per_ledger=4))
    ml = await factory.open(TOPIC)
    positions = [await ml.add_entry(str(i).encode()) for i in range(13)]
    found = await ml.find_newest_matching(lambda e: int(e.payload) <= 8)
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


async def test_ledger_failure_rolls_over_to_a_new_ledger() -> None:
    import pytest

    from magnetar.base.errors import MagnetarError

    world = make_world(3)
    ml = await (await world.broker(config(ensemble_size=3, write_quorum_size=3, ack_quorum_size=3))).open(TOPIC)
    first = await ml.add_entry(b"ok")
    victim = next(iter(world.bookies.values()))
    victim.crash()
    with pytest.raises(MagnetarError):
        await ml.add_entry(b"lost?")
    victim.restart()
    with pytest.raises(MagnetarError):  # refused until the owner settled the failure (topic fencing)
        await ml.add_entry(b"too early")
    await ml.settle_failed_writes()
    after = await ml.add_entry(b"again")
    assert after.ledger_id > first.ledger_id
    entries = await ml.read_entries(Position(-1, -1), 10)
    assert entries[0].payload == b"ok" and entries[-1].payload == b"again"
    assert [e.position for e in entries] == sorted(e.position for e in entries)


async def test_terminate_stops_appends_and_survives_reopen() -> None:
    import pytest

    from magnetar.managed_ledger import ManagedLedgerTerminatedError

    world = make_world()
    ml = await (await world.broker(config())).open(TOPIC)
    last = [await ml.add_entry(b"a"), await ml.add_entry(b"b")][-1]
    assert await ml.terminate() == last
    with pytest.raises(ManagedLedgerTerminatedError):
        await ml.add_entry(b"c")
    again = await (await world.broker(config())).open(TOPIC)
    assert again.is_terminated and again.state is MLState.TERMINATED
    assert [e.payload for e in await again.read_entries(Position(-1, -1), 10)] == [b"a", b"b"]


async def test_persisted_ranges_are_bounded() -> None:
    world = make_world()
    cfg = config(cursor_ranges_persist_count_max=2)
    ml = await (await world.broker(cfg)).open(TOPIC)
    cursor = await ml.open_cursor("sub", initial_position=ml.first_position)
    p = [await ml.add_entry(b"x") for _ in range(10)]
    await cursor.delete([p[1], p[3], p[5], p[7]])
    assert len(cursor.individually_deleted_ranges()) == 4
    await ml.close()
    again = (await (await world.broker(cfg)).open(TOPIC)).cursors["sub"]
    # Only the first two ranges were kept: the others are delivered again (at-least-once).
    assert again.individually_deleted_ranges() == [(p[1], p[1]), (p[3], p[3])]


async def test_a_run_of_appends_is_one_ledger_run_and_stops_at_a_full_ledger() -> None:
    """``append_run``: a run is started on the ledger as one ``LedgerHandle.append_run`` (each
    bookie of the ensemble, E = Qw here, gets it in one transport call), and a run that fills the
    ledger is cut there: the rest goes to the next ledger, positions in call order."""
    import asyncio

    from magnetar.base.errors import LimitExceededError

    world = make_world()
    factory = await world.broker(config(max_entries_per_ledger=4, add_queue_count_max=8))
    ml = await factory.open(TOPIC)
    await ml.add_entry(b"warm")
    told: list[Position | None] = []
    done = asyncio.Event()

    def on_done(position: Position | None, error: BaseException | None) -> None:
        assert error is None
        told.append(position)
        if len(told) == 5:
            done.set()

    assert ml.has_room(8) and not ml.has_room(9)
    with pytest.raises(LimitExceededError):
        ml.append_run([(b"x", on_done)] * 9)  # does not fit: nothing queued
    world.transport.runs.clear()
    ml.append_run([(b"r%d" % i, on_done) for i in range(5)])
    assert ml.config.ensemble_size == ml.config.write_quorum_size
    first_ledger = [ids for _, ids in world.transport.runs]
    # entries 1..3 fill the first ledger: one call per bookie
    assert first_ledger == [[1, 2, 3]] * ml.config.ensemble_size
    await asyncio.wait_for(done.wait(), 10)
    assert told == sorted(told) and len({p.ledger_id for p in told if p is not None}) == 2
    entries = await ml.read_entries(Position(-1, -1), 10)
    assert [e.payload for e in entries] == [b"warm"] + [b"r%d" % i for i in range(5)]
    await ml.close()
