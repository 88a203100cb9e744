"""Connections take turns (issue 22, latency isolation): the broker hands over at most
``BROKER_SENDS_PER_TURN_COUNT_MAX`` SENDs of one receive per loop pass, then lets what became
ready meanwhile run, so a light producer's SEND read in the same pass as a heavy producer's 60 is
handed over after the heavy one's first turn, not after all of them. Events keep their order per
connection; a receive within one turn is handed over at once.

Negative control: with a turn larger than the heavy receive, the light SEND waits for all of it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from magnetar import sim
from magnetar.base.limits import BROKER_SENDS_PER_TURN_COUNT_MAX
from magnetar.node.broker import SendTurn, hand_over_within_bound
from magnetar.protocol.pulsar import FlowReceived, SendReceived, pb
from magnetar.protocol.pulsar.fast_decode import SendCommand
from magnetar.protocol.pulsar.frames import MessagePayload

BOUND = 1000  # far above these receives: only the turns cut them

_BODY = memoryview(b"m")
_PAYLOAD = MessagePayload(pb.MessageMetadata(producer_name="p", sequence_id=0, publish_time=0), _BODY, _BODY,
                          None, None)


def _send(producer_id: int, sequence_id: int) -> SendReceived:
    return SendReceived(SendCommand(producer_id=producer_id, sequence_id=sequence_id), _PAYLOAD)


class _Session:
    """Records, across connections, the order in which SENDs were handed over."""

    def __init__(self, handed: list[tuple[int, int]]) -> None:
        self.pending_sends = 0
        self._handed = handed

    async def handle_all(self, events: Sequence[object]) -> bool:
        for event in events:
            if isinstance(event, SendReceived):
                self.pending_sends += 1
                self._handed.append((event.command.producer_id, event.command.sequence_id))
        return False

    async def wait_send_room(self) -> None:
        raise AssertionError("the bound is never reached here")


def _two_connections(heavy_count: int, turn: int) -> list[tuple[int, int]]:
    """A heavy receive of ``heavy_count`` SENDs (producer 1) and a light one of one SEND
    (producer 2) that became ready in the same loop pass, right after it: the order handed over."""

    async def main() -> list[tuple[int, int]]:
        handed: list[tuple[int, int]] = []
        heavy: list[object] = [_send(1, i) for i in range(heavy_count)]
        light: list[object] = [_send(2, 0)]
        tasks = [asyncio.ensure_future(hand_over_within_bound(_Session(handed), events, BOUND,  # type: ignore[arg-type]
                                                              lambda: None, lambda: True, SendTurn(turn)))
                 for events in (heavy, light)]
        results = await asyncio.gather(*tasks)
        assert results == [False, False]
        return handed

    return sim.run(main(), steps_max=100_000)


def test_a_light_send_is_handed_over_after_the_heavy_receives_first_turn() -> None:
    handed = _two_connections(60, BROKER_SENDS_PER_TURN_COUNT_MAX)
    assert handed.index((2, 0)) == BROKER_SENDS_PER_TURN_COUNT_MAX  # one turn of the heavy one, then it
    heavy = [sequence for producer, sequence in handed if producer == 1]
    assert heavy == list(range(60))  # every heavy SEND once, in order


def test_turns_cut_runs_of_sends_and_keep_other_events_with_them() -> None:
    runs: list[list[object]] = []

    class _Recording(_Session):
        async def handle_all(self, events: Sequence[object]) -> bool:
            runs.append(list(events))
            return await super().handle_all(events)

    events: list[object] = [_send(1, 0), _send(1, 1), FlowReceived(consumer_id=1, permits=5), _send(1, 2),
                            _send(1, 3), _send(1, 4)]

    async def main() -> bool:
        return await hand_over_within_bound(_Recording([]), events, BOUND, lambda: None, lambda: True, SendTurn(2))  # type: ignore[arg-type]

    assert sim.run(main(), steps_max=10_000) is False
    # Two SENDs per turn; the FLOW rides with the SENDs before it (it needs no room).
    assert runs == [events[0:3], events[3:5], events[5:6]]


def test_a_connection_closed_between_turns_stops_there() -> None:
    handed: list[tuple[int, int]] = []
    open_now = [True]

    class _Closing(_Session):
        async def handle_all(self, events: Sequence[object]) -> bool:
            open_now[0] = False  # the client went away while its first turn ran
            return await super().handle_all(events)

    async def main() -> bool:
        events: list[object] = [_send(1, i) for i in range(10)]
        return await hand_over_within_bound(_Closing(handed), events, BOUND, lambda: None,  # type: ignore[arg-type]
                                            lambda: open_now[0], SendTurn(4))

    assert sim.run(main(), steps_max=10_000) is True
    assert handed == [(1, 0), (1, 1), (1, 2), (1, 3)]


def test_negative_control_one_turn_for_the_whole_receive_makes_the_light_send_wait() -> None:
    handed = _two_connections(60, 1000)
    assert handed.index((2, 0)) == 60  # behind every heavy SEND of that receive
