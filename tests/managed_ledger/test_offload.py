"""Offload of sealed ledgers (``managed_ledger/offload.py``) over the in-memory reference store:
the order of the steps, reads that prefer bookies and fall back, the threshold on rollover, the
deletion lag, a failure at each fault point followed by a new owner (orphans collected, nothing
lost or doubled), trimming and deletion of offloaded ledgers, and the status table."""

from __future__ import annotations

import asyncio

import pytest

from magnetar import faults
from magnetar.base.types import Position
from magnetar.managed_ledger import ManagedLedger
from magnetar.managed_ledger.offload import (
    STATUS_TRANSITIONS,
    OffloadNotConfiguredError,
    OffloadRunningError,
    OffloadStatus,
    offloaded,
)
from magnetar.managed_ledger.offload_memory import MemoryOffloader
from tests.managed_ledger.harness import TOPIC, World, config, make_world, until

POINTS = ["managed_ledger.offload.after_write_files", "managed_ledger.offload.after_manifest",
          "managed_ledger.offload.after_record", "managed_ledger.offload.after_delete_bookie_copy"]


@pytest.fixture(autouse=True)
def _disarm() -> object:
    yield
    faults.disarm_all()


async def _open(world: World, offloader: MemoryOffloader | None, **overrides: object) -> ManagedLedger:
    factory = await world.broker(config(max_entries_per_ledger=3, **overrides))
    factory.offloader = offloader
    return await factory.open(TOPIC)


async def _fill(ml: ManagedLedger, count: int) -> dict[Position, bytes]:
    out = {}
    for i in range(count):
        data = f"entry-{i}".encode() * (i % 3 + 1)
        out[await ml.add_entry(data)] = data
    return out


async def _settled(ml: ManagedLedger) -> None:
    """Let the background work of ``ml`` (trim, offload on rollover, after open) finish."""
    while True:
        # (by the coroutine's repr: a compiled coroutine, magnetar/_compiled.py, has no __name__)
        busy = [t for t in ml._tasks if not t.done() and "roll_by_age" not in repr(t.get_coro())]
        if not busy:
            return
        await asyncio.wait(busy)


async def _all(ml: ManagedLedger) -> dict[Position, bytes]:
    return {e.position: e.payload for e in await ml.read_entries(Position(-1, -1), 1000)}


async def test_offload_then_delete_bookie_copies_reads_every_entry_back() -> None:
    world = make_world()
    store = MemoryOffloader()
    ml = await _open(world, store)
    ml.offload.set_policy(-1, 0)  # no automatic offload; bookie copies deleted at once
    written = await _fill(ml, 10)  # ledgers of 3, 3, 3 and the current one with 1
    sealed = ml.ledger_ids[:-1]
    ml.offload.start()
    assert await ml.offload.wait() is OffloadStatus.SUCCESS
    infos = {i.ledger_id: i for i in ml.ledger_infos()}
    assert all(offloaded(infos[lid]) and infos[lid].offload.bookie_deleted for lid in sealed)  # type: ignore[union-attr]
    assert not offloaded(infos[ml.current_ledger_id])
    assert not set(sealed) & set(await ml.manager.list_ledgers())  # bookie copies gone
    assert set(store.manifest[TOPIC]) == set(sealed)
    ml._entries.clear()  # nothing from the write cache
    assert await _all(ml) == written
    assert store.reads_count >= len(sealed)
    # seek by time's search reads single entries across offloaded ledgers
    target = list(written)[5]
    assert await ml.find_newest_matching(lambda e: e.position <= target) == target


async def test_reads_prefer_bookies_while_they_hold_a_copy_and_fall_back_when_they_fail() -> None:
    world = make_world()
    store = MemoryOffloader()
    ml = await _open(world, store)
    ml.offload.set_policy(-1, 3_600_000)
    written = await _fill(ml, 7)
    ml.offload.start()
    assert await ml.offload.wait() is OffloadStatus.SUCCESS
    first = ml.ledger_ids[0]
    assert not ml.ledger_info(first).offload.bookie_deleted  # type: ignore[union-attr]
    ml._entries.clear()
    assert await _all(ml) == written
    assert store.reads_count == 0  # the bookies served it
    await ml.manager.delete_ledger(first)  # the bookies lose their copy (not recorded)
    ml._entries.clear()
    assert await _all(ml) == written
    assert store.reads_count == 1
    # the lag runs out: the periodic check deletes the rest and records it
    await world.clock.sleep(3601)  # virtual time (simulated clock/loop): no real wait
    await ml.offload.check()
    assert all(ml.ledger_info(lid).offload.bookie_deleted for lid in ml.ledger_ids[:-1])  # type: ignore[union-attr]


