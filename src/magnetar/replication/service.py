"""The replication service of one broker: a replicator per loaded topic and remote cluster.

* When a topic loads (``BrokerService.topic_load_hooks``, awaited before the topic admits anyone)
  its replication clusters are resolved (``policy.remote_targets``: topic list over namespace list,
  capped by the tenant's allowed clusters) and a ``Replicator`` is made for each remote: its cursor
  is opened then, so every entry the topic takes afterwards is covered.
* At once on a policy change seen by this broker, and every ``REPLICATION_FULL_CHECK_EVERY_PASSES``
  passes, the loaded topics that may replicate are reconciled: replicators for new remotes start,
  those of remotes that left the list stop and their cursors are deleted (they would hold the
  ledgers back forever). A full pass costs O(namespaces + topics that may replicate), not O(loaded
  topics): it reads each namespace's (cached) policies once and visits the topics of namespaces
  whose list names another cluster, those with a topic-level list, those that replicate or have
  not settled, and those whose topic-policy node a listener reported changed. Any other topic has
  no replicator and inherits a namespace list naming no other cluster, whatever the tenant allows:
  it replicates nowhere, and a reconcile would change nothing.
  The passes in between (every ``REPLICATION_CHECK_INTERVAL_MS``) reconcile only the topics that
  replicate or have not settled, and sample rates: an idle broker with 100,000 topics that
  replicate nowhere does no per-topic work each second. A broker that serves every topic alone (a standalone) also loads the topics of
  replicated namespaces, so a backlog left by a crash drains without waiting for a client.
* Remote clusters are read from ``/admin/clusters/{name}`` (``brokerServiceUrl``, credentials);
  one asyncio client per remote, made again when the cluster's data changes.
* A closing topic stops its replicators first (``Topic.close_hooks``), keeping their cursors.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

from magnetar.base.clock import Clock
from magnetar.base.errors import InvalidArgumentError, LimitExceededError, NotFoundError
from magnetar.base.limits import (
    REPLICATION_CHECK_INTERVAL_MS,
    REPLICATION_CONNECT_TIMEOUT_MS,
    REPLICATION_FULL_CHECK_EVERY_PASSES,
    REPLICATION_LOAD_TOPICS_EVERY_PASSES,
    REPLICATION_PRODUCER_QUEUE_COUNT_MAX,
    REPLICATION_REMOTE_BACKOFF_MAX_MS,
    REPLICATION_REPLICATORS_COUNT_MAX,
)
from magnetar.base.types import TopicName
from magnetar.broker.dedup import REPL_DEDUP_CURSOR_NAME, REPLICATION_CURSOR_PREFIX
from magnetar.broker.replicated import REPL_PARTITIONS_PRODUCER_PROPERTY
from magnetar.broker.service import BrokerService
from magnetar.broker.topic import Topic, TopicState
from magnetar.catalog.lookup import SingleBrokerLookup
from magnetar.catalog.policies import decode_policies, namespace_path, topic_policies_path
from magnetar.catalog.resources import ClusterData
from magnetar.client.client import PulsarClient
from magnetar.client.config import ClientOptions, ProducerConfig
from magnetar.client.producer import Producer
from magnetar.replication.policy import remote_targets
from magnetar.replication.replicator import Replicator
from magnetar.replication.subscriptions import SubscriptionsController

log = logging.getLogger(__name__)

#: Makes a client for a remote cluster: (broker service URL, options) -> client.
ClientFactory = Callable[[str, ClientOptions], PulsarClient]


@dataclass(frozen=True, slots=True)
class RemoteCluster:
    name: str
    broker_service_url: str
    auth_method_name: str
    auth_data: bytes | None


def remote_cluster(name: str, data: ClusterData) -> RemoteCluster:
    """How replicators reach cluster ``name``: its ``brokerServiceUrl`` and the credentials from
    ``authenticationPlugin`` / ``authenticationParameters`` (``token`` + ``token:<jwt>`` or the
    bare token; any other plugin name is sent as the CONNECT's auth method with the parameters)."""
    if not data.broker_service_url:
        raise InvalidArgumentError(f"cluster {name} has no brokerServiceUrl")
    plugin, params = data.authentication_plugin, data.authentication_parameters
    if not plugin:
        return RemoteCluster(name, data.broker_service_url, "none", None)
    if plugin == "token" or plugin.endswith("AuthenticationToken"):
        token = params[len("token:"):] if params.startswith("token:") else params
        return RemoteCluster(name, data.broker_service_url, "token", token.encode())
    return RemoteCluster(name, data.broker_service_url, plugin, params.encode())


class RemoteClients:
    """One client per remote cluster, replaced when the cluster's registration changes."""

    def __init__(self, service: BrokerService, factory: ClientFactory) -> None:
        self._service = service
        self._factory = factory
        self._clients: dict[str, tuple[RemoteCluster, PulsarClient]] = {}

    async def _client(self, name: str) -> PulsarClient:
        resources = self._service.resources
        if resources is None:
            raise NotFoundError("no metadata store: no clusters")
        wanted = remote_cluster(name, await resources.cluster(name))
        found = self._clients.get(name)
        if found is not None and found[0] == wanted:
            return found[1]
        if found is not None:
            await found[1].close()
        options = ClientOptions(operation_timeout_ms=REPLICATION_CONNECT_TIMEOUT_MS,
                                auth_method_name=wanted.auth_method_name, auth_data=wanted.auth_data,
                                backoff_max_ms=REPLICATION_REMOTE_BACKOFF_MAX_MS)
        client = self._factory(wanted.broker_service_url, options)
        self._clients[name] = (wanted, client)
        return client

    async def producer(self, remote: str, topic: str, producer_name: str, partitions: int) -> Producer:
        """The remote producer; ``partitions``: the source's partition count when ``topic`` is a
        partition (the remote creates the partitioned topic from it if it has none)."""
        client = await self._client(remote)
        properties = {REPL_PARTITIONS_PRODUCER_PROPERTY: str(partitions)} if partitions else {}
        made = await client.create_producer(topic, ProducerConfig(
            producer_name=producer_name, send_timeout_ms=0, batching_enabled=False,
            max_pending_messages=REPLICATION_PRODUCER_QUEUE_COUNT_MAX, properties=properties))
        if not isinstance(made, Producer):
            await made.close()
            raise InvalidArgumentError(f"{topic} is partitioned in cluster {remote} and not here")
        return made

    async def close(self) -> None:
        clients, self._clients = self._clients, {}
        for _, client in clients.values():
            with contextlib.suppress(Exception):
                await client.close()


class ReplicationService:
    def __init__(self, service: BrokerService, local_cluster: str, client_factory: ClientFactory, clock: Clock,
                 *, load_replicated_topics: bool | None = None) -> None:
        self.service = service
        self.local = local_cluster
        self.clock = clock
        self.remotes = RemoteClients(service, client_factory)
        self._load_replicated = (isinstance(service.lookup, SingleBrokerLookup) if load_replicated_topics is None
                                 else load_replicated_topics)
        self._task: asyncio.Task[None] | None = None
        self._reconciling: dict[str, asyncio.Lock] = {}
        #: Loaded topics that replicate, or whose last reconcile did not end settled (no remote
        #: wanted, no replicator, stale cursors swept): the passes between full ones visit these.
        self._unsettled: dict[str, Topic] = {}
        self._full_wanted = True
        #: Loaded topics by namespace, and by topic-policy node (a partitioned topic's partitions
        #: share one): what a full pass visits is found from these, not by walking every topic.
        self._by_namespace: dict[str, dict[str, Topic]] = {}
        self._by_policy_node: dict[str, dict[str, Topic]] = {}
        #: Loaded topics whose topic-level policies set a replication list (it overrides the namespace's).
        self._topic_level: dict[str, Topic] = {}
        #: Topic-policy nodes of loaded topics reported changed since the last full pass.
        self._changed_nodes: set[str] = set()
        #: Replicated subscriptions of each topic that has replicators.
        self.controllers: dict[str, SubscriptionsController] = {}
        self._nudge = asyncio.Event()
        self._passes = 0
        self._stopped = False

    @property
    def unsettled_topics(self) -> list[str]:
        """The loaded topics the passes between full ones visit (they replicate or have not settled)."""
        return sorted(self._unsettled)

    @property
    def replicators_count(self) -> int:
        return sum(len(t.replicators) for t in self.service.topics.values())

    async def start(self) -> None:
        self.service.topic_load_hooks.append(self._on_topic_loaded)
        self.service.policies.listeners.append(self._policy_changed)
        for topic in list(self.service.topics.values()):
            await self._on_topic_loaded(topic)
        self._task = asyncio.get_running_loop().create_task(self._loop(), name="replication")

    async def stop(self) -> None:
        self._stopped = True
        with contextlib.suppress(ValueError):
            self.service.topic_load_hooks.remove(self._on_topic_loaded)
        with contextlib.suppress(ValueError):
            self.service.policies.listeners.remove(self._policy_changed)
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        for topic in list(self.service.topics.values()):
            await self._stop_all(topic)
        await self.remotes.close()

    # --- topics ---------------------------------------------------------------------------

    async def _on_topic_loaded(self, topic: Topic) -> None:
        topic.close_hooks.append(partial(self._stop_all, topic))
        try:
            await self.reconcile(topic)
        except Exception as error:  # metadata down: the periodic pass tries again
            log.warning("replication of %s not set up yet: %s", topic.name, error)

    async def _stop_all(self, topic: Topic) -> None:
        key = str(topic.name)
        if self._unsettled.get(key) is topic:
            del self._unsettled[key]
        if self._topic_level.get(key) is topic:
            del self._topic_level[key]
        for index, group in ((self._by_namespace, topic.name.namespace),
                             (self._by_policy_node, topic_policies_path(topic.name))):
            members = index.get(group)
            if members is not None and members.get(key) is topic:
                del members[key]
                if not members:
                    del index[group]
        lock = self._reconciling.get(key)
        if lock is not None and not lock.locked():
            del self._reconciling[key]
        controller = self.controllers.get(str(topic.name))
        if controller is not None and controller.topic is topic:
            del self.controllers[str(topic.name)]
            await controller.stop()
        for remote in list(topic.replicators):
            replicator = topic.replicators.pop(remote)
            if isinstance(replicator, Replicator):
                await replicator.stop()

    async def targets(self, name: TopicName, tenants: dict[str, list[str] | None] | None = None) -> list[str]:
        """The remotes ``name`` replicates to now; ``tenants`` caches allowed clusters for one pass."""
        return (await self._targets(name, tenants))[0]

    async def _targets(self, name: TopicName, tenants: dict[str, list[str] | None] | None) -> tuple[list[str], bool]:
        """(the remotes ``name`` replicates to now, whether its topic-level policies set a list)."""
        resources = self.service.resources
        if resources is None:
            return [], False
        topic = await self.service.policies.topic_policies(name)
        topic_level = topic is not None and topic.replication_clusters is not None
        tenants = {} if tenants is None else tenants
        if name.tenant not in tenants:
            try:
                tenants[name.tenant] = (await resources.tenant(name.tenant)).allowed_clusters
            except NotFoundError:
                tenants[name.tenant] = None
        allowed = tenants[name.tenant]
        if allowed is None:
            return [], topic_level
        # Decoded once per change of the node (not once per topic and pass).
        namespace = await self.service.policies.decoded(namespace_path(name.namespace), decode_policies)
        return remote_targets(self.local, allowed, namespace.replication_clusters if namespace else [],
                              topic.replication_clusters if topic else None), topic_level

    async def reconcile(self, topic: Topic, tenants: dict[str, list[str] | None] | None = None) -> None:
        """Start and stop ``topic``'s replicators to match its replication clusters now."""
        lock = self._reconciling.setdefault(str(topic.name), asyncio.Lock())
        async with lock:
            if self._stopped or _closed(topic):
                return
            self._unsettled[str(topic.name)] = topic  # until this reconcile ends settled
            self._by_namespace.setdefault(topic.name.namespace, {})[str(topic.name)] = topic
            self._by_policy_node.setdefault(topic_policies_path(topic.name), {})[str(topic.name)] = topic
            wanted, topic_level = await self._targets(topic.name, tenants)
            if topic_level:
                self._topic_level[str(topic.name)] = topic
            elif self._topic_level.get(str(topic.name)) is topic:
                del self._topic_level[str(topic.name)]
            await self._start_replicators(topic, [r for r in wanted if r not in topic.replicators])
            for remote in [r for r in topic.replicators if r not in wanted]:
                leaving = topic.replicators.pop(remote)
                if isinstance(leaving, Replicator):
                    await leaving.stop(delete_cursor=True)
                log.info("stopped replicating %s to %s", topic.name, remote)
            for name in topic.log.cursor_names():  # cursors of remotes removed while the topic was unloaded
                if (name.startswith(REPLICATION_CURSOR_PREFIX) and name != REPL_DEDUP_CURSOR_NAME
                        and name[len(REPLICATION_CURSOR_PREFIX):] not in wanted):
                    await topic.log.delete_cursor(name)
            if not wanted and not topic.replicators and self._unsettled.get(str(topic.name)) is topic:
                del self._unsettled[str(topic.name)]
        if _closed(topic):  # closed while we awaited: its close hook may have run before we started
            await self._stop_all(topic)

    async def _start_replicators(self, topic: Topic, remotes: list[str]) -> None:
        """Open the cursors of the new replicators; a new controller (topic just loaded here)
        recovers its state from the topic before any replicator reads."""
        if not remotes:
            return
        if self.replicators_count + len(remotes) > REPLICATION_REPLICATORS_COUNT_MAX:
            raise LimitExceededError("REPLICATION_REPLICATORS_COUNT_MAX", self.replicators_count + len(remotes),
                                REPLICATION_REPLICATORS_COUNT_MAX)
        controller, new = self._controller(topic)
        made: list[Replicator] = []
        for remote in remotes:
            replicator = Replicator(topic, self.local, remote, partial(self._producer, remote), self.clock,
                                    observer=controller.observe)
            await replicator.open_cursor()
            made.append(replicator)
        if new:
            cursors = [r.cursor for r in [*topic.replicators.values(), *made] if isinstance(r, Replicator)]
            try:
                await controller.recover(max(c.mark_delete_position for c in cursors if c is not None))
            except BaseException:
                del self.controllers[str(topic.name)]  # the next pass makes and recovers it again
                raise
            controller.start()
        for replicator in made:
            replicator.start()
            topic.replicators[replicator.remote] = replicator
            log.info("replicating %s from %s to %s", topic.name, self.local, replicator.remote)

    def _controller(self, topic: Topic) -> tuple[SubscriptionsController, bool]:
        """The topic's controller, and whether it was made now (not started yet)."""
        key = str(topic.name)
        found = self.controllers.get(key)
        if found is not None and found.topic is topic:
            return found, False
        controller = SubscriptionsController(
            topic, self.local, remotes=lambda: sorted(topic.replicators),
            connected=lambda: all(getattr(r, "connected", False) for r in topic.replicators.values()),
            clock=self.clock)
        self.controllers[key] = controller
        return controller, True

    async def _producer(self, remote: str, topic: str, producer_name: str) -> Producer:
        name = TopicName.parse(topic)
        partitions = await self.service.partitioned.partitions(name.partitioned_topic_name) if name.is_partition else 0
        return await self.remotes.producer(remote, topic, producer_name, partitions)

    # --- the periodic pass ----------------------------------------------------------------

    def _policy_changed(self, path: str) -> None:
        if path in self._by_policy_node:  # a loaded topic's own policies: the full pass visits it
            self._changed_nodes.add(path)
        self._full_wanted = True
        self._nudge.set()

    async def _loop(self) -> None:
        while not self._stopped:
            waiter = asyncio.ensure_future(self._nudge.wait())
            timer = asyncio.ensure_future(self.clock.sleep(REPLICATION_CHECK_INTERVAL_MS / 1000))
            try:
                await asyncio.wait({waiter, timer}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                waiter.cancel()
                timer.cancel()
            self._nudge.clear()
            full = self._full_wanted or self._passes % REPLICATION_FULL_CHECK_EVERY_PASSES == 0
            self._full_wanted = False
            try:
                await self.check(full=full)
            except Exception:  # one failed pass must not stop the next
                log.exception("replication check failed")

    async def check(self, *, full: bool = True) -> None:
        """One pass: load replicated topics (standalone), reconcile loaded ones (``full``: all that
        may replicate, see ``_full_pass_topics``; else those that replicate or have not settled),
        sample rates."""
        if self._load_replicated and self._passes % REPLICATION_LOAD_TOPICS_EVERY_PASSES == 0:
            await self._load_replicated_topics()
        self._passes += 1
        now_ns = self.clock.monotonic_ns()
        tenants: dict[str, list[str] | None] = {}  # one metadata read per tenant per pass
        for topic in (await self._full_pass_topics()) if full else list(self._unsettled.values()):
            try:
                await self.reconcile(topic, tenants)
            except Exception as error:
                log.warning("replication check of %s failed: %s", topic.name, error)
            for replicator in list(topic.replicators.values()):
                if isinstance(replicator, Replicator):
                    replicator.sample(now_ns)

    async def _full_pass_topics(self) -> list[Topic]:
        """The loaded topics a full pass reconciles: every one that replicates or has not settled,
        has a topic-level list, had its topic-policy node reported changed, or is in a namespace
        whose list names another cluster (the tenant's cap is left to the reconcile: a tenant has
        no listener, so a widened ``allowedClusters`` is adopted here as before). One (cached)
        namespace read per namespace; the topics of the others are not walked."""
        chosen = dict(self._unsettled)
        chosen.update(self._topic_level)
        changed, self._changed_nodes = self._changed_nodes, set()
        for path in changed:
            chosen.update(self._by_policy_node.get(path, {}))
        for namespace, members in list(self._by_namespace.items()):
            try:
                policies = await self.service.policies.decoded(namespace_path(namespace), decode_policies)
            except Exception as error:  # metadata down: reconcile them all, each fails and stays due
                log.warning("replication check of namespace %s failed: %s", namespace, error)
                policies = None
                chosen.update(members)
            if policies is not None and any(c != self.local for c in policies.replication_clusters):
                chosen.update(members)
        loaded = self.service.topics
        return [topic for key, topic in chosen.items() if loaded.get(key) is topic]

    async def _load_replicated_topics(self) -> None:
        resources = self.service.resources
        if resources is None:
            return
        for tenant in await resources.tenants():
            for namespace in await resources.namespaces(tenant):
                policies = await self.service.policies.namespace_policies(namespace)
                if policies is None or not remote_targets(self.local, (await resources.tenant(tenant)).allowed_clusters,
                                                          policies.replication_clusters, None):
                    continue
                # The stored topics only (``topics_of_namespace`` also walks every loaded topic:
                # O(loaded topics) per replicated namespace, and a loaded one needs no loading).
                for name in await self.service.log_store.list_logs(namespace):
                    if name not in self.service.topics and TopicName.parse(name).is_persistent:
                        with contextlib.suppress(Exception):
                            await self.service.get_topic(TopicName.parse(name), create=False)


def _closed(topic: Topic) -> bool:
    return topic.state is TopicState.CLOSED
