"""Reopen after a crash, fencing of the previous owner, racing owners, crashes during rollover.

``check_takeover`` is the checker: it runs an owner, crashes it, opens a new owner and reports
every violation of "each acknowledged entry is readable at its position", "ledger ids only grow"
and "the previous owner can no longer append". Its negative control opens without fencing.
"""

from __future__ import annotations

import asyncio

import pytest

from magnetar import faults
from magnetar.base.types import Position
from magnetar.managed_ledger import ManagedLedgerFencedError, MLState, OpenRecovery
from tests.managed_ledger.harness import TOPIC, config, crash, make_world, until


async def read_all(ml) -> dict[Position, bytes]:  # type: ignore[no-untyped-def]
    entries = await ml.read_entries(Position(-1, -1), 10_000)
    return {e.position: e.payload for e in entries}


async def check_takeover(open_recovery: OpenRecovery) -> list[str]:
    world = make_world()
    cfg = config(max_entries_per_ledger=4, open_recovery=open_recovery)
    old = await (await world.broker(cfg)).open(TOPIC)
    acked = {await old.add_entry(f"a{i}".encode()): f"a{i}".encode() for i in range(10)}
    old_ids = old.ledger_ids
    crash(old)  # no close, no flush: the old owner is simply gone (or partitioned away)
    new = await (await world.broker(cfg)).open(TOPIC)
    problems: list[str] = []
    if min(set(new.ledger_ids) - set(old_ids), default=-1) <= max(old_ids):
        problems.append(f"ledger ids did not grow: {old_ids} -> {new.ledger_ids}")
    # The old owner, still running somewhere, tries to append.
    try:
        zombie = await old.add_entry(b"zombie")
    except ManagedLedgerFencedError:
        pass
    else:
        acked[zombie] = b"zombie"
        problems.append(f"the previous owner got an acknowledgement at {zombie} after the takeover")
    for i in range(3):
        acked[await new.add_entry(f"b{i}".encode())] = f"b{i}".encode()
    crash(new)
    third = await (await world.broker(cfg)).open(TOPIC)
    stored = await read_all(third)
    for position, data in sorted(acked.items()):
        if stored.get(position) != data:
            problems.append(f"acknowledged entry {position} lost or changed: {stored.get(position)!r}")
    if list(stored) != sorted(stored):
        problems.append("positions out of order")
    return problems


async def test_reopen_after_crash_keeps_acknowledged_entries_and_fences_old_owner() -> None:
    assert await check_takeover(OpenRecovery.FENCE) == []


async def test_negative_control_open_without_fencing_is_caught() -> None:
    problems = await check_takeover(OpenRecovery.NO_FENCE)
    assert any("previous owner got an acknowledgement" in p for p in problems), problems
    assert any("lost" in p for p in problems), problems


async def test_old_owner_is_fenced_and_its_queue_fails() -> None:
    world = make_world()
    old = await (await world.broker(config())).open(TOPIC)
    await old.add_entry(b"x")
    new = await (await world.broker(config())).open(TOPIC)
    results = await asyncio.gather(*(old.add_entry(b"z") for _ in range(5)), return_exceptions=True)
    assert all(isinstance(r, ManagedLedgerFencedError) for r in results)
    assert old.state is MLState.FENCED
    with pytest.raises(ManagedLedgerFencedError):
        await old.add_entry(b"later")
    assert await new.add_entry(b"y") > Position(0, 0)


class GatedStore:
    """A metadata client whose puts of ``path`` wait at a gate: lets two opens interleave exactly."""

    def __init__(self, inner, path: str, gate: asyncio.Event) -> None:  # type: ignore[no-untyped-def]
        self._inner, self._path, self._gate = inner, path, gate
        self.waiting = 0

    def __getattr__(self, name: str):  # type: ignore[no-untyped-def]
        return getattr(self._inner, name)

    async def put(self, path: str, value: bytes, expected_version: int) -> int:
        if path == self._path:
            self.waiting += 1
            await self._gate.wait()
        return await self._inner.put(path, value, expected_version)