async def test_lost_offloaded_files_fail_the_read_negative_control() -> None:
    world = make_world()
    store = MemoryOffloader()
    ml = await _open(world, store)
    ml.offload.set_policy(-1, 0)
    await _fill(ml, 4)
    ml.offload.start()
    await ml.offload.wait()
    store.files.clear()  # the object store lost the data the list points at
    ml._entries.clear()
    with pytest.raises(Exception, match="no offloaded ledger"):
        await _all(ml)


async def test_threshold_checked_on_rollover() -> None:
    world = make_world()
    store = MemoryOffloader()
    ml = await _open(world, store)
    entry_bytes = len(b"entry-0")
    ml.offload.set_policy(3 * entry_bytes * 2, 3_600_000)  # about two ledgers' worth stays on bookies
    await _fill(ml, 3 * 5 + 1)
    await ml.offload.wait()
    await _settled(ml)
    infos = ml.ledger_infos()
    flags = [offloaded(i) for i in infos]
    assert flags[0] and not flags[-1]
    assert flags == sorted(flags, reverse=True)  # the oldest go first
    kept = sum(i.size_bytes for i in infos if not offloaded(i))
    assert kept <= 3 * entry_bytes * 2 + 3 * 3 * entry_bytes
    ml.offload.set_policy(0, 3_600_000)
    await ml.request_rollover()
    await _settled(ml)
    assert all(offloaded(i) for i in ml.ledger_infos()[:-1])


async def test_a_rollover_during_a_running_pass_is_offloaded_by_that_pass() -> None:
    # Threshold 0: every sealed ledger goes. The first rollover's pass is held after writing its
    # ledger's files while three more ledgers are sealed; once released, that pass must offload
    # them too (before: a rollover that found a pass running did nothing, so the last sealed
    # ledgers stayed on bookies until some later rollover).
    world = make_world()
    ml = await _open(world, MemoryOffloader())
    ml.offload.set_policy(0, 0)
    point = "managed_ledger.offload.after_write_files"
    faults.arm(point, "hang")
    await _fill(ml, 4)  # ledger 1 sealed: its pass starts and hangs at the point
    await until(lambda: faults.hits(point) > 0)  # loop passes, bounded (no time passes)
    await _fill(ml, 9)  # three more sealed while the pass is held
    assert ml.offload.status is OffloadStatus.RUNNING
    faults.release(point)
    await ml.offload.wait()
    await _settled(ml)
    infos = ml.ledger_infos()
    assert len(infos) >= 5 and all(offloaded(i) for i in infos[:-1]), [offloaded(i) for i in infos]


async def test_negative_threshold_never_offloads() -> None:
    world = make_world()
    store = MemoryOffloader()
    ml = await _open(world, store)
    ml.offload.set_policy(-1, 0)
    await _fill(ml, 10)
    await _settled(ml)
    assert not store.files
    assert ml.offload.status is OffloadStatus.NOT_RUN


@pytest.mark.parametrize("point", POINTS)
async def test_failure_at_each_point_then_a_new_owner_loses_and_doubles_nothing(point: str) -> None:
    world = make_world()
    store = MemoryOffloader()
    ml = await _open(world, store)
    ml.offload.set_policy(-1, 0)
    written = await _fill(ml, 10)
    faults.arm(point, "error")
    ml.offload.start()
    assert await ml.offload.wait() is OffloadStatus.ERROR
    assert "armed with error" in ml.offload.last_error
    faults.disarm_all()
    # a new owner (the old one crashed there): its open collects the orphans of the failed attempt
    ml2 = await _open(world, store)
    ml2.offload.set_policy(-1, 0)
    await _settled(ml2)
    recorded = {i.ledger_id: i.offload.uid for i in ml2.ledger_infos() if i.offload is not None}
    for ledger_id, uids in store.attempts_of(TOPIC).items():
        assert uids == [recorded[ledger_id]], "only the recorded attempt's files remain"
    assert store.manifest.get(TOPIC, {}) == recorded
    assert await _all(ml2) == {**written, **{p: d for p, d in (await _all(ml2)).items() if p not in written}}
    got = [e.position for e in await ml2.read_entries(Position(-1, -1), 1000)]
    assert len(got) == len(set(got))
    assert {p: d for p, d in (await _all(ml2)).items() if p in written} == written
    ml2.offload.start()
    assert await ml2.offload.wait() is OffloadStatus.SUCCESS
    assert all(offloaded(i) and i.offload.bookie_deleted for i in ml2.ledger_infos()[:-1])  # type: ignore[union-attr]
    ml2._entries.clear()
    assert {p: d for p, d in (await _all(ml2)).items() if p in written} == written
    assert all(len(uids) == 1 for uids in store.attempts_of(TOPIC).values())


