"""Seeded crash workload: appends and acks, a fault point hung at a random hit, the owner dropped
(kill -9), a new owner opened; repeated. The checker holds across every takeover:

* every acknowledged append is readable at its position with its bytes;
* ledger ids only grow (each new owner's current ledger is above every id seen before);
* the recovered mark-delete position is at least what the old owner last persisted and at most
  what it had acknowledged in memory (invariant 9).
"""

from __future__ import annotations

import asyncio

import pytest

from magnetar import faults
from magnetar.base.errors import MagnetarError
from magnetar.base.rng import SeededRng
from magnetar.base.types import Position
from magnetar.managed_ledger import ManagedCursor, ManagedLedger, OpenRecovery
from tests.managed_ledger.harness import TOPIC, config, crash, make_world

POINTS = [
    None,
    "managed_ledger.rollover.after_create",
    "managed_ledger.rollover.after_cas",
    "managed_ledger.cursor.mid_flush",
    "ledger.after_send_before_reply",
    "ledger.close.before_cas",
]


async def workload(rng: SeededRng, ml: ManagedLedger, cursor: ManagedCursor, acked: dict[Position, bytes], tag: str) -> None:
    for i in range(rng.randint(5, 15)):
        if rng.random() < 0.7 or not acked:
            data = f"{tag}-{i}".encode()
            acked[await ml.add_entry(data)] = data
        else:
            live = sorted(p for p in acked if p <= ml.last_confirmed_entry)
            target = rng.choice(live)
            if rng.random() < 0.5:
                await cursor.mark_delete(target)
            else:
                await cursor.delete([target])


async def run_workload(seed: int, rounds: int = 4, **overrides: object) -> list[str]:
    rng = SeededRng(seed)
    world = make_world()
    cfg = config(
        max_entries_per_ledger=rng.randint(2, 5), cursor_flush_interval_ms=rng.choice([0, 30]), **overrides
    )
    acked: dict[Position, bytes] = {}
    ids_seen: set[int] = set()
    md_floor, md_ceiling = Position(-1, -1), Position(2**62, 0)
    problems: list[str] = []
    for round_ in range(rounds):
        ml = await (await world.broker(cfg)).open(TOPIC)
        if ids_seen and ml.current_ledger_id <= max(ids_seen):
            problems.append(f"round {round_}: ledger id {ml.current_ledger_id} does not grow past {max(ids_seen)}")
        cursor = ml.cursors.get("sub") or await ml.open_cursor("sub", initial_position=ml.first_position)
        md = cursor.mark_delete_position
        if not md_floor <= md <= md_ceiling:
            problems.append(f"round {round_}: cursor recovered at {md}, outside [{md_floor}, {md_ceiling}]")
        stored = {e.position: e.payload for e in await ml.read_entries(Position(-1, -1), 10_000)}
        problems += [f"round {round_}: lost {p}" for p, d in acked.items() if stored.get(p) != d]
        point = rng.choice(POINTS)
        if point is not None:
            faults.arm(point, "hang", from_hit=rng.randint(1, 4))

        task = asyncio.ensure_future(workload(rng, ml, cursor, acked, f"{seed}-{round_}"))
        await asyncio.wait([task], timeout=5.0)  # virtual seconds: a hung point stops it here
        if task.done() and task.exception() is not None and not isinstance(task.exception(), MagnetarError):
            raise task.exception()  # type: ignore[misc]
        ids_seen |= set(ml.ledger_ids)
        md_floor, md_ceiling = cursor.persisted_mark_delete_position, cursor.mark_delete_position
        crash(ml, task)
        faults.disarm_all()
    return problems


@pytest.mark.parametrize("seed", range(24))
async def test_seeded_crash_workload(seed: int) -> None:
    assert await run_workload(seed) == []


@pytest.mark.parametrize("seed", range(3))
async def test_negative_control_workload_without_fencing_loses_entries(seed: int) -> None:
    problems = await run_workload(seed, open_recovery=OpenRecovery.NO_FENCE)
    assert any("lost" in p for p in problems), problems
