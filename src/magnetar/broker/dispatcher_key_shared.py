"""Key_Shared: every key goes to one consumer, chosen by hashing the key; order per key is kept.

The key is ``ordering_key``, else ``partition_key`` (an entry without either is routed by the
empty key). AUTO_SPLIT consumers share a consistent-hash ring (``RING_POINTS_PER_CONSUMER`` points
each), so a joining or leaving consumer moves few keys; STICKY consumers bring their own inclusive
ranges over ``KEY_HASH_SLOTS``.

Order per key: an entry's ordered group is its hash slot. When the consumer owning a slot has no
permits, the entry is held in the replay set and the pass goes on with entries of other slots (a
stalled consumer does not stall the others); later entries of a held slot are held behind it, so
they never overtake it (see ``Dispatcher``).

Order when a consumer joins (Pulsar's "recently joined consumers", with PIP-282's last-sent
position): keys that move to the new consumer may still have unacknowledged entries at an old one.
The new consumer therefore receives nothing until every entry sent before it joined (position at
or before the last one sent then) has been acknowledged or taken back for redelivery. Held entries
are not a reason to wait: nothing of them is in flight.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable

from magnetar.base.checksum import crc32c
from magnetar.base.clock import Clock
from magnetar.base.entry import Entry
from magnetar.base.limits import BROKER_DELAYED_INDEX_ENTRIES_MAX
from magnetar.base.types import Position
from magnetar.broker.config import BrokerConfig
from magnetar.broker.consumer import Consumer
from magnetar.broker.dispatcher import Dispatcher
from magnetar.broker.entry import entry_key
from magnetar.broker.log import SubscriptionCursor, TopicLog
from magnetar.protocol.pulsar import pb

KEY_HASH_SLOTS = 65_536  # Pulsar's range size for Key_Shared hash ranges
RING_POINTS_PER_CONSUMER = 100


def key_slot(key: bytes) -> int:
    return crc32c(key) % KEY_HASH_SLOTS


class KeySharedDispatcher(Dispatcher):
    skip_blocked = True
    supports_delayed = True

    def __init__(self, topic_log: TopicLog, cursor: SubscriptionCursor, config: BrokerConfig, partition_index: int,
                 *, clock: Clock | None = None, delayed_enabled: Callable[[], bool] | None = None,
                 delayed_index_entries_max: int = BROKER_DELAYED_INDEX_ENTRIES_MAX) -> None:
        super().__init__(topic_log, cursor, config, partition_index, clock=clock, delayed_enabled=delayed_enabled,
                         delayed_index_entries_max=delayed_index_entries_max)
        self._ring_points: list[int] = []
        self._ring_owners: list[Consumer] = []
        self.recently_joined: dict[Consumer, Position] = {}

    def add_consumer(self, consumer: Consumer) -> None:
        if self.pending:
            self.recently_joined[consumer] = max(self.pending)
        self.consumers.append(consumer)
        self._rebuild_ring()
        self.wake()

    def remove_consumer(self, consumer: Consumer) -> None:
        self.recently_joined.pop(consumer, None)
        if consumer in self.consumers:
            self.consumers.remove(consumer)
        self._rebuild_ring()
        super().remove_consumer(consumer)

    def _rebuild_ring(self) -> None:
        points: list[tuple[int, int, Consumer]] = []
        for order, consumer in enumerate(self.consumers):
            if consumer.hash_ranges:
                continue
            for i in range(RING_POINTS_PER_CONSUMER):
                point = crc32c(f"{consumer.name}:{consumer.consumer_id}:{i}".encode()) % KEY_HASH_SLOTS
                points.append((point, order, consumer))
        points.sort(key=lambda item: (item[0], item[1]))
        self._ring_points = [p for p, _, _ in points]
        self._ring_owners = [c for _, _, c in points]

    def owner(self, slot: int) -> Consumer | None:
        for consumer in self.consumers:
            for start, end in consumer.hash_ranges:
                if start <= slot <= end:
                    return consumer
        if not self._ring_points:
            return None
        index = bisect.bisect_left(self._ring_points, slot) % len(self._ring_points)
        return self._ring_owners[index]

    def group_of(self, entry: Entry, metadata: pb.MessageMetadata) -> object | None:
        return key_slot(entry_key(metadata))

    def group_ready(self, group: object) -> bool:
        consumer = self.owner(group) if isinstance(group, int) else None
        return consumer is not None and consumer.can_receive()

    def select(self, entry: Entry, metadata: pb.MessageMetadata) -> Consumer | None:
        consumer = self.owner(key_slot(entry_key(metadata)))
        if consumer is None or not consumer.can_receive():
            return None
        last_sent = self.recently_joined.get(consumer)
        if last_sent is not None:
            if self._in_flight_up_to(last_sent):
                return None
            del self.recently_joined[consumer]
        return consumer

    def _in_flight_up_to(self, position: Position) -> bool:
        # pending is in dispatch order, so an old entry still in flight is usually found first
        return any(p <= position for p in self.pending)