async def test_failed_write_leaves_nothing_and_the_next_pass_succeeds() -> None:
    world = make_world()
    store = MemoryOffloader()
    ml = await _open(world, store)
    ml.offload.set_policy(-1, 0)
    await _fill(ml, 4)
    store.fail_next_write = True
    ml.offload.start()
    assert await ml.offload.wait() is OffloadStatus.ERROR
    assert "refused" in ml.offload.last_error
    ml.offload.start()
    assert await ml.offload.wait() is OffloadStatus.SUCCESS


async def test_reopen_after_bookie_copies_were_deleted() -> None:
    world = make_world()
    store = MemoryOffloader()
    ml = await _open(world, store)
    ml.offload.set_policy(-1, 0)
    written = await _fill(ml, 4)  # ledger of 3 + current with 1: the reopen recovers the last two
    ml.offload.start()
    await ml.offload.wait()
    await ml.close()
    ml2 = await _open(world, store)
    assert {p: d for p, d in (await _all(ml2)).items()} == written


async def test_trim_and_delete_remove_offloaded_files() -> None:
    world = make_world()
    store = MemoryOffloader()
    ml = await _open(world, store, retention_time_s=0, retention_size_bytes=0)
    ml.offload.set_policy(-1, 0)
    cursor = await ml.open_cursor("sub", initial_position=ml.first_position)
    positions = list(await _fill(ml, 7))
    ml.offload.start()
    await ml.offload.wait()
    first = ml.ledger_ids[0]
    await cursor.mark_delete(positions[2])
    assert await ml.trim_consumed_ledgers() == [first]
    assert first not in store.attempts_of(TOPIC)
    await ml.delete()
    assert not store.files


async def test_start_refuses_while_running_and_without_a_driver() -> None:
    world = make_world()
    ml = await _open(world, None)
    with pytest.raises(OffloadNotConfiguredError):
        ml.offload.start()
    ml2 = await _open(make_world(), MemoryOffloader())
    await _fill(ml2, 4)
    ml2.offload.start()
    with pytest.raises(OffloadRunningError):
        ml2.offload.start()
    assert await ml2.offload.wait() is OffloadStatus.SUCCESS


def test_status_table_matches_pulsar() -> None:
    assert {s.value for s in OffloadStatus} == {"NOT_RUN", "RUNNING", "SUCCESS", "ERROR"}
    assert OffloadStatus.NOT_RUN not in {t for targets in STATUS_TRANSITIONS.values() for t in targets}


async def test_offload_up_to_a_message_id() -> None:
    world = make_world()
    ml = await _open(world, MemoryOffloader())
    positions = list(await _fill(ml, 10))
    ml.offload.start(positions[4])  # inside the second ledger: only the first is wholly before it
    await ml.offload.wait()
    assert [offloaded(i) for i in ml.ledger_infos()] == [True, False, False, False]
    ml.offload.start(positions[5])  # the second ledger's last entry: it goes too
    await ml.offload.wait()
    assert [offloaded(i) for i in ml.ledger_infos()] == [True, True, False, False]


async def test_the_policy_pass_setting_the_same_policy_keeps_its_object() -> None:
    """The broker sets every topic's offload policy each policy pass: an unchanged one is kept
    (the default stays the one shared by idle topics), a changed one is adopted. (Negative
    control, run: the earlier ``set_policy``, a new ``OffloadPolicy`` per call, fails the
    identity checks.)"""
    world = make_world()
    ml = await _open(world, MemoryOffloader())
    default = ml.offload.policy
    ml.offload.set_policy(default.threshold_bytes, default.deletion_lag_ms)
    assert ml.offload.policy is default
    ml.offload.set_policy(1000, -5)  # a negative lag is none
    changed = ml.offload.policy
    assert (changed.threshold_bytes, changed.deletion_lag_ms) == (1000, 0)
    ml.offload.set_policy(1000, 0)
    assert ml.offload.policy is changed
    await ml.close()
