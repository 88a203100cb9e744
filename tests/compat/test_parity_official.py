"""Pulsar parity with the official client (issue 18): the client's ERROR log, producer access
modes, missing namespaces, the message size limit. Each against a real broker (``BrokerThread``)."""

from __future__ import annotations

import socket
import struct
import threading
import time
from collections.abc import Iterator
from typing import Any

import pulsar
import pytest

from magnetar import faults
from magnetar.base.errors import InvalidArgumentError
from magnetar.broker import BrokerConfig
from magnetar.broker.topic import Topic
from magnetar.catalog.listeners import parse_listeners
from magnetar.catalog.resources import TenantInfo
from magnetar.cli.perf import PerfSettings, run_perf
from magnetar.metadata.memory import MemoryMetadataServer
from magnetar.protocol.pulsar import encode_command, encode_payload_command, pb
from magnetar.runtime.clock import SystemClock
from tests.compat.client_log import ClientLog
from tests.compat.harness import BrokerThread

TOPIC_PREFIX = "persistent://public/default/"
WAIT_S = 10.0


def wait_until(predicate: Any, what: str, timeout_s: float = WAIT_S) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.01)  # polling the broker thread under a deadline
    raise AssertionError(f"timed out waiting for {what}")


def loaded_topic(broker: BrokerThread, name: str) -> Topic:
    topic = broker.server.service.topics.get(next(t for t in broker.server.service.topics
                                                  if str(t) == TOPIC_PREFIX + name))
    assert topic is not None
    return topic


T = pb.BaseCommand


class RawConnection:
    """A bare Pulsar connection for what the official client does not expose (a LOOKUP alone)."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=WAIT_S)
        self.send(T(type=T.CONNECT, connect=pb.CommandConnect(client_version="raw", protocol_version=20)))
        self.connected = self.read()
        assert self.connected.type == T.CONNECTED

    def send(self, command: pb.BaseCommand) -> None:
        self.sock.sendall(encode_command(command))

    def _exact(self, size: int) -> bytes:
        out = b""
        while len(out) < size:
            chunk = self.sock.recv(size - len(out))
            assert chunk, "connection closed"
            out += chunk
        return out

    def read(self) -> pb.BaseCommand:
        frame = self._exact(struct.unpack(">I", self._exact(4))[0])
        size = struct.unpack(">I", frame[:4])[0]
        return pb.BaseCommand.FromString(frame[4:4 + size])

    def lookup(self, topic: str, listener: str = "") -> pb.CommandLookupTopicResponse:
        self.send(T(type=T.LOOKUP, lookupTopic=pb.CommandLookupTopic(topic=topic, request_id=1,
                                                                      advertised_listener_name=listener)))
        reply = self.read()
        assert reply.type == T.LOOKUP_RESPONSE
        return reply.lookupTopicResponse

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def metadata_broker() -> Iterator[BrokerThread]:
    """A broker with a metadata store (namespaces exist or not), bootstrapped like a standalone."""
    running = BrokerThread()
    try:
        running.metadata = running.call(MemoryMetadataServer(SystemClock()).connect())
        running.start()
        yield running
    finally:
        running.stop()


# --- the client's ERROR log ---------------------------------------------------------------------

def test_negative_control_a_receipt_for_an_unknown_producer_is_caught(broker: BrokerThread, client: Any,
                                                                        client_log: ClientLog) -> None:
    """What the bench showed: a SEND_RECEIPT for a producer id the client does not have. Injected
    here on the broker's live connection; the log check must report it."""
    producer = client.create_producer("control")
    producer.send(b"x")

    async def stray_receipt() -> None:
        for loop in broker.server._loops:
            loop.session.connection.send_receipt(99, 0, 1, 1)
            loop._wake_writer()

    broker.call(stray_receipt())
    wait_until(lambda: client_log.unexpected(), "the client's ERROR line")
    assert any("invalid producer Id in SendReceipt: 99" in line for line in client_log.unexpected())
    client_log.forget()  # caught: the fixture's own check is what the other tests rely on


