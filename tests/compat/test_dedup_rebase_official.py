"""The official client's sequence-id re-base (fact sheet §4, quirk c16) against deduplication.

The 4.2.0 client numbers a message when it is sent. If its connection drops before its *first*
receipt, it re-bases its generator on PRODUCER_SUCCESS.last_sequence_id (L) when it reconnects:
its next new message gets L+1, although a message it still holds (and resends) may already carry
L+1. That is how the elastic run's leader-kill phase lost ``q22:1`` and ``q23:1`` (docs/elastic.md,
"2 values lost"): the resend was stored, the new message under the same id was answered as a
duplicate with message id (-1, -1) and never stored. Reproduced here deterministically: the broker
is down (or the first message is durable without its receipt) while the client holds a message
no broker has stored, then it reconnects to the broker over the same store.

Every acknowledged message must be in the topic exactly once, and none acknowledged with (-1, -1).
Negative control: the ``no-rebase-check`` break restores the old judgement and the new message
is acknowledged with (-1, -1) and missing.
"""

from __future__ import annotations

import collections
import threading
from typing import Any

import pulsar
import pytest

from magnetar import faults
from magnetar.base.types import TopicName
from magnetar.faults import breaks
from tests.compat.harness import BrokerThread
from tests.compat.test_dedup_official import DEDUP_ON, QUIET, _stored, _wait_for_entries

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

NEW_AFTER_RECONNECT = 3


class _Sends:
    """send_async callbacks: the message id each payload was acknowledged with."""

    def __init__(self) -> None:
        self.acked: dict[str, tuple[int, int]] = {}
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)

    def send_async(self, producer: Any, payload: str) -> None:
        def done(result: Any, message_id: Any) -> None:
            with self._lock:
                if result == pulsar.Result.Ok:
                    self.acked[payload] = (message_id.ledger_id(), message_id.entry_id())
                self._changed.notify_all()

        producer.send_async(payload.encode(), done)

    def wait_for(self, payloads: list[str], timeout_s: float = 30.0) -> None:
        with self._changed:
            assert self._changed.wait_for(lambda: all(p in self.acked for p in payloads), timeout_s), (
                f"not acknowledged: {[p for p in payloads if p not in self.acked]}")


async def _unload(broker: BrokerThread, topic: str) -> None:
    """What the admin unload (and a bundle move) does: CLOSE_PRODUCER, then close the topic."""
    assert broker.server is not None
    service = broker.server.service
    name = TopicName.parse(f"persistent://public/default/{topic}")
    service.topics[str(name)].disconnect_producers()
    await service.unload(name)


def _run(scenario: str, topic: str, broken: bool = False) -> tuple[_Sends, collections.Counter[str]]:
    """``nothing-persisted``: the first message is sent while the broker is down. ``first-persisted``:
    the first is durable but its receipt held (no receipt ever reached the client), the second is
    sent while the broker is down. Then the broker comes back, and new messages follow.
    ``unload``: as ``first-persisted``, but the topic is unloaded (as a bundle move does) and the
    second is sent at once, while the client waits its ~100 ms to reconnect; the same broker loads
    the topic again. (Sent after the reconnect instead, it would get a fresh id: no reuse, and the
    same outcome.) ``broken``: under the ``no-rebase-check`` negative control."""
    broker = BrokerThread(DEDUP_ON).start()
    sends = _Sends()
    try:
        client = pulsar.Client(broker.url, operation_timeout_seconds=15, connection_timeout_ms=3000, logger=QUIET)
        try:
            producer = client.create_producer(topic, batching_enabled=False, send_timeout_millis=30_000)
            held = [] if scenario == "nothing-persisted" else ["v0"]
            if held:
                faults.arm("broker.after_persist_before_receipt", "hang", from_hit=1)
                sends.send_async(producer, "v0")
                assert broker.call(_wait_for_entries(broker, topic, 1), 10.0)
            if scenario == "unload":
                broker.call(_unload(broker, topic))  # CLOSE_PRODUCER: it reconnects after ~100 ms
                faults.release("broker.after_persist_before_receipt")
            else:
                broker.stop_server()  # the topic "moves": its producer loses its connection
            faults.disarm_all()
            if broken:
                breaks.enable(breaks.Break.NO_REBASE_CHECK)  # the autouse fixture's disarm_all ends it
            queued = [f"v{len(held)}"]
            sends.send_async(producer, queued[0])  # numbered now, stored by no broker yet
            if scenario != "unload":
                broker.start()  # the new owner, over the same store
            sends.wait_for(held + queued)
            new = [f"v{i}" for i in range(len(held) + 1, len(held) + 1 + NEW_AFTER_RECONNECT)]
            for payload in new:
                sends.send_async(producer, payload)
            sends.wait_for(new)
            producer.close()
            return sends, _stored(client, topic)
        finally:
            client.close()
    finally:
        broker.stop()


@pytest.mark.client_errors(r"Failed to establish connection to .*: Connection refused")  # the stopped broker
@pytest.mark.parametrize("scenario", ["nothing-persisted", "first-persisted", "unload"])
def test_new_messages_after_a_reconnect_before_the_first_receipt_are_all_stored(scenario: str) -> None:
    sends, stored = _run(scenario, f"rebase-{scenario}")
    payloads = sorted(sends.acked)
    assert stored == collections.Counter({p: 1 for p in payloads}), (stored, sends.acked)
    duplicates = [p for p, message_id in sends.acked.items() if message_id == (-1, -1)]
    held = scenario != "nothing-persisted"
    assert duplicates == (["v0"] if held else [])  # the held v0 is resent: the duplicate it is
    assert len(payloads) == (2 if held else 1) + NEW_AFTER_RECONNECT


def test_negative_control_without_the_rebase_check_a_new_message_is_lost() -> None:
    sends, stored = _run("nothing-persisted", "rebase-negative-control", broken=True)
    assert sends.acked["v1"] == (-1, -1)  # the first new message reused v0's id 0
    assert "v1" not in stored and stored["v0"] == 1, stored
