"""Peek, get by id, examine, terminate and trim through ``/admin/v2`` and ``magnetar admin``, on
messages the official client sent (a real broker with its HTTP endpoint)."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from typing import Any

import pulsar
import pytest
from typer.testing import CliRunner

from magnetar.cli.admin import admin_app
from tests.admin.conftest import HttpBroker

runner = CliRunner()
TOPIC = "persistent://public/default/inspect"
PATH = "/admin/v2/persistent/public/default/inspect"


def http(broker: HttpBroker, method: str, path: str) -> tuple[int, dict[str, str], bytes]:
    request = urllib.request.Request(f"{broker.http_url}{path}", method=method,
                                     data=b"" if method == "POST" else None)
    try:
        with urllib.request.urlopen(request, timeout=10) as reply:
            return reply.status, _lower(reply.headers), reply.read()
    except urllib.error.HTTPError as error:
        return error.code, _lower(error.headers), error.read()


def _lower(headers: Any) -> dict[str, str]:
    """Header names are case-insensitive (they travel lowercased here): compare them lowercased."""
    return {k.lower(): v for k, v in headers.items()}


def cli(broker: HttpBroker, *args: str, code: int = 0) -> str:
    result = runner.invoke(admin_app, ["--url", broker.http_url, *args])
    assert result.exit_code == code, (args, result.output)
    return result.output


@pytest.fixture
def client(http_broker: HttpBroker) -> Any:
    c = pulsar.Client(http_broker.thread.url, operation_timeout_seconds=10)
    yield c
    c.close()


def test_peek_get_by_id_and_examine_answer_entries_with_pulsars_headers(http_broker: HttpBroker,
                                                                         client: Any) -> None:
    consumer = client.subscribe(TOPIC, "sub", initial_position=pulsar.InitialPosition.Earliest)
    single = client.create_producer(TOPIC, batching_enabled=False, producer_name="single")
    first = single.send(b"one", properties={"k": "v"}, partition_key="pk", event_timestamp=1_700_000_000_000)
    single.send(b"two")
    batched = client.create_producer(TOPIC, batching_enabled=True, batching_max_messages=3,
                                     batching_max_publish_delay_ms=60_000, producer_name="batched")
    for text in ("b0", "b1", "b2"):
        batched.send_async(text.encode(), None, properties={"i": text})
    batched.flush()
    consumer.acknowledge(consumer.receive(timeout_millis=5000))  # "one" acked: peek starts after it
    deadline = time.monotonic() + 10  # the client sends grouped acks within 100 ms
    while http(http_broker, "GET", f"{PATH}/subscription/sub/position/1")[2] != b"two":
        assert time.monotonic() < deadline, "the ack never reached the broker"
        time.sleep(0.02)  # polling the broker under a deadline

    status, headers, body = http(http_broker, "GET", f"{PATH}/subscription/sub/position/1")
    assert status == 200 and body == b"two"
    assert headers["x-pulsar-producer-name"] == "single" and headers["x-pulsar-sequence-id"] == "1"
    status, headers, body = http(http_broker, "GET", f"{PATH}/subscription/sub/position/2")
    assert status == 200 and headers["x-pulsar-num-batch-message"] == "3"
    assert headers["x-pulsar-batch-size"] == str(len(body))
    assert http(http_broker, "GET", f"{PATH}/subscription/sub/position/3")[0] == 404
    assert http(http_broker, "GET", f"{PATH}/subscription/nosuch/position/1")[0] == 404

    ledger, entry = first.ledger_id(), first.entry_id()
    status, headers, body = http(http_broker, "GET", f"{PATH}/ledger/{ledger}/entry/{entry}")
    assert status == 200 and body == b"one"
    assert headers["x-pulsar-message-id"] == f"{ledger}:{entry}"
    assert headers["x-pulsar-property-k"] == "v" and headers["x-pulsar-partition-key"] == "pk"
    assert headers["x-pulsar-event-time"] == "2023-11-14T22:13:20.000Z"
    assert headers["x-pulsar-publish-time"].endswith("Z") and headers["x-pulsar-is-encrypted"] == "false"
    assert http(http_broker, "GET", f"{PATH}/ledger/{ledger}/entry/{entry + 99}")[0] == 404

    assert http(http_broker, "GET", f"{PATH}/examinemessage?initialPosition=earliest&messagePosition=1")[2] == b"one"
    assert http(http_broker, "GET", f"{PATH}/examinemessage?initialPosition=earliest&messagePosition=2")[2] == b"two"
    status, headers, _ = http(http_broker, "GET", f"{PATH}/examinemessage?initialPosition=latest&messagePosition=1")
    assert headers["x-pulsar-num-batch-message"] == "3"
    assert http(http_broker, "GET", f"{PATH}/examinemessage?initialPosition=latest&messagePosition=3")[2] == b"one"
    assert http(http_broker, "GET", f"{PATH}/examinemessage?initialPosition=latest&messagePosition=4")[0] == 404
    assert http(http_broker, "GET", f"{PATH}/examinemessage?initialPosition=middle")[0] == 412

    peeked = json.loads(cli(http_broker, "topics", "peek-messages", TOPIC, "-s", "sub", "-n", "2"))
    assert [m["payload"] for m in peeked] == ["two", "b0", "b1", "b2"]
    assert peeked[2]["properties"] == {"i": "b1"} and peeked[2]["messageId"].endswith(":1")
    by_id = json.loads(cli(http_broker, "topics", "get-message-by-id", TOPIC, "-l", str(ledger), "-e", str(entry)))
    assert by_id[0]["payload"] == "one" and by_id[0]["properties"] == {"k": "v"}
    latest = json.loads(cli(http_broker, "topics", "examine-message", TOPIC, "-i", "latest", "-m", "2"))
    assert latest[0]["payload"] == "two"
    # nothing was acknowledged by looking
    assert consumer.receive(timeout_millis=5000).data() == b"two"


def test_terminate_returns_the_last_id_and_producers_fail_with_topic_terminated(http_broker: HttpBroker,
                                                                              client: Any) -> None:
    producer = client.create_producer(TOPIC, batching_enabled=False, send_timeout_millis=5000)
    producer.send(b"a")
    last = producer.send(b"b")
    status, _, body = http(http_broker, "POST", f"{PATH}/terminate")
    assert status == 200
    assert json.loads(body) == {"ledgerId": last.ledger_id(), "entryId": last.entry_id(), "partitionIndex": -1}
    with pytest.raises(pulsar.TopicTerminated):
        producer.send(b"c")
    with pytest.raises(pulsar.TopicTerminated):
        client.create_producer(TOPIC)
    assert "terminated at" in cli(http_broker, "topics", "terminate", TOPIC)  # again: the same id
    reader = client.create_reader(TOPIC, pulsar.MessageId.earliest)
    assert [reader.read_next(5000).data() for _ in range(2)] == [b"a", b"b"]  # reads go on


def test_trim_topic(http_broker: HttpBroker, client: Any) -> None:
    client.create_producer(TOPIC).send(b"x")
    assert "trimmed" in cli(http_broker, "topics", "trim-topic", TOPIC)
    assert http(http_broker, "POST", "/admin/v2/persistent/public/default/no-such-topic/trim")[0] == 404
