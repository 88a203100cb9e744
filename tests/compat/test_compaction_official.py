"""Topic compaction seen by the official client: keys, tombstones, batches, keyless messages,
``is_read_compacted`` readers and consumers, on the in-memory log and on a real bookie."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pulsar
import pytest

from magnetar.base.types import TopicName
from magnetar.broker.compaction import CompactionStatus
from tests.compat.bookie_harness import BookieBrokerThread
from tests.compat.harness import BrokerThread

pytestmark = pytest.mark.timeout(120)

KEYS = [f"k{i}" for i in range(5)]
RECEIVE_TIMEOUT_MS = 1500


def _compact(broker: BrokerThread, topic: str) -> None:
    async def run() -> tuple[CompactionStatus, str | None]:
        assert broker.server is not None
        loaded = await broker.server.service.get_topic(TopicName.parse(topic), create=False)
        await loaded.compaction.start()
        return loaded.compaction.status, loaded.compaction.last_error

    status, error = broker.call(run())
    assert status is CompactionStatus.SUCCESS, error


def _publish(client: Any, topic: str, *, batching: bool, rounds: int, first: int = 0) -> dict[str, bytes | None]:
    """``rounds`` values per key (the last of k0 an empty tombstone), then one keyless message.
    Returns what a compacted read must show per key (None: the key is gone)."""
    producer = client.create_producer(topic, batching_enabled=batching, batching_max_messages=7,
                                      batching_max_publish_delay_ms=20)
    expected: dict[str, bytes | None] = {}
    for r in range(first, first + rounds):
        for key in KEYS:
            value = b"" if key == "k0" and r == first + rounds - 1 else f"{key}-{r}".encode()
            producer.send_async(value, None, partition_key=key)
            expected[key] = value or None
    producer.send_async(f"keyless-{first}".encode(), None)
    producer.flush()
    producer.close()
    return expected


def _drain(receive: Any) -> list[Any]:
    out = []
    while True:
        try:
            out.append(receive(RECEIVE_TIMEOUT_MS))
        except pulsar.Timeout:
            return out


def _by_key(messages: list[Any]) -> tuple[dict[str, bytes], list[bytes]]:
    keyed: dict[str, bytes] = {}
    keyless = []
    for m in messages:
        if m.partition_key():
            assert m.partition_key() not in keyed, f"key {m.partition_key()} delivered twice"
            keyed[m.partition_key()] = m.data()
        else:
            keyless.append(m.data())
    return keyed, keyless


def _visible(expected: dict[str, bytes | None]) -> dict[str, bytes]:
    return {k: v for k, v in expected.items() if v is not None}


@pytest.fixture
def broker() -> Iterator[BrokerThread]:
    running = BrokerThread().start()
    try:
        yield running
    finally:
        running.stop()


def _client(url: str) -> Any:
    return pulsar.Client(url, operation_timeout_seconds=15, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))


@pytest.mark.parametrize("batching", [False, True], ids=["single", "batched"])
def test_read_compacted_reader_and_consumer_see_latest_per_key(broker: BrokerThread, batching: bool) -> None:
    topic = f"persistent://public/default/compact-{'b' if batching else 's'}"
    client = _client(broker.url)
    try:
        expected = _publish(client, topic, batching=batching, rounds=4)
        _compact(broker, topic)
        reader = client.create_reader(topic, pulsar.MessageId.earliest, is_read_compacted=True)
        keyed, keyless = _by_key(_drain(reader.read_next))
        assert keyed == _visible(expected)
        assert "k0" not in keyed  # its last message was a tombstone
        assert keyless == [b"keyless-0"]
        # A consumer of an Exclusive subscription with read_compacted sees the same; acks work.
        consumer = client.subscribe(topic, "compacted-sub", consumer_type=pulsar.ConsumerType.Exclusive,
                                    initial_position=pulsar.InitialPosition.Earliest, is_read_compacted=True)
        received = _drain(consumer.receive)
        assert _by_key(received) == (keyed, keyless)
        for m in received:
            consumer.acknowledge(m)
        # Without read_compacted the full topic is there: every message, tombstone included.
        full = _drain(client.create_reader(topic, pulsar.MessageId.earliest).read_next)
        assert len(full) == 4 * len(KEYS) + 1
        assert [m.data() for m in full if m.partition_key() == "k0"][-1] == b""
    finally:
        client.close()


def test_messages_after_the_horizon_and_a_second_compaction(broker: BrokerThread) -> None:
    topic = "persistent://public/default/compact-twice"
    client = _client(broker.url)
    try:
        expected = _publish(client, topic, batching=True, rounds=3)
        _compact(broker, topic)
        later = _publish(client, topic, batching=False, rounds=2, first=10)  # above the horizon
        reader = client.create_reader(topic, pulsar.MessageId.earliest, is_read_compacted=True)
        messages = _drain(reader.read_next)
        above = messages[-(2 * len(KEYS) + 1):]  # the tail is read from the topic as it is
        assert [m.data() for m in above][-1] == b"keyless-10"
        assert _by_key(messages[:-(2 * len(KEYS) + 1)]) == (_visible(expected), [b"keyless-0"])
        _compact(broker, topic)
        keyed, keyless = _by_key(_drain(client.create_reader(topic, pulsar.MessageId.earliest,
                                                             is_read_compacted=True).read_next))
        assert keyed == _visible({**expected, **later})
        assert keyless == [b"keyless-0", b"keyless-10"]
        store = broker.log_store
        assert len(store.compacted.sealed) == 1  # type: ignore[attr-defined]  # the previous one was deleted
    finally:
        client.close()


@pytest.mark.integration
def test_compaction_on_a_bookie_survives_a_broker_restart(tmp_path: Path) -> None:
    broker = BookieBrokerThread(str(tmp_path))
    try:
        broker.start()
        topic = "persistent://public/default/compact-bookie"
        client = _client(broker.url)
        try:
            expected = _publish(client, topic, batching=True, rounds=3)
            _compact(broker, topic)
            expected.update(_publish(client, topic, batching=False, rounds=1, first=20))
            _compact(broker, topic)
        finally:
            client.close()
        assert broker.manager is not None
        ledgers_before = set(broker.call(broker.manager.list_ledgers()))
        broker.restart()  # the new broker finds the compacted ledger on the __compaction cursor
        client = _client(broker.url)
        try:
            reader = client.create_reader(topic, pulsar.MessageId.earliest, is_read_compacted=True)
            keyed, keyless = _by_key(_drain(reader.read_next))
            assert keyed == _visible(expected)
            assert keyless == [b"keyless-0", b"keyless-20"]
        finally:
            client.close()
        assert len(ledgers_before) >= 2
    finally:
        broker.stop()


def test_seek_within_compacted_data(broker: BrokerThread) -> None:
    topic = "persistent://public/default/compact-seek"
    client = _client(broker.url)
    try:
        _publish(client, topic, batching=False, rounds=3)
        _compact(broker, topic)
        reader = client.create_reader(topic, pulsar.MessageId.earliest, is_read_compacted=True)
        first = _drain(reader.read_next)
        assert len(first) == len(KEYS)  # k1..k4 and the keyless one
        reader.seek(first[1].message_id())  # as on a full topic: reading goes on after the id
        assert [m.data() for m in _drain(reader.read_next)] == [m.data() for m in first[2:]]
        reader.seek(pulsar.MessageId.earliest)
        assert [m.data() for m in _drain(reader.read_next)] == [m.data() for m in first]
        # Negative control: the same seek without read_compacted lands in the full topic.
        full = client.create_reader(topic, pulsar.MessageId.earliest)
        _drain(full.read_next)
        full.seek(pulsar.MessageId.earliest)
        assert len(_drain(full.read_next)) == 3 * len(KEYS) + 1
    finally:
        client.close()
