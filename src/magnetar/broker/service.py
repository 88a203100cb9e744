"""``BrokerService``: the registry of loaded topics and the broker-wide answers.

Topics are loaded on demand (``get_topic``) and, when ``topic_auto_creation`` is on, created by the
first producer or consumer naming them. Concurrent loads of one topic share one open. At most
``BROKER_TOPICS_LOADED_COUNT_MAX`` topics are loaded. Producer names the broker assigns are
``<cluster>-<broker index>-<counter>``, unique for the life of this service.
"""

from __future__ import annotations

import asyncio
import enum
import re

from magnetar.base.clock import Clock
from magnetar.base.errors import LimitExceeded, NotFound
from magnetar.base.limits import BROKER_TOPICS_LOADED_COUNT_MAX
from magnetar.base.types import TopicName
from magnetar.broker.config import BrokerConfig
from magnetar.broker.errors import BrokerError, to_broker_error
from magnetar.broker.log import LogStore
from magnetar.broker.lookup import PartitionedTopics, SingleBrokerLookup, TopicLookup
from magnetar.broker.topic import Topic
from magnetar.metadata.api import MetadataStore
from magnetar.protocol.pulsar import pb


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
        #: Answers LOOKUP; a cluster broker replaces it with ``broker.ownership.OwnershipLookup``.
        self.lookup: TopicLookup = SingleBrokerLookup(lambda: self.config.service_url)
        self.topics: dict[str, Topic] = {}
        self._loading: dict[str, asyncio.Future[Topic]] = {}
        self._producer_counter = 0
        self._state = ServiceState.RUNNING

    @property
    def state(self) -> ServiceState:
        return self._state

    def next_producer_name(self) -> str:
        name = f"{self.config.cluster_name}-{self.config.broker_index}-{self._producer_counter}"
        self._producer_counter += 1
        return name

    async def get_topic(self, name: TopicName, *, create: bool) -> Topic:
        if self._state is not ServiceState.RUNNING:
            raise BrokerError(pb.ServiceNotReady, "broker is shutting down")
        if not name.is_persistent:
            raise BrokerError(pb.NotAllowedError, "non-persistent topics are not supported")
        key = str(name)
        topic = self.topics.get(key)
        if topic is not None:
            return topic
        pending = self._loading.get(key)
        if pending is not None:
            return await asyncio.shield(pending)
        if len(self.topics) >= BROKER_TOPICS_LOADED_COUNT_MAX:
            raise to_broker_error(LimitExceeded("BROKER_TOPICS_LOADED_COUNT_MAX", len(self.topics) + 1,
                                                BROKER_TOPICS_LOADED_COUNT_MAX))
        future: asyncio.Future[Topic] = asyncio.get_running_loop().create_future()
        self._loading[key] = future
        try:
            topic_log = await self.log_store.open_log(key, create=create and self.config.topic_auto_creation)
            topic = Topic(name, topic_log, self.config, clock=self.clock)
            self.topics[key] = topic
            future.set_result(topic)
            return topic
        except NotFound as error:
            broker_error = BrokerError(pb.TopicNotFound, str(error))
            future.set_exception(broker_error)
            raise broker_error from error
        except BaseException as error:
            future.set_exception(to_broker_error(error))
            raise to_broker_error(error) from error
        finally:
            if future.done() and not future.cancelled():
                future.exception()  # mark retrieved: waiters got it, nobody else will
            del self._loading[key]

    async def partitions(self, name: TopicName) -> int:
        return await self.partitioned.partitions(name)

    async def topics_of_namespace(self, namespace: str, pattern: str | None = None) -> list[str]:
        stored = set(await self.log_store.list_logs(namespace))
        stored.update(t for t in self.topics if TopicName.parse(t).namespace == namespace)
        names = sorted(stored)
        if pattern:
            try:
                regex = re.compile(pattern)
            except re.error:
                return names
            names = [n for n in names if regex.match(n)]
        return names

    async def unload(self, name: TopicName) -> None:
        topic = self.topics.pop(str(name), None)
        if topic is not None:
            await topic.close()

    async def close(self) -> None:
        if self._state is ServiceState.CLOSED:
            return
        self._state = ServiceState.CLOSED
        for key in list(self.topics):
            topic = self.topics.pop(key)
            await topic.close()
