"""A subscription: a cursor, the consumers attached to it and the dispatcher of its type.

States: ACTIVE -> CLOSED (unsubscribed, or a non-durable subscription whose last consumer left).
The type is fixed while consumers are attached; a consumer of another type is refused with
ConsumerBusy, as is a second consumer on an Exclusive subscription.

Seek (``reset``) follows Java's order: every consumer is sent CLOSE_CONSUMER and detached first,
then the cursor and dispatcher move, and only then does the caller reply SUCCESS; the client then
subscribes again and sends a full FLOW, so no permits are lost.

Moving forward without consumers' acks (TTL expiry, backlog eviction, the admin API's skip and
clear-backlog) acknowledges through the cursor and tells the dispatcher, so what was dispatched
and is now acknowledged is never sent again; each pass reads at most
``BROKER_EXPIRY_SCAN_ENTRIES_COUNT_MAX`` entries (the next pass goes on).
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Sequence

from mypy_extensions import mypyc_attr

from magnetar.base.clock import Clock
from magnetar.base.entry import Entry
from magnetar.base.invariant import invariant
from magnetar.base.limits import BROKER_ACK_SLICE_IDS_COUNT_MAX, BROKER_EXPIRY_SCAN_ENTRIES_COUNT_MAX
from magnetar.base.types import Position
from magnetar.broker.compaction import CompactedView
from magnetar.broker.config import BrokerConfig
from magnetar.broker.consumer import Consumer, SubType
from magnetar.broker.dispatcher import Dispatcher, next_loop_pass
from magnetar.broker.dispatcher_key_shared import KeySharedDispatcher
from magnetar.broker.dispatcher_shared import SharedDispatcher
from magnetar.broker.dispatcher_single import SingleActiveDispatcher
from magnetar.broker.entry import entry_message_count
from magnetar.broker.errors import BrokerError
from magnetar.broker.ids import before
from magnetar.broker.log import SubscriptionCursor, TopicLog
from magnetar.broker.metrics import RateMeter
from magnetar.protocol.pulsar import pb, stored_entry_metadata


class SubscriptionState(enum.Enum):
    ACTIVE = "active"
    CLOSED = "closed"


_TRANSITIONS = {(SubscriptionState.ACTIVE, SubscriptionState.CLOSED)}


def make_dispatcher(sub_type: SubType, topic_log: TopicLog, cursor: SubscriptionCursor, config: BrokerConfig,
                    partition_index: int, clock: Clock | None = None,
                    delayed_enabled: Callable[[], bool] | None = None) -> Dispatcher:
    if sub_type in (SubType.EXCLUSIVE, SubType.FAILOVER):
        return SingleActiveDispatcher(topic_log, cursor, config, partition_index,
                                      failover=sub_type is SubType.FAILOVER)
    if sub_type is SubType.SHARED:
        return SharedDispatcher(topic_log, cursor, config, partition_index, clock=clock,
                                delayed_enabled=delayed_enabled)
    return KeySharedDispatcher(topic_log, cursor, config, partition_index, clock=clock,
                               delayed_enabled=delayed_enabled)


# The non-persistent topic's subscription (``broker/non_persistent.py``, Python) derives from it.
@mypyc_attr(allow_interpreted_subclasses=True)
class Subscription:
    def __init__(self, name: str, topic_log: TopicLog, cursor: SubscriptionCursor, config: BrokerConfig,
                 partition_index: int, on_closed: Callable[[Subscription], None],
                 clock: Clock | None = None, admit_consumer: Callable[[], None] | None = None,
                 delayed_enabled: Callable[[], bool] | None = None) -> None:
        self.name = name
        self.log = topic_log
        self.cursor = cursor
        self.config = config
        self.partition_index = partition_index
        self._on_closed = on_closed
        self.clock = clock
        self._admit_consumer = admit_consumer
        self._delayed_enabled = delayed_enabled  # the delayedDelivery policy; None: the broker default
        self.dispatcher: Dispatcher | None = None
        self.sub_type: SubType | None = None
        self.dispatched = RateMeter()
        self.expired = RateMeter()
        if clock is not None:  # rates count from the subscription's start
            self.dispatched.sample(clock.monotonic_ns())
            self.expired.sample(clock.monotonic_ns())
        self.last_expire_ms = 0
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

    def add_consumer(self, consumer: Consumer, read_log: TopicLog | None = None) -> None:
        """Attach ``consumer``; ``read_log`` (a ``read_compacted`` consumer's compacted view) is what
        the dispatcher reads from while this is the only consumer (default: the topic's log)."""
        if self._state is not SubscriptionState.ACTIVE:
            raise BrokerError(pb.ServiceNotReady, f"subscription {self.name} is closed")
        current = self.consumers
        if current and self.sub_type is not consumer.sub_type:
            raise BrokerError(pb.ConsumerBusy, f"subscription {self.name} is of a different type")
        if current and consumer.sub_type is SubType.EXCLUSIVE:
            raise BrokerError(pb.ConsumerBusy, "Exclusive consumer is already connected")
        if self._admit_consumer is not None:
            self._admit_consumer()
        source = read_log or self.log
        if self.dispatcher is None or self.sub_type is not consumer.sub_type:
            self.sub_type = consumer.sub_type
            self.dispatcher = make_dispatcher(consumer.sub_type, source, self.cursor, self.config,
                                              self.partition_index, self.clock, self._delayed_enabled)
            self.dispatcher.on_deliver = self.dispatched.record
            self.dispatcher.start()
        elif not current and self.dispatcher.log is not source:
            self.dispatcher.log = source  # positions are the topic's in both: reading goes on where it was
        self.dispatcher.add_consumer(consumer)

    async def remove_consumer(self, consumer: Consumer) -> None:
        consumer.close()
        if self.dispatcher is None:
            return
        self.dispatcher.remove_consumer(consumer)
        if not self.dispatcher.consumers and not self.durable:
            await self.close(delete=True)
            return
        release = getattr(self.log, "release_cursor", None)
        if not self.dispatcher.consumers and release is not None:
            # A read-only broker lets an idle subscription go (persisted, unlocked), so its next
            # consumer may come through another read-only broker (broker/read_only.py).
            await self.close(delete=False)
            await release(self.name)

    def flow(self, consumer: Consumer, permits: int) -> None:
        if self.dispatcher is not None and consumer.is_active:
            self.dispatcher.flow(consumer, permits)

    def notify_entries_added(self) -> None:
        if self.dispatcher is not None:
            self.dispatcher.entries_added()

    # --- acks and redelivery --------------------------------------------------------------------

    async def acknowledge(self, cumulative: bool, positions: Sequence[tuple[Position, Sequence[int]]]) -> None:
        """An ACK's ids: each a position and its ack set (empty for the whole entry; for a batch
        entry, the wire words, bit = 1 still unacknowledged).

        Individual acks beyond ``BROKER_ACK_SLICE_IDS_COUNT_MAX`` ids are applied in slices of
        that many, one event-loop pass each (``next_loop_pass`` between them; issue 22, the
        acknowledgement pass), in the order given; the caller's next ACK waits for the last slice
        (the connection reads on only then), so one consumer's acks never overtake each other. A
        subscription closed meanwhile takes no further slice (its cursor is closed)."""
        slice_max = BROKER_ACK_SLICE_IDS_COUNT_MAX
        if cumulative or len(positions) <= slice_max:
            await self._acknowledge(cumulative, positions)
            return
        for start in range(0, len(positions), slice_max):
            if start:
                await next_loop_pass()
                if self._state is not SubscriptionState.ACTIVE:
                    return
            await self._acknowledge(False, positions[start:start + slice_max])

    async def _acknowledge(self, cumulative: bool, positions: Sequence[tuple[Position, Sequence[int]]]) -> None:
        dispatcher = self.dispatcher
        if cumulative:
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
                await self._skip_compacted_out(dispatcher)
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
            await self._skip_compacted_out(dispatcher)

    async def _skip_compacted_out(self, dispatcher: Dispatcher) -> None:
        """A ``read_compacted`` dispatcher: acks also cover what compaction removed (see
        ``CompactedView.skip_compacted_out``)."""
        if isinstance(dispatcher.log, CompactedView):
            moved = await dispatcher.log.skip_compacted_out(self.cursor, self.config.dispatch_read_count_max)
            if moved is not None:
                dispatcher.acknowledged_cumulative(moved)

    async def _batch_size(self, position: Position) -> int:
        entries = await self.log.read(position, 1)
        if not entries or entries[0].position != position:
            return 1
        return entry_message_count(stored_entry_metadata(entries[0].payload))

    def redeliver(self, consumer: Consumer, positions: Sequence[Position]) -> None:
        if self.dispatcher is not None:
            self.dispatcher.redeliver(consumer, list(positions) or None)

    # --- seek and removal -----------------------------------------------------------------------

    def disconnect_consumers(self) -> list[Consumer]:
        """Detach every consumer with CLOSE_CONSUMER (its client subscribes again); returns them."""
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
        return detached

    async def reset(self, mark_delete: Position) -> list[Consumer]:
        """Seek: detach every consumer (CLOSE_CONSUMER), then move the cursor. Returns the detached."""
        detached = self.disconnect_consumers()
        dispatcher = self.dispatcher
        await self.cursor.reset(mark_delete)
        if dispatcher is not None:
            dispatcher.reset(mark_delete.next())
        return detached

    # --- moving forward without consumers (TTL, eviction, admin) ---------------------------------

    async def _scan(self, take: Callable[[Entry], bool]) -> None:
        """Show ``take`` the entries after the mark-delete position, in log order, one read at a
        time, until it returns False (one pass: at most ``BROKER_EXPIRY_SCAN_ENTRIES_COUNT_MAX``).

        A callback rather than an async generator: the module is compiled (mypyc has none)."""
        start = self.cursor.mark_delete_position.next()
        scanned = 0
        while scanned < BROKER_EXPIRY_SCAN_ENTRIES_COUNT_MAX:
            entries = await self.log.read(start, self.config.dispatch_read_count_max)
            if not entries:
                return
            for entry in entries:
                if not take(entry):
                    return
            scanned += len(entries)
            start = entries[-1].position.next()

    async def acknowledge_up_to(self, position: Position) -> None:
        """Cumulatively acknowledge everything up to ``position`` (never moves back)."""
        if position <= self.cursor.mark_delete_position:
            return
        await self.cursor.mark_delete(position)
        if self.dispatcher is not None:
            self.dispatcher.acknowledged_cumulative(position)

    async def expire_older_than(self, cutoff_ms: int) -> int:
        """Acknowledge the entries published before ``cutoff_ms`` (TTL); returns how many."""
        last: Position | None = None
        count = size = 0

        def older(entry: Entry) -> bool:
            nonlocal last, count, size
            if stored_entry_metadata(entry.payload).publish_time >= cutoff_ms:
                return False
            last = entry.position
            count += 1
            size += len(entry.payload)
            return True

        await self._scan(older)
        if last is not None:
            await self.acknowledge_up_to(last)
            self.expired.record(count, size)
            self.last_expire_ms = cutoff_ms
        return count

    async def evict_to_size(self, backlog_bytes_max: int) -> int:
        """Acknowledge the oldest entries until at most ``backlog_bytes_max`` bytes are left."""
        backlog = self.log.backlog_bytes(self.cursor.mark_delete_position)
        last: Position | None = None
        count = 0

        def over(entry: Entry) -> bool:
            nonlocal backlog, last, count
            if backlog <= backlog_bytes_max:
                return False
            backlog -= len(entry.payload)
            last = entry.position
            count += 1
            return True

        await self._scan(over)
        if last is not None:
            await self.acknowledge_up_to(last)
        return count

    async def skip(self, count: int) -> int:
        """Acknowledge the next ``count`` unacknowledged entries (admin ``skip``); returns how many."""
        chosen: list[Position] = []

        def unacked(entry: Entry) -> bool:
            if len(chosen) >= count:
                return False
            if not self.cursor.is_acked(entry.position):
                chosen.append(entry.position)
            return True

        await self._scan(unacked)
        if chosen:
            await self.cursor.delete(chosen)
            if self.dispatcher is not None:
                self.dispatcher.acknowledged(chosen)
        return len(chosen)

    async def clear_backlog(self) -> None:
        await self.acknowledge_up_to(self.log.last_position)

    async def close(self, *, delete: bool) -> None:
        if not self._close_state():
            return
        if self.dispatcher is not None:
            await self.dispatcher.close()
        if delete:
            await self.log.delete_cursor(self.name)
        self._on_closed(self)
