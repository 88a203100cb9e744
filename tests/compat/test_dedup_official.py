"""Deduplication with the official client: a producer with a fixed name resends after a reconnect
(in-process broker restart) and after a kill -9 of a real ``magnetar standalone``; a reader counts
what is stored, and every payload is there exactly once.

The resends are the client's own: the fault point ``broker.after_persist_before_receipt`` stops
receipts after a few messages are durable, so the client still holds them as pending and resends
them with their original sequence ids once it has reconnected.
"""

from __future__ import annotations

import collections
import json
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pulsar
import pytest

from magnetar import faults
from magnetar.broker import BrokerConfig
from magnetar.runtime.processes import StandaloneProcess, free_port
from tests.compat.client_log import ClientLog
from tests.compat.harness import BrokerThread

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

MESSAGES = 20
#: Deduplication is off by default (as in Pulsar's brokerDeduplicationEnabled=false); these tests
#: are about it, so their brokers turn it on (the kill -9 test: MAGNETAR_BROKER_DEDUPLICATION).
DEDUP_ON = BrokerConfig(advertised_port=0, deduplication=True)
QUIET = pulsar.ConsoleLogger(pulsar.LoggerLevel.Error)


def _client(url: str) -> Any:
    return pulsar.Client(url, operation_timeout_seconds=15, connection_timeout_ms=3000, logger=QUIET)


def _send_all_async(producer: Any, count: int) -> tuple[list[int], threading.Event]:
    """send_async ``count`` payloads; returns the indexes whose send succeeded and an all-done event."""
    ok: list[int] = []
    done = threading.Event()
    lock = threading.Lock()
    remaining = [count]

    def on_sent(result: Any, _msg_id: Any, i: int) -> None:
        with lock:
            if result == pulsar.Result.Ok:
                ok.append(i)
            remaining[0] -= 1
            if remaining[0] == 0:
                done.set()

    for i in range(count):
        producer.send_async(f"m-{i}".encode(), lambda r, m, i=i: on_sent(r, m, i))
    return ok, done


def _stored(client: Any, topic: str) -> collections.Counter[str]:
    reader = client.create_reader(topic, pulsar.MessageId.earliest)
    counts: collections.Counter[str] = collections.Counter()
    try:
        while reader.has_message_available():
            counts[reader.read_next(timeout_millis=5000).data().decode()] += 1
    finally:
        reader.close()
    return counts


def _resend_after_restart(config: BrokerConfig, topic: str, batching: bool = False,
                          hang_from_hit: int | None = None) -> tuple[collections.Counter[str], list[int]]:
    broker = BrokerThread(config).start()
    try:
        client = _client(broker.url)
        try:
            producer = client.create_producer(topic, producer_name="fixed-producer", batching_enabled=batching,
                                              batching_max_messages=3, batching_max_publish_delay_ms=1,
                                              send_timeout_millis=60_000, max_pending_messages=100)
            faults.arm("broker.after_persist_before_receipt", "hang",
                       from_hit=hang_from_hit or (3 if batching else 6))
            ok, done = _send_all_async(producer, MESSAGES)
            deadline_s = 10.0
            assert broker.call(_wait_for_entries(broker, topic, MESSAGES), deadline_s)
            broker.restart()  # receipts of 5..19 never went out: the client resends them
            faults.disarm_all()
            assert done.wait(30), "the client did not finish its sends after the restart"
            for i in range(MESSAGES, MESSAGES + 5):  # new messages after the client re-based its ids
                producer.send(f"m-{i}".encode())
                ok.append(i)
            producer.close()
            return _stored(client, topic), sorted(ok)
        finally:
            client.close()
    finally:
        broker.stop()


async def _wait_for_entries(broker: BrokerThread, topic: str, count: int) -> bool:
    """Wait (on the broker's loop, bounded by the caller) until ``count`` messages are stored."""
    import asyncio

    from magnetar.base.types import EARLIEST
    from magnetar.broker.entry import entry_message_count
    from magnetar.protocol.pulsar import stored_entry_metadata

    full = f"persistent://public/default/{topic}"
    while True:
        loaded = broker.server.service.topics.get(full) if broker.server is not None else None
        if loaded is not None:
            entries = await loaded.log.read(EARLIEST, count)
            if sum(entry_message_count(stored_entry_metadata(e.payload)) for e in entries) >= count:
                return True
        await asyncio.sleep(0.01)


