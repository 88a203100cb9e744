"""Broker restart with the official client attached, and bad input from raw sockets.

Restart: the broker is closed and started again on the same port over the same storage, as a
restart over the same bookies; the client reconnects by itself. Nothing acknowledged is lost.
Bad input: each misbehaving raw client gets an error or a closed connection, and a well-behaved
client on the same broker keeps working.
"""

from __future__ import annotations

import socket
import struct
import threading
import time
from typing import Any

import pulsar
import pytest

from magnetar.broker import BrokerConfig
from magnetar.protocol.pulsar import encode_command, pb
from tests.compat.harness import BrokerThread

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

CONNECT = encode_command(pb.BaseCommand(type=pb.BaseCommand.CONNECT, connect=pb.CommandConnect(
    client_version="raw-test", protocol_version=20)))


def _raw(broker: BrokerThread) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", broker.port), timeout=5)
    sock.sendall(CONNECT)
    _read_frame(sock)
    return sock


def _read_frame(sock: socket.socket) -> bytes:
    head = _read_exact(sock, 4)
    return _read_exact(sock, struct.unpack(">I", head)[0])


def _read_exact(sock: socket.socket, n: int) -> bytes:
    out = b""
    while len(out) < n:
        chunk = sock.recv(n - len(out))
        if not chunk:
            raise ConnectionError("closed")
        out += chunk
    return out


def _closed_by_peer(sock: socket.socket) -> bool:
    sock.settimeout(5)
    try:
        while sock.recv(65536):
            pass
    except (ConnectionError, TimeoutError, OSError):
        return True
    return True


def _still_serves(client: Any, topic: str) -> None:
    producer = client.create_producer(topic)
    consumer = client.subscribe(topic, "ok", initial_position=pulsar.InitialPosition.Earliest)
    producer.send(b"still-ok")
    assert consumer.receive(timeout_millis=5000).data() == b"still-ok"


def test_producer_and_consumer_survive_broker_restart(broker: BrokerThread, client: Any) -> None:
    topic = "restart"
    consumer = client.subscribe(topic, "s", initial_position=pulsar.InitialPosition.Earliest)
    producer = client.create_producer(topic, send_timeout_millis=30_000)
    acked: list[bytes] = []
    lock = threading.Lock()

    def on_sent(result: Any, _msg_id: Any, data: bytes) -> None:
        if result == pulsar.Result.Ok:
            with lock:
                acked.append(data)

    for i in range(50):
        data = f"a{i}".encode()
        producer.send_async(data, lambda r, m, d=data: on_sent(r, m, d))
    producer.flush()
    received_before = [consumer.receive(timeout_millis=5000).data() for _ in range(10)]  # not acked
    broker.restart()
    for i in range(50):
        data = f"b{i}".encode()
        producer.send_async(data, lambda r, m, d=data: on_sent(r, m, d))
    producer.flush()
    seen: set[bytes] = set()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        with lock:
            if set(acked) <= seen:
                break
        try:
            msg = consumer.receive(timeout_millis=1000)
        except pulsar.Timeout:
            continue
        seen.add(msg.data())
        consumer.acknowledge(msg)
    assert len(acked) == 100
    assert set(acked) <= seen
    assert set(received_before) <= seen


def test_malformed_frame_closes_only_that_connection(broker: BrokerThread, client: Any) -> None:
    sock = _raw(broker)
    sock.sendall(struct.pack(">II", 8, 4) + b"\xff\xff\xff\xff")  # command bytes that are not protobuf
    assert _closed_by_peer(sock)
    _still_serves(client, "after-malformed")


def test_oversized_frame_closes_only_that_connection(broker: BrokerThread, client: Any) -> None:
    sock = _raw(broker)
    sock.sendall(struct.pack(">I", 64 * 1024 * 1024))
    assert _closed_by_peer(sock)
    _still_serves(client, "after-oversized")


def test_unknown_command_is_answered_or_closed(broker: BrokerThread, client: Any) -> None:
    sock = _raw(broker)
    body = pb.BaseCommand(type=pb.BaseCommand.GET_SCHEMA, getSchema=pb.CommandGetSchema(request_id=7, topic="t"))
    sock.sendall(encode_command(body))
    frame = _read_frame(sock)
    assert frame  # GET_SCHEMA_RESPONSE with an error code
    sock.sendall(struct.pack(">II", 8, 4) + bytes([0x08, 0x7F, 0x00, 0x00]))  # type 127: unknown
    assert _closed_by_peer(sock)
    _still_serves(client, "after-unknown")


