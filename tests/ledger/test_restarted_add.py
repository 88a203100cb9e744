"""One object per add (issue 22, session 18): the ``PendingAdd`` a caller hands to
``LedgerHandle.append_adds`` is the one the handle keeps and tells, and the managed ledger starts
the same object again on its next ledger after the first one failed. The failed handle's late
answers (replies still on the wire, gates released later) must not reach the add once another
handle took it: they would count as the new handle's.

Negative control: without the owner check in ``LedgerHandle._on_reply`` (``op.owner is not
self``), the failed ledger's two late replies clear the add's in-flight bits on the new ledger,
its own replies are then dropped as unasked, and the first test's add is never told."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from magnetar import faults
from magnetar.base.errors import FencedError
from magnetar.ledger.handle import LedgerHandle, RunReplies
from magnetar.ledger.pending_add import CallbackAdd
from tests.ledger.fakes import HeldTransport, held_writers
from tests.managed_ledger.harness import until


@pytest.fixture(autouse=True)
def _disarm() -> Iterator[None]:
    yield
    faults.disarm_all()


async def _two_writers(transport: HeldTransport) -> tuple[LedgerHandle, LedgerHandle]:
    first, second = await held_writers(transport, 2)
    return first, second


async def test_a_failed_ledgers_late_replies_do_not_count_for_the_add_started_again() -> None:
    transport = HeldTransport()
    first, second = await _two_writers(transport)
    told: list[tuple[int | None, str]] = []
    add = CallbackAdd(b"x", lambda entry_id, error: told.append((entry_id, type(error).__name__)))
    first.append_adds([add])
    late = transport.take()
    assert len(late) == 3
    late[0](0, FencedError("fenced by a recovering reader"))  # the first ledger fails: the add is told
    assert told == [(None, "FencedError")] and first.pending_count == 0
    second.append_adds([add])  # the same object, started again on the next ledger
    assert add.owner is second and add.entry_id == 0
    fresh = transport.take()
    late[1](0, None)  # the first ledger's other bookies answer late: not the second's add any more
    late[2](0, None)
    assert told == [(None, "FencedError")]
    for on_reply in fresh:
        assert isinstance(on_reply, RunReplies)
        on_reply.stored(range(1))
    assert told == [(None, "FencedError"), (0, "NoneType")]  # told once, by the second ledger
    assert second.last_add_confirmed == 0 and second.pending_count == 0


async def test_a_gate_released_after_the_add_started_again_does_not_pass_its_quorum() -> None:
    """``ledger.after_quorum_before_ack`` held on the first ledger while it fails and the add
    starts again: its release must not mark the new start as past its quorum (one reply on the
    new ledger is below Qa). Control: without the owner check in ``_quorum_passed``,
    ``quorum_passed`` is True once the held gate goes on."""
    transport = HeldTransport()
    first, second = await _two_writers(transport)
    told: list[int | None] = []
    add = CallbackAdd(b"x", lambda entry_id, _error: told.append(entry_id))
    tasks_before = len(asyncio.all_tasks())
    faults.arm("ledger.after_quorum_before_ack", "hang")
    first.append_adds([add])
    late = transport.take()
    late[0](0, None)
    late[1](0, None)  # Qa reached on the first ledger: its quorum gate holds the add
    assert faults.holding("ledger.after_quorum_before_ack") or len(asyncio.all_tasks()) > tasks_before
    late[2](0, FencedError("fenced by a recovering reader"))  # the first ledger fails: the add is told
    assert told == [None]
    second.append_adds([add])  # the same object, started again
    fresh = transport.take()
    fresh[0](0, None)  # one copy on the second ledger: below Qa
    faults.release("ledger.after_quorum_before_ack")
    await until(lambda: len(asyncio.all_tasks()) <= tasks_before)  # the held gate went on
    assert not add.quorum_passed and told == [None]
    fresh[1](0, None)  # Qa on the second ledger: its own gate (released: inline) passes it
    assert add.quorum_passed and told == [None, 0]
