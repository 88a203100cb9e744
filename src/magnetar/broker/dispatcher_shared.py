"""Shared: entries go round-robin to the consumers that have permits, lowest priority level first.

Acks are individual; REDELIVER_UNACKNOWLEDGED_MESSAGES lists ids, which go to the replay set with
their redelivery count incremented and are sent (to any consumer) before new entries.

Chunked messages: all chunks of one message go to one consumer, in order, as Pulsar does (a
consumer can only reassemble chunks it receives). The first chunk sent picks the consumer; the
chunks of a message form an ordered group (see ``Dispatcher``), so while that consumer has no
permits its chunks are held and other messages go on to other consumers. If the consumer leaves,
its unacknowledged chunks are replayed from the first one and the next chunk sent picks again.
At most ``chunked_messages_tracked_count_max`` messages are tracked; beyond it the oldest is
forgotten (its remaining chunks may then go to another consumer, which drops the incomplete message).
"""

from __future__ import annotations

from collections.abc import Callable

from magnetar.base.clock import Clock
from magnetar.base.entry import Entry
from magnetar.base.limits import BROKER_DELAYED_INDEX_ENTRIES_MAX
from magnetar.broker.config import BrokerConfig
from magnetar.broker.consumer import Consumer
from magnetar.broker.dispatcher import Dispatcher
from magnetar.broker.log import SubscriptionCursor, TopicLog
from magnetar.protocol.pulsar import pb


def _chunk_group(metadata: pb.MessageMetadata) -> tuple[str, str] | None:
    if metadata.HasField("num_chunks_from_msg") and metadata.num_chunks_from_msg > 1 and metadata.HasField("uuid"):
        return ("chunked", metadata.uuid)
    return None


class SharedDispatcher(Dispatcher):
    skip_blocked = True
    supports_delayed = True
    _next_index = 0

    def __init__(self, topic_log: TopicLog, cursor: SubscriptionCursor, config: BrokerConfig, partition_index: int,
                 *, clock: Clock | None = None, delayed_enabled: Callable[[], bool] | None = None,
                 delayed_index_entries_max: int = BROKER_DELAYED_INDEX_ENTRIES_MAX) -> None:
        super().__init__(topic_log, cursor, config, partition_index, clock=clock, delayed_enabled=delayed_enabled,
                         delayed_index_entries_max=delayed_index_entries_max)
        self.chunk_owners: dict[object, Consumer] = {}  # chunked message group -> its consumer

    def group_of(self, entry: Entry, metadata: pb.MessageMetadata) -> object | None:
        return _chunk_group(metadata)

    def _owner(self, group: object) -> Consumer | None:
        owner = self.chunk_owners.get(group)
        if owner is not None and (not owner.is_active or owner not in self.consumers):
            del self.chunk_owners[group]
            return None
        return owner

    def group_ready(self, group: object) -> bool:
        owner = self._owner(group)
        return owner is None or owner.can_receive()

    def remove_consumer(self, consumer: Consumer) -> None:
        for group in [g for g, c in self.chunk_owners.items() if c is consumer]:
            del self.chunk_owners[group]
        super().remove_consumer(consumer)

    def select(self, entry: Entry, metadata: pb.MessageMetadata) -> Consumer | None:
        group = _chunk_group(metadata)
        if group is not None:
            owner = self._owner(group)
            if owner is not None:
                if not owner.can_receive():
                    return None
                if metadata.chunk_id == metadata.num_chunks_from_msg - 1:
                    del self.chunk_owners[group]  # the last chunk: the message is complete
                return owner
        chosen = self._round_robin()
        if chosen is not None and group is not None and metadata.chunk_id < metadata.num_chunks_from_msg - 1:
            self.chunk_owners[group] = chosen
            while len(self.chunk_owners) > self.config.chunked_messages_tracked_count_max:
                del self.chunk_owners[next(iter(self.chunk_owners))]
        return chosen

    def _round_robin(self) -> Consumer | None:
        consumers = self.consumers
        count = len(consumers)
        best: Consumer | None = None
        best_offset = 0
        for offset in range(count):
            consumer = consumers[(self._next_index + offset) % count]
            if consumer.can_receive() and (best is None or consumer.priority_level < best.priority_level):
                best, best_offset = consumer, offset
        if best is not None:
            self._next_index = (self._next_index + best_offset + 1) % count
        return best
