"""Deduplication with the official client: a producer with a fixed name resends after a reconnect
(in-process broker restart) and after a kill -9 of a real ``magnetar standalone``; a reader counts
what is stored, and every payload is there exactly once.

The resends are the client's own: the fault point ``broker.after_persist_before_receipt`` stops
receipts after a few messages are durable, so the client still holds them as pending and resends
them with their original sequence ids once it has reconnected.
"""

from __future__ import annotations

import collections
import dataclasses
import threading
from pathlib import Path
from typing import Any

import pulsar
import pytest

from magnetar import faults
from magnetar.broker import BrokerConfig
from magnetar.runtime.processes import StandaloneProcess, free_port
from tests.compat.harness import BrokerThread

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

MESSAGES = 20
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
            if sum(entry_message_count(stored_entry_metadata(e.data)) for e in entries) >= count:
                return True
        await asyncio.sleep(0.01)


@pytest.mark.parametrize("batching, hang_from_hit", [(False, None), (True, None), (False, 1)],
                         ids=["single", "batched", "no-first-receipt"])
def test_client_resends_after_reconnect_are_stored_once(batching: bool, hang_from_hit: int | None) -> None:
    """``no-first-receipt``: the client never got a receipt before the reconnect, so it re-bases its
    sequence ids on PRODUCER_SUCCESS.last_sequence_id (fact sheet quirk c16): nothing new is lost."""
    counts, ok = _resend_after_restart(BrokerConfig(advertised_port=0), f"dedup-reconnect-{batching}-{hang_from_hit}",
                                       batching, hang_from_hit)
    assert ok == list(range(MESSAGES + 5))
    assert counts == collections.Counter({f"m-{i}": 1 for i in range(MESSAGES + 5)})


def test_negative_control_without_dedup_resends_are_stored_twice() -> None:
    config = dataclasses.replace(BrokerConfig(advertised_port=0), deduplication=False)
    counts, ok = _resend_after_restart(config, "dedup-off")
    assert ok == list(range(MESSAGES + 5))
    assert set(counts) == {f"m-{i}" for i in range(MESSAGES + 5)}
    assert sum(counts.values()) > MESSAGES + 5, counts  # the persisted-without-receipt ones came twice


def test_same_name_new_producer_gets_last_sequence_id_and_its_resends_are_dropped(broker: BrokerThread,
                                                                                   client: Any) -> None:
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
    import os

    return {k: v for k, v in os.environ.items() if k != "MAGNETAR_FAULTS"}
