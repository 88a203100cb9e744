"""Compatibility with the official ``pulsar-client`` (C++ 4.2.0 inside) through one fake broker.

Our producer's batches and compressed payloads are read by the official consumer, and the
official producer's batches are read by our consumer: the same stored bytes, decoded by both
implementations, give the same messages.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pulsar
import pytest

from magnetar.cli.produce import connect
from magnetar.client import Compression, InitialPosition, MessageId
from magnetar.client.consumer import Consumer
from tests.client.fake_broker import FakeBroker
from tests.client.tcp_broker import ThreadedBroker

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


@pytest.fixture
def broker() -> Iterator[FakeBroker]:
    threaded = ThreadedBroker()
    try:
        yield threaded.start()
    finally:
        threaded.stop()


def _official(url: str) -> Any:
    return pulsar.Client(url, operation_timeout_seconds=10, connection_timeout_ms=3000,
                         logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))


@pytest.mark.parametrize("codec", [Compression.NONE, Compression.LZ4, Compression.ZSTD, Compression.ZLIB,
                                   Compression.SNAPPY])
def test_official_consumer_reads_our_batches(broker: FakeBroker, codec: Compression) -> None:
    async def produce() -> list[MessageId]:
        client = connect(broker.url)
        try:
            producer = await client.create_producer("compat", batching_enabled=True, batch_max_messages=3,
                                                    batch_max_delay_ms=60_000, compression=codec)
            futures = [await producer.send_async(f"m{i}".encode() * 50, key=f"k{i}", properties={"i": str(i)},
                                                 event_time_ms=100 + i) for i in range(6)]
            ids = list(await asyncio.gather(*futures))
            single = await client.create_producer("compat", compression=codec)
            ids.append(await single.send(b"single", properties={"s": "1"}))
            return ids
        finally:
            await client.close()

    ids = asyncio.run(asyncio.wait_for(produce(), 30))
    assert ids[:6] == [MessageId(7, i // 3, i % 3, -1, 3) for i in range(6)]
    client = _official(broker.url)
    try:
        consumer = client.subscribe("compat", "sub", initial_position=pulsar.InitialPosition.Earliest)
        got = [consumer.receive(timeout_millis=10_000) for _ in range(7)]
        for message in got:
            consumer.acknowledge(message)
    finally:
        client.close()
    assert [m.data() for m in got] == [f"m{i}".encode() * 50 for i in range(6)] + [b"single"]
    assert [m.partition_key() for m in got[:6]] == [f"k{i}" for i in range(6)]
    assert [m.properties() for m in got] == [{"i": str(i)} for i in range(6)] + [{"s": "1"}]
    assert [m.event_timestamp() for m in got[:6]] == [100 + i for i in range(6)]
    assert [(m.message_id().entry_id(), m.message_id().batch_index()) for m in got[:6]] == [
        (i // 3, i % 3) for i in range(6)]


def test_our_consumer_reads_official_batches(broker: FakeBroker) -> None:
    client = _official(broker.url)
    try:
        producer = client.create_producer("compat2", batching_enabled=True, batching_max_messages=4,
                                          batching_max_publish_delay_ms=60_000,
                                          compression_type=pulsar.CompressionType.LZ4)
        results: list[Any] = []
        for i in range(4):
            producer.send_async(f"o{i}".encode(), lambda res, mid: results.append(res), properties={"i": str(i)},
                                partition_key="pk")
        producer.flush()
        # Batching is on with a 60 s delay: flush instead of waiting for the batch timer.
        producer.send_async(b"plain", lambda res, mid: results.append(res), event_timestamp=77)
        producer.flush()
        producer.close()
    finally:
        client.close()

    async def consume() -> list[Any]:
        ours = connect(broker.url)
        try:
            consumer = await ours.subscribe("compat2", "sub", initial_position=InitialPosition.EARLIEST)
            assert isinstance(consumer, Consumer)
            return [await consumer.receive(timeout_ms=10_000) for _ in range(5)]
        finally:
            await ours.close()

    got = asyncio.run(asyncio.wait_for(consume(), 30))
    assert [m.payload for m in got] == [b"o0", b"o1", b"o2", b"o3", b"plain"]
    assert [m.properties for m in got[:4]] == [{"i": str(i)} for i in range(4)]
    assert all(m.key == "pk" for m in got[:4])
    assert [m.message_id for m in got[:4]] == [MessageId(7, 0, i, -1, 4) for i in range(4)]
    assert got[4].event_time_ms == 77 and got[4].message_id == MessageId(7, 1, 0, -1, 1)  # a batch of one
    assert [m.sequence_id for m in got] == [0, 1, 2, 3, 4]
