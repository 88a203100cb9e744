"""A connection's turn spans receives (issue 22, latency isolation): at most
``BROKER_SENDS_PER_TURN_COUNT_MAX`` SENDs of one connection are handed over per loop pass, counting
every receive of that pass. A heavy producer's read loop that finished one receive's last, partial
turn read the next buffered receive at once (no yield between them: the bytes were there) and
handed over a whole new turn of it in the same pass, so a pass held up to twice the turn of its
SENDs, and the light producer's SEND and journal completion, which wait for the pass to end,
waited that much longer.

Shown over the real TCP read path (``runtime.network``'s protocol and ``TcpConnection``, the
direct receiver, ``take``) on a transport that only records writes, with a memory log: a receive
of 24 SENDs, and a receive of 12 more buffered while the first is handed over in turns. The
SENDs handed over per loop pass (the memory log's entries, stored at the hand-over, counted by a
callback that runs once per pass) never exceed the turn, and all 36 are stored in order.

Negative control (checked by hand on the session-start tree, ``node/broker.py`` at ``a46128b``,
where each receive started a fresh turn): the passes held 16, 20 (the first receive's last 8 and
all 12 of the next), and this test's bound fails.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import uvloop

from magnetar.base.limits import BROKER_SENDS_PER_TURN_COUNT_MAX
from magnetar.broker import BrokerConfig, MemoryLogStore
from magnetar.broker.service import BrokerService
from magnetar.metadata import MemoryMetadataServer
from magnetar.node.broker import BrokerServer, _ConnectionLoop
from magnetar.node.broker_generation import bootstrap_cluster
from magnetar.protocol.pulsar import encode_command, pb
from magnetar.protocol.pulsar.client_connection import ClientConfig, connect_command
from magnetar.runtime.clock import SystemClock
from magnetar.runtime.network import TcpConnection, _ConnectionProtocol
from tests.managed_ledger.harness import until
from tests.node.send_frames import send_frame

TOPIC = "persistent://public/default/turns"


class _Transport:
    """What ``_ConnectionProtocol`` and ``TcpConnection`` use of a transport: writes recorded."""

    def __init__(self) -> None:
        self.written = bytearray()
        self.closing = False

    def set_write_buffer_limits(self, high: int) -> None:
        return None

    def get_extra_info(self, name: str) -> object:
        return ("127.0.0.1", 1) if name == "peername" else None

    def write(self, data: bytes) -> None:
        self.written += data

    def writelines(self, parts: Sequence[bytes]) -> None:
        for part in parts:
            self.written += part

    def is_closing(self) -> bool:
        return self.closing

    def close(self) -> None:
        self.closing = True

    def pause_reading(self) -> None:
        return None

    def resume_reading(self) -> None:
        return None


def _send(sequence_id: int) -> bytes:
    return send_frame("turns-0", sequence_id, sequence_id.to_bytes(4, "big"))


def _answered(transport: _Transport, kind: int) -> bool:
    """A frame of command type ``kind`` was written (frames: size, command size, command, ...)."""
    data, offset = bytes(transport.written), 0
    while offset + 8 <= len(data):
        size = int.from_bytes(data[offset:offset + 4], "big")
        command_size = int.from_bytes(data[offset + 4:offset + 8], "big")
        command = pb.BaseCommand()
        command.ParseFromString(data[offset + 8:offset + 8 + command_size])
        if command.type == kind:
            return True
        offset += 4 + size
    return False


async def _sends_per_pass() -> tuple[list[int], list[bytes]]:
    clock = SystemClock()
    store = await MemoryMetadataServer(clock).connect()
    log_store = MemoryLogStore()
    service = BrokerService(BrokerConfig(), log_store, store, clock=clock)
    await bootstrap_cluster(service, web_url="http://127.0.0.1:9")
    server = BrokerServer(service, None, clock)  # type: ignore[arg-type]  # served directly, no listener
    transport = _Transport()
    protocol = _ConnectionProtocol()
    protocol.connection_made(transport)  # type: ignore[arg-type]
    serving = asyncio.ensure_future(server._serve(TcpConnection(protocol)))
    try:
        protocol.data_received(encode_command(connect_command(ClientConfig())))
        await until(lambda: _answered(transport, pb.BaseCommand.CONNECTED))
        protocol.data_received(encode_command(pb.BaseCommand(type=pb.BaseCommand.PRODUCER, producer=pb.CommandProducer(
            topic=TOPIC, producer_id=1, request_id=1, producer_name="turns-0"))))
        await until(lambda: _answered(transport, pb.BaseCommand.PRODUCER_SUCCESS))
        (loop,) = server._loops
        assert isinstance(loop, _ConnectionLoop)
        await until(lambda: loop._parked is not None)  # receives are handed over directly now
        stored = log_store._logs[TOPIC].data  # the memory log stores each entry at its hand-over

        per_pass: list[int] = []
        seen = [len(stored)]
        running = asyncio.get_running_loop()

        def count_pass() -> None:  # once per loop pass (rescheduled for the next one) until all are in
            now = len(stored)
            per_pass.append(now - seen[0])
            seen[0] = now
            if now < 36:
                running.call_soon(count_pass)

        running.call_soon(count_pass)
        # One receive of 24 SENDs (more than a turn: handed over in turns), and 12 more buffered
        # behind it while its turns run (the transport delivers them before the read loop is back).
        protocol.data_received(b"".join(_send(i) for i in range(24)))
        protocol.data_received(b"".join(_send(i) for i in range(24, 36)))
        await until(lambda: seen[0] >= 36)  # every pass counted
        entries = [bytes(data) for data in stored]
        return [count for count in per_pass if count], entries
    finally:
        protocol.connection_lost(None)
        # The serving task ends (its outcome is not asserted: compiled, a connection's task ends
        # cancelled after its loop's clean-up, on the session-start tree too; noted for the lead).
        await asyncio.wait([serving], timeout=10)
        assert serving.done() and not server._loops
        await server.close()


def test_a_connection_hands_over_at_most_one_turn_per_pass_across_receives() -> None:
    per_pass, entries = uvloop.run(_sends_per_pass())
    assert sum(per_pass) == 36
    assert max(per_pass) <= BROKER_SENDS_PER_TURN_COUNT_MAX, per_pass
    assert per_pass[0] == BROKER_SENDS_PER_TURN_COUNT_MAX  # a whole turn first: the batching stays
    assert [entry[-4:] for entry in entries] == [i.to_bytes(4, "big") for i in range(36)]  # in order, once
