"""A large ACK is applied in slices, one event-loop pass each, in order (issue 22, the
acknowledgement pass).

The official client sends its grouped acks every 100 ms: thousands of ids in one ACK at its top
rate. ``Subscription.acknowledge`` applies ``BROKER_ACK_SLICE_IDS_COUNT_MAX`` ids per pass so the
other callbacks due meanwhile (receipts, other connections' reads) are not held behind it.

What is checked, with the real subscription, dispatcher and session over the in-memory log:

* the slices reach the cursor in the ACK's order, every id once, and other callbacks run between
  them (``_assert_applied_in_order``; its negative control: a dropped id and two swapped slices
  fail it);
* a small ACK and a cumulative ACK take one pass;
* a subscription closed between slices takes no further slice, and no error is raised;
* through the session: the ACK's receipt (request id) goes out after the last slice, and a
  REDELIVER_UNACKNOWLEDGED read after the ACK on the same connection redelivers nothing (the
  connection's next command waits for the whole ACK). The negative control hands the two
  commands over concurrently: the redelivery then overtakes the unapplied slices and entries are
  sent again.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import pytest

from magnetar.base.limits import BROKER_ACK_SLICE_IDS_COUNT_MAX as SLICE
from magnetar.base.types import Position
from magnetar.broker.consumer import SubType
from magnetar.broker.session import Session
from magnetar.broker.subscription import Subscription
from magnetar.protocol.pulsar import encode_command, pb
from magnetar.protocol.pulsar.frames import make_command
from tests.admin.harness import AdminWorld, run_world
from tests.broker.test_session_authorization import _connected, _replies
from tests.manual_clock import settle

T = pb.BaseCommand
TOPIC = "persistent://public/default/acks"
_BOUND_S = 10.0  # a failure bound only: nothing here waits on time


class RecordingCursor:
    """The subscription's cursor, with every individual-ack call recorded (the positions, in order)."""

    def __init__(self, cursor: Any) -> None:
        self._cursor = cursor
        self.deletes: list[list[Position]] = []
        self.mark_deletes: list[Position] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._cursor, name)

    async def delete(self, positions: Sequence[Position]) -> None:
        self.deletes.append(list(positions))
        await self._cursor.delete(positions)

    async def mark_delete(self, position: Position, properties: dict[str, int] | None = None) -> None:
        self.mark_deletes.append(position)
        await self._cursor.mark_delete(position, properties)


def _assert_applied_in_order(deletes: list[list[Position]], ids: list[Position]) -> None:
    """Every id reached the cursor once, in the ACK's order, in slices of at most ``SLICE``."""
    assert [p for call in deletes for p in call] == ids, "ids lost, repeated or reordered"
    assert all(len(call) <= SLICE for call in deletes), "a slice larger than the bound"


async def _dispatched(world: AdminWorld, count: int) -> tuple[Subscription, RecordingCursor, list[Position]]:
    """A Shared subscription with ``count`` entries dispatched to its consumer and unacknowledged."""
    consumer, sub, channel = await world.subscribe(TOPIC, "s", SubType.SHARED)
    await world.publish(TOPIC, count)
    sub.flow(consumer, count)
    await settle()
    assert sub.dispatcher is not None and len(sub.dispatcher.pending) == count
    recorder = RecordingCursor(sub.cursor)
    sub.cursor = recorder
    return sub, recorder, [Position(*position) for _, position, _ in channel.messages]


def test_a_large_ack_is_applied_in_slices_in_order_with_other_callbacks_between() -> None:
    async def body(world: AdminWorld) -> None:
        count = 2 * SLICE + 37
        sub, recorder, ids = await _dispatched(world, count)
        acked = [ids[1], ids[0], *ids[2:]]  # as the client sent them (not sorted)
        seen: list[int] = []
        task = asyncio.ensure_future(sub.acknowledge(False, [(p, ()) for p in acked]))
        asyncio.get_running_loop().call_soon(lambda: seen.append(len(recorder.deletes)))
        await asyncio.wait_for(task, _BOUND_S)
        assert seen == [1], "the callback due after the first slice ran before the second"
        assert [len(call) for call in recorder.deletes] == [SLICE, SLICE, 37]
        _assert_applied_in_order(recorder.deletes, acked)
        assert sub.dispatcher is not None and not sub.dispatcher.pending
        assert sub.cursor.backlog_entries() == 0

    run_world(body)


def test_the_order_check_catches_a_lost_and_a_reordered_slice() -> None:
    ids = [Position(1, i) for i in range(2 * SLICE)]
    first, second = ids[:SLICE], ids[SLICE:]
    _assert_applied_in_order([first, second], ids)
    with pytest.raises(AssertionError, match="lost, repeated or reordered"):
        _assert_applied_in_order([first, second[1:]], ids)
    with pytest.raises(AssertionError, match="lost, repeated or reordered"):
        _assert_applied_in_order([second, first], ids)
    with pytest.raises(AssertionError, match="larger than the bound"):
        _assert_applied_in_order([ids], ids)


