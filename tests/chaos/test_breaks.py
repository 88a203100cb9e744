"""Negative-control switches: read from MAGNETAR_BREAK like MAGNETAR_FAULTS, and each one really
breaks its mechanism (the journal replies before writing; recovery stops fencing or truncates)."""

from __future__ import annotations

import asyncio

import pytest

from magnetar import faults
from magnetar.base.errors import InvalidArgumentError
from magnetar.faults import breaks
from magnetar.ledger.recovery import RecoveryMode, _broken
from magnetar.protocol.bookie import Status
from tests.storage.test_storage import KEY, Node, entry, sim


def test_breaks_come_from_the_environment_with_the_faults_and_go_with_disarm() -> None:
    faults.arm_from_env({"MAGNETAR_BREAK": "ack-before-fsync, no-fencing"})
    assert breaks.active(breaks.Break.ACK_BEFORE_FSYNC)
    assert breaks.active(breaks.Break.NO_FENCING)
    assert not breaks.active(breaks.Break.TRUNCATE_TO_LAC)
    faults.disarm_all()
    assert not breaks.active(breaks.Break.ACK_BEFORE_FSYNC)
    with pytest.raises(InvalidArgumentError, match="unknown break"):
        breaks.enable_from_env({"MAGNETAR_BREAK": "fsync-never"})


def test_recovery_mode_follows_the_break() -> None:
    assert _broken(RecoveryMode.CORRECT) is RecoveryMode.CORRECT
    breaks.enable(breaks.Break.NO_FENCING)
    assert _broken(RecoveryMode.CORRECT) is RecoveryMode.NO_FENCING
    breaks.disable_all()
    breaks.enable(breaks.Break.TRUNCATE_TO_LAC)
    assert _broken(RecoveryMode.CORRECT) is RecoveryMode.TRUNCATE_TO_LAC


@pytest.mark.parametrize("broken", [False, True])
def test_ack_before_fsync_replies_before_the_journal_write(broken: bool) -> None:
    """Hung just before the journal write: a correct bookie has not answered; a broken one has,
    and a crash there loses the acknowledged add."""

    async def scenario() -> None:
        node = Node()
        bookie = await node.boot()
        if broken:
            breaks.enable(breaks.Break.ACK_BEFORE_FSYNC)
        faults.arm("bookie.before_journal_append", "hang")
        answers: list[Status] = []
        bookie.add_entry(entry(7, 0), KEY, False, answers.append)
        for _ in range(100):
            if faults.hits("bookie.before_journal_append"):
                break
            await asyncio.sleep(0.001)
        assert faults.hits("bookie.before_journal_append") == 1
        assert answers == ([Status.OK] if broken else [])
        node.power_cut()
        faults.disarm_all()
        bookie = await node.boot()
        assert bookie.read_entry(7, 0).status is not Status.OK
        await bookie.stop()

    sim(scenario)
