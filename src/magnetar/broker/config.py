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
    NAMESPACE_BUNDLES_COUNT_MAX,
)


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
    # --- load balancer (``broker.balancer``; the Pulsar key of each field: ``balancer.PULSAR_KEYS``) ---
    #: loadBalancerEnabled: the elected leader broker sheds load and splits hot bundles.
    load_balancer_enabled: bool = True
    #: loadBalancerSheddingEnabled: the leader unloads bundles from overloaded brokers.
    load_balancer_shedding_enabled: bool = True
    #: loadBalancerSheddingIntervalMinutes (1): how often the leader decides.
    load_balancer_shedding_interval_ms: int = 60_000
    #: loadBalancerSheddingGracePeriodMinutes (30): a bundle moved is not moved again before this.
    load_balancer_shedding_grace_period_ms: int = 1_800_000
    #: loadBalancerBrokerOverloadedThresholdPercentage (85): a broker using this much CPU sheds.
    load_balancer_broker_overloaded_threshold_percent: int = 85
    #: loadBalancerBrokerThresholdShedderPercentage (10): a broker whose load is this much above
    #: the cluster average sheds; a target may not end up above it.
    load_balancer_broker_threshold_percent: int = 10
    #: loadBalancerAutoBundleSplitEnabled: split bundles above the four maxima below.
    load_balancer_auto_bundle_split_enabled: bool = True
    #: loadBalancerNamespaceBundleMaxTopics / MaxSessions / MaxMsgRate / MaxBandwidthMbytes.
    load_balancer_namespace_bundle_topics_max: int = 1000
    load_balancer_namespace_bundle_sessions_max: int = 1000
    load_balancer_namespace_bundle_msg_rate_max: int = 30_000
    load_balancer_namespace_bundle_bandwidth_bytes_max: int = 100 * MIB
    #: loadBalancerNamespaceMaximumBundles (128): no split beyond this many bundles per namespace.
    load_balancer_namespace_bundles_max: int = 128
    #: loadBalancerMaxNumberOfBundlesToSplitPerCycle (10).
    load_balancer_bundle_splits_per_cycle_max: int = 10
    #: Bundles one shedding round may unload (no Pulsar key: Pulsar unloads until under threshold).
    load_balancer_unloads_per_cycle_max: int = 16
    #: loadBalancerCPUResourceWeight, loadBalancerBandwithInResourceWeight (+Out, averaged), and
    #: Magnetar's weights of message rate, topics and sessions in a broker's load score (0 = ignore).
    load_balancer_cpu_weight: float = 1.0
    load_balancer_bandwidth_weight: float = 1.0
    load_balancer_msg_rate_weight: float = 1.0
    load_balancer_topics_weight: float = 1.0
    load_balancer_sessions_weight: float = 1.0

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
        if self.auto_created_partitions_count < 0:
            raise InvalidArgument("auto_created_partitions_count must be >= 0")
        if self.load_balancer_shedding_interval_ms < 100 or self.load_balancer_shedding_grace_period_ms < 0:
            raise InvalidArgument("load_balancer_shedding_interval_ms must be >= 100 and the grace period >= 0")
        if not 2 <= self.load_balancer_namespace_bundles_max <= NAMESPACE_BUNDLES_COUNT_MAX:
            raise InvalidArgument(f"load_balancer_namespace_bundles_max must be 2..{NAMESPACE_BUNDLES_COUNT_MAX}")

    @property
    def service_url(self) -> str:
        return f"pulsar://{self.advertised_host}:{self.advertised_port}"