async def test_two_owners_racing_the_cas_loser_is_fenced() -> None:
    from magnetar.managed_ledger import ManagedLedgerFactory

    world = make_world()
    first = await (await world.broker(config())).open(TOPIC)
    await first.add_entry(b"before")
    gate = asyncio.Event()
    stores = [GatedStore(await world.metadata.connect(), first.path, gate) for _ in range(2)]
    factories = [ManagedLedgerFactory(manager=world.manager(), store=s, clock=world.clock) for s in stores]  # type: ignore[arg-type]
    opens = [asyncio.ensure_future(f.open(TOPIC)) for f in factories]
    await until(lambda: all(s.waiting == 1 for s in stores))  # both read the same version
    gate.set()
    results = await asyncio.gather(*opens, return_exceptions=True)
    winners = [r for r in results if not isinstance(r, BaseException)]
    losers = [r for r in results if isinstance(r, BaseException)]
    assert len(winners) == 1 and len(losers) == 1, results
    assert isinstance(losers[0], ManagedLedgerFencedError)
    position = await winners[0].add_entry(b"w")
    assert (await winners[0].read_entry(position)).payload == b"w"
    with pytest.raises(ManagedLedgerFencedError):
        await first.add_entry(b"zombie")
    stored = await read_all(winners[0])
    assert list(stored.values()) == [b"before", b"w"]


async def test_sequential_owners_only_the_latest_can_append() -> None:
    world = make_world()
    owners = [await (await world.broker(config())).open(TOPIC) for _ in range(3)]
    results = [await asyncio.gather(o.add_entry(b"x"), return_exceptions=True) for o in owners]
    assert [isinstance(r[0], Position) for r in results] == [False, False, True]


async def test_rollover_cas_lost_to_a_new_owner_fences() -> None:
    world = make_world()
    old = await (await world.broker(config(max_entries_per_ledger=2))).open(TOPIC)
    await old.add_entry(b"1")
    faults.arm("managed_ledger.rollover.after_create", "hang")
    tasks = [asyncio.ensure_future(old.add_entry(str(i).encode())) for i in range(2, 5)]
    await until(lambda: faults.hits("managed_ledger.rollover.after_create") == 1)
    new = await (await world.broker(config())).open(TOPIC)
    faults.release("managed_ledger.rollover.after_create")
    results = await asyncio.gather(*tasks, return_exceptions=True)
    assert isinstance(results[0], Position)  # acknowledged before the rollover began
    assert all(isinstance(r, ManagedLedgerFencedError) for r in results[1:]), results
    assert old.state is MLState.FENCED
    stored = await read_all(new)
    assert stored[results[0]] == b"2"


@pytest.mark.parametrize("point", ["managed_ledger.rollover.after_create", "managed_ledger.rollover.after_cas"])
async def test_crash_during_rollover_loses_nothing_acknowledged(point: str) -> None:
    world = make_world()
    cfg = config(max_entries_per_ledger=3)
    old = await (await world.broker(cfg)).open(TOPIC)
    faults.arm(point, "hang")
    tasks = [asyncio.ensure_future(old.add_entry(f"e{i}".encode())) for i in range(6)]
    await until(lambda: faults.hits(point) == 1 and sum(t.done() for t in tasks) == 3)
    acked = {t.result(): f"e{i}".encode() for i, t in enumerate(tasks) if t.done() and not t.exception()}
    assert len(acked) == 3
    old_ids = old.ledger_ids
    crash(old, *tasks)
    faults.disarm_all()
    new = await (await world.broker(cfg)).open(TOPIC)
    assert new.current_ledger_id > max(old_ids)
    stored = await read_all(new)
    for position, data in acked.items():
        assert stored[position] == data
    assert await new.add_entry(b"after") > max(acked)
