"""A subscription: a cursor, the consumers attached to it and the dispatcher of its type.

States: ACTIVE -> CLOSED (unsubscribed, or a non-durable subscription whose last consumer left).
The type is fixed while consumers are attached; a consumer of another type is refused with
ConsumerBusy, as is a second consumer on an Exclusive subscription.

Seek (``reset``) follows Java's order: every consumer is sent CLOSE_CONSUMER and detached first,
then the cursor and dispatcher move, and only then does the caller reply SUCCESS; the client then
subscribes again and sends a full FLOW, so no permits are lost.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Sequence

from magnetar.base.clock import Clock
from magnetar.base.invariant import invariant
from magnetar.base.types import Position
from magnetar.broker.config import BrokerConfig
from magnetar.broker.consumer import Consumer, SubType
from magnetar.broker.dispatcher import Dispatcher
from magnetar.broker.dispatcher_key_shared import KeySharedDispatcher
from magnetar.broker.dispatcher_shared import SharedDispatcher
from magnetar.broker.dispatcher_single import SingleActiveDispatcher
from magnetar.broker.entry import entry_message_count
from magnetar.broker.errors import BrokerError
from magnetar.broker.ids import before
from magnetar.broker.log import SubscriptionCursor, TopicLog
from magnetar.protocol.pulsar import pb, stored_entry_metadata


class SubscriptionState(enum.Enum):
    ACTIVE = "active"
    CLOSED = "closed"


_TRANSITIONS = {(SubscriptionState.ACTIVE, SubscriptionState.CLOSED)}


def make_dispatcher(sub_type: SubType, topic_log: TopicLog, cursor: SubscriptionCursor, config: BrokerConfig,
                    partition_index: int, clock: Clock | None = None) -> Dispatcher:
    if sub_type in (SubType.EXCLUSIVE, SubType.FAILOVER):
        return SingleActiveDispatcher(topic_log, cursor, config, partition_index,
                                      failover=sub_type is SubType.FAILOVER)
    if sub_type is SubType.SHARED:
        return SharedDispatcher(topic_log, cursor, config, partition_index, clock=clock)
    return KeySharedDispatcher(topic_log, cursor, config, partition_index, clock=clock)


class Subscription:
    def __init__(self, name: str, topic_log: TopicLog, cursor: SubscriptionCursor, config: BrokerConfig,
                 partition_index: int, on_closed: Callable[[Subscription], None],
                 clock: Clock | None = None) -> None:
        self.name = name
        self.log = topic_log
        self.cursor = cursor
        self.config = config
        self.partition_index = partition_index
        self._on_closed = on_closed
        self.clock = clock
        self.dispatcher: Dispatcher | None = None
        self.sub_type: SubType | None = None
        self._state = SubscriptionState.ACTIVE

    @property
    def state(self) -> SubscriptionState:
        return self._state

    @property
    def durable(self) -> bool:
        return self.cursor.durable

    @property
    def consumers(self) -> list[Consumer]:
        return list(self.dispatcher.consumers) if self.dispatcher is not None else []

    def _close_state(self) -> bool:
        if self._state is SubscriptionState.CLOSED:
            return False
        invariant((self._state, SubscriptionState.CLOSED) in _TRANSITIONS, "subscription state table")
        self._state = SubscriptionState.CLOSED
        return True

    # --- consumers ------------------------------------------------------------------------------

    def add_consumer(self, consumer: Consumer) -> None:
        if self._state is not SubscriptionState.ACTIVE:
            raise BrokerError(pb.ServiceNotReady, f"subscription {self.name} is closed")
        current = self.consumers
        if current and self.sub_type is not consumer.sub_type:
            raise BrokerError(pb.ConsumerBusy, f"subscription {self.name} is of a different type")
        if current and consumer.sub_type is SubType.EXCLUSIVE:
            raise BrokerError(pb.ConsumerBusy, "Exclusive consumer is already connected")
        if self.dispatcher is None or self.sub_type is not consumer.sub_type:
            self.sub_type = consumer.sub_type
            self.dispatcher = make_dispatcher(consumer.sub_type, self.log, self.cursor, self.config,
                                              self.partition_index, self.clock)
            self.dispatcher.start()
        self.dispatcher.add_consumer(consumer)

    async def remove_consumer(self, consumer: Consumer) -> None:
        consumer.close()
        if self.dispatcher is None:
            return
        self.dispatcher.remove_consumer(consumer)
        if not self.dispatcher.consumers and not self.durable:
            await self.close(delete=True)

    def flow(self, consumer: Consumer, permits: int) -> None:
        if self.dispatcher is not None and consumer.is_active:
            self.dispatcher.flow(consumer, permits)

    def notify_entries_added(self) -> None:
        if self.dispatcher is not None:
            self.dispatcher.wake()

    # --- acks and redelivery --------------------------------------------------------------------

    async def acknowledge(self, ack: pb.CommandAck, positions: Sequence[tuple[Position, list[int]]]) -> None:
        dispatcher = self.dispatcher
        if ack.ack_type == pb.CommandAck.Cumulative:
            if not positions:
                return
            position, ack_set = positions[-1]
            if ack_set and any(ack_set):
                await self.cursor.mark_delete(before(position))
                await self.cursor.delete_batch_indexes(position, ack_set, await self._batch_size(position))
                target = before(position)
            else:
                await self.cursor.mark_delete(position)
                target = position
            if dispatcher is not None:
                dispatcher.acknowledged_cumulative(target)
            return
        whole: list[Position] = []
        for position, ack_set in positions:
            if ack_set and any(ack_set):
                await self.cursor.delete_batch_indexes(position, ack_set, await self._batch_size(position))
                if self.cursor.is_acked(position):
                    whole.append(position)
            else:
                whole.append(position)
        if whole:
            await self.cursor.delete(whole)
        if dispatcher is not None:
            dispatcher.acknowledged(whole)

    async def _batch_size(self, position: Position) -> int:
        entries = await self.log.read(position, 1)
        if not entries or entries[0].position != position:
            return 1
        return entry_message_count(stored_entry_metadata(entries[0].data))

    def redeliver(self, consumer: Consumer, positions: Sequence[Position]) -> None:
        if self.dispatcher is not None:
            self.dispatcher.redeliver(consumer, list(positions) or None)

    # --- seek and removal -----------------------------------------------------------------------

    async def reset(self, mark_delete: Position) -> list[Consumer]:
        """Seek: detach every consumer (CLOSE_CONSUMER), then move the cursor. Returns the detached."""
        detached = self.consumers
        dispatcher = self.dispatcher
        for consumer in detached:
            if consumer.channel.is_open():
                consumer.channel.send_close_consumer(consumer.consumer_id)
            consumer.close()
            if dispatcher is not None:
                dispatcher.consumers.remove(consumer)
        if dispatcher is not None and isinstance(dispatcher, SingleActiveDispatcher):
            dispatcher.active = None
        await self.cursor.reset(mark_delete)
        if dispatcher is not None:
            dispatcher.reset(mark_delete.next())
        return detached

    async def close(self, *, delete: bool) -> None:
        if not self._close_state():
            return
        if self.dispatcher is not None:
            await self.dispatcher.close()
        if delete:
            await self.log.delete_cursor(self.name)
        self._on_closed(self)
