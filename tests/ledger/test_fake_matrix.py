"""Seeded crash matrix over the fake transport (the real-storage SimWorld version is still to come).

Per (E, Qw, Qa) in {(3,3,2), (3,2,2), (5,3,2)} and seed: a writer adds entries while the seed
fails bookies (B1-like: refused before storing), crashes bookies that then restart (synced state
kept), and freezes the writer at a random writer fault point (W2-W5); a new owner recovers the
ledger; the frozen writer then resumes as a zombie. The docs/faults.md checkers must find nothing.
"""

from __future__ import annotations

import asyncio

import pytest

from magnetar import faults
from magnetar.base.errors import MagnetarError
from magnetar.base.rng import SeededRng
from magnetar.ledger.errors import RecoveryIncompleteError
from magnetar.ledger.recovery import RecoveryMode
from tests.ledger.checkers import check_ledger
from tests.ledger.fakes import make_cluster
from tests.manual_clock import settle

CONFIGS = [(3, 3, 2), (3, 2, 2), (5, 3, 2)]
WRITER_POINTS = [
    "ledger.after_send_before_reply",
    "ledger.after_reply_before_count",
    "ledger.after_quorum_before_ack",
    "ledger.before_send_next_entry",
]
SEEDS = range(12)


async def _run(e: int, w: int, a: int, seed: int, mode: RecoveryMode = RecoveryMode.CORRECT) -> list[str]:
    rng = SeededRng(seed * 1000 + e * 100 + w * 10 + a)
    cluster = make_cluster(e + 2)
    manager = cluster.manager(seed)
    handle = await manager.create_ledger(e, w, a)
    point = rng.choice(WRITER_POINTS)
    faults.arm(point, "hang", from_hit=rng.randint(1, 12))
    acked: dict[int, bytes] = {}

    async def writer() -> None:
        for i in range(20):
            if rng.random() < 0.15:
                victim = rng.choice(list(handle.ensemble))
                cluster.transport.rule(victim, "add", i, "fail")
            try:
                entry_id = await handle.add_entry(b"s%d-%d" % (seed, i))
            except MagnetarError:
                return
            acked[entry_id] = b"s%d-%d" % (seed, i)

    tasks = [asyncio.ensure_future(writer())]
    await settle(rng.randint(20, 400))
    if rng.random() < 0.5:
        crashed = rng.choice(list(handle.ensemble))
        cluster.bookie(crashed).crash()
        cluster.bookie(crashed).restart()
    closed = None
    for _ in range(5):
        try:
            closed = await cluster.manager(seed + 1).recover_ledger(handle.ledger_id, mode=mode)
            break
        except RecoveryIncompleteError:
            await settle()
    assert closed is not None
    faults.release(point)  # the frozen writer resumes as a zombie
    await settle(400)
    for task in tasks:
        task.cancel()
    reader = await manager.open_ledger(handle.ledger_id)
    readings = []
    for _ in range(2):
        got = await reader.read_entries(0, closed.last_entry_id) if closed.last_entry_id >= 0 else []
        readings.append({x.entry_id: x.payload for x in got})
    return check_ledger(handle.ledger_id, acked, closed, readings, cluster.bookies.values())


@pytest.mark.parametrize(("e", "w", "a"), CONFIGS)
async def test_crash_matrix_over_fakes(e: int, w: int, a: int) -> None:
    for seed in SEEDS:
        faults.disarm_all()
        problems = await _run(e, w, a, seed)
        assert problems == [], (e, w, a, seed, problems)


@pytest.mark.parametrize("mode", [RecoveryMode.TRUNCATE_TO_LAC, RecoveryMode.NO_FENCING])
async def test_crash_matrix_negative_controls_report_loss(mode: RecoveryMode) -> None:
    reported = 0
    for seed in SEEDS:
        faults.disarm_all()
        reported += bool(await _run(3, 3, 2, seed, mode))
    assert reported > 0, f"{mode}: the checkers found nothing in {len(SEEDS)} seeds"