@pytest.mark.parametrize("batching, hang_from_hit", [(False, None), (True, None), (False, 1)],
                         ids=["single", "batched", "no-first-receipt"])
def test_client_resends_after_reconnect_are_stored_once(batching: bool, hang_from_hit: int | None) -> None:
    """``no-first-receipt``: the client never got a receipt before the reconnect, so it re-bases its
    sequence ids on PRODUCER_SUCCESS.last_sequence_id (fact sheet quirk c16): nothing new is lost."""
    counts, ok = _resend_after_restart(DEDUP_ON, f"dedup-reconnect-{batching}-{hang_from_hit}", batching,
                                       hang_from_hit)
    assert ok == list(range(MESSAGES + 5))
    assert counts == collections.Counter({f"m-{i}": 1 for i in range(MESSAGES + 5)})


def test_negative_control_without_dedup_resends_are_stored_twice() -> None:
    counts, ok = _resend_after_restart(BrokerConfig(advertised_port=0), "dedup-off")  # the default: off
    assert ok == list(range(MESSAGES + 5))
    assert set(counts) == {f"m-{i}" for i in range(MESSAGES + 5)}
    assert sum(counts.values()) > MESSAGES + 5, counts  # the persisted-without-receipt ones came twice


@pytest.fixture
def dedup_broker() -> Iterator[BrokerThread]:
    running = BrokerThread(DEDUP_ON).start()
    try:
        yield running
    finally:
        running.stop()


def test_same_name_new_producer_gets_last_sequence_id_and_its_resends_are_dropped(dedup_broker: BrokerThread,
                                                                                   client_log: ClientLog) -> None:
    broker = dedup_broker
    client = pulsar.Client(broker.url, operation_timeout_seconds=10, connection_timeout_ms=3000,
                           logger=client_log.logger)
    try:
        _same_name_resends(broker, client)
    finally:
        client.close()


def _same_name_resends(broker: BrokerThread, client: Any) -> None:
    first = client.create_producer("dedup-names", producer_name="named", batching_enabled=False)
    for seq in range(10):
        first.send(f"m-{seq}".encode(), sequence_id=seq)
    first.close()
    broker.restart()  # the topic is loaded again: the map comes from the snapshot and the replay
    second = client.create_producer("dedup-names", producer_name="named", batching_enabled=False)
    assert second.last_sequence_id() == 9
    for seq in range(5, 15):
        second.send(f"m-{seq}".encode(), sequence_id=seq)
    assert second.last_sequence_id() == 14
    second.close()
    assert _stored(client, "dedup-names") == collections.Counter({f"m-{i}": 1 for i in range(15)})


@pytest.mark.client_errors(r"Failed to establish connection to .*: Connection refused")  # the kill -9
@pytest.mark.parametrize("dedup", [True, False], ids=["dedup", "negative-control-no-dedup"])
def test_resends_after_kill_9_of_a_real_standalone_are_stored_once(tmp_path: Path, dedup: bool) -> None:
    """The standalone SIGKILLs itself right after the 6th message is durable, before its receipt;
    the client reconnects to the restarted standalone and resends what had no receipt. With the
    ``no-dedup`` break (negative control) the resent durable message is stored twice."""
    broker_port, bookie_port = free_port(), free_port()
    data = str(tmp_path / "data")
    started: list[StandaloneProcess] = []
    try:
        first = StandaloneProcess(data, broker_port=broker_port, bookie_port=bookie_port,
                                  env={**_env(), "MAGNETAR_FAULTS": "broker.after_persist_before_receipt:crash@6"})
        started.append(first)
        client = _client(f"pulsar://127.0.0.1:{broker_port}")
        try:
            producer = client.create_producer("dedup-kill", producer_name="fixed-producer", batching_enabled=False,
                                              send_timeout_millis=60_000)
            ok, done = _send_all_async(producer, MESSAGES)
            assert first.process.wait(30) == -9  # it killed itself at the fault point
            second = StandaloneProcess(data, broker_port=broker_port, bookie_port=bookie_port,
                                       env=_env() if dedup else {**_env(), "MAGNETAR_BREAK": "no-dedup"})
            started.append(second)
            assert done.wait(60), "the client did not finish its sends after the restart"
            assert sorted(ok) == list(range(MESSAGES))
            producer.close()
            counts = _stored(client, "dedup-kill")
        finally:
            client.close()
        if dedup:
            assert counts == collections.Counter({f"m-{i}": 1 for i in range(MESSAGES)})
        else:
            assert set(counts) == {f"m-{i}" for i in range(MESSAGES)} and counts["m-5"] == 2, counts
        assert started[-1].terminate() == 0
    finally:
        for process in started:
            process.kill()


