"""Broker configuration: one frozen dataclass, units last in every name.

Hard bounds a deployment may lower but never raise are checked in ``__post_init__`` against the
broker section of ``magnetar.base.limits``.
"""

from __future__ import annotations

from dataclasses import dataclass

from magnetar.base.errors import InvalidArgument
from magnetar.base.limits import (
    BROKER_DISPATCH_READ_COUNT_MAX,
    BROKER_PENDING_ACKS_PER_SUBSCRIPTION_COUNT_MAX,
    BROKER_PENDING_SENDS_PER_PRODUCER_COUNT_MAX,
    BROKER_REDELIVERY_TRACKER_COUNT_MAX,
    MIB,
    PULSAR_MESSAGE_BYTES_MAX,
)
from magnetar.broker.listeners import parse_listeners
from magnetar.broker.schema_compat import Compatibility


@dataclass(frozen=True, slots=True)
class BrokerConfig:
    #: Name of the cluster; broker-assigned producer names are ``<cluster>-<index>-<counter>``.
    cluster_name: str = "standalone"
    broker_index: int = 0
    #: Host and port clients are sent to by LOOKUP ("connect here"); set by the runtime.
    advertised_host: str = "127.0.0.1"
    advertised_port: int = 6650
    #: Create a topic when a producer or consumer names one that does not exist (Pulsar: true).
    topic_auto_creation: bool = True
    #: Partitions of an auto-created topic; 0 means non-partitioned (Pulsar's default).
    auto_created_partitions_count: int = 0
    #: Answer a re-sent (producer_name, sequence_id) already persisted with a (-1,-1) receipt.
    #: Differs from Pulsar on purpose (brokerDeduplicationEnabled=false there): Magnetar's
    #: guarantees are stated and checked with it on (FAULTS.md invariant 8: no duplicates after
    #: producer retries, in the simulator, the chaos runs and the kill -9 tests; the Spark sink's
    #: retried tasks), and a user who turns it off per namespace still can (deduplicationEnabled).
    deduplication: bool = True
    #: Broker-wide policy defaults, used where neither the namespace nor the topic sets one
    #: (Pulsar: defaultRetentionTimeInMinutes/SizeInMB = 0, ttlDurationDefaultInSeconds = 0,
    #: delayedDeliveryEnabled = true). Retention -1 keeps consumed entries forever; TTL 0 never expires.
    retention_time_s: float = 0.0
    retention_size_bytes: int = 0
    message_ttl_s: int = 0
    delayed_delivery: bool = True
    #: How often loaded topics are checked for TTL expiry, backlog quotas and retention (Pulsar
    #: checks these every 1-5 min; a short period costs one pass over the loaded topics).
    policy_check_interval_ms: int = 5000
    #: SENDs one producer may have between receipt and persist; reading pauses beyond it.
    pending_sends_per_producer_max: int = 1000
    #: SENDs all producers of one connection may have unanswered; reading from the connection
    #: pauses at it and resumes at half (Pulsar: maxPendingPublishRequestsPerConnection).
    pending_sends_per_connection_max: int = 1000
    #: Entries one dispatcher read asks the log for.
    dispatch_read_count_max: int = 100
    #: Dispatched-but-unacknowledged entries one subscription tracks; dispatch pauses beyond it.
    pending_acks_per_subscription_max: int = 50_000
    #: Positions with a redelivery count kept per subscription (oldest forgotten beyond it).
    redelivery_tracker_count_max: int = 50_000
    #: Entries a Shared/Key_Shared subscription holds back in its replay set because their key's
    #: (or chunked message's) consumer has no permits, while it goes on with other keys; beyond it
    #: reading new entries pauses (Pulsar: keySharedLookAheadMsgInReplayThresholdPerSubscription).
    dispatch_look_ahead_count_max: int = 20_000
    #: Chunked messages whose chunks a Shared subscription is sending to one consumer (the owner of
    #: the oldest is forgotten beyond it).
    chunked_messages_tracked_count_max: int = 10_000
    #: Queued outgoing bytes of one connection above which dispatch to it pauses and reading from
    #: it stops (a client that never reads must not grow the broker's memory).
    connection_outbound_bytes_high: int = 2 * MIB
    #: Test-only switch for the negative control of the outbound bound: False lets a connection's
    #: queue grow without limit. Never False in a deployment.
    connection_outbound_bound_enabled: bool = True

    # --- Pulsar parity (issue 18) ----------------------------------------------------------------
    #: Largest message a producer may send (Pulsar: maxMessageSize, 5 MiB): reported in
    #: CONNECTED.max_message_size (the official client refuses larger sends itself, MessageTooBig,
    #: and chunks at it); a frame beyond it plus 10 KiB of headers closes the connection, as
    #: Pulsar's frame decoder does. A topic's maxMessageSize policy refuses smaller ones
    #: (NotAllowed). It may be lowered, not raised above 5 MiB (the frame bound).
    max_message_size_bytes: int = PULSAR_MESSAGE_BYTES_MAX
    #: Schema compatibility of a namespace whose schemaCompatibilityStrategy policy is UNDEFINED
    #: (Pulsar: schemaCompatibilityStrategy, FULL); one of ``schema_compat.Compatibility``.
    schema_compatibility_strategy: str = "FULL"
    #: Pulsar's advertisedListeners, ``name:pulsar://host:port,name:pulsar+ssl://host:port,...``
    #: (``broker.listeners``): LOOKUP answers the listener the client names; "" none but the
    #: internal one at the advertised address.
    advertised_listeners: str = ""
    #: Pulsar's internalListenerName: the listener of a LOOKUP that names none ("": the first).
    internal_listener_name: str = ""

    def __post_init__(self) -> None:
        bounds = (
            ("pending_sends_per_producer_max", self.pending_sends_per_producer_max,
             BROKER_PENDING_SENDS_PER_PRODUCER_COUNT_MAX),
            ("pending_sends_per_connection_max", self.pending_sends_per_connection_max,
             BROKER_PENDING_SENDS_PER_PRODUCER_COUNT_MAX),
            ("dispatch_read_count_max", self.dispatch_read_count_max, BROKER_DISPATCH_READ_COUNT_MAX),
            ("pending_acks_per_subscription_max", self.pending_acks_per_subscription_max,
             BROKER_PENDING_ACKS_PER_SUBSCRIPTION_COUNT_MAX),
            ("redelivery_tracker_count_max", self.redelivery_tracker_count_max, BROKER_REDELIVERY_TRACKER_COUNT_MAX),
            ("dispatch_look_ahead_count_max", self.dispatch_look_ahead_count_max,
             BROKER_PENDING_ACKS_PER_SUBSCRIPTION_COUNT_MAX),
            ("chunked_messages_tracked_count_max", self.chunked_messages_tracked_count_max,
             BROKER_PENDING_ACKS_PER_SUBSCRIPTION_COUNT_MAX),
        )
        for name, value, bound in bounds:
            if not 1 <= value <= bound:
                raise InvalidArgument(f"{name} must be 1..{bound}, got {value}")
        if self.connection_outbound_bytes_high < 64 * 1024:
            raise InvalidArgument("connection_outbound_bytes_high must be at least 64 KiB")
        if self.policy_check_interval_ms < 1 or self.message_ttl_s < 0:
            raise InvalidArgument("policy_check_interval_ms must be >= 1 and message_ttl_s >= 0")
        if self.retention_time_s < -1 or self.retention_size_bytes < -1:
            raise InvalidArgument("retention_time_s and retention_size_bytes must be >= -1")
        if not 1024 <= self.max_message_size_bytes <= PULSAR_MESSAGE_BYTES_MAX:
            raise InvalidArgument(f"max_message_size_bytes must be 1024..{PULSAR_MESSAGE_BYTES_MAX}, "
                                  f"got {self.max_message_size_bytes}")
        if self.schema_compatibility_strategy not in {c.value for c in Compatibility}:
            raise InvalidArgument(f"schema_compatibility_strategy must be one of "
                                  f"{sorted(c.value for c in Compatibility)}, got {self.schema_compatibility_strategy!r}")
        listeners = parse_listeners(self.advertised_listeners)  # raises InvalidArgument if malformed
        if listeners and self.internal_listener_name and self.internal_listener_name not in listeners:
            raise InvalidArgument(f"internal_listener_name {self.internal_listener_name!r} is not among "
                                  f"advertised_listeners {sorted(listeners)}")
        if self.auto_created_partitions_count < 0:
            raise InvalidArgument("auto_created_partitions_count must be >= 0")

    @property
    def service_url(self) -> str:
        return f"pulsar://{self.advertised_host}:{self.advertised_port}"
