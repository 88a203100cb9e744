"""Non-persistent topics (``non-persistent://tenant/ns/topic``): in memory, at most once.

A message published to a non-persistent topic is stored nowhere: it gets a position (the topic's
in-memory ledger id, a counter for the entry id), the producer's receipt carries that id, and it is
offered at once to every subscription. In each subscription the dispatcher's policy (``select``:
the active consumer of an Exclusive or Failover subscription, the next consumer with permits of a
Shared one, the owner of the key's hash range for Key_Shared) picks a consumer; if the policy finds
none (no consumer, or the one it picks has no flow permits or a full connection), the message is
**dropped for that subscription** and counted (Pulsar's ``msgDropRate``; ``msgDropCount`` is the
running total). Nothing is kept for later: no backlog, no redelivery, no seek (refused); acks are
accepted and change nothing. A subscription lives while it has consumers (it is non-durable).

Publishes are dropped too, as Pulsar drops them: a connection with
``max_concurrent_non_persistent_messages_per_connection`` SENDs to non-persistent topics still
unanswered drops the next one instead of publishing it (the session answers it with a (-1,-1)
receipt in its producer's order, ``Producer.drop``), counted in the publisher's ``msgDropRate``.

The topic exists while it is loaded on this broker (created by its first producer or consumer where
auto-creation allows it, or the partition of a partitioned topic whose count the admin API
recorded); deleting it, or its namespace, disconnects its clients. Deduplication and compaction do not
apply. Positions: the in-memory ledger id is ``NON_PERSISTENT_LEDGER_ID`` and entry ids start at 0
with each load.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from magnetar.base.clock import Clock
from magnetar.base.entry import Entry
from magnetar.base.errors import CorruptDataError, LimitExceededError
from magnetar.base.limits import BROKER_TOPICS_LOADED_COUNT_MAX
from magnetar.base.types import Position, TopicName
from magnetar.broker.config import BrokerConfig
from magnetar.broker.consumer import Consumer
from magnetar.broker.dedup import MessageDeduplication
from magnetar.broker.entry import entry_message_count
from magnetar.broker.errors import BrokerError, to_broker_error
from magnetar.broker.log import AppendCallback, StorageStats
from magnetar.broker.metrics import RateMeter
from magnetar.broker.policy_checks import ALL_CHECKS, DueChecks
from magnetar.broker.subscription import Subscription
from magnetar.broker.topic import PublishCallback, Topic, TopicState
from magnetar.catalog.policies import EffectivePolicies
from magnetar.protocol.pulsar import pb, stored_entry_metadata

if TYPE_CHECKING:
    from magnetar.broker.service import BrokerService

NON_PERSISTENT_LEDGER_ID = 0


class NonPersistentCursor:
    """A subscription's cursor on a log that keeps nothing: no backlog, nothing to acknowledge."""

    def __init__(self, name: str, start: Position) -> None:
        self._name = name
        self._start = start

    @property
    def name(self) -> str:
        return self._name

    @property
    def durable(self) -> bool:
        return False

    @property
    def mark_delete_position(self) -> Position:
        return self._start

    def is_acked(self, position: Position) -> bool:
        return False

    def batch_ack_set(self, position: Position, batch_size: int) -> list[int] | None:
        return None

    @property
    def properties(self) -> dict[str, int]:
        return {}

    async def mark_delete(self, position: Position, properties: dict[str, int] | None = None) -> None:
        return None  # nothing is kept, so there is nothing to acknowledge

    async def delete(self, positions: Sequence[Position]) -> None:
        return None

    async def delete_batch_indexes(self, position: Position, ack_set: Sequence[int], batch_size: int) -> None:
        return None

    async def reset(self, mark_delete: Position) -> None:
        raise BrokerError(pb.NotAllowedError, "seek is not allowed on a non-persistent topic")

    def backlog_entries(self) -> int:
        return 0


