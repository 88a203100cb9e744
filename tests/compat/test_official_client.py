"""The official ``pulsar-client`` (C++ 4.2.0 inside) against a Magnetar broker started by the test.

Every test talks to a real broker over loopback; timeouts are bounded (receive timeouts, the
operation timeout of the client, pytest-timeout).
"""

from __future__ import annotations

import time
from typing import Any

import pulsar
import pytest

pytestmark = [pytest.mark.integration, pytest.mark.timeout(90)]

RECEIVE_MS = 5000


def _drain(consumer: Any, count: int, *, ack: bool = True) -> list[Any]:
    out = []
    for _ in range(count):
        msg = consumer.receive(timeout_millis=RECEIVE_MS)
        out.append(msg)
        if ack:
            consumer.acknowledge(msg)
    return out


def _nothing_more(consumer: Any, wait_ms: int = 300) -> bool:
    try:
        consumer.receive(timeout_millis=wait_ms)
    except pulsar.Timeout:
        return True
    return False


@pytest.mark.parametrize("codec", ["NONE", "LZ4", "ZLib", "ZSTD", "SNAPPY"])
@pytest.mark.parametrize("batching", [False, True])
def test_batching_and_compression(client: Any, codec: str, batching: bool) -> None:
    topic = f"bc-{codec}-{batching}"
    consumer = client.subscribe(topic, "s", initial_position=pulsar.InitialPosition.Earliest)
    producer = client.create_producer(topic, compression_type=getattr(pulsar.CompressionType, codec),
                                      batching_enabled=batching, batching_max_messages=10,
                                      batching_max_publish_delay_ms=10)
    for i in range(25):
        producer.send_async(f"{codec}-{i}-".encode() * 20, None, properties={"i": str(i)})
    producer.flush()
    got = _drain(consumer, 25)
    assert [m.data() for m in got] == [f"{codec}-{i}-".encode() * 20 for i in range(25)]
    assert [m.properties()["i"] for m in got] == [str(i) for i in range(25)]
    assert _nothing_more(consumer)


def test_individual_acks_with_holes_survive_consumer_restart(client: Any) -> None:
    topic = "holes"
    consumer = client.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.Shared,
                                initial_position=pulsar.InitialPosition.Earliest)
    producer = client.create_producer(topic)
    for i in range(10):
        producer.send(f"m{i}".encode())
    got = _drain(consumer, 10, ack=False)
    for msg in got:
        if int(msg.data()[1:]) % 2 == 0:
            consumer.acknowledge(msg)
    consumer.close()
    consumer = client.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.Shared)
    again = sorted(m.data() for m in _drain(consumer, 5))
    assert again == sorted(f"m{i}".encode() for i in range(1, 10, 2))
    assert _nothing_more(consumer)


def test_cumulative_ack_survives_consumer_restart(client: Any) -> None:
    topic = "cumulative"
    consumer = client.subscribe(topic, "s", initial_position=pulsar.InitialPosition.Earliest)
    producer = client.create_producer(topic)
    for i in range(10):
        producer.send(f"m{i}".encode())
    got = _drain(consumer, 10, ack=False)
    consumer.acknowledge_cumulative(got[5])
    consumer.close()
    consumer = client.subscribe(topic, "s")
    assert [m.data() for m in _drain(consumer, 4)] == [f"m{i}".encode() for i in range(6, 10)]
    assert _nothing_more(consumer)


def test_batch_index_acks_survive_consumer_restart(client: Any) -> None:
    """Batches of ten, two members of each left unacknowledged by a consumer with batch-index acks:
    after a restart exactly those come again (the MESSAGE frames carry the entries' ack sets, which
    the client uses to skip the acknowledged members)."""
    topic = "batch-index-acks"
    options: dict[str, Any] = {"consumer_type": pulsar.ConsumerType.Shared, "batch_index_ack_enabled": True}
    consumer = client.subscribe(topic, "s", initial_position=pulsar.InitialPosition.Earliest, **options)
    producer = client.create_producer(topic, batching_enabled=True, batching_max_messages=10,
                                      batching_max_publish_delay_ms=60_000)
    for i in range(30):
        producer.send_async(f"{i}".encode(), None)
    producer.flush()  # three batches of ten
    holes = {i for i in range(30) if i % 10 in (3, 8)}
    for msg in _drain(consumer, 30, ack=False):
        if int(msg.data()) not in holes:
            consumer.acknowledge(msg)
    consumer.close()
    consumer = client.subscribe(topic, "s", **options)
    assert sorted(int(m.data()) for m in _drain(consumer, len(holes))) == sorted(holes)
    assert _nothing_more(consumer)


