"""Fencing and recovery over the fake transport: true end, idempotence, BookKeeper 2614,
the zombie writer, and the negative controls that make the checkers report loss."""

from __future__ import annotations

import asyncio

import pytest

from magnetar import faults
from magnetar.base.errors import FencedError
from magnetar.ledger.errors import RecoveryIncompleteError
from magnetar.ledger.ledger_metadata import LedgerState
from magnetar.ledger.recovery import RecoveryMode
from tests.ledger.checkers import check_ledger, payloads
from tests.ledger.fakes import make_cluster
from tests.manual_clock import settle


async def _read_all(manager, ledger_id, last):  # type: ignore[no-untyped-def]
    reader = await manager.open_ledger(ledger_id)
    return payloads(await reader.read_entries(0, last)) if last >= 0 else {}


async def test_recovery_finds_an_unacknowledged_tail_entry_and_writes_it_back() -> None:
    cluster = make_cluster(3)
    manager = cluster.manager()
    handle = await manager.create_ledger(3, 3, 2)
    acked = {await handle.add_entry(b"a%d" % i): b"a%d" % i for i in range(3)}
    b0, b1, b2 = handle.ensemble
    # Entry 3 reaches b0 only (W2: on fewer than Qa bookies, not acknowledged).
    cluster.transport.rule(b1, "add", 3, "hold_before")
    cluster.transport.rule(b2, "add", 3, "hold_before")
    writer = asyncio.ensure_future(handle.add_entry(b"a3"))
    await settle()
    assert not writer.done()
    closed = await manager.recover_ledger(handle.ledger_id)
    assert closed.last_entry_id == 3  # one valid copy is enough: recovery keeps it
    for bookie in (b0, b1, b2):
        assert cluster.bookie(bookie).has(handle.ledger_id, 3) is not None  # written back to the write set
    reading = await _read_all(manager, handle.ledger_id, 3)
    assert check_ledger(handle.ledger_id, acked, closed, [reading], cluster.bookies.values()) == []
    writer.cancel()


async def test_recovery_drops_an_entry_that_quorum_says_is_missing() -> None:
    cluster = make_cluster(3)
    manager = cluster.manager()
    handle = await manager.create_ledger(3, 3, 2)
    acked = {await handle.add_entry(b"x%d" % i): b"x%d" % i for i in range(2)}
    for bookie in handle.ensemble:
        cluster.transport.rule(bookie, "add", 2, "hold_before")
    writer = asyncio.ensure_future(handle.add_entry(b"x2"))
    await settle()
    closed = await manager.recover_ledger(handle.ledger_id)
    assert closed.last_entry_id == 1
    for rule in cluster.transport.rules:
        rule.release()
    await settle()
    with pytest.raises(FencedError):
        await writer  # fenced bookies refuse the held add: never acknowledged
    reading = await _read_all(manager, handle.ledger_id, 1)
    assert check_ledger(handle.ledger_id, acked, closed, [reading], cluster.bookies.values()) == []


async def test_recovery_is_idempotent_when_the_recoverer_dies_midway() -> None:
    cluster = make_cluster(4)
    manager = cluster.manager()
    handle = await manager.create_ledger(3, 2, 2)
    acked = {await handle.add_entry(b"i%d" % i): b"i%d" % i for i in range(5)}
    faults.arm("ledger.recovery.after_fence", "error")  # R1: the recoverer dies after fencing
    with pytest.raises(faults.InjectedFaultError):
        await manager.recover_ledger(handle.ledger_id)
    assert (await manager.store.read(handle.ledger_id)).metadata.state is LedgerState.IN_RECOVERY
    faults.disarm_all()
    faults.arm("ledger.recovery.before_close_cas", "error")  # R3: dies after the write-back
    with pytest.raises(faults.InjectedFaultError):
        await manager.recover_ledger(handle.ledger_id)
    faults.disarm_all()
    first = await manager.recover_ledger(handle.ledger_id)
    second = await manager.recover_ledger(handle.ledger_id)
    assert first == second and first.last_entry_id == 4
    reading = await _read_all(manager, handle.ledger_id, 4)
    assert check_ledger(handle.ledger_id, acked, first, [reading, reading], cluster.bookies.values()) == []


async def test_concurrent_recoverers_converge() -> None:
    cluster = make_cluster(3)
    manager = cluster.manager()
    handle = await manager.create_ledger(3, 3, 2)
    for i in range(4):
        await handle.add_entry(b"c%d" % i)
    one, two = await asyncio.gather(
        manager.recover_ledger(handle.ledger_id), cluster.manager(2).recover_ledger(handle.ledger_id)
    )
    assert one == two and one.last_entry_id == 3


async def test_recovery_waits_for_fencing_coverage() -> None:
    cluster = make_cluster(3)
    manager = cluster.manager()
    handle = await manager.create_ledger(3, 3, 2)
    await handle.add_entry(b"z")
    b0, b1, _ = handle.ensemble
    cluster.bookie(b0).alive = False
    cluster.bookie(b1).alive = False
    with pytest.raises(RecoveryIncompleteError):  # only one of three answered: the writer may still win
        await manager.recover_ledger(handle.ledger_id)
    cluster.bookie(b1).alive = True
    assert (await manager.recover_ledger(handle.ledger_id)).last_entry_id == 0


