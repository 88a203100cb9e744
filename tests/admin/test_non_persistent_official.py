"""Non-persistent topics with the official client and the admin API: publishes dropped at the
connection's in-flight bound (Pulsar's ``maxConcurrentNonPersistentMessagePerConnection``, the
publisher's ``msgDropRate``), partitioned non-persistent topics (``.../partitions``,
``partitioned-stats``), and a namespace delete that unloads its non-persistent topics."""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
from typing import Any

import pulsar
import pytest

from magnetar import faults
from magnetar.broker import BrokerConfig
from tests.admin.conftest import HttpBroker, running_http_broker

pytestmark = pytest.mark.timeout(120)
NP = "/admin/v2/non-persistent/public/default"
RECEIVE_TIMEOUT_MS = 800
WAIT_S = 10.0
RECEIPT_GATE = "broker.after_persist_before_receipt"


def _call(broker: HttpBroker, method: str, path: str, body: Any = None) -> tuple[int, Any]:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(f"{broker.http_url}{path}", method=method, data=data,
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=10) as reply:
            raw = reply.read()
            return reply.status, json.loads(raw) if raw else None
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def _client(broker: HttpBroker) -> Any:
    return pulsar.Client(broker.thread.url, operation_timeout_seconds=10,
                         logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))


def _drain(consumer: Any) -> list[bytes]:
    out = []
    while True:
        try:
            message = consumer.receive(RECEIVE_TIMEOUT_MS)
        except pulsar.Timeout:
            return out
        out.append(message.data())
        consumer.acknowledge(message)


def _wait_until(condition: Any, what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)  # polling the broker under a deadline


def _publishes_while_receipts_are_held(bound: int, sends: int) -> tuple[list[bytes], dict[str, Any], list[Any]]:
    """A consumer, then ``sends`` async sends while the broker holds its receipts (so that many
    SENDs are in flight on the producer's connection); released once the broker has them all.
    Returns what the consumer got, the topic's stats and the client's send results."""
    config = BrokerConfig(advertised_port=0, max_concurrent_non_persistent_messages_per_connection=bound)
    with running_http_broker(config) as broker:
        client = _client(broker)
        try:
            topic = "non-persistent://public/default/np-publish-drops"
            consumer = client.subscribe(topic, "s", receiver_queue_size=1000)
            producer = client.create_producer(topic, batching_enabled=False, producer_name="p")
            results: list[Any] = []
            done = threading.Event()

            def sent(result: Any, _msg_id: Any) -> None:
                results.append(result)
                if len(results) == sends:
                    done.set()

            faults.arm(RECEIPT_GATE, "hang")
            try:
                # The first receipt is held at the gate (that SEND is answered as far as the bound
                # goes); every later SEND stays in flight behind it.
                producer.send_async(b"m0", sent)
                _wait_until(lambda: faults.hits(RECEIPT_GATE) == 1, "the first receipt held")
                for i in range(1, sends):
                    producer.send_async(f"m{i}".encode(), sent)
                loaded = broker.thread.server.service.topics[topic]  # type: ignore[union-attr]
                _wait_until(lambda: loaded.published.msg_count + loaded.producers["p"].dropped.msg_count == sends,
                            "every SEND published or dropped at the broker")
            finally:
                async def release() -> None:  # on the broker's loop: the gate's event is its
                    faults.disarm_all()

                broker.thread.call(release())
            assert done.wait(WAIT_S), "the held receipts did not come"
            got = _drain(consumer)
            producer.send(b"later")  # nothing in flight any more: published again
            got += _drain(consumer)
            status, stats = _call(broker, "GET", f"{NP}/np-publish-drops/stats")
            assert status == 200
            return got, stats, results
        finally:
            client.close()


