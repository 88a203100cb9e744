"""Non-persistent topics with the official client: delivery to every subscription type, drops for
consumers without permits (counted in the stats), at most once, and regex subscriptions that see
persistent and non-persistent topics according to the client's topic type option."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pulsar
import pytest

from magnetar.admin.non_persistent import non_persistent_stats
from magnetar.broker.non_persistent import NonPersistentTopic
from tests.compat.harness import BrokerThread

pytestmark = pytest.mark.timeout(120)
RECEIVE_TIMEOUT_MS = 800


@pytest.fixture
def broker() -> Iterator[BrokerThread]:
    running = BrokerThread().start()
    try:
        yield running
    finally:
        running.stop()


@pytest.fixture
def client(broker: BrokerThread) -> Iterator[Any]:
    c = pulsar.Client(broker.url, operation_timeout_seconds=10, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    try:
        yield c
    finally:
        c.close()


def _drain(consumer: Any) -> list[bytes]:
    out = []
    while True:
        try:
            message = consumer.receive(RECEIVE_TIMEOUT_MS)
        except pulsar.Timeout:
            return out
        out.append(message.data())
        consumer.acknowledge(message)


def _stats(broker: BrokerThread, topic: str) -> dict[str, Any]:
    async def read() -> dict[str, Any]:
        assert broker.server is not None
        loaded = broker.server.service.topics[topic]
        assert isinstance(loaded, NonPersistentTopic)
        return non_persistent_stats(loaded)

    return broker.call(read())


def test_a_consumer_without_permits_loses_what_it_has_no_room_for(broker: BrokerThread, client: Any) -> None:
    topic = "non-persistent://public/default/np-drops"
    slow = client.subscribe(topic, "slow", receiver_queue_size=5)  # 5 permits, and nobody receives yet
    fast = client.subscribe(topic, "fast", receiver_queue_size=1000)
    producer = client.create_producer(topic, batching_enabled=False)
    ids = [producer.send(f"m{i}".encode()) for i in range(20)]
    assert [m.entry_id() for m in ids] == list(range(20))  # receipts name in-memory positions
    assert _drain(slow) == [f"m{i}".encode() for i in range(5)]  # the rest was dropped, not kept
    assert _drain(fast) == [f"m{i}".encode() for i in range(20)]
    stats = _stats(broker, topic)
    assert stats["subscriptions"]["slow"]["msgDropCount"] == 15
    assert stats["subscriptions"]["fast"]["msgDropCount"] == 0
    assert stats["msgDropCount"] == 15 and stats["msgInCounter"] == 20
    # At most once: later messages reach the slow consumer again (it has permits now), older ones never.
    producer.send(b"later")
    assert _drain(slow) == [b"later"]


def test_messages_published_before_a_subscription_are_not_kept(broker: BrokerThread, client: Any) -> None:
    topic = "non-persistent://public/default/np-absent"
    producer = client.create_producer(topic)
    for i in range(5):
        producer.send(f"early-{i}".encode())
    consumer = client.subscribe(topic, "late", initial_position=pulsar.InitialPosition.Earliest)
    producer.send(b"seen")
    assert _drain(consumer) == [b"seen"]
    consumer.close()
    assert "late" not in broker.server.service.topics[topic].subscriptions  # type: ignore[union-attr]


@pytest.mark.parametrize("sub_type", [pulsar.ConsumerType.Exclusive, pulsar.ConsumerType.Failover,
                                      pulsar.ConsumerType.Shared, pulsar.ConsumerType.KeyShared])
def test_every_subscription_type_delivers(client: Any, sub_type: Any) -> None:
    topic = f"non-persistent://public/default/np-type-{int(sub_type)}"
    consumers = [client.subscribe(topic, "s", consumer_type=sub_type)]
    if sub_type in (pulsar.ConsumerType.Shared, pulsar.ConsumerType.KeyShared, pulsar.ConsumerType.Failover):
        consumers.append(client.subscribe(topic, "s", consumer_type=sub_type))
    producer = client.create_producer(topic, batching_enabled=False)
    sent = [f"m{i}".encode() for i in range(30)]
    for i, value in enumerate(sent):
        producer.send(value, partition_key=f"k{i % 7}")
    received = [m for c in consumers for m in _drain(c)]
    assert sorted(received) == sorted(sent)


def test_regex_subscription_modes(client: Any) -> None:
    persistent = client.create_producer("persistent://public/default/rx-p")
    non_persistent = client.create_producer("non-persistent://public/default/rx-np")
    modes = {pulsar.RegexSubscriptionMode.PersistentOnly: [b"p"],
             pulsar.RegexSubscriptionMode.NonPersistentOnly: [b"np"],
             pulsar.RegexSubscriptionMode.AllTopics: [b"np", b"p"]}
    for mode, expected in modes.items():
        consumer = client.subscribe(re.compile("persistent://public/default/rx-.*"), f"s{int(mode)}",
                                    regex_subscription_mode=mode)
        persistent.send(b"p")
        non_persistent.send(b"np")
        assert sorted(_drain(consumer)) == expected, mode
        consumer.close()
