"""Per-connection bound on unanswered SENDs (Pulsar's maxPendingPublishRequestsPerConnection).

Three producers of one official client share one connection; appends are held back, so nothing
is answered. The broker must stop reading the connection once ``pending_sends_per_connection_max``
SENDs are unanswered (the client's queues then fill), not take every producer's 1,000, and must not
hand over the rest of the receive that reached the bound either (exactly the bound is accepted).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator, Sequence
from typing import Any

import pulsar
import pytest

from magnetar.base.types import Position
from magnetar.broker import BrokerConfig, MemoryLogStore
from magnetar.broker.log import AppendCallback
from magnetar.broker.memory_log import MemoryTopicLog
from tests.broker.fakes import append, append_each_then
from tests.compat.harness import BrokerThread

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

PRODUCERS = 3
PER_PRODUCER = 1000


class _HeldLog:
    """A memory log whose appends wait until ``gate`` is set."""

    def __init__(self, inner: MemoryTopicLog, gate: asyncio.Event) -> None:
        self.inner = inner
        self.gate = gate

    def __getattr__(self, name: str) -> object:
        return getattr(self.inner, name)

    def append_run(self, run: Sequence[tuple[bytes, AppendCallback]]) -> None:
        append_each_then(run, self._append)

    async def _append(self, data: bytes) -> Position:
        await self.gate.wait()
        return await append(self.inner, data)


class _HeldStore(MemoryLogStore):
    def __init__(self) -> None:
        super().__init__()
        self.gate: asyncio.Event | None = None

    async def open_log(self, topic: str, *, create: bool) -> Any:
        if self.gate is None:
            self.gate = asyncio.Event()
        inner = await super().open_log(topic, create=create)
        return _HeldLog(inner, self.gate) if "held-" in topic else inner


def _accepted(broker: BrokerThread) -> int:
    async def count() -> int:
        assert broker.server is not None
        return sum(producer.pending_count for topic in broker.server.service.topics.values()
                   for producer in topic.producers.values())

    return broker.call(count())


@pytest.fixture(params=[1000, 10_000], ids=["bounded", "negative-control-unbounded"])
def held(request: pytest.FixtureRequest) -> Iterator[tuple[BrokerThread, _HeldStore, int]]:
    store = _HeldStore()
    broker = BrokerThread(BrokerConfig(advertised_port=0, pending_sends_per_connection_max=request.param),
                          log_store=store).start()
    try:
        yield broker, store, request.param
    finally:
        broker.stop()


def test_a_connection_stops_being_read_at_its_pending_bound(held: tuple[BrokerThread, _HeldStore, int]) -> None:
    broker, store, bound = held
    client = pulsar.Client(broker.url, operation_timeout_seconds=30,
                           logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    try:
        producers = [client.create_producer(f"persistent://public/default/held-{i}", batching_enabled=False,
                                            max_pending_messages=PER_PRODUCER, block_if_queue_full=False,
                                            send_timeout_millis=60_000) for i in range(PRODUCERS)]
        results: list[Any] = []
        payload = b"x" * 1024
        for _ in range(PER_PRODUCER):
            for producer in producers:
                producer.send_async(payload, lambda result, _id: results.append(result))
        time.sleep(2.0)  # the broker reads what it will read
        accepted = _accepted(broker)
        if bound >= PRODUCERS * PER_PRODUCER:  # the negative control: every SEND is taken
            assert accepted == PRODUCERS * PER_PRODUCER
        else:  # exactly the bound: the rest of a read waits for room too (not a read's worth beyond it)
            assert accepted == bound, accepted
        assert store.gate is not None
        broker.loop.call_soon_threadsafe(store.gate.set)
        deadline = time.monotonic() + 30
        while len(results) < PRODUCERS * PER_PRODUCER and time.monotonic() < deadline:
            time.sleep(0.05)
        assert results.count(pulsar.Result.Ok) == PRODUCERS * PER_PRODUCER
    finally:
        client.close()
