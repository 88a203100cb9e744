"""The replication service's periodic passes (issue 22): between full passes only the topics that
replicate (or have not settled) are visited, so an idle broker with many topics that replicate
nowhere does no per-topic work each second; a full pass still adopts a policy change."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from magnetar.base.types import TopicName
from magnetar.broker.topic import Topic
from magnetar.catalog.policies import Policies
from magnetar.catalog.resources import ClusterData, TenantInfo
from magnetar.client.client import PulsarClient
from magnetar.client.config import ClientOptions
from magnetar.metadata.memory import MemoryMetadataServer
from magnetar.replication import ReplicationService
from magnetar.runtime.clock import SystemClock
from tests.compat.harness import BrokerThread

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def thread() -> Iterator[BrokerThread]:
    running = BrokerThread()
    running.metadata = running.call(MemoryMetadataServer(SystemClock()).connect())
    running.start()
    try:
        yield running
    finally:
        running.stop()


def _no_remote(url: str, options: ClientOptions) -> PulsarClient:
    raise ConnectionRefusedError(f"no remote cluster in this test ({url})")


def test_only_replicating_topics_stay_in_the_passes_between_full_ones(thread: BrokerThread) -> None:
    assert thread.server is not None
    service = thread.server.service
    resources = service.resources
    assert resources is not None
    local = service.config.cluster_name

    def replicate_to(clusters: list[str]) -> None:
        def change(policies: Policies) -> None:
            policies.replication_clusters = clusters

        thread.call(resources.update_policies("public/default", change))

    async def load(count: int) -> list[Topic]:
        return [await service.get_topic(TopicName.parse(f"persistent://public/default/r{i}"), create=True)
                for i in range(count)]

    topics = thread.call(load(3))
    replication = ReplicationService(service, local, _no_remote, SystemClock())
    for topic in topics:
        thread.call(replication.reconcile(topic))
    assert replication.unsettled_topics == []  # nothing replicates: the partial passes skip them all
    thread.call(replication.check(full=False))
    assert all(not t.replicators for t in topics)

    # Control: the namespace now replicates to "east"; a full pass starts replicators and every
    # topic is then visited by the partial passes too (rates sampled, replicators kept in step).
    thread.call(resources.create_cluster("east", ClusterData(broker_service_url="pulsar://127.0.0.1:9")))
    thread.call(resources.update_tenant("public", TenantInfo(allowed_clusters=[local, "east"])))
    replicate_to([local, "east"])
    thread.call(replication.check(full=False))
    assert replication.unsettled_topics == []  # a partial pass does not see the change ...
    thread.call(replication.check(full=True))  # ... a full one (nudged by the change) does
    names = [str(t.name) for t in topics]
    assert replication.unsettled_topics == sorted(names)
    assert all(list(t.replicators) == ["east"] for t in topics)

    replicate_to([local])
    thread.call(replication.check(full=False))  # replicating topics are visited: they stop replicating
    assert replication.unsettled_topics == [] and all(not t.replicators for t in topics)
    thread.call(replication.stop())