def test_wrong_checksum_gets_a_checksum_error(broker: BrokerThread, client: Any) -> None:
    producer = client.create_producer("checksum")  # creates the topic
    producer.close()
    sock = _raw(broker)
    sock.sendall(encode_command(pb.BaseCommand(type=pb.BaseCommand.PRODUCER, producer=pb.CommandProducer(
        topic="persistent://public/default/checksum", producer_id=1, request_id=1))))
    reply = pb.BaseCommand()
    frame = _read_frame(sock)
    reply.ParseFromString(frame[4:])
    assert reply.type == pb.BaseCommand.PRODUCER_SUCCESS
    metadata = pb.MessageMetadata(producer_name=reply.producer_success.producer_name, sequence_id=0,
                                  publish_time=1)
    meta = metadata.SerializeToString()
    body = struct.pack(">I", len(meta)) + meta + b"payload"
    cmd = pb.BaseCommand(type=pb.BaseCommand.SEND, send=pb.CommandSend(producer_id=1, sequence_id=0)).SerializeToString()
    frame_out = struct.pack(">I", len(cmd)) + cmd + struct.pack(">HI", 0x0E01, 12345) + body
    sock.sendall(struct.pack(">I", len(frame_out)) + frame_out)
    reply = pb.BaseCommand()
    frame = _read_frame(sock)
    reply.ParseFromString(frame[4 : 4 + struct.unpack(">I", frame[:4])[0]])
    assert reply.type == pb.BaseCommand.SEND_ERROR
    assert reply.send_error.error == pb.ChecksumError
    sock.close()


def _never_reads_peak(broker: BrokerThread, client: Any, topic: str) -> tuple[int, int]:
    """Fill a topic with 20 MiB, let a raw client subscribe with 1000 permits and never read.

    Returns (peak bytes the broker queued for that connection, the configured bound). Watches the
    server's per-connection queue until it crosses the bound plus slack (unbounded case) or has
    reached the bound and held for half a second (bounded case); at most 10 s.
    """
    producer = client.create_producer(topic, batching_enabled=False)
    payload = b"z" * (512 * 1024)
    for _ in range(40):  # 20 MiB in the topic
        producer.send_async(payload, None)
    producer.flush()
    sock = _raw(broker)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
    sub = pb.BaseCommand(type=pb.BaseCommand.SUBSCRIBE, subscribe=pb.CommandSubscribe(
        topic=f"persistent://public/default/{topic}", subscription="lazy", subType=pb.CommandSubscribe.Exclusive,
        consumer_id=1, request_id=1, initialPosition=pb.CommandSubscribe.Earliest))
    sock.sendall(encode_command(sub))
    sock.sendall(encode_command(pb.BaseCommand(
        type=pb.BaseCommand.FLOW, flow=pb.CommandFlow(consumer_id=1, messagePermits=1000))))
    limit = broker.config.connection_outbound_bytes_high

    async def outbound() -> list[int]:
        assert broker.server is not None
        return broker.server.connection_outbound_bytes()

    peak = 0
    reached_at: float | None = None
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        peak = max([peak, *broker.call(outbound())])
        if peak > limit + NEVER_READS_SLACK_BYTES:
            break
        if reached_at is None and peak >= limit:
            reached_at = time.monotonic()
        if reached_at is not None and time.monotonic() - reached_at > 0.5:
            break
        time.sleep(0.02)
    sock.close()
    return peak, limit


# The bound is a high-water mark: the frame that crosses it is still queued (one 512 KiB message
# plus framing), and the socket buffer's share is counted until drain returns.
NEVER_READS_SLACK_BYTES = 2 * 512 * 1024 + 64 * 1024


def test_a_client_that_never_reads_keeps_broker_memory_bounded(broker: BrokerThread, client: Any) -> None:
    peak, limit = _never_reads_peak(broker, client, "never-reads")
    assert limit <= peak <= limit + NEVER_READS_SLACK_BYTES
    _still_serves(client, "after-never-reads")


def test_never_reads_negative_control_without_the_bound_the_queue_grows() -> None:
    unbounded = BrokerThread(BrokerConfig(advertised_port=0, connection_outbound_bound_enabled=False)).start()
    client = pulsar.Client(unbounded.url, operation_timeout_seconds=10,
                           logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    try:
        peak, limit = _never_reads_peak(unbounded, client, "never-reads-unbounded")
        assert peak > limit + NEVER_READS_SLACK_BYTES  # the check above would have caught it
    finally:
        client.close()
        unbounded.stop()