def test_closing_a_producer_after_its_sends_were_answered_logs_nothing(client: Any) -> None:
    """Batched sends, flushed, then closed: every receipt reaches a producer the client has."""
    producer = client.create_producer("batched-close", batching_enabled=True, batching_max_messages=50,
                                      batching_max_publish_delay_ms=5)
    done = threading.Semaphore(0)
    for i in range(2000):
        producer.send_async(b"m%d" % i, lambda result, _id: done.release())
    producer.flush()
    for _ in range(2000):
        assert done.acquire(timeout=WAIT_S)
    producer.close()


def test_perf_closes_its_client_with_no_send_in_flight() -> None:
    """The benchmark's errors: with the broker the bottleneck (receipts slowed down, reading paused
    at 50 unanswered SENDs) sends are in flight when the window ends and the client's
    CLOSE_PRODUCER waits behind them; ``magnetar perf`` waits for their receipts before it closes
    its client, so none reaches a producer the client dropped (the log check would see it)."""
    broker = BrokerThread(BrokerConfig(advertised_port=0, pending_sends_per_connection_max=50)).start()
    faults.arm("broker.after_persist_before_receipt", "delay", delay_ms=2)
    try:
        result = run_perf(PerfSettings(service_url=broker.url, topic="perf-drain", size=100, batching=False,
                                       duration_s=1, max_pending=300))
    finally:
        faults.disarm_all()
        broker.stop()
    assert result["publish"]["count"] > 0 and result["publish"]["pending_at_end"] == 0


def test_the_broker_answers_nothing_for_a_closed_producer(broker: BrokerThread, client: Any) -> None:
    """After CLOSE_PRODUCER the broker's producer is closed: a late append's receipt is dropped."""
    producer = client.create_producer("close-drops")
    producer.send(b"x")
    topic = loaded_topic(broker, "close-drops")
    (handle,) = topic.producers.values()
    producer.close()
    wait_until(lambda: not topic.producers, "the producer leaving the topic")
    assert handle.state.value == "closed"


# --- producer access modes ------------------------------------------------------------------------

@pytest.mark.client_errors(r"Failed to create producer: (ProducerFenced|ProducerBusy)")
def test_exclusive_producers_are_fenced_and_shared_ones_busy(client: Any) -> None:
    first = client.create_producer("excl", access_mode=pulsar.ProducerAccessMode.Exclusive)
    with pytest.raises(pulsar.ProducerFenced):  # a second exclusive one
        client.create_producer("excl", access_mode=pulsar.ProducerAccessMode.Exclusive)
    with pytest.raises(pulsar.ProducerBusy):  # a shared one after an exclusive one
        client.create_producer("excl")
    first.send(b"still mine")
    first.close()
    shared = client.create_producer("excl")
    with pytest.raises(pulsar.ProducerFenced):  # an exclusive one while shared ones exist
        client.create_producer("excl", access_mode=pulsar.ProducerAccessMode.Exclusive)
    shared.close()
    client.create_producer("excl", access_mode=pulsar.ProducerAccessMode.Exclusive).send(b"again")


def test_wait_for_exclusive_is_admitted_when_the_holder_leaves(broker: BrokerThread, client: Any) -> None:
    holder = client.create_producer("wait-excl", access_mode=pulsar.ProducerAccessMode.Exclusive)
    created: list[Any] = []
    waiter = threading.Thread(target=lambda: created.append(client.create_producer(
        "wait-excl", access_mode=pulsar.ProducerAccessMode.WaitForExclusive)), daemon=True)
    waiter.start()
    topic = loaded_topic(broker, "wait-excl")
    wait_until(lambda: len(topic._waiting) == 1, "the waiting producer")
    assert not created
    epoch = topic.topic_epoch
    holder.close()
    waiter.join(WAIT_S)
    assert created, "WaitForExclusive was not admitted"
    created[0].send(b"now mine")
    assert topic.topic_epoch == (epoch or 0) + 1