def _env() -> dict[str, str]:
    """The test's environment without armed faults, deduplication on by configuration."""
    import os

    env = {k: v for k, v in os.environ.items() if k != "MAGNETAR_FAULTS"}
    env["MAGNETAR_BROKER_DEDUPLICATION"] = "true"
    return env


# --- the default (off, as in Pulsar) and the policies that turn it on ---------------------------


def _admin(standalone: StandaloneProcess, method: str, path: str, body: Any = None) -> Any:
    data = json.dumps(body).encode() if body is not None else (b"" if method in ("PUT", "POST") else None)
    request = urllib.request.Request(f"{standalone.http_url}/admin/v2{path}", method=method, data=data,
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=10) as reply:
        raw = reply.read()
    return json.loads(raw) if raw else None


def _send_twice(client: Any, topic: str) -> collections.Counter[str]:
    """A producer with a fixed name sends one sequence id twice (what a retry after a lost receipt
    sends); what the topic stores. (Not id 0: the Python client ignores a falsy ``sequence_id``.)"""
    producer = client.create_producer(topic, producer_name="resender", batching_enabled=False)
    producer.send(b"first", sequence_id=7)
    producer.send(b"again", sequence_id=7)
    producer.close()
    return _stored(client, topic)


def _wait_until(condition: Any, what: str, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)  # polling the standalone's admin API under a deadline


def test_off_by_default_and_on_by_namespace_or_topic_policy(tmp_path: Path) -> None:
    """A default standalone stores a re-sent sequence id twice (Pulsar's brokerDeduplicationEnabled
    is false); with the namespace policy (``/namespaces/{t}/{ns}/deduplication``) or the topic policy
    (``.../deduplicationEnabled``) on, the re-send is dropped."""
    standalone = StandaloneProcess(str(tmp_path / "data"), env=_env_default())
    try:
        client = _client(standalone.broker_url)
        try:
            assert _admin(standalone, "GET", "/namespaces/public/default/deduplication") is None
            off = _send_twice(client, "persistent://public/default/dedup-default")
            assert off == collections.Counter({"first": 1, "again": 1})

            _admin(standalone, "PUT", "/namespaces/public/dedup-on")
            _admin(standalone, "POST", "/namespaces/public/dedup-on/deduplication", True)
            assert _admin(standalone, "GET", "/namespaces/public/dedup-on/deduplication") is True
            on = _send_twice(client, "persistent://public/dedup-on/resent")
            assert on == collections.Counter({"first": 1})

            topic_path = "/persistent/public/default/dedup-topic-policy"
            _admin(standalone, "PUT", topic_path)
            _admin(standalone, "POST", f"{topic_path}/deduplicationEnabled", True)
            _wait_until(lambda: _admin(standalone, "GET", f"{topic_path}/stats")["deduplicationStatus"] == "Enabled",
                        "the topic policy to reach the broker")
            on_topic = _send_twice(client, "persistent://public/default/dedup-topic-policy")
            assert on_topic == collections.Counter({"first": 1})
        finally:
            client.close()
        assert standalone.terminate() == 0
    finally:
        standalone.kill()


def _env_default() -> dict[str, str]:
    """The test's environment with no deduplication setting (the broker's default applies)."""
    import os

    return {k: v for k, v in os.environ.items() if k not in ("MAGNETAR_FAULTS", "MAGNETAR_BROKER_DEDUPLICATION")}