def test_publishes_beyond_the_in_flight_bound_are_dropped_and_counted() -> None:
    got, stats, results = _publishes_while_receipts_are_held(bound=3, sends=10)
    assert results == [pulsar.Result.Ok] * 10  # a dropped publish is answered, as Pulsar does
    assert got == [b"m0", b"m1", b"m2", b"m3", b"later"]  # m1..m3 in flight at the bound, m4..m9 dropped
    (publisher,) = stats["publishers"]
    assert publisher["msgDropCount"] == 6 and "msgDropRate" in publisher
    assert stats["msgDropCount"] == 6 and stats["msgInCounter"] == 5


def test_negative_control_within_the_bound_nothing_is_dropped() -> None:
    got, stats, results = _publishes_while_receipts_are_held(bound=1000, sends=10)
    assert results == [pulsar.Result.Ok] * 10
    assert got == [f"m{i}".encode() for i in range(10)] + [b"later"]
    assert stats["publishers"][0]["msgDropCount"] == 0 and stats["msgDropCount"] == 0


def test_partitioned_non_persistent_topic() -> None:
    with running_http_broker() as broker:
        assert _call(broker, "PUT", f"{NP}/npp/partitions", 3) == (204, None)
        assert _call(broker, "PUT", f"{NP}/npp/partitions", 3)[0] == 409
        assert _call(broker, "GET", f"{NP}/npp/partitions") == (200, {"partitions": 3})
        assert _call(broker, "GET", f"{NP}/partitioned") == (200, ["non-persistent://public/default/npp"])
        assert _call(broker, "GET", "/admin/v2/persistent/public/default/partitioned") == (200, [])
        client = _client(broker)
        try:
            topic = "non-persistent://public/default/npp"
            assert len(client.get_topic_partitions(topic)) == 3
            consumer = client.subscribe(topic, "s", receiver_queue_size=1000)
            producer = client.create_producer(topic, batching_enabled=False)
            for i in range(9):
                producer.send(f"m{i}".encode(), partition_key=f"k{i}")
            assert sorted(_drain(consumer)) == sorted(f"m{i}".encode() for i in range(9))
            status, stats = _call(broker, "GET", f"{NP}/npp/partitioned-stats")
            assert status == 200 and stats["metadata"] == {"partitions": 3}
            assert stats["msgInCounter"] == 9 and stats["msgDropCount"] == 0
            assert _call(broker, "POST", f"{NP}/npp/partitions", 4) == (204, None)
            assert _call(broker, "GET", f"{NP}/npp/partitions") == (200, {"partitions": 4})
            assert _call(broker, "DELETE", f"{NP}/npp/partitions")[0] == 412  # clients attached
            producer.close()
            consumer.close()
        finally:
            client.close()
        assert _call(broker, "DELETE", f"{NP}/npp/partitions") == (204, None)
        assert _call(broker, "GET", f"{NP}/npp/partitions") == (200, {"partitions": 0})
        assert _call(broker, "GET", f"{NP}/npp/partitioned-stats")[0] == 404
        loaded = broker.thread.server.service.topics  # type: ignore[union-attr]
        assert not [t for t in loaded if t.startswith("non-persistent://public/default/npp")]


def test_a_namespace_delete_unloads_its_non_persistent_topics() -> None:
    with running_http_broker() as broker:
        assert _call(broker, "PUT", "/admin/v2/namespaces/public/np-ns")[0] == 204
        client = _client(broker)
        try:
            producer = client.create_producer("non-persistent://public/np-ns/t")
            producer.send(b"x")
            service = broker.thread.server.service  # type: ignore[union-attr]
            assert "non-persistent://public/np-ns/t" in service.topics
            assert _call(broker, "DELETE", "/admin/v2/namespaces/public/np-ns")[0] == 409  # not empty
            assert _call(broker, "DELETE", "/admin/v2/namespaces/public/np-ns?force=true")[0] == 204
            assert "non-persistent://public/np-ns/t" not in service.topics
            assert _call(broker, "GET", "/admin/v2/non-persistent/public/np-ns")[0] == 404
        finally:
            client.close()
