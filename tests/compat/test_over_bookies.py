"""The official client against a broker whose topics live in managed ledgers on a real bookie.

Covers the durable path end to end: receipts only after the bookie fsynced, cursor state (acks with
holes) persisted to the managed cursor, and a broker restart over the same bookie and metadata
(the new broker fences and recovers the topic's ledgers) with nothing acknowledged lost.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pulsar
import pytest

from magnetar.base.types import Position, TopicName
from tests.compat.bookie_harness import BookieBrokerThread

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


@pytest.fixture
def durable_broker(tmp_path: Path) -> Iterator[BookieBrokerThread]:
    running = BookieBrokerThread(str(tmp_path))
    try:
        running.start()
        yield running
    finally:
        running.stop()


@pytest.fixture
def durable_client(durable_broker: BookieBrokerThread) -> Iterator[Any]:
    c = pulsar.Client(durable_broker.url, operation_timeout_seconds=15, connection_timeout_ms=3000,
                      logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    try:
        yield c
    finally:
        c.close()


def _wait_until_acked(broker: BookieBrokerThread, topic: str, subscription: str, positions: list[Position]) -> None:
    async def all_acked() -> bool:
        assert broker.server is not None
        loaded = broker.server.service.topics.get(str(TopicName.parse(topic)))
        cursor = loaded.subscriptions[subscription].cursor if loaded else None
        return cursor is not None and all(cursor.is_acked(p) for p in positions)

    deadline = time.monotonic() + 10
    while not broker.call(all_acked()):
        assert time.monotonic() < deadline, "the broker never received the client's acks"
        time.sleep(0.01)


def test_round_trip_and_holes_survive_broker_restart(durable_broker: BookieBrokerThread, durable_client: Any) -> None:
    topic = "durable"
    consumer = durable_client.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.Shared,
                                        initial_position=pulsar.InitialPosition.Earliest)
    producer = durable_client.create_producer(topic, batching_enabled=False)  # holes are per entry
    acked: list[bytes] = []
    lock = threading.Lock()

    def sent(result: Any, _id: Any, data: bytes) -> None:
        if result == pulsar.Result.Ok:
            with lock:
                acked.append(data)

    for i in range(30):
        data = f"m{i}".encode()
        producer.send_async(data, lambda r, m, d=data: sent(r, m, d))
    producer.flush()
    first = [consumer.receive(timeout_millis=5000) for _ in range(30)]
    acked_positions = []
    for msg in first:
        if int(msg.data()[1:]) % 3 == 0:
            consumer.acknowledge(msg)
            acked_positions.append(Position(msg.message_id().ledger_id(), msg.message_id().entry_id()))
    # The client sends grouped acks every 100 ms: restart only once the broker's cursor has them all.
    _wait_until_acked(durable_broker, topic, "s", acked_positions)
    durable_broker.restart()
    for i in range(30, 40):
        data = f"m{i}".encode()
        producer.send_async(data, lambda r, m, d=data: sent(r, m, d))
    producer.flush()
    expected = {f"m{i}".encode() for i in range(40) if i >= 30 or i % 3}
    seen: set[bytes] = set()
    deadline = time.monotonic() + 30
    while not expected <= seen and time.monotonic() < deadline:
        try:
            msg = consumer.receive(timeout_millis=1000)
        except pulsar.Timeout:
            continue
        seen.add(msg.data())
        consumer.acknowledge(msg)
    assert len(acked) == 40
    assert expected <= seen
    assert not seen & {f"m{i}".encode() for i in range(0, 30, 3)}
