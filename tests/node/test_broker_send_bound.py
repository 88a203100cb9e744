"""A connection's unanswered SENDs stay within ``pending_sends_per_connection_max`` exactly, even
inside one receive (issue 22, latency isolation): one 64 KiB read holds ~60 SENDs of 1 KiB, and
checking the bound only before the next read let a connection with many partitions put the bound
plus a read's worth of adds beside everyone else's in the bookie's journal group. At the bound the
rest of the receive waits, reading held (the keep-alive spares it), until half were answered;
events keep their order; events that are not SENDs need no room.

Negative control: with a bound above the receive's SENDs everything is handed over at once.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from magnetar import sim
from magnetar.node.broker import SendTurn, hand_over_within_bound
from magnetar.protocol.pulsar import FlowReceived, SendReceived, pb
from magnetar.protocol.pulsar.fast_decode import SendCommand
from magnetar.protocol.pulsar.frames import MessagePayload
from magnetar.sim import SimClock


class _Session:
    """What ``_ConnectionLoop`` uses of a ``Session`` here: SENDs handed over count as pending
    until ``answer`` (the room returns at half the bound, as ``Session`` does)."""

    def __init__(self, bound: int) -> None:
        self.bound = bound
        self.pending_sends = 0
        self.batches: list[list[object]] = []
        self._room = asyncio.Event()
        self._room.set()

    async def handle_all(self, events: Sequence[object]) -> bool:
        self.batches.append(list(events))
        self.pending_sends += sum(1 for event in events if isinstance(event, SendReceived))
        return False

    async def wait_send_room(self) -> None:
        while self.pending_sends >= self.bound:
            self._room.clear()
            await self._room.wait()

    def answer(self, count: int) -> None:
        self.pending_sends -= count
        if self.pending_sends <= self.bound // 2:
            self._room.set()


_BODY = memoryview(b"m")
_PAYLOAD = MessagePayload(pb.MessageMetadata(producer_name="p", sequence_id=0, publish_time=0), _BODY, _BODY,
                          None, None)


def _send(sequence_id: int) -> SendReceived:
    return SendReceived(SendCommand(producer_id=1, sequence_id=sequence_id), _PAYLOAD)


def _flow() -> FlowReceived:
    return FlowReceived(consumer_id=1, permits=10)


def _handled(bound: int, events: list[object]) -> tuple[list[list[object]], bool, list[list[object]]]:
    """(batches handed over before any answer, reading held meanwhile, all batches in the end)."""

    async def main() -> tuple[list[list[object]], bool, list[list[object]]]:
        clock = SimClock()
        session = _Session(bound)
        held: list[bool] = []
        handling = asyncio.ensure_future(hand_over_within_bound(
            session, events, bound, lambda: held.append(True), lambda: True, SendTurn()))  # type: ignore[arg-type]
        deadline = clock.monotonic_ns() + 1_000_000_000
        while not handling.done() and not held and clock.monotonic_ns() < deadline:
            await clock.sleep(0.001)  # virtual time: steps the simulated loop until it holds or ends
        before = [list(batch) for batch in session.batches]
        was_held = bool(held)
        while not handling.done() and clock.monotonic_ns() < deadline:
            session.answer(session.pending_sends)  # the journal group completes: all answered
            await clock.sleep(0.001)  # virtual time (SimClock): no real wait
        assert handling.done() and handling.result() is False
        return before, was_held, session.batches

    return sim.run(main(), steps_max=1_000_000)


def test_a_receive_with_more_sends_than_the_room_waits_at_the_bound_in_order() -> None:
    events: list[object] = [_flow(), _send(1), _send(2), _send(3), _flow(), _send(4), _send(5), _send(6)]
    before, held, batches = _handled(4, events)
    assert held  # the rest of the receive waits for answers, reading held
    assert before == [events[:6]]  # 4 SENDs (the bound) and the FLOWs between them, nothing more
    assert [event for batch in batches for event in batch] == events  # all of them, in order, once
    assert batches[1:] == [events[6:]]


def test_sends_past_the_bound_are_handed_over_in_rounds_of_the_room_left() -> None:
    events: list[object] = [_send(i) for i in range(10)]
    _before, _held, batches = _handled(4, events)
    assert [len(batch) for batch in batches] == [4, 4, 2]


def test_negative_control_a_bound_above_the_receive_hands_everything_over_at_once() -> None:
    events: list[object] = [_flow(), _send(1), _send(2), _send(3), _flow(), _send(4), _send(5), _send(6)]
    before, held, batches = _handled(1000, events)
    assert not held
    assert before == [events] and batches == [events]
