"""A real ``magnetar standalone`` killed (SIGKILL, through the fault point armed with ``crash``)
during a compaction, at each of its two fault points, then restarted on the same data: a
``read_compacted`` reader of the official client loses nothing and gets nothing twice, and the next
compaction completes."""

from __future__ import annotations

import json
import os
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pulsar
import pytest

from magnetar.runtime.processes import StandaloneProcess, free_port
from tests.cluster.helpers import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]
TOPIC = "persistent://public/default/compact-crash"
EXIT_DEADLINE_S = 60.0
STATUS_DEADLINE_S = 60.0
RECEIVE_TIMEOUT_MS = 2000


@pytest.fixture
def launched() -> Iterator[list[StandaloneProcess]]:
    started: list[StandaloneProcess] = []
    yield started
    for standalone in started:
        standalone.kill()


def _http(method: str, url: str) -> Any:
    request = urllib.request.Request(url, method=method, data=b"" if method == "PUT" else None)
    with urllib.request.urlopen(request, timeout=10) as reply:
        raw = reply.read()
    return json.loads(raw) if raw else None


def _compaction_url(standalone: StandaloneProcess) -> str:
    return f"{standalone.http_url}/admin/v2/persistent/public/default/compact-crash/compaction"


def _compact(standalone: StandaloneProcess) -> None:
    url = _compaction_url(standalone)
    _http("PUT", url)
    wait_until(lambda: _http("GET", url)["status"] != "RUNNING", STATUS_DEADLINE_S, "the compaction to end")
    assert _http("GET", url) == {"status": "SUCCESS", "lastError": ""}


def _produce(url: str, values: dict[str, bytes]) -> None:
    client = pulsar.Client(url, operation_timeout_seconds=15, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    try:
        producer = client.create_producer(TOPIC, batching_enabled=True, batching_max_publish_delay_ms=5)
        for key, value in values.items():
            producer.send_async(value, None, partition_key=key)
        producer.flush()
    finally:
        client.close()


def _compacted_read(url: str) -> list[tuple[str, bytes, str]]:
    client = pulsar.Client(url, operation_timeout_seconds=15, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    try:
        reader = client.create_reader(TOPIC, pulsar.MessageId.earliest, is_read_compacted=True)
        out = []
        while True:
            try:
                message = reader.read_next(RECEIVE_TIMEOUT_MS)
            except pulsar.Timeout:
                return out
            out.append((message.partition_key(), message.data(), str(message.message_id())))
    finally:
        client.close()


def _state(messages: list[tuple[str, bytes, str]]) -> dict[str, bytes]:
    ids = [m[2] for m in messages]
    assert len(ids) == len(set(ids)), "a message was read twice"
    state: dict[str, bytes] = {}
    for key, value, _ in messages:
        if value:
            state[key] = value
        else:
            state.pop(key, None)
    return state


@pytest.mark.parametrize("point", ["broker.compaction.after_write_before_record",
                                   "broker.compaction.after_record_before_delete"])
def test_crash_during_compaction_loses_and_duplicates_nothing(tmp_path: Path, launched: list[StandaloneProcess],
                                                              point: str) -> None:
    ports = {"broker_port": free_port(), "bookie_port": free_port(), "web_port": free_port()}
    data = str(tmp_path / "data")
    env = dict(os.environ, MAGNETAR_FAULTS=f"{point}:crash@2")  # the second compaction dies there
    first = StandaloneProcess(data, env=env, **ports)
    launched.append(first)
    expected = {f"k{i}": f"r1-{i}".encode() for i in range(50)}
    _produce(first.broker_url, expected)
    _compact(first)
    round_two = {f"k{i}": f"r2-{i}".encode() for i in range(0, 50, 2)} | {"k1": b"", "k99": b"r2-99"}
    _produce(first.broker_url, round_two)
    _http("PUT", _compaction_url(first))
    assert first.process.wait(EXIT_DEADLINE_S) != 0  # killed at the fault point
    expected.update(round_two)
    del expected["k1"]

    second = StandaloneProcess(data, **ports)
    launched.append(second)
    assert _state(_compacted_read(second.broker_url)) == expected
    _compact(second)
    after = _compacted_read(second.broker_url)
    assert _state(after) == expected
    assert len(after) == len(expected)  # all below the new horizon now: one message per key
