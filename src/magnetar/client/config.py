"""Frozen configuration of the client, its producers and consumers (units last in names).

Defaults follow the official Python client where it has one (max_pending_messages 1000,
send timeout 30 s, receiver queue 1000, ack grouping 100 ms, nack delay 60 s, operation timeout
30 s); ``validate()`` checks each value against its bound in ``magnetar.base.limits``.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from magnetar.base.errors import InvalidArgumentError
from magnetar.base.limits import (
    CLIENT_ACK_GROUP_COUNT_MAX,
    CLIENT_BACKOFF_INITIAL_MS,
    CLIENT_BACKOFF_MAX_MS,
    CLIENT_BATCH_MESSAGES_COUNT_MAX,
    CLIENT_PRODUCER_PENDING_COUNT_MAX,
    CLIENT_RECEIVER_QUEUE_COUNT_MAX,
    PULSAR_MESSAGE_BYTES_MAX,
)
from magnetar.protocol.pulsar.generated import pulsar_api_pb2 as pb


class SubscriptionType(enum.Enum):
    EXCLUSIVE = pb.CommandSubscribe.Exclusive
    SHARED = pb.CommandSubscribe.Shared
    FAILOVER = pb.CommandSubscribe.Failover
    KEY_SHARED = pb.CommandSubscribe.Key_Shared

    @property
    def individual_ack_only(self) -> bool:
        """Shared and Key_Shared refuse cumulative acks and name the ids they redeliver."""
        return self in (SubscriptionType.SHARED, SubscriptionType.KEY_SHARED)


class InitialPosition(enum.Enum):
    LATEST = pb.CommandSubscribe.Latest
    EARLIEST = pb.CommandSubscribe.Earliest


class Compression(enum.Enum):
    NONE = pb.NONE
    LZ4 = pb.LZ4
    ZLIB = pb.ZLIB
    ZSTD = pb.ZSTD
    SNAPPY = pb.SNAPPY


def _check(name: str, value: int, low: int, high: int) -> None:
    if not low <= value <= high:
        raise InvalidArgumentError(f"{name} must be in [{low}, {high}], got {value}")


@dataclass(frozen=True, slots=True)
class ClientOptions:
    operation_timeout_ms: int = 30_000
    connection_timeout_ms: int = 10_000
    keep_alive_interval_ms: int = 30_000
    client_version: str = "Magnetar-Client-0.1.0"
    auth_method_name: str = "none"
    auth_data: bytes | None = None
    #: Reconnect backoff cap (Pulsar's ``maxBackoffInterval``): 100 ms doubling up to this.
    backoff_max_ms: int = CLIENT_BACKOFF_MAX_MS

    def validate(self) -> None:
        _check("operation_timeout_ms", self.operation_timeout_ms, 1, 3_600_000)
        _check("backoff_max_ms", self.backoff_max_ms, CLIENT_BACKOFF_INITIAL_MS, 3_600_000)
        _check("connection_timeout_ms", self.connection_timeout_ms, 1, 3_600_000)
        _check("keep_alive_interval_ms", self.keep_alive_interval_ms, 1, 3_600_000)


@dataclass(frozen=True, slots=True)
class ProducerConfig:
    producer_name: str | None = None
    max_pending_messages: int = 1_000
    send_timeout_ms: int = 30_000  # 0: never time out (resend until receipted)
    batching_enabled: bool = False
    batch_max_messages: int = 1_000
    batch_max_bytes: int = 128 * 1024
    batch_max_delay_ms: int = 10
    compression: Compression = Compression.NONE
    properties: dict[str, str] = field(default_factory=dict)
    initial_sequence_id: int | None = None
    round_robin: bool = True  # un-keyed messages on partitioned topics; False: always partition 0

    def validate(self) -> None:
        _check("max_pending_messages", self.max_pending_messages, 1, CLIENT_PRODUCER_PENDING_COUNT_MAX)
        _check("send_timeout_ms", self.send_timeout_ms, 0, 86_400_000)
        _check("batch_max_messages", self.batch_max_messages, 1, CLIENT_BATCH_MESSAGES_COUNT_MAX)
        _check("batch_max_bytes", self.batch_max_bytes, 1, PULSAR_MESSAGE_BYTES_MAX)
        _check("batch_max_delay_ms", self.batch_max_delay_ms, 0, 3_600_000)


@dataclass(frozen=True, slots=True)
class ConsumerConfig:
    subscription_type: SubscriptionType = SubscriptionType.EXCLUSIVE
    initial_position: InitialPosition = InitialPosition.LATEST
    consumer_name: str | None = None  # None: a random 10-hex name, like the official client
    receiver_queue_size: int = 1_000
    ack_group_time_ms: int = 100
    ack_group_max_count: int = CLIENT_ACK_GROUP_COUNT_MAX
    negative_ack_redelivery_delay_ms: int = 60_000
    batch_index_ack_enabled: bool = False
    priority_level: int = 0
    read_compacted: bool = False
    replicate_subscription_state: bool = False
    properties: dict[str, str] = field(default_factory=dict)

    def validate(self) -> None:
        _check("receiver_queue_size", self.receiver_queue_size, 1, CLIENT_RECEIVER_QUEUE_COUNT_MAX)
        _check("ack_group_time_ms", self.ack_group_time_ms, 0, 3_600_000)
        _check("ack_group_max_count", self.ack_group_max_count, 1, CLIENT_ACK_GROUP_COUNT_MAX)
        _check("negative_ack_redelivery_delay_ms", self.negative_ack_redelivery_delay_ms, 0, 86_400_000)
