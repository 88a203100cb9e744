"""``magnetar admin`` against a broker's real HTTP endpoint, and /metrics after official-client traffic."""

from __future__ import annotations

import json
import urllib.request
from typing import Any

import pulsar
from typer.testing import CliRunner

from magnetar.cli.admin import admin_app
from tests.admin.conftest import HttpBroker

runner = CliRunner()


def admin(broker: HttpBroker, *args: str, code: int = 0) -> str:
    result = runner.invoke(admin_app, ["--url", broker.http_url, *args])
    assert result.exit_code == code, (args, result.output)
    return result.output


def admin_json(broker: HttpBroker, *args: str) -> Any:
    return json.loads(admin(broker, *args))


def test_cli_tenants_namespaces_and_policies(http_broker: HttpBroker) -> None:
    b = http_broker
    assert "standalone" in admin(b, "clusters", "list")
    assert admin_json(b, "clusters", "get", "standalone")["brokerServiceUrl"].startswith("pulsar://")
    admin(b, "tenants", "create", "acme", "--admin-roles", "ops")
    assert "acme" in admin(b, "tenants", "list")
    assert admin_json(b, "tenants", "get", "acme")["adminRoles"] == ["ops"]
    assert "already exists" in admin(b, "tenants", "create", "acme", code=1)
    admin(b, "tenants", "update", "acme", "--admin-roles", "root")
    admin(b, "namespaces", "create", "acme/ns")
    assert "acme/ns" in admin(b, "namespaces", "list", "acme")
    admin(b, "namespaces", "set-retention", "acme/ns", "--time-minutes", "10", "--size-mb", "-1")
    assert admin_json(b, "namespaces", "get-policy", "acme/ns", "retention") == {
        "retentionTimeInMinutes": 10, "retentionSizeInMB": -1}
    admin(b, "namespaces", "set-message-ttl", "acme/ns", "60")
    admin(b, "namespaces", "set-backlog-quota", "acme/ns", "--limit-size", "1000", "--policy", "producer_exception")
    assert admin_json(b, "namespaces", "get-policy", "acme/ns", "backlogQuotaMap")["destination_storage"][
        "policy"] == "producer_exception"
    admin(b, "namespaces", "remove-backlog-quota", "acme/ns")
    admin(b, "namespaces", "set-policy", "acme/ns", "deduplication", "true")
    admin(b, "namespaces", "set-policy", "acme/ns", "maxProducersPerTopic", "3")
    policies = admin_json(b, "namespaces", "policies", "acme/ns")
    assert policies["message_ttl_in_seconds"] == 60 and policies["max_producers_per_topic"] == 3
    admin(b, "namespaces", "remove-policy", "acme/ns", "maxProducersPerTopic")
    assert "must be >= 0" in admin(b, "namespaces", "set-policy", "--", "acme/ns", "messageTTL", "-4", code=1)
    assert "error 409" in admin(b, "tenants", "delete", "acme", code=1)
    admin(b, "namespaces", "delete", "acme/ns")
    admin(b, "tenants", "delete", "acme")
    assert "acme" not in admin(b, "tenants", "list")


def test_cli_topics_and_subscriptions_with_the_official_client(http_broker: HttpBroker) -> None:
    b = http_broker
    topic = "persistent://public/default/cli-topic"
    admin(b, "topics", "create", topic)
    admin(b, "topics", "create-subscription", topic, "sub", "--message-id", "earliest")
    client = pulsar.Client(b.thread.url, operation_timeout_seconds=10,
                           logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    try:
        producer = client.create_producer(topic, batching_enabled=False)
        for i in range(10):
            producer.send(f"m{i}".encode())
        producer.close()
        stats = admin_json(b, "topics", "stats", topic, "--json")
        assert stats["msgInCounter"] == 10 and stats["subscriptions"]["sub"]["msgBacklog"] == 10
        assert "sub" in admin(b, "topics", "stats", topic)
        admin(b, "topics", "skip", topic, "sub", "4")
        assert admin_json(b, "topics", "stats", topic, "--json")["subscriptions"]["sub"]["msgBacklog"] == 6
        admin(b, "topics", "reset-cursor", topic, "sub", "--message-id", "earliest")
        consumer = client.subscribe(topic, "sub")
        received = [consumer.receive(timeout_millis=5000).data() for _ in range(10)]
        assert received == [f"m{i}".encode() for i in range(10)]  # the reset put them all back
        consumer.close()
        admin(b, "topics", "clear-backlog", topic, "sub")
        admin(b, "topics", "expire-messages", topic, "0")
        assert admin_json(b, "topics", "stats", topic, "--json")["subscriptions"]["sub"]["msgBacklog"] == 0
        internal = admin_json(b, "topics", "internal-stats", topic)
        assert internal["numberOfEntries"] == 10 and "sub" in internal["cursors"]

        metrics = urllib.request.urlopen(f"{b.http_url}/metrics", timeout=10).read().decode()
        assert f'pulsar_in_messages_total{{cluster="standalone",namespace="public/default",topic="{topic}"}} 10.0' \
            in metrics
        assert 'magnetar_publish_latency_seconds_bucket{' in metrics
        assert 'pulsar_subscription_back_log{' in metrics and 'subscription="sub"' in metrics

        admin(b, "topics", "set-policy", topic, "maxMessageSize", "1024")
        assert admin_json(b, "topics", "get-policy", topic, "maxMessageSize") == 1024
        admin(b, "topics", "set-message-ttl", topic, "30")
        admin(b, "topics", "remove-policy", topic, "maxMessageSize")
        assert "sub" in admin(b, "topics", "subscriptions", topic)
        admin(b, "topics", "unsubscribe", topic, "sub")
        admin(b, "topics", "delete", topic)
        assert topic not in admin(b, "topics", "list", "public/default")

        partitioned = "persistent://public/default/cli-parts"
        admin(b, "topics", "create-partitioned", partitioned, "2")
        admin(b, "topics", "update-partitioned", partitioned, "3")
        assert admin_json(b, "topics", "get-partitions", partitioned) == {"partitions": 3}
        assert partitioned in admin(b, "topics", "list-partitioned", "public/default")
        producer = client.create_producer(partitioned)
        assert len(client.get_topic_partitions(partitioned)) == 3
        producer.close()
        admin(b, "topics", "delete-partitioned", partitioned, "--force")
    finally:
        client.close()
    assert "not found" in admin(b, "topics", "delete", topic, code=1)