class NonPersistentLog:
    """The ``TopicLog`` of a non-persistent topic: positions are handed out, entries are not kept."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._last = Position(NON_PERSISTENT_LEDGER_ID, -1)

    @property
    def name(self) -> str:
        return self._name

    @property
    def last_position(self) -> Position:
        return self._last

    def next_position(self) -> Position:
        self._last = self._last.next()
        return self._last

    def append_run(self, run: Sequence[tuple[bytes, AppendCallback]]) -> None:
        """Nothing is stored: the positions are taken at once, each ``on_done`` runs on the next loop pass."""
        loop = asyncio.get_running_loop()
        for _data, on_done in run:
            loop.call_soon(on_done, self.next_position(), None)

    def has_room(self, count: int = 1) -> bool:
        return True

    async def wait_for_room(self) -> None:
        return None

    async def read(self, start: Position, count_max: int) -> list[Entry]:
        return []

    async def open_cursor(self, name: str, *, durable: bool, initial_mark_delete: Position) -> NonPersistentCursor:
        return NonPersistentCursor(name, self._last)

    async def delete_cursor(self, name: str) -> None:
        return None

    def cursor_names(self) -> list[str]:
        return []

    def storage_stats(self) -> StorageStats:
        return StorageStats(0, 0, ())

    def backlog_bytes(self, after: Position) -> int:
        return 0

    async def apply_retention(self, retention_time_s: float, retention_size_bytes: int) -> list[int]:
        return []

    def retention_may_trim(self, retention_time_s: float, retention_size_bytes: int) -> bool:
        return True  # ``apply_retention`` decides

    async def close(self) -> None:
        return None


class NonPersistentSubscription(Subscription):
    """Offers each message once to the consumer its dispatcher's policy picks, or drops it."""

    def __init__(self, name: str, topic_log: NonPersistentLog, cursor: NonPersistentCursor, config: BrokerConfig,
                 partition_index: int, on_closed: Callable[[Subscription], None], clock: Clock | None,
                 admit_consumer: Callable[[], None]) -> None:
        super().__init__(name, topic_log, cursor, config, partition_index, on_closed, clock=clock,
                         admit_consumer=admit_consumer, delayed_enabled=lambda: False)
        self.dropped = RateMeter()
        if clock is not None:
            self.dropped.sample(clock.monotonic_ns())

    def offer(self, entry: Entry, metadata: pb.MessageMetadata, count: int) -> bool:
        """Send ``entry`` to the chosen consumer now; False (and counted) if it was dropped."""
        dispatcher = self.dispatcher
        consumer: Consumer | None = None
        if dispatcher is not None and dispatcher.consumers:
            consumer = dispatcher.select(entry, metadata)
        if consumer is None:
            self.dropped.record(count, len(entry.payload))
            return False
        position = entry.position
        consumer.channel.send_message(consumer.consumer_id, position.ledger_id, position.entry_id, self.partition_index,
                                      entry.payload, 0, ())
        consumer.permits -= count
        self.dispatched.record(count, len(entry.payload))
        return True

    async def acknowledge(self, cumulative: bool, positions: Sequence[tuple[Position, Sequence[int]]]) -> None:
        return None  # at most once: nothing waits for an ack

    def redeliver(self, consumer: Consumer, positions: Sequence[Position]) -> None:
        return None  # nothing is kept to send again

    async def reset(self, mark_delete: Position) -> list[Consumer]:
        raise BrokerError(pb.NotAllowedError, "seek is not allowed on a non-persistent topic")


class NonPersistentTopic(Topic):
    def __init__(self, name: TopicName, config: BrokerConfig, clock: Clock | None = None,
                 policies: Callable[[], EffectivePolicies] | None = None) -> None:
        self.np_log = NonPersistentLog(str(name))
        super().__init__(name, self.np_log, config, clock=clock, policies=policies)
        self.dedup = MessageDeduplication(self.np_log, config, enabled=lambda: False)

    # --- publishing -----------------------------------------------------------------------------

    def _admit_publish(self, data: bytes) -> None:
        self._check_writable()
        size_max = self.policies().max_message_size_bytes
        if size_max and len(data) > size_max:
            raise BrokerError(pb.NotAllowedError, f"Exceed maximum message size: {len(data)} > {size_max} bytes")

    def _dispatch(self, data: bytes) -> Position:
        position = self.np_log.next_position()
        try:
            metadata = stored_entry_metadata(data)
        except CorruptDataError as error:
            raise BrokerError(pb.NotAllowedError, f"unreadable message: {error}") from error
        count = entry_message_count(metadata)
        self.published.record(count, len(data))
        entry = Entry(position, data)
        for subscription in list(self.subscriptions.values()):
            if isinstance(subscription, NonPersistentSubscription):
                subscription.offer(entry, metadata, count)
        return position

    async def publish(self, data: bytes) -> Position:
        self._admit_publish(data)
        return self._dispatch(data)

    def start_publish_run(self, run: Sequence[tuple[bytes, PublishCallback, int]]) -> None:
        """The one publish path of a topic that stores nothing (never waits: returns None, see
        ``Topic.start_publish_run``): each entry offered to the subscriptions at once, ``on_done``
        on the next loop pass; a refused one (nothing dispatched) is told at once."""
        loop = asyncio.get_running_loop()
        for data, on_done, _messages in run:
            try:
                self._admit_publish(data)
                position = self._dispatch(data)
            except Exception as error:
                on_done(None, error)
                continue
            loop.call_soon(on_done, position, None)

    # --- subscriptions --------------------------------------------------------------------------

    async def subscription(self, name: str, *, durable: bool, initial_mark_delete: Position) -> Subscription:
        self._check_active()
        found = self.subscriptions.get(name)
        if found is not None:
            return found
        cursor = NonPersistentCursor(name, self.np_log.last_position)
        subscription = NonPersistentSubscription(name, self.np_log, cursor, self.config, self.partition_index,
                                                 self._forget, self.clock, self._admit_consumer)
        self.subscriptions[name] = subscription
        return subscription

    def subscription_names(self) -> list[str]:
        return sorted(self.subscriptions)

    # --- stats ----------------------------------------------------------------------------------

    async def check_policies(self, now_ms: int, due: DueChecks = ALL_CHECKS) -> None:
        """No TTL, quota or retention to apply."""

    def rates_idle(self) -> bool:
        return all(meter.idle() for meter in self.rate_meters())

    def rate_meters(self) -> list[RateMeter]:
        """The drop rates too (while active), sampled with the broker's rate samples."""
        meters = super().rate_meters()
        if self.state is not TopicState.ACTIVE:
            return meters
        for subscription in self.subscriptions.values():
            if isinstance(subscription, NonPersistentSubscription):
                meters.append(subscription.dropped)
        for producer in self.producers.values():
            meters.append(producer.dropped)
        return meters


