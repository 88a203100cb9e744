"""A loaded topic: its log, producers and subscriptions.

States: ACTIVE -> CLOSED (unloaded or broker shutdown). A closed topic refuses new producers and
consumers with ServiceNotReady; the client looks it up again and retries.

Producer access modes: Shared producers coexist; Exclusive is refused (ProducerBusy) while any
other producer exists and keeps others out; ExclusiveWithFencing closes the existing producers
(CLOSE_PRODUCER) and makes their reconnects fail with ProducerFenced; WaitForExclusive is answered
``producer_ready=false`` and admitted (a second PRODUCER_SUCCESS) when the topic has no producer.

Deduplication (``dedup``, see ``broker/dedup.py``) keeps the highest sequence id persisted per
producer name, snapshotted in the ``pulsar.dedup`` cursor and rebuilt on load.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass

from magnetar.base.clock import Clock
from magnetar.base.invariant import invariant
from magnetar.base.types import EARLIEST, Position, TopicName
from magnetar.broker.config import BrokerConfig
from magnetar.broker.dedup import MessageDeduplication
from magnetar.broker.entry import entry_message_count
from magnetar.broker.errors import BrokerError
from magnetar.broker.log import TopicLog
from magnetar.broker.producer import AccessMode, Producer
from magnetar.broker.subscription import Subscription
from magnetar.protocol.pulsar import pb, stored_entry_metadata

DEDUP_PRODUCER_NAMES_COUNT_MAX = 10_000
SUBSCRIPTIONS_PER_TOPIC_COUNT_MAX = 10_000
PRODUCERS_PER_TOPIC_COUNT_MAX = 10_000


class TopicState(enum.Enum):
    ACTIVE = "active"
    CLOSED = "closed"


_TRANSITIONS = {(TopicState.ACTIVE, TopicState.CLOSED)}


@dataclass(slots=True)
class WaitingProducer:
    producer: Producer
    request_id: int
    admit: Callable[[Producer, int], None]


class Topic:
    def __init__(self, name: TopicName, topic_log: TopicLog, config: BrokerConfig,
                 clock: Clock | None = None) -> None:
        self.name = name
        self.log = topic_log
        self.config = config
        self.producers: dict[str, Producer] = {}
        self.subscriptions: dict[str, Subscription] = {}
        self.clock = clock  # delayed delivery needs it; None: delayed messages go out at once
        self.dedup = MessageDeduplication(topic_log, config)
        self._fenced_names: set[str] = set()
        self._waiting: list[WaitingProducer] = []
        self._state = TopicState.ACTIVE

    @property
    def state(self) -> TopicState:
        return self._state

    @property
    def partition_index(self) -> int:
        return self.name.partition_index

    def _check_active(self) -> None:
        if self._state is not TopicState.ACTIVE:
            raise BrokerError(pb.ServiceNotReady, f"topic {self.name} is being unloaded")

    # --- producers ------------------------------------------------------------------------------

    def last_sequence_id(self, producer_name: str) -> int:
        return self.dedup.last_sequence_id(producer_name)

    def add_producer(self, producer: Producer, request_id: int,
                     admit: Callable[[Producer, int], None]) -> bool:
        """Admit ``producer``; False means it waits (WaitForExclusive) and ``admit`` is called later."""
        self._check_active()
        if producer.name in self._fenced_names:
            raise BrokerError(pb.ProducerFenced, f"producer {producer.name} was fenced by an exclusive producer")
        existing = self.producers.get(producer.name)
        if existing is not None:
            if existing.channel.is_open():
                raise BrokerError(pb.ProducerBusy, f"producer with name '{producer.name}' is already connected")
            self.remove_producer(existing)  # a stale producer of a connection that is gone
        if len(self.producers) >= PRODUCERS_PER_TOPIC_COUNT_MAX:
            raise BrokerError(pb.ProducerBusy, "too many producers on this topic")
        others = list(self.producers.values())
        exclusive_held = any(p.access_mode is not AccessMode.SHARED for p in others)
        mode = producer.access_mode
        if mode is AccessMode.SHARED and exclusive_held:
            raise BrokerError(pb.ProducerBusy, "an exclusive producer is connected")
        if mode is AccessMode.EXCLUSIVE and others:
            raise BrokerError(pb.ProducerBusy, "topic has producers; exclusive access refused")
        if mode is AccessMode.EXCLUSIVE_WITH_FENCING:
            for other in others:
                self._fenced_names.add(other.name)
                self.remove_producer(other)
                if other.channel.is_open():
                    other.channel.send_close_producer(other.producer_id)
        if mode is AccessMode.WAIT_FOR_EXCLUSIVE and others:
            self._waiting.append(WaitingProducer(producer, request_id, admit))
            return False
        self.producers[producer.name] = producer
        return True

    def remove_producer(self, producer: Producer) -> None:
        if self.producers.get(producer.name) is producer:
            del self.producers[producer.name]
        self._waiting = [w for w in self._waiting if w.producer is not producer]
        if producer.state.value == "active":
            producer.close()
        if not self.producers and self._waiting:
            waiting = self._waiting.pop(0)
            self.producers[waiting.producer.name] = waiting.producer
            waiting.admit(waiting.producer, waiting.request_id)

    async def publish(self, data: bytes) -> Position:
        self._check_active()
        position = await self.log.append(data)
        for subscription in self.subscriptions.values():
            subscription.notify_entries_added()
        return position

    # --- subscriptions --------------------------------------------------------------------------

    async def subscription(self, name: str, *, durable: bool, initial_mark_delete: Position) -> Subscription:
        self._check_active()
        found = self.subscriptions.get(name)
        if found is not None:
            return found
        if len(self.subscriptions) >= SUBSCRIPTIONS_PER_TOPIC_COUNT_MAX:
            raise BrokerError(pb.TooManyRequests, "too many subscriptions on this topic")
        cursor = await self.log.open_cursor(name, durable=durable, initial_mark_delete=initial_mark_delete)
        found = self.subscriptions.get(name)  # another subscribe may have won while we awaited
        if found is not None:
            return found
        subscription = Subscription(name, self.log, cursor, self.config, self.partition_index, self._forget,
                                    clock=self.clock)
        self.subscriptions[name] = subscription
        return subscription

    def _forget(self, subscription: Subscription) -> None:
        if self.subscriptions.get(subscription.name) is subscription:
            del self.subscriptions[subscription.name]

    # --- queries --------------------------------------------------------------------------------

    async def last_message_id(self) -> pb.MessageIdData:
        """The last entry's id; batch_index = size - 1 for a batch (Java does the same)."""
        last = self.log.last_position
        partition = self.partition_index
        if last.entry_id < 0:
            return _wire_id(last, partition, None)
        entries = await self.log.read(last, 1)
        batch_index = None
        if entries and entries[0].position == last:
            metadata = stored_entry_metadata(entries[0].data)
            if metadata.HasField("num_messages_in_batch"):
                batch_index = entry_message_count(metadata) - 1
        return _wire_id(last, partition, batch_index)

    async def find_by_publish_time(self, timestamp_ms: int, scan_max: int) -> Position | None:
        """The first entry published at or after ``timestamp_ms`` (a bounded forward scan)."""
        start = EARLIEST
        scanned = 0
        while scanned < scan_max:
            entries = await self.log.read(start, self.config.dispatch_read_count_max)
            if not entries:
                return None
            for entry in entries:
                if stored_entry_metadata(entry.data).publish_time >= timestamp_ms:
                    return entry.position
            scanned += len(entries)
            start = entries[-1].position.next()
        raise BrokerError(pb.UnknownError, f"publish-time seek scanned {scanned} entries without a match")

    # --- lifecycle ------------------------------------------------------------------------------

    async def close(self) -> None:
        if self._state is TopicState.CLOSED:
            return
        invariant((self._state, TopicState.CLOSED) in _TRANSITIONS, "topic state table")
        self._state = TopicState.CLOSED
        for producer in list(self.producers.values()):
            self.remove_producer(producer)
        for subscription in list(self.subscriptions.values()):
            await subscription.close(delete=not subscription.durable)
        await self.dedup.close()
        await self.log.close()


def _wire_id(position: Position, partition: int, batch_index: int | None) -> pb.MessageIdData:
    from magnetar.protocol.pulsar import commands

    return commands.message_id(position.ledger_id, position.entry_id, partition=partition, batch_index=batch_index)
