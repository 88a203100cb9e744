"""The broker's keep-alive does not close a connection whose reading the broker itself holds for
SEND back-pressure (``pending_sends_per_connection_max`` unanswered SENDs): the client's PONG may
sit unread in the socket meanwhile. Pulsar likewise skips the keep-alive close while a channel's
auto-read is off (which it turns off for this). A client that does not read our replies is still
closed by the keep-alive. Issue 24: during a move wave the 300
producers' SENDs to closing topics held the read of their one connection for a minute, and the
keep-alive then disconnected all of them, lookups included (``ResultDisconnected``).

Negative control: the same connection, reading not held, is closed after two intervals.
"""

from __future__ import annotations

import asyncio

from magnetar import sim
from magnetar.broker import BrokerConfig, MemoryLogStore
from magnetar.broker.service import BrokerService
from magnetar.metadata import MemoryMetadataServer
from magnetar.node.broker import BrokerServer, _ConnectionLoop
from magnetar.protocol.pulsar import State, encode_command, pb
from magnetar.sim import SimClock

INTERVAL_S = 30  # the server's keep-alive interval (``KEEP_ALIVE_INTERVAL_MS``)


class _Conn:
    peer = "127.0.0.1:9"

    def __init__(self) -> None:
        self.closed = False

    def close(self) -> None:
        self.closed = True


def _state_after(held: bool, wait_s: float) -> State:
    async def main() -> State:
        clock = SimClock()
        store = await MemoryMetadataServer(clock).connect()
        service = BrokerService(BrokerConfig(), MemoryLogStore(), store, clock=clock)
        server = BrokerServer(service, network=None, clock=clock)  # type: ignore[arg-type]
        loop = _ConnectionLoop(server, _Conn())  # type: ignore[arg-type]
        body = pb.CommandConnect(client_version="test", protocol_version=20)
        for event in loop.protocol.receive_data(encode_command(pb.BaseCommand(type=pb.BaseCommand.CONNECT,
                                                                              connect=body)), loop._now_ms()):
            await loop.session.handle(event)
        assert loop.protocol.state is State.CONNECTED
        loop._reading_held = held  # as ``_read_loop`` sets it while it waits for room
        ticker = asyncio.ensure_future(loop._tick_loop())
        await clock.sleep(wait_s)  # virtual time (simulated clock/loop): no real wait
        state = loop.protocol.state
        ticker.cancel()
        await service.close()
        return state

    return sim.run(main(), steps_max=1_000_000)


def test_a_connection_whose_reading_the_broker_holds_outlives_the_keep_alive() -> None:
    assert _state_after(held=True, wait_s=5 * INTERVAL_S) is State.CONNECTED


def test_negative_control_a_silent_connection_read_normally_is_closed() -> None:
    assert _state_after(held=False, wait_s=2 * INTERVAL_S + 2) is State.CLOSED