async def open_non_persistent(service: BrokerService, name: TopicName, *, create: bool, admin: bool) -> Topic:
    """The loaded non-persistent topic ``name``, made now if ``create`` and the policy allow it."""
    key = str(name)
    found = service.topics.get(key)
    if found is not None:
        return found
    if not create:
        raise BrokerError(pb.TopicNotFound, f"topic {name} does not exist")
    effective = await service.policies.load(name)
    declared = name.is_partition and name.partition_index < await service.partitioned.partitions(
        name.partitioned_topic_name)
    if not (admin or declared or effective.auto_topic_creation):
        raise BrokerError(pb.TopicNotFound, f"topic {name} does not exist and auto-creation is off")
    found = service.topics.get(key)  # created by another request while the policies loaded
    if found is not None:
        return found
    if len(service.topics) >= BROKER_TOPICS_LOADED_COUNT_MAX:
        raise to_broker_error(LimitExceededError("BROKER_TOPICS_LOADED_COUNT_MAX", len(service.topics) + 1,
                                            BROKER_TOPICS_LOADED_COUNT_MAX))
    topic = NonPersistentTopic(name, service.config, clock=service.clock,
                               policies=lambda: service.policies.effective(name))
    service.topics[key] = topic
    return topic


def topics_of_mode(names: list[str], mode: int) -> list[str]:
    """``names`` kept by CommandGetTopicsOfNamespace's ``mode`` (PERSISTENT, NON_PERSISTENT, ALL)."""
    if mode == pb.CommandGetTopicsOfNamespace.ALL:
        return names
    wanted = "non-persistent://" if mode == pb.CommandGetTopicsOfNamespace.NON_PERSISTENT else "persistent://"
    return [n for n in names if n.startswith(wanted)]


def drop_stats(topic: Topic) -> dict[str, dict[str, float | int]]:
    """Per subscription: Pulsar's ``msgDropRate`` and the running ``msgDropCount``."""
    out: dict[str, dict[str, float | int]] = {}
    for name, subscription in topic.subscriptions.items():
        if isinstance(subscription, NonPersistentSubscription):
            out[name] = {"msgDropRate": subscription.dropped.msg_rate, "msgDropCount": subscription.dropped.msg_count}
    return out


def publisher_drop_stats(topic: Topic) -> dict[str, dict[str, float | int]]:
    """Per producer name: publishes dropped at the connection's in-flight bound (``msgDropRate``)
    and their running total (``msgDropCount``)."""
    return {name: {"msgDropRate": producer.dropped.msg_rate, "msgDropCount": producer.dropped.msg_count}
            for name, producer in topic.producers.items()}


__all__ = [
    "NON_PERSISTENT_LEDGER_ID",
    "NonPersistentLog",
    "NonPersistentSubscription",
    "NonPersistentTopic",
    "drop_stats",
    "open_non_persistent",
    "publisher_drop_stats",
    "topics_of_mode",
]
