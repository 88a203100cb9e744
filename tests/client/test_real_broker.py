"""Our client against the real Magnetar broker (``magnetar standalone`` as a child process).

Bounded: each process is started with a readiness timeout and killed by PID in a fixture
``finally``; every client wait has a timeout.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from magnetar.cli.produce import connect
from magnetar.client import EARLIEST, ClientOptions, Compression, InitialPosition, SubscriptionType
from magnetar.client.consumer import Consumer
from magnetar.client.producer import Producer
from magnetar.runtime.processes import StandaloneProcess, free_port

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]
OPTIONS = ClientOptions(operation_timeout_ms=20_000, connection_timeout_ms=5_000)


@pytest.fixture
def launched() -> Iterator[list[StandaloneProcess]]:
    started: list[StandaloneProcess] = []
    try:
        yield started
    finally:
        for server in started:
            server.kill()


@pytest.fixture
def standalone(tmp_path: Path, launched: list[StandaloneProcess]) -> StandaloneProcess:
    server = StandaloneProcess(str(tmp_path / "data"), broker_port=free_port(), bookie_port=free_port())
    launched.append(server)
    return server


def _run(coro: Any) -> Any:
    return asyncio.run(asyncio.wait_for(coro, 120))


def test_produce_consume_batches_and_acks(standalone: StandaloneProcess) -> None:
    async def body() -> tuple[list[Any], list[Any]]:
        client = connect(standalone.broker_url, OPTIONS)
        try:
            consumer = await client.subscribe("ours", "sub", initial_position=InitialPosition.EARLIEST)
            plain = await client.create_producer("ours")
            ids = [await plain.send(f"p{i}".encode(), key="k", properties={"i": str(i)}) for i in range(3)]
            batched = await client.create_producer("ours", batching_enabled=True, batch_max_messages=5,
                                                   compression=Compression.LZ4)
            futures = [await batched.send_async(f"b{i}".encode()) for i in range(10)]
            ids += await asyncio.gather(*futures)
            got = []
            for _ in range(13):
                message = await consumer.receive(timeout_ms=20_000)
                consumer.acknowledge(message)
                got.append(message)
            await consumer.flush_acks()
            return ids, got
        finally:
            await client.close()

    ids, got = _run(body())
    assert [m.payload for m in got] == [f"p{i}".encode() for i in range(3)] + [f"b{i}".encode() for i in range(10)]
    assert [m.message_id for m in got] == ids
    assert got[1].key == "k" and got[1].properties == {"i": "1"}
    assert [m.message_id.batch_index for m in got[3:]] == [i % 5 for i in range(10)]


def test_reader_and_has_message_available(standalone: StandaloneProcess) -> None:
    async def body() -> tuple[list[bytes], list[bool]]:
        client = connect(standalone.broker_url, OPTIONS)
        try:
            producer = await client.create_producer("reader-topic")
            assert isinstance(producer, Producer)
            for i in range(4):
                await producer.send(str(i).encode())
            reader = await client.create_reader("reader-topic", EARLIEST)
            got = []
            while await reader.has_message_available():
                got.append((await reader.read_next(timeout_ms=20_000)).payload)
            flags = [await reader.has_message_available()]
            await producer.send(b"4")
            flags.append(await reader.has_message_available())
            return got, flags
        finally:
            await client.close()

    got, flags = _run(body())
    assert got == [b"0", b"1", b"2", b"3"]
    assert flags == [False, True]


def test_shared_consumer_nack_redelivery(standalone: StandaloneProcess) -> None:
    async def body() -> tuple[bytes, int]:
        client = connect(standalone.broker_url, OPTIONS)
        try:
            consumer = await client.subscribe("nack-topic", "sub", initial_position=InitialPosition.EARLIEST,
                                              subscription_type=SubscriptionType.SHARED,
                                              negative_ack_redelivery_delay_ms=200)
            assert isinstance(consumer, Consumer)
            producer = await client.create_producer("nack-topic")
            await producer.send(b"again")
            first = await consumer.receive(timeout_ms=20_000)
            consumer.negative_acknowledge(first)
            second = await consumer.receive(timeout_ms=20_000)
            consumer.acknowledge(second)
            return second.payload, second.redelivery_count
        finally:
            await client.close()

    assert _run(body()) == (b"again", 1)


def test_official_client_and_ours_interoperate_through_the_broker(standalone: StandaloneProcess) -> None:
    import pulsar

    async def produce() -> None:
        client = connect(standalone.broker_url, OPTIONS)
        try:
            producer = await client.create_producer("interop", batching_enabled=True, batch_max_messages=3,
                                                    compression=Compression.ZSTD)
            await asyncio.gather(*[await producer.send_async(f"ours-{i}".encode(), key="k") for i in range(6)])
        finally:
            await client.close()

    _run(produce())
    official = pulsar.Client(standalone.broker_url, operation_timeout_seconds=20,
                             logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    try:
        consumer = official.subscribe("interop", "sub", initial_position=pulsar.InitialPosition.Earliest)
        got = [consumer.receive(timeout_millis=20_000).data() for _ in range(6)]
        producer = official.create_producer("interop-back", batching_enabled=True, batching_max_messages=2,
                                            batching_max_publish_delay_ms=5)
        for i in range(4):
            producer.send(f"official-{i}".encode())
        producer.close()
    finally:
        official.close()
    assert got == [f"ours-{i}".encode() for i in range(6)]

    async def consume() -> list[bytes]:
        client = connect(standalone.broker_url, OPTIONS)
        try:
            consumer = await client.subscribe("interop-back", "sub", initial_position=InitialPosition.EARLIEST)
            return [(await consumer.receive(timeout_ms=20_000)).payload for _ in range(4)]
        finally:
            await client.close()

    assert _run(consume()) == [f"official-{i}".encode() for i in range(4)]


def test_producer_survives_a_broker_sigkill_and_nothing_receipted_is_lost(
        tmp_path: Path, launched: list[StandaloneProcess]) -> None:
    """Receipted messages are consumable after a SIGKILL + restart; pending sends are resent by
    the producer after it reconnects and complete (at-least-once: duplicates are allowed)."""
    broker_port, bookie_port = free_port(), free_port()
    first = StandaloneProcess(str(tmp_path / "data"), broker_port=broker_port, bookie_port=bookie_port)
    launched.append(first)

    async def body() -> tuple[set[bytes], set[bytes]]:
        client = connect(first.broker_url, OPTIONS)
        try:
            producer = await client.create_producer("kill-topic", send_timeout_ms=0)
            receipted = {f"before-{i}".encode() for i in range(20)}
            for payload in sorted(receipted):
                await producer.send(payload)
            first.kill()
            pending = [await producer.send_async(f"during-{i}".encode()) for i in range(5)]
            second = StandaloneProcess(str(tmp_path / "data"), broker_port=broker_port, bookie_port=bookie_port)
            launched.append(second)
            await asyncio.gather(*pending)
            receipted |= {f"during-{i}".encode() for i in range(5)}
            consumer = await client.subscribe("kill-topic", "sub", initial_position=InitialPosition.EARLIEST)
            seen: set[bytes] = set()
            while not receipted <= seen:
                message = await consumer.receive(timeout_ms=20_000)
                seen.add(message.payload)
                consumer.acknowledge(message)
            return receipted, seen
        finally:
            await client.close()

    receipted, seen = _run(body())
    assert receipted - seen == set()


def test_seek_against_the_real_broker(standalone: StandaloneProcess) -> None:
    async def body() -> tuple[bytes, bytes]:
        client = connect(standalone.broker_url, OPTIONS)
        try:
            producer = await client.create_producer("seek-topic")
            ids = [await producer.send(str(i).encode()) for i in range(5)]
            consumer = await client.subscribe("seek-topic", "sub", initial_position=InitialPosition.EARLIEST)
            assert isinstance(consumer, Consumer)
            for _ in range(5):
                consumer.acknowledge(await consumer.receive(timeout_ms=20_000))
            await consumer.flush_acks()
            await consumer.seek(ids[2])
            after_id = (await consumer.receive(timeout_ms=20_000)).payload
            await consumer.seek(EARLIEST)
            after_earliest = (await consumer.receive(timeout_ms=20_000)).payload
            return after_id, after_earliest
        finally:
            await client.close()

    assert _run(body()) == (b"3", b"0")
