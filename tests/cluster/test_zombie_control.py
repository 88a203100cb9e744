"""Fencing is what keeps a zombie owner harmless, and the zombie test's check catches the loss when
it is gone (negative control).

The zombie here is a broker run in this process whose ownership is made deaf on purpose (it never
learns its session ended, so it keeps serving), then whose ZooKeeper session is expired. The real
broker process takes the bundle over and opens the managed ledger: with fencing (production) the
zombie's later writes fail and nothing acknowledged is lost; with ``MAGNETAR_BREAK=no-fencing`` in
the new owner, the zombie keeps appending to the ledger the new owner already closed, the client
gets acknowledgements, and the check finds those messages missing.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from pathlib import Path
from typing import Any, TypeVar

import pulsar
import pytest

from magnetar.base.types import TopicName
from magnetar.control.ownership import BundleOwnership
from magnetar.metadata.zookeeper import ZooKeeperMetadataStore
from magnetar.runtime.broker_node import BrokerNode, BrokerNodeConfig
from magnetar.runtime.processes import free_port
from tests.cluster.helpers import SESSION_TIMEOUT_MS, Outcomes, client, owner_of, read_all, running_cluster

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]
R = TypeVar("R")


class InProcessBroker:
    """A ``BrokerNode`` on its own event-loop thread."""

    def __init__(self, metadata_url: str) -> None:
        self.node = BrokerNode(BrokerNodeConfig(metadata_url=metadata_url, port=free_port(), http_port=0,
                                                session_timeout_ms=SESSION_TIMEOUT_MS))
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="zombie-broker", daemon=True)
        self.thread.start()
        self.stop_event = self.call(self._event())
        ready = threading.Event()
        self.running = asyncio.run_coroutine_threadsafe(
            self.node.run(self.stop_event, on_ready=lambda _node: ready.set()), self.loop)
        assert ready.wait(30), "in-process broker did not start"

    async def _event(self) -> asyncio.Event:
        return asyncio.Event()

    def call(self, coro: Coroutine[Any, Any, R]) -> R:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(30)

    def take(self, topic: str) -> None:
        """Acquire the topic's bundle here (an authoritative lookup skips the load-based choice)."""

        async def take() -> None:
            ownership = self.node.ownership
            assert ownership is not None
            await ownership.lookup(TopicName.parse(topic), authoritative=True)

        self.call(take())

    def make_zombie(self) -> None:
        """Deafen the ownership to its session, then expire the session in ZooKeeper."""

        async def deafen_and_expire() -> None:
            ownership = self.node.ownership
            assert isinstance(ownership, BundleOwnership)
            ownership.store.session.remove_listener(ownership._on_session)
            ownership._on_bundle_lost = lambda _owned: None  # type: ignore[method-assign, assignment]
            assert isinstance(ownership.store, ZooKeeperMetadataStore)
            await ownership.store.expire_for_test()

        self.call(deafen_and_expire())

    def stop(self) -> None:
        try:
            self.loop.call_soon_threadsafe(self.stop_event.set)
            self.running.result(60)
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(10)


@pytest.mark.parametrize("fencing", [True, False], ids=["fencing", "no-fencing-negative-control"])
def test_a_deaf_zombie_owner_loses_nothing_with_fencing_and_the_check_finds_loss_without(
        tmp_path: Path, fencing: bool) -> None:
    env = {} if fencing else {"broker-0": {"MAGNETAR_BREAK": "no-fencing"}}
    with running_cluster(tmp_path, brokers=1, env=env) as cluster:
        zombie = InProcessBroker(cluster.metadata_url)
        try:
            topic = "persistent://public/default/deaf-zombie"
            zombie.take(topic)
            c1 = client(zombie.node.service_url)
            # A subscription from the start keeps every ledger for the read at the end (without
            # one, and without retention, the new owner trims what no cursor needs, as Pulsar does).
            c1.subscribe(topic, "hold", initial_position=pulsar.InitialPosition.Earliest).close()
            p1 = c1.create_producer(topic, batching_enabled=False, send_timeout_millis=8_000)
            outcomes = Outcomes()
            for i in range(10):
                outcomes.send_async(p1, f"z-before-{i}".encode())
            outcomes.wait(10, 30)
            assert owner_of(cluster, topic) is None  # owned by the in-process broker

            zombie.make_zombie()
            c2 = client(cluster.broker_url(0))
            p2 = c2.create_producer(topic, batching_enabled=False)
            for i in range(10):
                outcomes.acked[f"owner-{i}".encode()] = str(p2.send(f"owner-{i}".encode()))
            assert owner_of(cluster, topic) == 0
            for i in range(10):  # through the zombie, which still believes it owns the topic
                outcomes.send_async(p1, f"z-after-{i}".encode())
            # The zombie may keep the client retrying (it still answers "connect here"): sends
            # without an outcome by then are unknown, which is allowed; only acks are checked.
            outcomes.wait(30, 10, undecided_ok=True)
            c1.close()
            c2.close()
            stored = read_all(cluster.broker_url(0), topic)
        finally:
            zombie.stop()
        lost = sorted(v for v, i in outcomes.acked.items() if stored.get(v) != i)
        if fencing:
            assert lost == []
        else:
            assert lost == sorted(f"z-after-{i}".encode() for i in range(10)), lost