@pytest.mark.client_errors(r"ProducerFenced")
def test_exclusive_with_fencing_takes_the_topic(broker: BrokerThread, client: Any) -> None:
    shared = client.create_producer("fence-excl", send_timeout_millis=3000)
    shared.send(b"before")
    fencing = client.create_producer("fence-excl", access_mode=pulsar.ProducerAccessMode.ExclusiveWithFencing)
    fencing.send(b"mine")
    with pytest.raises((pulsar.ProducerFenced, pulsar.Timeout, pulsar.AlreadyClosed)):
        shared.send(b"after")
    consumer = client.subscribe("fence-excl", "s", initial_position=pulsar.InitialPosition.Earliest)
    got = [consumer.receive(timeout_millis=5000).data() for _ in range(2)]
    assert got == [b"before", b"mine"]


# --- topics outside an existing namespace ---------------------------------------------------------

@pytest.mark.client_errors(r"TopicNotFound")
def test_a_missing_tenant_or_namespace_is_topic_not_found(metadata_broker: BrokerThread) -> None:
    client = pulsar.Client(metadata_broker.url, operation_timeout_seconds=10)
    try:
        client.create_producer("in-default").send(b"public/default exists by default")
        for topic in ("persistent://no-tenant/ns/t", "persistent://public/no-namespace/t"):
            with pytest.raises(pulsar.TopicNotFound):
                client.create_producer(topic)
            with pytest.raises(pulsar.TopicNotFound):
                client.subscribe(topic, "s")
        raw = RawConnection(metadata_broker.port)
        try:
            answer = raw.lookup("persistent://public/no-namespace/t")
            assert answer.response == pb.CommandLookupTopicResponse.Failed
            assert answer.error == pb.TopicNotFound
        finally:
            raw.close()
        service = metadata_broker.server.service
        assert not any("no-namespace" in t or "no-tenant" in t for t in service.topics), "a topic was created"

        async def make_namespace() -> None:
            await service.resources.create_tenant("tenant-b", TenantInfo(allowed_clusters=["standalone"]))
            await service.resources.create_namespace("tenant-b/ns")

        metadata_broker.call(make_namespace())
        client.create_producer("persistent://tenant-b/ns/t").send(b"auto-created inside a namespace")
        assert "persistent://tenant-b/ns/t" in metadata_broker.call(service.topics_of_namespace("tenant-b/ns"))
    finally:
        client.close()


# --- maxMessageSize -------------------------------------------------------------------------------

SMALL_MAX_BYTES = 64 * 1024


@pytest.fixture
def small_max_broker() -> Iterator[BrokerThread]:
    running = BrokerThread(BrokerConfig(advertised_port=0, max_message_size_bytes=SMALL_MAX_BYTES)).start()
    try:
        yield running
    finally:
        running.stop()


def test_max_message_size_is_reported_and_enforced(small_max_broker: BrokerThread) -> None:
    raw = RawConnection(small_max_broker.port)
    try:
        assert raw.connected.connected.max_message_size == SMALL_MAX_BYTES
        raw.send(T(type=T.PRODUCER, producer=pb.CommandProducer(topic=TOPIC_PREFIX + "big", producer_id=1,
                                                                 request_id=1)))
        assert raw.read().type == T.PRODUCER_SUCCESS
        for sequence_id, size in ((0, SMALL_MAX_BYTES - 1024), (1, SMALL_MAX_BYTES + 20 * 1024)):
            metadata = pb.MessageMetadata(producer_name="raw", sequence_id=sequence_id, publish_time=1)
            raw.sock.sendall(encode_payload_command(
                T(type=T.SEND, send=pb.CommandSend(producer_id=1, sequence_id=sequence_id)), metadata,
                b"x" * size))
        assert raw.read().type == T.SEND_RECEIPT  # within the limit
        with pytest.raises((AssertionError, ConnectionError)):  # a frame beyond it and 10 KiB: closed
            raw.read()
    finally:
        raw.close()
    client = pulsar.Client(small_max_broker.url, operation_timeout_seconds=10)
    try:
        producer = client.create_producer("big-official", batching_enabled=False)
        producer.send(b"y" * (SMALL_MAX_BYTES - 1024))
        with pytest.raises(pulsar.MessageTooBig):  # the client knows the limit from CONNECTED
            producer.send(b"y" * (SMALL_MAX_BYTES + 1))
    finally:
        client.close()