async def _bookkeeper_2614(mode: RecoveryMode) -> list[str]:
    """E=3 Qw=3 Qa=2. e0 reaches b0 only; one fence (to b2) is lost; recovery reads b1 and b2
    answer "no such entry" and close the ledger empty; then b2 processes the old writer's add."""
    cluster = make_cluster(3)
    manager = cluster.manager()
    handle = await manager.create_ledger(3, 3, 2)
    b0, b1, b2 = handle.ensemble
    held = [cluster.transport.rule(b, "add", 0, "hold_before") for b in (b1, b2)]
    writer = asyncio.ensure_future(handle.add_entry(b"e0"))
    await settle()
    cluster.transport.rule(b2, "read_last", None, "drop_fence")
    slow_read = cluster.transport.rule(b0, "read", 0, "hold_before")
    closed = await manager.recover_ledger(handle.ledger_id, mode=mode)
    # b2's (possibly unfenced) copy answers before b1's fenced refusal, as in the TLA+ trace.
    held[1].release()
    await settle()
    held[0].release()
    await settle()
    acked: dict[int, bytes] = {}
    if writer.done() and writer.exception() is None:
        acked[writer.result()] = b"e0"
    slow_read.release()
    reading = await _read_all(manager, handle.ledger_id, closed.last_entry_id)
    return check_ledger(handle.ledger_id, acked, closed, [reading], cluster.bookies.values())


async def test_bookkeeper_2614_fencing_recovery_reads_prevent_the_loss() -> None:
    assert await _bookkeeper_2614(RecoveryMode.CORRECT) == []


async def test_bookkeeper_2614_negative_control_reports_the_loss() -> None:
    problems = await _bookkeeper_2614(RecoveryMode.READS_WITHOUT_FENCING)
    assert any(p.startswith("I2") for p in problems), problems


async def _zombie(mode: RecoveryMode) -> list[str]:
    """The old writer keeps writing while a new owner recovers; it must never get an ack past the end."""
    cluster = make_cluster(5)
    manager = cluster.manager()
    handle = await manager.create_ledger(3, 3, 2)
    acked: dict[int, bytes] = {}
    paused = asyncio.Event()
    resume = asyncio.Event()

    async def zombie() -> None:
        for i in range(10):
            if i == 5:
                paused.set()
                await resume.wait()  # a long GC pause: the new owner recovers meanwhile
            try:
                entry_id = await handle.add_entry(b"z%d" % i)
            except FencedError:
                return
            acked[entry_id] = b"z%d" % i

    task = asyncio.ensure_future(zombie())
    await paused.wait()
    closed = await manager.recover_ledger(handle.ledger_id, mode=mode)
    resume.set()
    await task
    reading = await _read_all(manager, handle.ledger_id, closed.last_entry_id)
    return check_ledger(handle.ledger_id, acked, closed, [reading], cluster.bookies.values())


async def test_zombie_writer_is_fenced() -> None:
    assert await _zombie(RecoveryMode.CORRECT) == []


async def test_zombie_writer_negative_control_without_fencing() -> None:
    problems = await _zombie(RecoveryMode.NO_FENCING)
    assert any(p.startswith(("I2", "I1")) for p in problems), problems


async def test_truncate_to_lac_negative_control_reports_loss() -> None:
    cluster = make_cluster(3)
    manager = cluster.manager()
    handle = await manager.create_ledger(3, 3, 2)
    acked = {await handle.add_entry(b"t%d" % i): b"t%d" % i for i in range(3)}
    # Entry 2 is acknowledged but no later entry carried LAC=2: the highest LAC on bookies is 1.
    closed = await manager.recover_ledger(handle.ledger_id, mode=RecoveryMode.TRUNCATE_TO_LAC)
    reading = await _read_all(manager, handle.ledger_id, closed.last_entry_id)
    problems = check_ledger(handle.ledger_id, acked, closed, [reading], cluster.bookies.values())
    assert any(p.startswith("I2") for p in problems), problems


async def _ack_before_fsync(broken: bool) -> list[str]:
    """BP-46 scenario 2: e0 acked by two bookies; one crashes; with ack-before-sync it lost e0 and
    answers "no such entry", which with a third negative closes the ledger empty."""
    cluster = make_cluster(3)
    manager = cluster.manager()
    handle = await manager.create_ledger(3, 3, 2)
    b0, b1, b2 = handle.ensemble
    for bookie in cluster.bookies.values():
        bookie.ack_before_sync = broken
    cluster.transport.rule(b1, "add", 0, "hold_before")  # b1 never gets e0
    acked = {await handle.add_entry(b"d0"): b"d0"}
    cluster.bookie(b0).crash()
    cluster.bookie(b0).restart()
    cluster.bookie(b2).crash()  # b2 stays down; with its copy synced, nothing is lost
    if broken:
        cluster.bookie(b2).restart()  # back, but its unsynced copy of e0 is gone
    closed = await manager.recover_ledger(handle.ledger_id)
    cluster.bookie(b2).restart()
    reading = await _read_all(manager, handle.ledger_id, closed.last_entry_id) if closed.last_entry_id >= 0 else {}
    return check_ledger(handle.ledger_id, acked, closed, [reading], cluster.bookies.values())


async def test_acks_after_fsync_keep_entries_across_bookie_crashes() -> None:
    assert await _ack_before_fsync(broken=False) == []


async def test_ack_before_fsync_negative_control_reports_loss() -> None:
    problems = await _ack_before_fsync(broken=True)
    assert any(p.startswith(("I1", "I2")) for p in problems), problems
