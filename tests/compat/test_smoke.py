"""Round trip through a real broker with the official client: properties, keys, event time."""

from __future__ import annotations

from typing import Any

import pulsar
import pytest

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]


def test_round_trip_with_properties_keys_and_event_time(client: Any) -> None:
    topic = "persistent://public/default/rt"
    consumer = client.subscribe(topic, "sub", initial_position=pulsar.InitialPosition.Earliest)
    producer = client.create_producer(topic)
    ids = [producer.send(f"m-{i}".encode(), properties={"i": str(i)}, partition_key=f"k{i}",
                         event_timestamp=1000 + i) for i in range(5)]
    got = []
    for _ in range(5):
        msg = consumer.receive(timeout_millis=5000)
        got.append(msg)
        consumer.acknowledge(msg)
    assert [m.data() for m in got] == [f"m-{i}".encode() for i in range(5)]
    assert [m.properties() for m in got] == [{"i": str(i)} for i in range(5)]
    assert [m.partition_key() for m in got] == [f"k{i}" for i in range(5)]
    assert [m.event_timestamp() for m in got] == [1000 + i for i in range(5)]
    assert [str(m.message_id()) for m in got] == [str(i) for i in ids]
    producer.close()
    consumer.close()