def test_max_message_size_defaults_to_pulsars() -> None:
    assert BrokerConfig().max_message_size_bytes == 5 * 1024 * 1024
    with pytest.raises(InvalidArgumentError):
        BrokerConfig(max_message_size_bytes=6 * 1024 * 1024)


# --- advertised listeners -------------------------------------------------------------------------

@pytest.fixture
def listener_broker() -> Iterator[BrokerThread]:
    """Two listeners on one port: ``internal`` as 127.0.0.1, ``external`` as localhost."""
    running = BrokerThread().start()
    try:
        port = running.port
        running.config = BrokerConfig(advertised_port=port, internal_listener_name="internal",
                                      advertised_listeners=f"internal:pulsar://127.0.0.1:{port},"
                                                           f"external:pulsar://localhost:{port}")
        running.restart()  # same port, now with the listeners
        yield running
    finally:
        running.stop()


def test_lookup_answers_the_listener_the_client_names(listener_broker: BrokerThread) -> None:
    port = listener_broker.port
    raw = RawConnection(port)
    try:
        external = raw.lookup(TOPIC_PREFIX + "l", "external")
        assert external.response == pb.CommandLookupTopicResponse.Connect
        assert external.brokerServiceUrl == f"pulsar://localhost:{port}"
        assert raw.lookup(TOPIC_PREFIX + "l", "").brokerServiceUrl == f"pulsar://127.0.0.1:{port}"
        assert raw.lookup(TOPIC_PREFIX + "l", "internal").brokerServiceUrl == f"pulsar://127.0.0.1:{port}"
        missing = raw.lookup(TOPIC_PREFIX + "l", "nope")
        assert missing.response == pb.CommandLookupTopicResponse.Failed and missing.error == pb.ServiceNotReady
        assert "nope" in missing.message
    finally:
        raw.close()
    client = pulsar.Client(f"pulsar://127.0.0.1:{port}", listener_name="external", operation_timeout_seconds=10)
    try:
        consumer = client.subscribe("listener-topic", "s")
        client.create_producer("listener-topic").send(b"via external")
        assert consumer.receive(timeout_millis=5000).data() == b"via external"
    finally:
        client.close()


@pytest.mark.client_errors(r"does not have external listener")
def test_a_listener_the_broker_does_not_have_is_an_error(broker: BrokerThread) -> None:
    raw = RawConnection(broker.port)
    try:
        assert raw.lookup(TOPIC_PREFIX + "l", "internal").brokerServiceUrl == broker.url  # the implicit one
        assert raw.lookup(TOPIC_PREFIX + "l", "external").error == pb.ServiceNotReady
    finally:
        raw.close()
    client = pulsar.Client(broker.url, listener_name="external", operation_timeout_seconds=2)
    try:
        with pytest.raises(pulsar.PulsarException):  # never the default URL
            client.create_producer("no-listener")
    finally:
        client.close()


@pytest.mark.parametrize("listeners, internal", [
    ("external", ""), ("x:http://h:1", ""), ("a:pulsar://h:1,a:pulsar://h:2", ""), ("a:pulsar://h:1", "b"),
])
def test_malformed_listener_configs_are_refused(listeners: str, internal: str) -> None:
    with pytest.raises(InvalidArgumentError):
        BrokerConfig(advertised_listeners=listeners, internal_listener_name=internal)


def test_a_listener_may_carry_a_plain_and_a_tls_url() -> None:
    parsed = parse_listeners("ext:pulsar://h:1, ext:pulsar+ssl://h:2,int:pulsar://i:3")
    assert (parsed["ext"].url, parsed["ext"].url_tls, parsed["int"].url) == ("pulsar://h:1", "pulsar+ssl://h:2",
                                                                              "pulsar://i:3")
