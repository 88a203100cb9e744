"""A tiny asyncio broker for tests: our codec and state machine behind a loopback socket.

Test code only (src/ stays sans-IO). It answers the official client's handshake, partitioned
metadata, lookup ("connect here"), producer, send, subscribe, flow and close commands, keeps
every received SEND, and delivers them back as MESSAGE frames when a consumer asks (FLOW).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from dataclasses import dataclass, field

from magnetar.protocol.pulsar import (
    AckReceived,
    ClientConnected,
    CommandReceived,
    ConnectionTerminated,
    CorruptSend,
    FlowReceived,
    SendCommand,
    SendReceived,
    ServerConfig,
    ServerConnection,
    pb,
)

T = pb.BaseCommand
LEDGER_ID = 7


@dataclass
class StoredEntry:
    producer_id: int
    send: SendCommand
    metadata: pb.MessageMetadata
    payload: bytes
    headers_and_payload: bytes
    checksum: int | None
    entry_id: int


@dataclass
class FakeBroker:
    entries: list[StoredEntry] = field(default_factory=list)
    received_types: list[str] = field(default_factory=list)
    connects: list[ClientConnected] = field(default_factory=list)
    acks: list[pb.CommandAck] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    port: int = 0
    _server: asyncio.base_events.Server | None = None
    _tasks: set[asyncio.Task[None]] = field(default_factory=set)
    ack_event: asyncio.Event = field(default_factory=asyncio.Event)
    config: ServerConfig = field(default_factory=ServerConfig)
    pings_sent: int = 0
    pinged_thrice: threading.Event = field(default_factory=threading.Event)  # waited on by client threads

    @property
    def url(self) -> str:
        return f"pulsar://127.0.0.1:{self.port}"

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            with contextlib.suppress(BaseException):
                await task

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        loop = asyncio.get_running_loop()
        conn = ServerConnection(now_ms=int(loop.time() * 1000), config=self.config)
        consumers: dict[int, int] = {}  # consumer_id -> next entry index to deliver
        permits: dict[int, int] = {}
        try:
            while True:
                deadline_ms = conn.next_deadline_ms()
                now_ms = int(loop.time() * 1000)
                timeout_s = None if deadline_ms is None else max(0.0, (deadline_ms - now_ms) / 1000)
                try:
                    data = await asyncio.wait_for(reader.read(64 * 1024), timeout=timeout_s)
                except TimeoutError:
                    for event in conn.tick(int(loop.time() * 1000)):
                        self._on_event(conn, event, consumers, permits)
                    if conn.outbound_bytes:
                        self.pings_sent += 1
                        if self.pings_sent >= 3:
                            self.pinged_thrice.set()
                    writer.writelines(conn.data_to_send())
                    await writer.drain()
                    continue
                if not data:
                    return
                for event in conn.receive_data(data, int(loop.time() * 1000)):
                    self._on_event(conn, event, consumers, permits)
                self._dispatch(conn, consumers, permits)
                writer.writelines(conn.data_to_send())
                await writer.drain()
        except asyncio.CancelledError:
            return  # stop(): end quietly so asyncio does not log the cancelled handler
        except Exception as error:  # recorded for the test to assert on
            self.errors.append(repr(error))
        finally:
            self._tasks.discard(task)
            writer.close()

    def _on_event(self, conn: ServerConnection, event: object, consumers: dict[int, int],
                  permits: dict[int, int]) -> None:
        if isinstance(event, ClientConnected):
            self.connects.append(event)
        elif isinstance(event, SendReceived):
            self.received_types.append("SEND")
            entry = StoredEntry(
                producer_id=event.command.producer_id, send=event.command, metadata=event.message.metadata,
                payload=bytes(event.message.payload), headers_and_payload=bytes(event.message.headers_and_payload),
                checksum=event.message.checksum, entry_id=len(self.entries),
            )
            self.entries.append(entry)
            conn.send_receipt(event.command.producer_id, event.command.sequence_id, LEDGER_ID, entry.entry_id)
        elif isinstance(event, CorruptSend):
            conn.send_send_error(event.command.producer_id, event.command.sequence_id, pb.ChecksumError, "bad crc")
        elif isinstance(event, ConnectionTerminated):
            self.errors.append(event.reason)
        elif isinstance(event, FlowReceived):  # FLOW and ACK arrive as events of their own
            self.received_types.append("FLOW")
            flow = pb.CommandFlow(consumer_id=event.consumer_id, messagePermits=event.permits)
            self._on_request(conn, flow, consumers, permits)
        elif isinstance(event, AckReceived):
            self.received_types.append("ACK")
            self._on_request(conn, event.decoded(), consumers, permits)
        elif isinstance(event, CommandReceived):
            self.received_types.append(T.Type.Name(event.type))
            self._on_request(conn, event.body, consumers, permits)

    def _on_request(self, conn: ServerConnection, body: object, consumers: dict[int, int],
                    permits: dict[int, int]) -> None:
        if isinstance(body, pb.CommandPartitionedTopicMetadata):
            conn.send_partitioned_metadata(body.request_id, 0)
        elif isinstance(body, pb.CommandLookupTopic):
            conn.send_lookup_connect(body.request_id, self.url)
        elif isinstance(body, pb.CommandProducer):
            conn.send_producer_success(body.request_id, f"magnetar-test-{body.producer_id}")
        elif isinstance(body, pb.CommandSubscribe):
            consumers[body.consumer_id] = 0
            permits[body.consumer_id] = 0
            conn.send_success(body.request_id)
        elif isinstance(body, pb.CommandFlow):
            permits[body.consumer_id] = permits.get(body.consumer_id, 0) + body.messagePermits
        elif isinstance(body, pb.CommandAck):
            self.acks.append(body)
            self.ack_event.set()
        elif isinstance(body, pb.CommandCloseProducer | pb.CommandCloseConsumer | pb.CommandUnsubscribe):
            if isinstance(body, pb.CommandCloseConsumer):
                consumers.pop(body.consumer_id, None)
            conn.send_success(body.request_id)
        else:
            self.errors.append(f"unhandled request {type(body).__name__}")

    def _dispatch(self, conn: ServerConnection, consumers: dict[int, int], permits: dict[int, int]) -> None:
        for consumer_id, next_index in list(consumers.items()):
            index = next_index
            while index < len(self.entries) and permits[consumer_id] > 0:
                entry = self.entries[index]
                conn.send_message(consumer_id, LEDGER_ID, entry.entry_id, entry.headers_and_payload, partition=-1)
                count = entry.metadata.num_messages_in_batch if entry.metadata.HasField("num_messages_in_batch") else 1
                permits[consumer_id] -= count
                index += 1
            consumers[consumer_id] = index
