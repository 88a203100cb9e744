"""Delayed delivery with the official client: ``deliver_after`` / ``deliver_at`` on Shared and
Key_Shared subscriptions arrive in deadline order and never before their time; Exclusive gets
them at once (as Pulsar does)."""

from __future__ import annotations

import time
from datetime import timedelta
from typing import Any

import pulsar
import pytest

from tests.compat.harness import BrokerThread

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]

DELAYS_MS = [900, 300, 600, 150, 450]


def _receive_all(consumer: Any, count: int, timeout_s: float = 10.0) -> list[tuple[str, float]]:
    """(payload, wall-clock ms when received) for ``count`` messages, acknowledged as they come."""
    out: list[tuple[str, float]] = []
    deadline = time.monotonic() + timeout_s
    while len(out) < count and time.monotonic() < deadline:
        try:
            message = consumer.receive(timeout_millis=50)
        except pulsar.Timeout:
            continue
        out.append((message.data().decode(), time.time() * 1000))
        consumer.acknowledge(message)
    return out


@pytest.mark.parametrize("sub_type", [pulsar.ConsumerType.Shared, pulsar.ConsumerType.KeyShared],
                         ids=["shared", "key_shared"])
def test_deliver_after_arrives_in_time_order_and_not_before(broker: BrokerThread, client: Any,
                                                            sub_type: Any) -> None:
    topic = f"delayed-{sub_type}"
    consumer = client.subscribe(topic, "s", consumer_type=sub_type)
    producer = client.create_producer(topic, batching_enabled=False)
    sent_at_ms = time.time() * 1000
    for i, delay in enumerate(DELAYS_MS):
        producer.send(f"d{i}".encode(), partition_key=f"k{i % 2}", deliver_after=timedelta(milliseconds=delay))
    producer.send(b"now")
    received = _receive_all(consumer, len(DELAYS_MS) + 1)
    assert [payload for payload, _ in received] == ["now"] + [f"d{DELAYS_MS.index(d)}" for d in sorted(DELAYS_MS)]
    for payload, at_ms in received[1:]:
        delay = DELAYS_MS[int(payload[1:])]
        assert at_ms >= sent_at_ms + delay, (payload, at_ms - sent_at_ms, delay)
    assert received[-1][1] - sent_at_ms < max(DELAYS_MS) + 2000  # and not much later either


def test_deliver_at_an_absolute_time(broker: BrokerThread, client: Any) -> None:
    consumer = client.subscribe("delayed-at", "s", consumer_type=pulsar.ConsumerType.Shared)
    producer = client.create_producer("delayed-at", batching_enabled=False)
    at_ms = int(time.time() * 1000) + 400
    producer.send(b"at", deliver_at=at_ms)
    with pytest.raises(pulsar.Timeout):
        consumer.receive(timeout_millis=200)
    message = consumer.receive(timeout_millis=5000)
    assert message.data() == b"at" and time.time() * 1000 >= at_ms


def test_exclusive_subscription_gets_delayed_messages_at_once(broker: BrokerThread, client: Any) -> None:
    consumer = client.subscribe("delayed-excl", "s", consumer_type=pulsar.ConsumerType.Exclusive)
    producer = client.create_producer("delayed-excl", batching_enabled=False)
    producer.send(b"later", deliver_after=timedelta(seconds=30))
    assert consumer.receive(timeout_millis=5000).data() == b"later"
