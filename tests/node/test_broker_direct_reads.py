"""Receives handled by a plain call from the transport (issue 22: the broker's fixed cost per run).

Over TCP (``runtime.network.TcpConnection``: ``set_receiver`` / ``read_now``) a connection's read
loop parks once and the transport's callback hands each receive to the session directly: no
future, no task step and no coroutine frames per receive, which at a modest rate (one SEND per
receive) were paid per message. What needs the loop (a wait before reading, a full slice, EOF,
an error) is handed back to it. Shown here over loopback TCP with a memory log:

* a synchronous producer's SENDs are all answered while the read loop stays parked on one and
  the same future (the loop task never resumed for them);
* negative control: a connection without ``set_receiver`` (the simulated network's kind) is read
  by the loop itself (never parked) and answers the same SENDs;
* a malformed frame received directly ends that connection, as the loop's own read did;
* the client's EOF received directly ends the connection's loop.
"""

from __future__ import annotations

import asyncio
import struct
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import uvloop

from magnetar.broker import BrokerConfig, MemoryLogStore
from magnetar.broker.service import BrokerService
from magnetar.metadata import MemoryMetadataServer
from magnetar.node.broker import BrokerServer, _ConnectionLoop
from magnetar.node.broker_generation import bootstrap_cluster
from magnetar.protocol.pulsar import encode_command, pb
from magnetar.protocol.pulsar.client_connection import ClientConfig, connect_command
from magnetar.runtime.clock import SystemClock
from magnetar.runtime.network import TcpConnection, TcpListener, TcpNetwork
from tests.managed_ledger.harness import until
from tests.node.send_frames import send_frame

TOPIC = "persistent://public/default/direct"
_WAIT_S = 10.0


class _LoopReadTcp:
    """TCP whose connections offer ``read`` only (no ``set_receiver``): the loop reads itself."""

    def __init__(self) -> None:
        self._tcp = TcpNetwork()

    async def listen(self, host: str, port: int, handler: Callable[[_ReadOnly], Awaitable[None]]) -> TcpListener:
        async def plain(connection: TcpConnection) -> None:
            await handler(_ReadOnly(connection))
        return await self._tcp.listen(host, port, plain)  # type: ignore[arg-type]


class _ReadOnly:
    def __init__(self, inner: TcpConnection) -> None:
        self._inner = inner
        self.peer = inner.peer
        self.read = inner.read
        self.write = inner.write
        self.writelines = inner.writelines
        self.drain = inner.drain
        self.is_closing = inner.is_closing
        self.close = inner.close

    @property
    def writing_paused(self) -> bool:
        return self._inner.writing_paused


@asynccontextmanager
async def _broker(network: TcpNetwork | _LoopReadTcp) -> AsyncIterator[BrokerServer]:
    clock = SystemClock()
    store = await MemoryMetadataServer(clock).connect()
    service = BrokerService(BrokerConfig(), MemoryLogStore(), store, clock=clock)
    await bootstrap_cluster(service, web_url="http://127.0.0.1:9")
    server = BrokerServer(service, network, clock)  # type: ignore[arg-type]
    await server.listen("127.0.0.1", 0)
    try:
        yield server
    finally:
        await server.close()


async def _frame(reader: asyncio.StreamReader) -> pb.BaseCommand:
    (size,) = struct.unpack(">I", await asyncio.wait_for(reader.readexactly(4), _WAIT_S))
    body = await asyncio.wait_for(reader.readexactly(size), _WAIT_S)
    (command_size,) = struct.unpack_from(">I", body, 0)
    command = pb.BaseCommand()
    command.ParseFromString(body[4:4 + command_size])
    return command


def _send(sequence_id: int) -> bytes:
    return send_frame("direct-0", sequence_id, b"x" * 100)


async def _producer(server: BrokerServer) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    writer.write(encode_command(connect_command(ClientConfig())))
    assert (await _frame(reader)).type == pb.BaseCommand.CONNECTED
    writer.write(encode_command(pb.BaseCommand(type=pb.BaseCommand.PRODUCER, producer=pb.CommandProducer(
        topic=TOPIC, producer_id=1, request_id=1, producer_name="direct-0"))))
    assert (await _frame(reader)).type == pb.BaseCommand.PRODUCER_SUCCESS
    return reader, writer


def _only_loop(server: BrokerServer) -> _ConnectionLoop:
    (loop,) = server._loops
    return loop


async def _sends_are_answered_while_the_read_loop_stays_parked() -> None:
    async with _broker(TcpNetwork()) as server:
        reader, writer = await _producer(server)
        loop = _only_loop(server)
        parked = None
        for sequence_id in range(20):
            writer.write(_send(sequence_id))
            receipt = await _frame(reader)
            assert receipt.type == pb.BaseCommand.SEND_RECEIPT and receipt.send_receipt.sequence_id == sequence_id
            assert receipt.send_receipt.message_id.entryId == sequence_id
            await until(lambda: loop._parked is not None)  # the loop parks again after a wait
            if parked is None:
                parked = loop._parked
            assert parked is not None and loop._parked is parked and not parked.done()  # never woken: all direct
        writer.close()


async def _negative_control_a_connection_without_a_receiver_is_read_by_the_loop() -> None:
    async with _broker(_LoopReadTcp()) as server:
        reader, writer = await _producer(server)
        loop = _only_loop(server)
        for sequence_id in range(20):
            writer.write(_send(sequence_id))
            receipt = await _frame(reader)
            assert receipt.send_receipt.sequence_id == sequence_id
            assert loop._parked is None
        writer.close()


async def _parked_after_one_send(server: BrokerServer) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A producer whose first SEND was answered, once the broker's read loop is parked again (the
    next receive is handled directly)."""
    reader, writer = await _producer(server)
    loop = _only_loop(server)
    writer.write(_send(0))
    await _frame(reader)
    await until(lambda: loop._parked is not None)
    return reader, writer


async def _a_malformed_frame_received_directly_ends_the_connection() -> None:
    async with _broker(TcpNetwork()) as server:
        reader, writer = await _parked_after_one_send(server)
        writer.write(struct.pack(">II", 8, 4) + b"\xff" * 4)  # a command that is not protobuf
        assert await asyncio.wait_for(reader.read(), _WAIT_S) == b""  # the broker closed it
        await until(lambda: not server._loops)
        writer.close()


async def _eof_received_directly_ends_the_loop() -> None:
    async with _broker(TcpNetwork()) as server:
        _, writer = await _parked_after_one_send(server)
        writer.write_eof()
        await until(lambda: not server._loops)
        writer.close()


def test_sends_are_answered_while_the_read_loop_stays_parked() -> None:
    uvloop.run(_sends_are_answered_while_the_read_loop_stays_parked())


def test_negative_control_a_connection_without_a_receiver_is_read_by_the_loop() -> None:
    uvloop.run(_negative_control_a_connection_without_a_receiver_is_read_by_the_loop())


def test_a_malformed_frame_received_directly_ends_the_connection() -> None:
    uvloop.run(_a_malformed_frame_received_directly_ends_the_connection())


def test_eof_received_directly_ends_the_loop() -> None:
    uvloop.run(_eof_received_directly_ends_the_loop())
