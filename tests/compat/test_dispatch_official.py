"""Dispatch behaviour the official client can observe: Key_Shared with a stalled consumer and with a
joining consumer, chunked messages on a Shared subscription, and regex topic discovery.

Every receive has a timeout; each test's total time is bounded by pytest-timeout.
"""

from __future__ import annotations

import re
import time
from typing import Any

import pulsar
import pytest

from magnetar.broker.dispatcher_key_shared import KEY_HASH_SLOTS, key_slot

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]

RECEIVE_MS = 5000
HALF = KEY_HASH_SLOTS // 2


def _key_in(low: bool, prefix: str) -> str:
    return next(k for k in (f"{prefix}{i}" for i in range(1000)) if (key_slot(k.encode()) < HALF) == low)


def _sticky(low: bool) -> Any:
    ranges = [(0, HALF - 1)] if low else [(HALF, KEY_HASH_SLOTS - 1)]
    return pulsar.ConsumerKeySharedPolicy(key_shared_mode=pulsar.KeySharedMode.Sticky, sticky_ranges=ranges)


def _receive_all(consumers: list[Any], count: int, deadline_s: float, ack: bool = True) -> list[tuple[int, Any]]:
    got: list[tuple[int, Any]] = []
    deadline = time.monotonic() + deadline_s
    while len(got) < count and time.monotonic() < deadline:
        for index, consumer in enumerate(consumers):
            try:
                msg = consumer.receive(timeout_millis=50)
            except pulsar.Timeout:
                continue
            got.append((index, msg))
            if ack:
                consumer.acknowledge(msg)
    return got


def test_key_shared_stalled_consumer_does_not_stall_other_keys(client: Any) -> None:
    topic = "ks-stall"
    low, high = _key_in(True, "a"), _key_in(False, "b")
    # the stalled consumer never calls receive: after its receiver queue (5) it has no permits
    stalled = client.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.KeyShared, receiver_queue_size=5,
                               key_shared_policy=_sticky(True), consumer_name="stalled")
    busy = client.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.KeyShared, receiver_queue_size=5,
                            key_shared_policy=_sticky(False), consumer_name="busy")
    producer = client.create_producer(topic, batching_enabled=False)
    for i in range(60):
        producer.send_async(f"{i}".encode(), None, partition_key=low if i % 3 == 0 else high)
    producer.flush()
    busy_got = [int(m.data()) for _, m in _receive_all([busy], 40, 15)]
    assert busy_got == [i for i in range(60) if i % 3], "the busy consumer was held up by the stalled one"
    stalled_got = [int(m.data()) for _, m in _receive_all([stalled], 20, 15)]
    assert stalled_got == [i for i in range(60) if i % 3 == 0]  # in order, nothing of its key overtaken


def test_key_shared_joining_consumer_waits_for_earlier_entries_to_be_acked(client: Any) -> None:
    topic = "ks-join"
    keys = [f"key-{i}" for i in range(8)]
    first = client.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.KeyShared, consumer_name="first")
    producer = client.create_producer(topic, batching_enabled=False)
    for i in range(16):
        producer.send(f"{i}".encode(), partition_key=keys[i % 8])
    held = [m for _, m in _receive_all([first], 16, 10, ack=False)]  # received, not acknowledged
    assert len(held) == 16
    second = client.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.KeyShared, consumer_name="second")
    for i in range(16, 48):
        producer.send(f"{i}".encode(), partition_key=keys[i % 8])
    early = _receive_all([second], 1, 1.0, ack=False)
    assert early == [], "the new consumer got a key's entry while earlier ones were still unacked elsewhere"
    for msg in held:
        first.acknowledge(msg)
    rest = _receive_all([first, second], 32, 20)
    assert sorted(int(m.data()) for _, m in rest) == list(range(16, 48))
    owners: dict[str, set[int]] = {}
    order: dict[str, list[int]] = {}
    for index, msg in rest:
        owners.setdefault(msg.partition_key(), set()).add(index)
        order.setdefault(msg.partition_key(), []).append(int(msg.data()))
    assert all(values == sorted(values) for values in order.values())
    assert any(1 in o for o in owners.values()), "the new consumer should own some of the 8 keys"


def test_shared_chunked_messages_stay_whole_on_one_consumer(client: Any) -> None:
    topic = "shared-chunks"
    consumers = [client.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.Shared, receiver_queue_size=2,
                                  consumer_name=f"c{i}") for i in range(2)]
    producer = client.create_producer(topic, chunking_enabled=True, batching_enabled=False)
    size = 11 * 1024 * 1024  # three chunks each at the 5 MiB maximum message size
    payloads = [bytes([i]) * size for i in range(2)]
    for payload in payloads:
        producer.send_async(payload, None)
    producer.flush()
    got = _receive_all(consumers, 2, 30)
    assert sorted(m.data() for _, m in got) == payloads
    assert {index for index, _ in got} == {0, 1}  # round robin by message, each message whole


def _pattern_consumer(client: Any, pattern: str, subscription: str, discovery_period_s: int) -> Any:
    """``client.subscribe(re.compile(pattern), ...)`` with a working discovery period.

    pulsar-client 3.13's ``subscribe`` type-checks ``pattern_auto_discovery_period`` but never
    passes it to the C++ configuration (the consumer re-polls every 60 s whatever one asks), so the
    configuration is built here the way ``subscribe`` builds it, plus that one setting.
    """
    import _pulsar

    conf = _pulsar.ConsumerConfiguration()
    conf.consumer_type(pulsar.ConsumerType.Exclusive)
    conf.subscription_initial_position(pulsar.InitialPosition.Earliest)
    conf.pattern_auto_discovery_period(discovery_period_s)
    schema = pulsar.schema.BytesSchema()
    conf.schema(schema.schema_info())
    consumer = pulsar.Consumer()
    consumer._consumer = client._client.subscribe_pattern(re.compile(pattern).pattern, subscription, conf)
    consumer._client = client
    consumer._schema = schema
    schema.attach_client(client._client)
    client._consumers.append(consumer)
    return consumer


def test_regex_subscription_picks_up_a_new_topic(client: Any) -> None:
    client.create_producer("rxn-a").send(b"rxn-a")
    consumer = _pattern_consumer(client, "persistent://public/default/rxn-.*", "s", discovery_period_s=1)
    assert consumer.receive(timeout_millis=RECEIVE_MS).data() == b"rxn-a"
    client.create_producer("rxn-new").send(b"rxn-new")  # created after the subscription
    msg = consumer.receive(timeout_millis=10_000)  # discovery runs every second
    assert msg.data() == b"rxn-new"
    assert msg.topic_name() == "persistent://public/default/rxn-new"
