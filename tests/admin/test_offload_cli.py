"""``magnetar admin`` tiered-storage commands against a broker's real HTTP endpoint: namespace
offload threshold and deletion lag (set, get, clear, bad values refused), and a topic without
managed ledgers refused with 400 (the offload itself runs on a real standalone in
``tests/integration/test_tiered_storage.py``)."""

from __future__ import annotations

import json

import pulsar

from tests.admin.conftest import HttpBroker
from tests.admin.test_cli import admin

TOPIC = "persistent://public/default/cli-offload"


def test_cli_offload_policies_and_refusals(http_broker: HttpBroker) -> None:
    b = http_broker
    assert json.loads(admin(b, "namespaces", "get-offload-threshold", "public/default")) == -1
    admin(b, "namespaces", "set-offload-threshold", "public/default", "0")
    assert json.loads(admin(b, "namespaces", "get-offload-threshold", "public/default")) == 0
    assert admin(b, "namespaces", "get-offload-deletion-lag", "public/default").strip() == "null"
    admin(b, "namespaces", "set-offload-deletion-lag", "public/default", "60000")
    assert json.loads(admin(b, "namespaces", "get-offload-deletion-lag", "public/default")) == 60000
    assert "error 412" in admin(b, "namespaces", "set-offload-deletion-lag", "public/default", "--", "-5", code=1)
    admin(b, "namespaces", "clear-offload-deletion-lag", "public/default")
    assert admin(b, "namespaces", "get-offload-deletion-lag", "public/default").strip() == "null"
    assert "error 404" in admin(b, "topics", "offload-status", TOPIC, code=1)  # no such topic yet
    client = pulsar.Client(b.thread.url, operation_timeout_seconds=10,
                           logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    try:
        client.create_producer(TOPIC).send(b"x")
    finally:
        client.close()
    # this broker keeps topics in memory: nothing to offload, said plainly
    assert "error 400" in admin(b, "topics", "offload", TOPIC, code=1)
    assert "LEDGER:ENTRY" in admin(b, "topics", "offload", TOPIC, "--message-id", "nope", code=2)