@pytest.mark.client_errors(r"Failed to create consumer: ConsumerBusy")
def test_exclusive_refuses_a_second_consumer(client: Any) -> None:
    client.subscribe("excl", "s", consumer_type=pulsar.ConsumerType.Exclusive)
    with pytest.raises(pulsar.ConsumerBusy):
        client.subscribe("excl", "s", consumer_type=pulsar.ConsumerType.Exclusive)


def test_failover_moves_to_the_standby_consumer(client: Any) -> None:
    topic = "failover"
    first = client.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.Failover, consumer_name="a",
                             initial_position=pulsar.InitialPosition.Earliest)
    second = client.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.Failover, consumer_name="b")
    producer = client.create_producer(topic)
    for i in range(4):
        producer.send(f"m{i}".encode())
    assert [m.data() for m in _drain(first, 2)] == [b"m0", b"m1"]
    assert _nothing_more(second)
    first.close()
    assert [m.data() for m in _drain(second, 2)] == [b"m2", b"m3"]


def test_shared_spreads_messages_over_consumers(client: Any) -> None:
    topic = "shared"
    consumers = [client.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.Shared, receiver_queue_size=5)
                 for _ in range(2)]
    producer = client.create_producer(topic)
    for i in range(20):
        producer.send(f"m{i}".encode())
    seen: dict[int, list[bytes]] = {0: [], 1: []}
    deadline = time.monotonic() + 10
    while len(seen[0]) + len(seen[1]) < 20 and time.monotonic() < deadline:
        for index, consumer in enumerate(consumers):
            try:
                msg = consumer.receive(timeout_millis=100)
            except pulsar.Timeout:
                continue
            seen[index].append(msg.data())
            consumer.acknowledge(msg)
    assert sorted(seen[0] + seen[1]) == sorted(f"m{i}".encode() for i in range(20))
    assert seen[0] and seen[1]


def test_key_shared_keeps_each_key_on_one_consumer_in_order(client: Any) -> None:
    topic = "keyshared"
    consumers = [client.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.KeyShared) for _ in range(3)]
    producer = client.create_producer(topic)
    for i in range(60):
        producer.send(f"{i}".encode(), partition_key=f"key-{i % 6}")
    by_key: dict[str, set[int]] = {}
    order: dict[str, list[int]] = {}
    total = 0
    deadline = time.monotonic() + 15
    while total < 60 and time.monotonic() < deadline:
        for index, consumer in enumerate(consumers):
            try:
                msg = consumer.receive(timeout_millis=20)
            except pulsar.Timeout:
                continue
            total += 1
            by_key.setdefault(msg.partition_key(), set()).add(index)
            order.setdefault(msg.partition_key(), []).append(int(msg.data()))
            consumer.acknowledge(msg)
    assert total == 60
    assert all(len(owners) == 1 for owners in by_key.values())
    assert all(values == sorted(values) for values in order.values())


def test_seek_by_message_id_and_by_time(client: Any) -> None:
    topic = "seek"
    consumer = client.subscribe(topic, "s", initial_position=pulsar.InitialPosition.Earliest)
    producer = client.create_producer(topic)
    ids = []
    for i in range(6):
        ids.append(producer.send(f"m{i}".encode()))
    middle_time = None
    got = _drain(consumer, 6)
    middle_time = got[3].publish_timestamp()
    consumer.seek(ids[1])
    assert [m.data() for m in _drain(consumer, 4)] == [b"m2", b"m3", b"m4", b"m5"]
    consumer.seek(middle_time)
    first = consumer.receive(timeout_millis=RECEIVE_MS)
    assert first.publish_timestamp() >= middle_time
    assert int(first.data()[1:]) <= 3
    consumer.seek(pulsar.MessageId.earliest)
    assert consumer.receive(timeout_millis=RECEIVE_MS).data() == b"m0"


