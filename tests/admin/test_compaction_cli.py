"""``magnetar admin`` compaction commands against a broker's real HTTP endpoint, with the official client."""

from __future__ import annotations

import json

import pulsar

from tests.admin.conftest import HttpBroker
from tests.admin.test_cli import admin

TOPIC = "persistent://public/default/cli-compact"


def test_cli_compacts_and_reports_status_and_thresholds(http_broker: HttpBroker) -> None:
    b = http_broker
    assert "error 404" in admin(b, "topics", "compaction-status", TOPIC, code=1)  # no such topic yet
    client = pulsar.Client(b.thread.url, operation_timeout_seconds=10,
                           logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    try:
        producer = client.create_producer(TOPIC, batching_enabled=False)
        for i in range(10):
            producer.send(f"v{i}".encode(), partition_key=f"k{i % 2}")
        assert json.loads(admin(b, "topics", "compaction-status", TOPIC)) == {"status": "NOT_RUN", "lastError": ""}
        assert "started" in admin(b, "topics", "compact", TOPIC)
        status = json.loads(admin(b, "topics", "compaction-status", TOPIC, "--wait", "--deadline-s", "60"))
        assert status == {"status": "SUCCESS", "lastError": ""}
        reader = client.create_reader(TOPIC, pulsar.MessageId.earliest, is_read_compacted=True)
        assert sorted(reader.read_next(2000).data() for _ in range(2)) == [b"v8", b"v9"]
        assert "error 404" in admin(b, "topics", "compact", "persistent://public/default/no-such-topic", code=1)
    finally:
        client.close()
    assert admin(b, "namespaces", "get-compaction-threshold", "public/default").strip() == "null"
    admin(b, "namespaces", "set-compaction-threshold", "public/default", "1048576")
    assert json.loads(admin(b, "namespaces", "get-compaction-threshold", "public/default")) == 1048576
    admin(b, "namespaces", "remove-compaction-threshold", "public/default")
    assert admin(b, "namespaces", "get-compaction-threshold", "public/default").strip() == "null"
