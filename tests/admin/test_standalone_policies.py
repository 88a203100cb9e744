"""A real ``magnetar standalone`` process: policies set through the REST API, their effects seen by
the official client (backlog quota hold / exception / eviction, max producers, TTL)."""

from __future__ import annotations

import json
import os
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pulsar
import pytest

from magnetar.runtime.processes import StandaloneProcess

pytestmark = pytest.mark.integration
WAIT_S = 10.0


class Rest:
    def __init__(self, base: str) -> None:
        self.base = base + "/admin/v2"

    def __call__(self, method: str, path: str, body: Any = None, query: str = "") -> Any:
        data = None if body is None else json.dumps(body).encode()
        url = self.base + path + (f"?{query}" if query else "")
        request = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=10) as reply:
            raw = reply.read()
        return json.loads(raw) if raw else None


def wait_for(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture(scope="module")
def standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneProcess]:
    env = dict(os.environ, MAGNETAR_BROKER_POLICY_CHECK_INTERVAL_MS="100")
    process = StandaloneProcess(str(Path(tmp_path_factory.mktemp("standalone")) / "data"), env=env)
    try:
        yield process
    finally:
        process.terminate()


@pytest.fixture(scope="module")
def client(standalone: StandaloneProcess) -> Iterator[Any]:
    c = pulsar.Client(standalone.broker_url, operation_timeout_seconds=5,
                      logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    try:
        yield c
    finally:
        c.close()


def set_quota(rest: Rest, namespace: str, quota: dict[str, Any]) -> None:
    """Set after filling: the broker's 100 ms check would otherwise act in the middle of ``fill``."""
    rest("POST", f"/namespaces/public/{namespace}/backlogQuota", quota, query="backlogQuotaType=destination_storage")


def setup_namespace(rest: Rest, namespace: str) -> str:
    rest("PUT", f"/namespaces/public/{namespace}")
    topic = f"persistent://public/{namespace}/t"
    rest("PUT", f"/persistent/public/{namespace}/t")
    rest("PUT", f"/persistent/public/{namespace}/t/subscription/slow", {"ledgerId": -1, "entryId": -1})
    return topic


def stats(rest: Rest, namespace: str) -> dict[str, Any]:
    return rest("GET", f"/persistent/public/{namespace}/t/stats")  # type: ignore[no-any-return]


def fill(client: Any, topic: str, count: int = 30) -> Any:
    producer = client.create_producer(topic, batching_enabled=False, send_timeout_millis=0)
    for i in range(count):
        producer.send(b"x" * 200 + str(i).encode())
    return producer


def test_backlog_quota_hold_keeps_sends_pending_until_the_backlog_is_consumed(standalone: StandaloneProcess,
                                                                              client: Any) -> None:
    rest = Rest(standalone.http_url)
    topic = setup_namespace(rest, "hold")
    producer = fill(client, topic)
    set_quota(rest, "hold", {"limitSize": 2000, "policy": "producer_request_hold"})
    wait_for(lambda: stats(rest, "hold")["backlogQuotaExceeded"], "the quota to be exceeded")
    results: list[Any] = []
    producer.send_async(b"held", lambda result, msg_id: results.append(result))
    time.sleep(1.0)  # the producer was disconnected and is refused on reconnect: the send is held
    assert results == []
    with pytest.raises(pulsar.ProducerBlockedQuotaExceededError):
        client.create_producer(topic)
    rest("POST", "/persistent/public/hold/t/subscription/slow/skip_all")
    wait_for(lambda: bool(results), "the held send to complete")
    assert results == [pulsar.Result.Ok]
    assert stats(rest, "hold")["msgInCounter"] == 31
    producer.close()


def test_backlog_quota_exception_fails_the_producer(standalone: StandaloneProcess, client: Any) -> None:
    rest = Rest(standalone.http_url)
    topic = setup_namespace(rest, "exc")
    producer = fill(client, topic)
    set_quota(rest, "exc", {"limitSize": 2000, "policy": "producer_exception"})
    wait_for(lambda: stats(rest, "exc")["backlogQuotaExceeded"], "the quota to be exceeded")
    with pytest.raises(pulsar.ProducerBlockedQuotaExceededException):
        producer.send(b"refused")
    with pytest.raises(pulsar.ProducerBlockedQuotaExceededException):
        client.create_producer(topic)
    producer.close()


def test_backlog_quota_eviction_drops_the_oldest_and_keeps_producing(standalone: StandaloneProcess,
                                                                     client: Any) -> None:
    rest = Rest(standalone.http_url)
    topic = setup_namespace(rest, "evict")
    producer = fill(client, topic)
    set_quota(rest, "evict", {"limitSize": 2000, "policy": "consumer_backlog_eviction"})
    wait_for(lambda: stats(rest, "evict")["subscriptions"]["slow"]["backlogSize"] <= 2000, "eviction")
    producer.send(b"still accepted")
    consumer = client.subscribe(topic, "slow")
    first = consumer.receive(timeout_millis=5000).data()
    assert first != b"x" * 200 + b"0"  # the oldest were evicted
    consumer.close()
    producer.close()


def test_max_producers_and_ttl(standalone: StandaloneProcess, client: Any) -> None:
    rest = Rest(standalone.http_url)
    topic = setup_namespace(rest, "limits")
    rest("POST", "/namespaces/public/limits/maxProducersPerTopic", 1)
    first = client.create_producer(topic, batching_enabled=False)
    with pytest.raises(pulsar.ProducerBusy):
        client.create_producer(topic)
    for i in range(5):
        first.send(str(i).encode())
    assert stats(rest, "limits")["subscriptions"]["slow"]["msgBacklog"] == 5
    rest("POST", "/namespaces/public/limits/messageTTL", 1)
    wait_for(lambda: stats(rest, "limits")["subscriptions"]["slow"]["msgBacklog"] == 0, "TTL expiry")
    first.close()
