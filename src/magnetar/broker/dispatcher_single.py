"""Exclusive and Failover: one active consumer at a time receives everything, in log order.

Exclusive admits one consumer (the subscription refuses a second with ConsumerBusy). Failover
admits many; the active one is the first connected among the lowest priority level for a
non-partitioned topic, and ``partition_index % n`` of them sorted by name for a partition (so the
partitions of one topic spread over the consumers), as Pulsar picks it. Consumers are told with
ACTIVE_CONSUMER_CHANGE. When the active consumer changes or asks for redelivery (these types send
an empty id list, meaning "everything"), the dispatcher rewinds to the mark-delete position, so the
new active consumer gets every unacknowledged entry, in order.
"""

from __future__ import annotations

from collections.abc import Sequence

from magnetar.base.entry import Entry
from magnetar.base.types import Position
from magnetar.broker.config import BrokerConfig
from magnetar.broker.consumer import Consumer
from magnetar.broker.dispatcher import Dispatcher
from magnetar.broker.log import SubscriptionCursor, TopicLog
from magnetar.protocol.pulsar import pb


class SingleActiveDispatcher(Dispatcher):
    def __init__(self, topic_log: TopicLog, cursor: SubscriptionCursor, config: BrokerConfig, partition_index: int,
                 *, failover: bool) -> None:
        super().__init__(topic_log, cursor, config, partition_index)
        self.failover = failover
        self.active: Consumer | None = None

    def select(self, entry: Entry, metadata: pb.MessageMetadata) -> Consumer | None:
        active = self.active
        return active if active is not None and active.can_receive() else None

    def add_consumer(self, consumer: Consumer) -> None:
        self.consumers.append(consumer)
        self._pick_active(joined=consumer)
        self.wake()

    def remove_consumer(self, consumer: Consumer) -> None:
        if consumer in self.consumers:
            self.consumers.remove(consumer)
        if consumer is self.active:
            self.active = None
            self.rewind(count=False)
        self._pick_active(joined=None)
        self.wake()

    def redeliver(self, consumer: Consumer, positions: Sequence[Position] | None) -> None:
        if consumer is self.active:
            self.rewind(count=True)

    def _choose(self) -> Consumer | None:
        if not self.consumers:
            return None
        best = min(c.priority_level for c in self.consumers)
        candidates = [c for c in self.consumers if c.priority_level == best]
        if self.partition_index >= 0:
            candidates.sort(key=lambda c: (c.name, c.consumer_id))
            return candidates[self.partition_index % len(candidates)]
        return candidates[0]

    def _pick_active(self, joined: Consumer | None) -> None:
        chosen = self._choose()
        previous = self.active
        if chosen is previous:
            if joined is not None and self.failover and joined is not chosen:
                joined.channel.send_active_consumer_change(joined.consumer_id, False)
            elif joined is not None and self.failover:
                joined.channel.send_active_consumer_change(joined.consumer_id, True)
            return
        self.active = chosen
        if previous is not None:
            self.rewind(count=False)  # what the old active consumer had not acknowledged goes to the new one
        if self.failover:
            for consumer in self.consumers:
                if consumer.channel.is_open():
                    consumer.channel.send_active_consumer_change(consumer.consumer_id, consumer is chosen)
