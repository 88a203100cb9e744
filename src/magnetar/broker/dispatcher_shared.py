"""Shared: entries go round-robin to the consumers that have permits, lowest priority level first.

Acks are individual; REDELIVER_UNACKNOWLEDGED_MESSAGES lists ids, which go to the replay set with
their redelivery count incremented and are sent (to any consumer) before new entries.
"""

from __future__ import annotations

from magnetar.broker.consumer import Consumer
from magnetar.broker.dispatcher import Dispatcher
from magnetar.broker.log import Entry
from magnetar.protocol.pulsar import pb


class SharedDispatcher(Dispatcher):
    _next_index = 0

    def select(self, entry: Entry, metadata: pb.MessageMetadata) -> Consumer | None:
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
