"""The replication service's periodic passes (issue 22): between full passes only the topics that
replicate (or have not settled) are visited, so an idle broker with many topics that replicate
nowhere does no per-topic work each second; a full pass still adopts a policy change."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import pytest

from magnetar.base.types import TopicName
from magnetar.broker.service import BrokerService
from magnetar.broker.topic import Topic
from magnetar.catalog.policies import Policies, TopicPolicies
from magnetar.catalog.resources import ClusterData, Resources, TenantInfo
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


def test_a_full_pass_visits_only_the_topics_that_may_replicate(thread: BrokerThread) -> None:
    """Many topics in a namespace naming no other cluster, a few in one that does: a full pass
    reconciles the few (the old walk of every loaded topic reconciled all 43), yet still adopts a
    topic-level list, a widened tenant and a namespace that starts naming another cluster."""
    service, resources, local = _geo_namespace(thread)
    thread.call(resources.update_tenant("public", TenantInfo(allowed_clusters=[local])))  # narrowed later

    async def load(namespace: str, prefix: str, count: int) -> list[Topic]:
        return [await service.get_topic(TopicName.parse(f"persistent://{namespace}/{prefix}{i}"), create=True)
                for i in range(count)]

    quiet = thread.call(load("public/default", "quiet", 40))
    geo = thread.call(load("public/geo", "geo", 3))
    replication = ReplicationService(service, local, _no_remote, SystemClock())
    # What ``start`` registers, without its periodic loop (this test runs every pass itself).
    service.policies.listeners.append(replication._policy_changed)
    for topic in [*quiet, *geo]:
        thread.call(replication.reconcile(topic))
    visited: list[str] = []
    reconcile = replication.reconcile

    async def counting(topic: Topic, tenants: dict[str, list[str] | None] | None = None) -> None:
        visited.append(str(topic.name))
        await reconcile(topic, tenants)

    replication.reconcile = counting  # type: ignore[method-assign]

    def full_pass() -> list[str]:
        visited.clear()
        thread.call(replication.check(full=True))
        return sorted(visited)

    geo_names = sorted(str(t.name) for t in geo)
    # The tenant does not allow "east" yet: nothing replicates, but the geo topics may (a tenant
    # has no listener), so the full pass visits them, and only them.
    assert full_pass() == geo_names
    assert all(not t.replicators for t in [*quiet, *geo])
    thread.call(resources.update_tenant("public", TenantInfo(allowed_clusters=[local, "east"])))
    assert full_pass() == geo_names and all(list(t.replicators) == ["east"] for t in geo)
    assert all(not t.replicators for t in quiet)

    # A topic-level list on one quiet topic: reported by the cache's listener, adopted at once,
    # and that topic is visited from then on (its list overrides the namespace's).
    def change(policies: TopicPolicies) -> None:
        policies.replication_clusters = [local, "east"]

    thread.call(resources.update_topic_policies(quiet[0].name, change))
    _wait_for(lambda: (found := thread.call(service.policies.topic_policies(quiet[0].name))) is not None
              and found.replication_clusters is not None)
    assert full_pass() == sorted([*geo_names, str(quiet[0].name)])
    assert list(quiet[0].replicators) == ["east"]
    thread.call(resources.delete_topic_policies(quiet[0].name))
    _wait_for(lambda: thread.call(service.policies.topic_policies(quiet[0].name)) is None)
    assert str(quiet[0].name) in full_pass() and not quiet[0].replicators
    assert full_pass() == geo_names  # settled: visited no more

    # Negative control: once public/default names another cluster, the full pass visits all 43.
    def replicate(policies: Policies) -> None:
        policies.replication_clusters = [local, "east"]

    thread.call(resources.update_policies("public/default", replicate))
    _wait_for(lambda: (found := thread.call(service.policies.namespace_policies("public/default"))) is not None
              and "east" in found.replication_clusters)
    assert full_pass() == sorted(str(t.name) for t in [*quiet, *geo])
    assert all(list(t.replicators) == ["east"] for t in quiet)
    thread.call(replication.stop())


def _wait_for(condition: Callable[[], bool], timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"


def test_a_standalone_loads_the_stored_topics_of_replicated_namespaces(thread: BrokerThread) -> None:
    """A stored topic not loaded, in a namespace that replicates, is loaded by the pass (its
    backlog drains without a client); one in a namespace that does not stays unloaded."""
    service, _resources, local = _geo_namespace(thread)
    geo, quiet = (TopicName.parse(f"persistent://public/{ns}/stored") for ns in ("geo", "default"))
    for name in (geo, quiet):
        thread.call(service.get_topic(name, create=True))
        thread.call(service.unload(name))
    assert str(geo) not in service.topics and str(quiet) not in service.topics
    replication = ReplicationService(service, local, _no_remote, SystemClock(), load_replicated_topics=True)
    thread.call(replication.start())  # its first pass loads them, the load hook starts replicators
    _wait_for(lambda: str(geo) in service.topics and list(service.topics[str(geo)].replicators) == ["east"])
    assert str(quiet) not in service.topics
    thread.call(replication.stop())


def _geo_namespace(thread: BrokerThread) -> tuple[BrokerService, Resources, str]:
    """A remote cluster "east" that tenant "public" allows and namespace "public/geo" replicates
    to: (the broker service, its resources, the local cluster's name)."""
    assert thread.server is not None
    service = thread.server.service
    resources = service.resources
    assert resources is not None
    local = service.config.cluster_name
    thread.call(resources.create_cluster("east", ClusterData(broker_service_url="pulsar://127.0.0.1:9")))
    thread.call(resources.update_tenant("public", TenantInfo(allowed_clusters=[local, "east"])))
    thread.call(resources.create_namespace("public/geo", Policies(replication_clusters=[local, "east"])))
    return service, resources, local