def test_a_small_ack_and_a_cumulative_ack_take_one_pass() -> None:
    async def body(world: AdminWorld) -> None:
        sub, recorder, ids = await _dispatched(world, SLICE + 50)
        done: list[bool] = []
        task = asyncio.ensure_future(sub.acknowledge(False, [(p, ()) for p in ids[:SLICE]]))
        asyncio.get_running_loop().call_soon(lambda: done.append(task.done()))
        await asyncio.wait_for(task, _BOUND_S)
        assert done == [True] and len(recorder.deletes) == 1
        task = asyncio.ensure_future(sub.acknowledge(True, [(p, ()) for p in ids]))  # only the last id counts
        asyncio.get_running_loop().call_soon(lambda: done.append(task.done()))
        await asyncio.wait_for(task, _BOUND_S)
        assert done == [True, True] and recorder.mark_deletes == [ids[-1]]
        assert sub.cursor.backlog_entries() == 0

    run_world(body)


def test_a_subscription_closed_between_slices_takes_no_further_slice() -> None:
    async def body(world: AdminWorld) -> None:
        sub, recorder, ids = await _dispatched(world, 2 * SLICE)
        task = asyncio.ensure_future(sub.acknowledge(False, [(p, ()) for p in ids]))
        closing = asyncio.get_running_loop().call_soon(lambda: asyncio.ensure_future(sub.close(delete=False)))
        await asyncio.wait_for(task, _BOUND_S)  # no error
        assert closing is not None
        assert [len(call) for call in recorder.deletes] == [SLICE]

    run_world(body)


# --- through the session: receipts, and the connection's next command ------------------------------


def _frame(command: T) -> bytes:
    return encode_command(command)


async def _session_with_pending(world: AdminWorld, count: int) -> tuple[Session, Any, list[tuple[int, int]]]:
    conn = _connected()
    session = Session(world.service, conn, lambda: None)
    subscribe = make_command(T.SUBSCRIBE, pb.CommandSubscribe(
        topic=TOPIC, subscription="s", subType=pb.CommandSubscribe.Shared, consumer_id=1, request_id=1,
        initialPosition=pb.CommandSubscribe.Earliest))
    await world.publish(TOPIC, count)
    flow = make_command(T.FLOW, pb.CommandFlow(consumer_id=1, messagePermits=2 * count))  # room for redeliveries
    for command in (subscribe, flow):
        for event in conn.receive_data(_frame(command), 0):
            await session.handle(event)
        await session.requests.settled()  # SUBSCRIBE is answered from its own task
    await settle()
    ids = [(r.message.message_id.ledgerId, r.message.message_id.entryId) for r in _replies(conn) if r.type == T.MESSAGE]
    assert len(ids) == count
    return session, conn, ids


def _ack_then_redeliver(ids: list[tuple[int, int]]) -> bytes:
    ack = pb.CommandAck(consumer_id=1, ack_type=pb.CommandAck.Individual, request_id=7,
                        message_id=[pb.MessageIdData(ledgerId=lid, entryId=eid) for lid, eid in ids])
    redeliver = pb.CommandRedeliverUnacknowledgedMessages(consumer_id=1)
    return _frame(make_command(T.ACK, ack)) + _frame(make_command(T.REDELIVER_UNACKNOWLEDGED_MESSAGES, redeliver))


async def _redelivered_after(world: AdminWorld, *, concurrently: bool) -> tuple[list[T], int]:
    session, conn, ids = await _session_with_pending(world, 3 * SLICE)
    events = conn.receive_data(_ack_then_redeliver(ids), 0)
    if concurrently:  # the negative control: not how a connection hands its commands over
        await asyncio.wait_for(asyncio.gather(*(session.handle_all([event]) for event in events)), _BOUND_S)
    else:
        await asyncio.wait_for(session.handle_all(events), _BOUND_S)
    await settle()
    replies = _replies(conn)
    topic = world.service.topics[TOPIC]
    return replies, topic.subscriptions["s"].cursor.backlog_entries()


def test_the_receipt_follows_the_last_slice_and_the_next_command_waits_for_the_whole_ack() -> None:
    async def body(world: AdminWorld) -> None:
        replies, backlog = await _redelivered_after(world, concurrently=False)
        assert [r.type for r in replies] == [T.ACK_RESPONSE]  # nothing redelivered
        assert replies[0].ackResponse.request_id == 7 and not replies[0].ackResponse.HasField("error")
        assert backlog == 0

    run_world(body)


def test_the_redelivery_check_catches_a_command_overtaking_the_ack() -> None:
    """Negative control: handed over concurrently, the REDELIVER runs between the ACK's slices and
    the entries of the slices not yet applied are sent again."""

    async def body(world: AdminWorld) -> None:
        replies, backlog = await _redelivered_after(world, concurrently=True)
        assert any(r.type == T.MESSAGE for r in replies)
        assert backlog == 0  # every ack still applied in the end

    run_world(body)