def test_readers_and_has_message_available(client: Any) -> None:
    topic = "readers"
    producer = client.create_producer(topic)
    ids = [producer.send(f"m{i}".encode()) for i in range(5)]
    reader = client.create_reader(topic, pulsar.MessageId.earliest)
    got = []
    while reader.has_message_available():
        got.append(reader.read_next(timeout_millis=RECEIVE_MS).data())
    assert got == [f"m{i}".encode() for i in range(5)]
    reader.close()
    after = client.create_reader(topic, ids[2])
    assert after.read_next(timeout_millis=RECEIVE_MS).data() == b"m3"
    inclusive = client.create_reader(topic, ids[2], start_message_id_inclusive=True)
    assert inclusive.read_next(timeout_millis=RECEIVE_MS).data() == b"m2"
    latest = client.create_reader(topic, pulsar.MessageId.latest)
    assert not latest.has_message_available()
    producer.send(b"new")
    assert latest.read_next(timeout_millis=RECEIVE_MS).data() == b"new"
    latest_inclusive = client.create_reader(topic, pulsar.MessageId.latest, start_message_id_inclusive=True)
    assert latest_inclusive.has_message_available()
    assert latest_inclusive.read_next(timeout_millis=RECEIVE_MS).data() == b"new"


def test_negative_ack_redelivers_with_count(client: Any) -> None:
    topic = "nack"
    consumer = client.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.Shared,
                                negative_ack_redelivery_delay_ms=100)
    producer = client.create_producer(topic)
    producer.send(b"x")
    counts = []
    for _ in range(3):
        msg = consumer.receive(timeout_millis=RECEIVE_MS)
        counts.append(msg.redelivery_count())
        consumer.negative_acknowledge(msg)
    assert counts == [0, 1, 2]


def test_dead_letter_after_max_redeliveries(client: Any) -> None:
    topic = "persistent://public/default/dlq-src"
    policy = pulsar.ConsumerDeadLetterPolicy(max_redeliver_count=2,
                                             dead_letter_topic="persistent://public/default/dlq-dead")
    consumer = client.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.Shared,
                                negative_ack_redelivery_delay_ms=100, dead_letter_policy=policy)
    dead = client.subscribe("persistent://public/default/dlq-dead", "d",
                            initial_position=pulsar.InitialPosition.Earliest)
    producer = client.create_producer(topic)
    producer.send(b"poison")
    for _ in range(3):
        msg = consumer.receive(timeout_millis=RECEIVE_MS)
        consumer.negative_acknowledge(msg)
    assert dead.receive(timeout_millis=10_000).data() == b"poison"
    assert _nothing_more(consumer, 500)


def test_chunked_12_mib_message(client: Any) -> None:
    topic = "chunked"
    consumer = client.subscribe(topic, "s", initial_position=pulsar.InitialPosition.Earliest)
    producer = client.create_producer(topic, chunking_enabled=True, batching_enabled=False)
    payload = bytes(range(256)) * (12 * 1024 * 1024 // 256)
    producer.send(payload)
    msg = consumer.receive(timeout_millis=20_000)
    assert msg.data() == payload
    consumer.acknowledge(msg)


def test_unsubscribe_deletes_the_subscription(client: Any) -> None:
    topic = "unsub"
    producer = client.create_producer(topic)
    consumer = client.subscribe(topic, "s")
    producer.send(b"a")
    consumer.unsubscribe()
    consumer = client.subscribe(topic, "s")
    producer.send(b"b")
    assert consumer.receive(timeout_millis=RECEIVE_MS).data() == b"b"


def test_regex_subscription_finds_topics(client: Any) -> None:
    for name in ("rx-a", "rx-b", "other"):
        client.create_producer(name).send(name.encode())
    consumer = client.subscribe(pulsar.re.compile if False else __import__("re").compile(
        "persistent://public/default/rx-.*"), "s", initial_position=pulsar.InitialPosition.Earliest)
    got = sorted(m.data() for m in _drain(consumer, 2))
    assert got == [b"rx-a", b"rx-b"]


@pytest.mark.client_errors(r"Failed to create producer: (ProducerBusy|ProducerFenced)")
def test_producer_names_and_exclusive_access(client: Any) -> None:
    named = client.create_producer("names", producer_name="mine")
    assert named.producer_name() == "mine"
    with pytest.raises(pulsar.ProducerBusy):
        client.create_producer("names", producer_name="mine")
    with pytest.raises(pulsar.ProducerFenced):  # Pulsar: an exclusive producer while shared ones exist
        client.create_producer("names", access_mode=pulsar.ProducerAccessMode.Exclusive)
    auto = client.create_producer("names")
    assert auto.producer_name().startswith("standalone-0-")
