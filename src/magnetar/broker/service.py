"""``BrokerService``: the registry of loaded topics and the broker-wide answers.

Topics are loaded on demand (``get_topic``) and, when ``topic_auto_creation`` is on, created by the
first producer or consumer naming them, only inside a namespace that exists (``check_namespace``). Concurrent loads of one topic share one open. At most
``BROKER_TOPICS_LOADED_COUNT_MAX`` topics are loaded. Producer names the broker assigns are
``<cluster>-<broker index>-<counter>``, unique for the life of this service.

Policies: ``policies`` (a ``PolicyCache``) is read when a topic loads (auto-creation follows the
namespace's ``autoTopicCreationOverride``) and by each topic on use. With a clock, the policy
checks (TTL, backlog quotas, retention, compaction threshold) run over the loaded topics, each on
its own period (``broker/policy_checks.py``, Pulsar's keys and defaults), and rates are sampled;
``check_policies()`` runs every check at once. ``resources`` (tenants,
namespaces, clusters) exists when there is a metadata store.

``topic_load_hooks`` are awaited with each newly loaded topic before anyone can use it (the
geo-replication service opens its replicators' cursors there, so no entry escapes them).
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
import re
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from magnetar.base.clock import Clock
from magnetar.base.errors import AlreadyExistsError, LimitExceededError, NotFoundError
from magnetar.base.limits import BROKER_TOPICS_LOADED_COUNT_MAX
from magnetar.base.types import TopicName
from magnetar.broker import offload
from magnetar.broker.config import BrokerConfig
from magnetar.broker.errors import BrokerError, to_broker_error
from magnetar.broker.log import LogStore
from magnetar.broker.non_persistent import open_non_persistent, topics_of_mode
from magnetar.broker.policy_checks import ALL_CHECKS, TOPIC_PASS_SLICE_NS, DueChecks, PolicySchedule
from magnetar.broker.topic import Topic
from magnetar.broker.topic_passes import RATE_SAMPLE_RUN_COUNT, TopicPassWork, pass_work, sample_rates_of
from magnetar.catalog.listeners import Listeners
from magnetar.catalog.lookup import LookupAnswer, PartitionedTopics, SingleBrokerLookup, TopicLookup
from magnetar.catalog.policy_cache import PolicyCache
from magnetar.catalog.resources import Resources, TopicBusyError
from magnetar.catalog.schema import SchemaRegistry
from magnetar.catalog.schema_compat import Compatibility
from magnetar.metadata.api import MetadataStore
from magnetar.protocol.pulsar import pb

if TYPE_CHECKING:
    from magnetar.security import Authenticator

log = logging.getLogger(__name__)


class ServiceState(enum.Enum):
    RUNNING = "running"
    CLOSED = "closed"


class BrokerService:
    def __init__(self, config: BrokerConfig, log_store: LogStore, metadata: MetadataStore | None = None,
                 clock: Clock | None = None) -> None:
        self.config = config
        self.clock = clock
        self.log_store = log_store
        self.partitioned = PartitionedTopics(metadata)
        #: Answers LOOKUP; a cluster broker replaces it with ``control.ownership.OwnershipLookup``.
        self.lookup: TopicLookup = SingleBrokerLookup(lambda: self.config.service_url,
                                                      lambda: self.config.service_url_tls)
        self.topics: dict[str, Topic] = {}
        #: The class of the topics it loads (``Topic``; a test records calls with a subclass:
        #: ``Topic`` is compiled, its methods cannot be replaced).
        self.topic_type: type[Topic] = Topic
        self._rates_sampled_ns = -1  # the last rate sampling pass (-1: none yet)
        self._on_log_fenced: Callable[[Topic], None] = self._unload_fenced  # bound once, not per topic
        #: A pass over the topics yields to the loop after this long (``TOPIC_PASS_SLICE_NS``).
        self.topic_pass_slice_ns = TOPIC_PASS_SLICE_NS
        self.policies = PolicyCache(metadata, config)
        self.resources = Resources(metadata, self.policies) if metadata is not None else None
        # /schemas/...; in memory without a metadata store
        self.schemas = SchemaRegistry(metadata, strategy_of=self.schema_compatibility,
                                      now_ms=clock.now_ms if clock is not None else None)
        self.topic_load_hooks: list[Callable[[Topic], Awaitable[None]]] = []
        #: Who a client is (``magnetar.security``); set by the runtime when
        #: ``config.authentication_enabled``. None: every session and request has role None.
        self.authenticator: Authenticator | None = None
        self._checker: asyncio.Task[None] | None = None
        self._loading: dict[str, asyncio.Task[Topic]] = {}
        self._closing: set[asyncio.Task[None]] = set()  # topics unloaded because their log was fenced
        self._producer_counter = 0
        self._listeners: Listeners | None = None
        self._listeners_of: BrokerConfig | None = None
        self._state = ServiceState.RUNNING

    @property
    def state(self) -> ServiceState:
        return self._state

    def next_producer_name(self) -> str:
        name = f"{self.config.cluster_name}-{self.config.broker_index}-{self._producer_counter}"
        self._producer_counter += 1
        return name

    async def get_topic(self, name: TopicName, *, create: bool, admin: bool = False) -> Topic:
        """The loaded topic ``name``, loading it; ``create``: create it if missing and the
        auto-creation policy allows it (``admin``: whatever the policy says)."""
        if self._state is not ServiceState.RUNNING:
            raise BrokerError(pb.ServiceNotReady, "broker is shutting down")
        if not name.is_persistent:
            return await open_non_persistent(self, name, create=create, admin=admin)
        key = str(name)
        topic = self.topics.get(key)
        if topic is not None:
            return topic
        pending = self._loading.get(key)
        if pending is None:
            if len(self.topics) >= BROKER_TOPICS_LOADED_COUNT_MAX:
                raise to_broker_error(LimitExceededError("BROKER_TOPICS_LOADED_COUNT_MAX", len(self.topics) + 1,
                                                    BROKER_TOPICS_LOADED_COUNT_MAX))
            # Its own task: a caller that stops waiting (its request abandoned, its connection
            # closed) must not interrupt a load other callers wait for, half done.
            pending = asyncio.get_running_loop().create_task(self._load(name, key, create=create, admin=admin))
            self._loading[key] = pending
            pending.add_done_callback(_retrieved)
        return await asyncio.shield(pending)

    async def _load(self, name: TopicName, key: str, *, create: bool, admin: bool) -> Topic:
        try:
            await self.check_namespace(name)
            effective = await self.policies.load(name)
            allowed = admin or effective.auto_topic_creation
            topic_log = await self.log_store.open_log(key, create=create and allowed)
            topic = self.topic_type(name, topic_log, self.config, clock=self.clock,
                                    # Asked once per publish run: compiled, memoized on itself.
                                    policies=self.policies.view(name),
                                    on_log_fenced=self._on_log_fenced)
            await offload.install(topic, self.policies, self.config, self.schemas)
            for hook in list(self.topic_load_hooks):
                await hook(topic)
            self.topics[key] = topic
            self._start_checker()
            return topic
        except NotFoundError as error:
            raise BrokerError(pb.TopicNotFound, str(error)) from error
        except BaseException as error:
            raise to_broker_error(error) from error
        finally:
            del self._loading[key]

    def listener_urls(self, name: str, answer: LookupAnswer) -> tuple[str, str | None]:
        """(url, TLS url) a LOOKUP answer carries for the client's listener ``name`` ("" none).
        Raises ServiceNotReady when the broker answered for does not have that listener."""
        config = self.config
        if answer.url != config.service_url:  # another broker's: its listeners, when known
            if not name or answer.listeners is None:
                return answer.url, None  # asked again there, it maps the name itself
            listener = Listeners(answer.listeners, "", answer.url).resolve(name)
        else:
            if self._listeners is None or self._listeners_of is not config:  # the runtime may replace config
                self._listeners = Listeners(config.advertised_listeners, config.internal_listener_name,
                                            config.service_url)
                self._listeners_of = config
            listener = self._listeners.resolve(name)
        if listener is None or (listener.url is None and listener.url_tls is None):
            raise BrokerError(pb.ServiceNotReady, f"the broker {answer.url} does not have {name} listener")
        return listener.url or "", listener.url_tls

    async def schema_compatibility(self, name: TopicName) -> Compatibility:
        """The namespace's schemaCompatibilityStrategy; UNDEFINED (or no namespace registry): the
        broker's ``schema_compatibility_strategy`` (FULL, as Pulsar's)."""
        policies = await self.policies.namespace_policies(name.namespace) if self.resources is not None else None
        value = policies.schema_compatibility_strategy if policies is not None else "UNDEFINED"
        return Compatibility(self.config.schema_compatibility_strategy if value == "UNDEFINED" else value)

    async def check_namespace(self, name: TopicName) -> None:
        """TopicNotFound when ``name``'s tenant or namespace does not exist: Pulsar's answer to a
        lookup, producer or consumer there, so that no topic exists the admin API cannot list.
        Without a metadata store there is no namespace registry (and no admin API): every
        namespace is accepted."""
        if self.resources is not None and await self.policies.namespace_policies(name.namespace) is None:
            raise BrokerError(pb.TopicNotFound, f"Namespace {name.namespace} does not exist "
                                                f"(topic {name})")

    async def partitions(self, name: TopicName) -> int:
        """Partitions of ``name`` for PARTITIONED_METADATA; a new topic in a namespace whose
        auto-creation policy says ``partitioned`` is created with its default partition count."""
        await self.check_namespace(name)
        count = await self.partitioned.partitions(name)
        if count or name.is_partition or self.resources is None:
            return count
        effective = await self.policies.load(name)
        wanted = effective.auto_topic_partitions_count
        if not effective.auto_topic_creation or wanted < 1 or await self.topic_exists(name):
            return 0
        try:
            await self.partitioned.create(name, wanted)
        except AlreadyExistsError:  # another client or broker created it first
            return await self.partitioned.partitions(name)
        return wanted

    async def topics_of_namespace(self, namespace: str, pattern: str | None = None,
                                  mode: int = pb.CommandGetTopicsOfNamespace.PERSISTENT) -> list[str]:
        """Topics of ``namespace`` of the domains ``mode`` names (Pulsar's default: persistent ones)."""
        stored = set(await self.log_store.list_logs(namespace))
        stored.update(t for t in self.topics if TopicName.parse(t).namespace == namespace)
        names = topics_of_mode(sorted(stored), mode)
        if pattern:
            try:
                regex = re.compile(pattern)
            except re.error:
                return names
            names = [n for n in names if regex.match(n)]
        return names

    async def topic_exists(self, name: TopicName) -> bool:
        return str(name) in self.topics or str(name) in await self.log_store.list_logs(name.namespace)

    async def create_topic(self, name: TopicName) -> Topic:
        """Admin create: a new non-partitioned topic (AlreadyExistsError if it is there)."""
        if await self.topic_exists(name):
            raise AlreadyExistsError(f"Topic {name} already exists")
        return await self.get_topic(name, create=True, admin=True)

    async def delete_topic(self, name: TopicName, *, force: bool = False) -> None:
        """Delete a topic's log and cursors; refused (TopicBusyError) while clients are attached
        unless ``force``, which disconnects them."""
        if not await self.topic_exists(name):
            raise NotFoundError(f"Topic {name} not found")
        topic = self.topics.get(str(name))
        if topic is not None and not force:
            if topic.producers:
                raise TopicBusyError(f"Topic {name} has active producers")
            if any(s.consumers for s in topic.subscriptions.values()):
                raise TopicBusyError(f"Topic {name} has active subscriptions")
        if topic is not None:
            topic.disconnect_producers()
            for subscription in list(topic.subscriptions.values()):
                subscription.disconnect_consumers()
        if name.is_persistent:  # its compacted ledger is not in the log's ledger list: delete it too
            loaded = topic or await self.get_topic(name, create=False, admin=True)
            await loaded.compaction.delete_compacted_ledger()
        await self.unload(name)
        if not name.is_persistent:
            return  # nothing stored: unloading it deleted it
        await self.log_store.delete_log(str(name))
        if self.resources is not None and not name.is_partition:
            await self.resources.delete_topic_policies(name)

    # --- policy checks ---------------------------------------------------------------------------

    def _start_checker(self) -> None:
        if self.clock is not None and self._checker is None and self._state is ServiceState.RUNNING:
            self._checker = asyncio.get_running_loop().create_task(self._check_loop(self.clock), name="policies")

    async def _check_loop(self, clock: Clock) -> None:
        schedule = PolicySchedule(self.config.policy_periods(), clock.monotonic_ns() // 1_000_000)
        while self._state is ServiceState.RUNNING:
            await clock.sleep(max(0, schedule.next_due_ms() - clock.monotonic_ns() // 1_000_000) / 1000)
            due, rates = schedule.due(clock.monotonic_ns() // 1_000_000)
            try:
                await self.check_policies(due, rates=rates)
            except Exception:  # one failed pass must not stop the next
                log.exception("policy check failed")

    async def check_policies(self, due: DueChecks = ALL_CHECKS, *, rates: bool = True) -> None:
        """One pass over the loaded topics running the checks ``due`` (all: a pass at once, what
        tests and callers outside the schedule want), and sampling rates. A topic none of the due
        checks can act on now (``topic_passes.pass_work``: most topics, at a broker's defaults)
        costs a few attribute reads and no call."""
        clock = self.clock
        if clock is None:
            return
        slice_end_ns = clock.monotonic_ns() + self.topic_pass_slice_ns
        checked = False
        for index, (key, topic) in enumerate(list(self.topics.items()) if due.any() else ()):
            # The clock read every 32 quiet topics (a look is ~0.5 us) and after every checked one:
            # once this slice's time is up, the loop runs its other work first.
            if (checked or index & 31 == 0) and clock.monotonic_ns() >= slice_end_ns:
                await clock.sleep(0)  # a yield
                slice_end_ns = clock.monotonic_ns() + self.topic_pass_slice_ns
            checked = False
            if self.topics.get(key) is not topic:
                continue  # unloaded meanwhile (while the pass or an earlier topic's check waited)
            work = pass_work(topic, due)
            if work is None:
                continue
            checked = True
            try:
                await self._check_topic(topic, work, clock)
            except Exception as error:
                log.warning("policy check of %s failed: %s", topic.name, error)
        if rates:
            await self._sample_rates(clock)

    async def _check_topic(self, topic: Topic, work: TopicPassWork, clock: Clock) -> None:
        if work.own is not None:
            await topic.check_policies(clock.now_ms(), work.own)
        if work.compaction_threshold_bytes > 0:
            await topic.compaction.check_threshold(work.compaction_threshold_bytes)
        if work.offload_refresh:  # Pulsar deletes offloaded ledgers' bookie copies in its trim too
            await offload.refresh(topic, self.policies, self.config)

    async def _sample_rates(self, clock: Clock) -> None:
        """Sample every loaded topic's rates; an idle topic (nothing counted since its last sample,
        rates zero) is skipped at the cost of a look at its meters (``Topic.sample_rates``). In
        slices of ``topic_pass_slice_ns``, each sampled at its own start (its topics' windows end
        when they are read); the topics of a slice in compiled runs (``topic_passes.sample_rates_of``)."""
        start_ns = now_ns = clock.monotonic_ns()
        slice_end_ns = now_ns + self.topic_pass_slice_ns
        previous_ns = self._rates_sampled_ns
        topics = list(self.topics.values())
        for start in range(0, len(topics), RATE_SAMPLE_RUN_COUNT):
            if clock.monotonic_ns() >= slice_end_ns:
                await clock.sleep(0)  # a yield: the loop's other work first
                now_ns = clock.monotonic_ns()
                slice_end_ns = now_ns + self.topic_pass_slice_ns
            sample_rates_of(topics, start, min(len(topics), start + RATE_SAMPLE_RUN_COUNT), now_ns, previous_ns)
        self._rates_sampled_ns = start_ns

    async def unload(self, name: TopicName) -> None:
        topic = self.topics.pop(str(name), None)
        if topic is not None:
            await topic.close()

    def _unload_fenced(self, topic: Topic) -> None:
        """A topic's log was fenced: out of service at once (its clients reconnect and load it
        again on a freshly opened log), closed in the background."""
        key = str(topic.name)
        if self.topics.get(key) is not topic:
            return  # already unloaded (the bundle was lost, an admin unload)
        del self.topics[key]
        topic.disconnect_producers()
        for subscription in list(topic.subscriptions.values()):
            subscription.disconnect_consumers()
        task = asyncio.get_running_loop().create_task(self._close_fenced(topic), name=f"unload-fenced:{key}")
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)

    async def _close_fenced(self, topic: Topic) -> None:
        try:
            await topic.close()
        except Exception as error:  # a fenced log fails to flush its cursors: the next open recovers them
            log.warning("closing fenced topic %s: %s", topic.name, error)

    async def close(self) -> None:
        if self._state is ServiceState.CLOSED:
            return
        self._state = ServiceState.CLOSED
        if self._checker is not None:
            self._checker.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._checker
        self.policies.close()
        for key in list(self.topics):
            topic = self.topics.pop(key)
            await topic.close()
        if self._closing:
            await asyncio.gather(*list(self._closing), return_exceptions=True)


def _retrieved(task: asyncio.Task[Topic]) -> None:
    """A failed load's error reached its waiters (or nobody waits any more): not logged as lost."""
    if not task.cancelled():
        task.exception()
