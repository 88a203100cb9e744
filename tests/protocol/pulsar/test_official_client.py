"""Our codec against the REAL official client (pulsar-client 3.13, C++ 4.2.0 inside).

A loopback asyncio server built from ``magnetar.protocol.pulsar`` answers the client. If any of
our field numbers, required labels or framing details were wrong, the client would fail to
connect, time out, or the decoded messages would differ from what it sent.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import Any, TypeVar

import pulsar
import pytest

from magnetar.protocol.pulsar import ServerConfig, decode_entry, pb
from tests.protocol.pulsar.fake_broker import LEDGER_ID, FakeBroker

pytestmark = [pytest.mark.integration, pytest.mark.timeout(90)]

R = TypeVar("R")
TOPIC = "persistent://public/default/magnetar-codec"


def _client(url: str) -> Any:
    return pulsar.Client(
        url, operation_timeout_seconds=10, connection_timeout_ms=3000,
        logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error),
    )


async def _in_thread(fn: Callable[[], R]) -> R:
    return await asyncio.wait_for(asyncio.get_running_loop().run_in_executor(None, fn), timeout=30)


def _produce(url: str) -> dict[str, list[Any]]:
    """Send plain, keyed, property-carrying, batched and compressed messages; return the ids."""
    client = _client(url)
    ids: dict[str, list[Any]] = {}
    try:
        plain = client.create_producer(TOPIC, send_timeout_millis=10_000)
        ids["plain"] = [
            plain.send(b"hello-0", properties={"k": "v0"}, partition_key="key0", event_timestamp=1234),
            plain.send(b"hello-1"),
        ]
        plain.close()
        for codec_name, codec in [("LZ4", pulsar.CompressionType.LZ4), ("ZLIB", pulsar.CompressionType.ZLib),
                                  ("ZSTD", pulsar.CompressionType.ZSTD), ("SNAPPY", pulsar.CompressionType.SNAPPY)]:
            producer = client.create_producer(
                TOPIC, compression_type=codec, send_timeout_millis=10_000, batching_enabled=True, batching_max_messages=4,
                batching_max_publish_delay_ms=60_000,
            )
            results: list[Any] = []
            for i in range(4):
                producer.send_async(
                    (f"{codec_name}-{i}-" + "x" * 200).encode(),
                    lambda res, msg_id, results=results: results.append((res, msg_id)),
                    properties={"i": str(i)}, partition_key=f"pk{i}",
                )
            producer.flush()
            ids[codec_name] = results
            producer.close()
        single_lz4 = client.create_producer(TOPIC, compression_type=pulsar.CompressionType.LZ4,
                                            send_timeout_millis=10_000)
        ids["single-lz4"] = [single_lz4.send(b"z" * 5000, properties={"big": "yes"})]
        single_lz4.close()
    finally:
        client.close()
    return ids


@pytest.fixture
def broker() -> Any:
    return FakeBroker()


async def _with_broker(broker: FakeBroker, body: Callable[[], Any]) -> Any:
    await broker.start()
    try:
        return await body()
    finally:
        await broker.stop()


def test_official_producer_messages_decode_to_what_was_sent(broker: FakeBroker) -> None:
    async def body() -> dict[str, list[Any]]:
        return await _in_thread(lambda: _produce(broker.url))

    ids = asyncio.run(_with_broker(broker, body))
    assert broker.errors == []
    connect = broker.connects[0]
    assert connect.client_version == "Pulsar-CPP-v4.2.0"
    assert connect.client_protocol_version == 20 and connect.protocol_version == 20
    assert connect.features.supports_auth_refresh and connect.features.supports_broker_entry_metadata
    assert connect.auth_method_name == "none" and connect.auth_data is None
    assert "PARTITIONED_METADATA" in broker.received_types and "LOOKUP" in broker.received_types

    entries = broker.entries
    # Negotiated v20 means the client sends the 0x0e01 checksum block.
    assert all(e.checksum is not None for e in entries)

    first, second = entries[0], entries[1]
    assert first.metadata.producer_name == "magnetar-test-0"
    assert first.metadata.sequence_id == 0 and second.metadata.sequence_id == 1
    assert [(kv.key, kv.value) for kv in first.metadata.properties] == [("k", "v0")]
    assert first.metadata.partition_key == "key0" and first.metadata.event_time == 1234
    assert not first.metadata.HasField("num_messages_in_batch")
    assert first.send.num_messages is None  # the official client leaves it unset for one message
    assert [m.payload for m in decode_entry(first.metadata, first.payload)] == [b"hello-0"]
    assert [m.payload for m in decode_entry(second.metadata, second.payload)] == [b"hello-1"]

    codecs = {"LZ4": pb.LZ4, "ZLIB": pb.ZLIB, "ZSTD": pb.ZSTD, "SNAPPY": pb.SNAPPY}
    batches = entries[2:6]
    for entry, (name, codec) in zip(batches, codecs.items(), strict=True):
        assert entry.metadata.compression == codec, name
        assert entry.metadata.num_messages_in_batch == 4 and entry.send.num_messages == 4
        assert entry.send.sequence_id == 0  # a batch's SEND carries the first message's sequence id
        messages = decode_entry(entry.metadata, entry.payload)
        assert [m.payload for m in messages] == [(f"{name}-{i}-" + "x" * 200).encode() for i in range(4)]
        assert [m.metadata.partition_key for m in messages if m.metadata] == [f"pk{i}" for i in range(4)]
        assert [[(kv.key, kv.value) for kv in m.metadata.properties] for m in messages if m.metadata] == [
            [("i", str(i))] for i in range(4)
        ]
        assert [m.metadata.sequence_id for m in messages if m.metadata] == [0, 1, 2, 3]
        assert len(entry.payload) < 4 * 200  # really compressed

    big = entries[6]
    assert big.metadata.compression == pb.LZ4 and big.metadata.uncompressed_size == 5000
    assert [m.payload for m in decode_entry(big.metadata, big.payload)] == [b"z" * 5000]

    # The client built its message ids from our receipts: (ledger, entry) and batch indexes.
    assert (ids["plain"][0].ledger_id(), ids["plain"][0].entry_id()) == (LEDGER_ID, 0)
    assert ids["plain"][1].entry_id() == 1
    lz4_ids = [msg_id for _res, msg_id in ids["LZ4"]]
    assert [(m.entry_id(), m.batch_index()) for m in lz4_ids] == [(2, i) for i in range(4)]
    assert all(res == pulsar.Result.Ok for res, _ in ids["ZSTD"])
    assert "CLOSE_PRODUCER" in broker.received_types


def _produce_then_consume(url: str) -> list[tuple[bytes, dict[str, str], str, int]]:
    client = _client(url)
    try:
        producer = client.create_producer(TOPIC, compression_type=pulsar.CompressionType.ZSTD,
                                          send_timeout_millis=10_000, batching_enabled=True, batching_max_messages=3,
                                          batching_max_publish_delay_ms=60_000)
        for i in range(3):
            producer.send_async(f"b{i}".encode(), lambda *_: None, properties={"n": str(i)}, partition_key=f"k{i}")
        producer.flush()
        producer.close()
        single = client.create_producer(TOPIC, send_timeout_millis=10_000)
        single.send(b"single", properties={"n": "s"}, partition_key="ks")
        single.close()
        consumer = client.subscribe(TOPIC, "sub", consumer_type=pulsar.ConsumerType.Shared)
        got = []
        for _ in range(4):
            msg = consumer.receive(timeout_millis=10_000)
            got.append((msg.data(), msg.properties(), msg.partition_key(), msg.message_id().batch_index()))
            consumer.acknowledge(msg)
        consumer.close()
        return got
    finally:
        client.close()


def test_official_consumer_accepts_our_message_frames(broker: FakeBroker) -> None:
    async def body() -> list[tuple[bytes, dict[str, str], str, int]]:
        result = await _in_thread(lambda: _produce_then_consume(broker.url))
        # Acks are grouped and flushed within ~100 ms; close() flushes them too.
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(broker.ack_event.wait(), timeout=5)
        return result

    got = asyncio.run(_with_broker(broker, body))
    assert broker.errors == []
    assert got == [
        (b"b0", {"n": "0"}, "k0", 0),
        (b"b1", {"n": "1"}, "k1", 1),
        (b"b2", {"n": "2"}, "k2", 2),
        (b"single", {"n": "s"}, "ks", -1),
    ]
    assert "SUBSCRIBE" in broker.received_types and "FLOW" in broker.received_types
    acked = [(m.ledgerId, m.entryId) for ack in broker.acks for m in ack.message_id]
    assert (LEDGER_ID, 0) in acked and (LEDGER_ID, 1) in acked
    assert all(not m.HasField("partition") for ack in broker.acks for m in ack.message_id)


def _produce_plain(url: str) -> list[Any]:
    client = _client(url)
    try:
        producer = client.create_producer(TOPIC, send_timeout_millis=10_000)
        ids = [producer.send(f"v5-{i}".encode(), properties={"i": str(i)}) for i in range(3)]
        producer.close()
        return ids
    finally:
        client.close()


def test_official_client_at_protocol_v5_sends_no_checksum() -> None:
    broker = FakeBroker(config=ServerConfig(protocol_version_max=5))

    async def body() -> list[Any]:
        return await _in_thread(lambda: _produce_plain(broker.url))

    ids = asyncio.run(_with_broker(broker, body))
    assert broker.errors == []
    assert broker.connects[0].protocol_version == 5
    assert [e.checksum for e in broker.entries] == [None, None, None]  # the 0x0e01 block is absent
    assert [bytes(e.payload) for e in broker.entries] == [b"v5-0", b"v5-1", b"v5-2"]
    assert [i.entry_id() for i in ids] == [0, 1, 2]


def test_official_client_answers_our_keep_alive_pings() -> None:
    # A short interval: the broker pings the idle client; without its PONG the broker would close
    # the connection after a second interval and the next send would need a new connection.
    broker = FakeBroker(config=ServerConfig(keep_alive_interval_ms=150))

    def scenario() -> list[Any]:
        client = _client(broker.url)
        try:
            producer = client.create_producer(TOPIC, send_timeout_millis=10_000)
            first = producer.send(b"before")
            assert broker.pinged_thrice.wait(timeout=20)
            second = producer.send(b"after")
            producer.close()
            return [first, second]
        finally:
            client.close()

    async def body() -> list[Any]:
        return await _in_thread(scenario)

    ids = asyncio.run(_with_broker(broker, body))
    assert broker.errors == []  # no "keep-alive timeout"
    assert len(broker.connects) == 1  # the same connection carried both sends
    assert [i.entry_id() for i in ids] == [0, 1]
