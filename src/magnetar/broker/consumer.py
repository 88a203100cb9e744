"""A consumer attached to a subscription, and the ``ConsumerChannel`` its connection provides.

A consumer holds flow permits (counted per *message*: a batch entry costs its
``num_messages_in_batch``) and may receive only while it has permits and its connection is
writable. State: ACTIVE until closed by the client, by a seek, or by its connection going away.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from typing import Protocol

from magnetar.base.invariant import invariant
from magnetar.protocol.pulsar import pb


class ConsumerChannel(Protocol):
    """The part of a client connection a dispatcher talks to."""

    def send_message(self, consumer_id: int, ledger_id: int, entry_id: int, partition: int, data: bytes,
                     redelivery_count: int, ack_set: Sequence[int]) -> None:
        """A MESSAGE for the entry at ``ledger_id:entry_id`` of partition ``partition`` (-1: not
        partitioned); ``data`` is the stored entry, sent unchanged."""

    def send_close_consumer(self, consumer_id: int) -> None: ...

    def send_active_consumer_change(self, consumer_id: int, is_active: bool) -> None: ...

    def writable(self) -> bool:
        """False while the connection's outgoing bytes are above the high-water mark."""

    def is_open(self) -> bool: ...


class ConsumerState(enum.Enum):
    ACTIVE = "active"
    CLOSED = "closed"


_TRANSITIONS = {
    (ConsumerState.ACTIVE, ConsumerState.CLOSED),
    (ConsumerState.CLOSED, ConsumerState.CLOSED),
}


class SubType(enum.IntEnum):
    EXCLUSIVE = pb.CommandSubscribe.Exclusive
    SHARED = pb.CommandSubscribe.Shared
    FAILOVER = pb.CommandSubscribe.Failover
    KEY_SHARED = pb.CommandSubscribe.Key_Shared


class Consumer:
    def __init__(self, consumer_id: int, name: str, sub_type: SubType, channel: ConsumerChannel, *,
                 priority_level: int = 0, hash_ranges: tuple[tuple[int, int], ...] = (),
                 connection_key: object = None) -> None:
        self.consumer_id = consumer_id
        self.name = name
        self.sub_type = sub_type
        self.channel = channel
        self.priority_level = priority_level
        self.hash_ranges = hash_ranges  # Key_Shared STICKY ranges, inclusive; empty for AUTO_SPLIT
        self.connection_key = connection_key
        self.permits = 0
        self.pending_count = 0  # entries dispatched to this consumer and not yet acknowledged
        self._state = ConsumerState.ACTIVE

    @property
    def state(self) -> ConsumerState:
        return self._state

    def close(self) -> None:
        invariant((self._state, ConsumerState.CLOSED) in _TRANSITIONS, "consumer state table")
        self._state = ConsumerState.CLOSED

    @property
    def is_active(self) -> bool:
        return self._state is ConsumerState.ACTIVE

    def can_receive(self) -> bool:
        return self._state is ConsumerState.ACTIVE and self.permits > 0 and self.channel.writable()

    def add_permits(self, count: int) -> None:
        self.permits += count

    def __repr__(self) -> str:
        return f"Consumer({self.consumer_id}, {self.name!r}, permits={self.permits})"
