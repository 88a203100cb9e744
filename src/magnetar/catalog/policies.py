"""Namespace and topic policies: the Pulsar JSON model, resolution and a watched cache.

Stored in the metadata store where Pulsar keeps them: namespace ``Policies`` at
``/admin/policies/{tenant}/{ns}``, topic overrides (``TopicPolicies``, Pulsar keeps them in a system
topic) at ``/admin/topic-policies/{tenant}/{ns}/persistent/{encoded local name}``. JSON field names
are Pulsar's (``retention_policies``, ``message_ttl_in_seconds``, ``backlog_quota_map``, ...).

Resolution (``EffectivePolicies``): a topic override wins, else the namespace value, else the broker
default from ``BrokerSettings`` (the broker's ``BrokerConfig`` is one). A partition
``t-partition-N`` takes the overrides of ``t``.

``PolicyCache`` (``catalog/policy_cache.py``, compiled) reads each node once, keeps it, and watches it: a change made by any broker (or
the admin API here, which also writes through) is applied without a restart. Loaded topics read
their effective policies synchronously from the cache on each check (``effective``), so nothing
has to be pushed to them. At most ``POLICY_CACHE_NODES_COUNT_MAX`` nodes are cached and watched.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Protocol
from urllib.parse import quote

import msgspec

from magnetar.base.errors import InvalidArgumentError
from magnetar.base.types import TopicName
from magnetar.security.authorization import AuthAction

POLICIES_ROOT = "/admin/policies"
TOPIC_POLICIES_ROOT = "/admin/topic-policies"


class BrokerSettings(Protocol):
    """The broker settings the policies need (fields of ``magnetar.broker.config.BrokerConfig``): the
    defaults a policy falls back to, and the authorization switches checked against the grants."""

    @property
    def cluster_name(self) -> str: ...
    @property
    def topic_auto_creation(self) -> bool: ...
    @property
    def auto_created_partitions_count(self) -> int: ...
    @property
    def deduplication(self) -> bool: ...
    @property
    def retention_time_s(self) -> float: ...
    @property
    def retention_size_bytes(self) -> int: ...
    @property
    def message_ttl_s(self) -> int: ...
    @property
    def delayed_delivery(self) -> bool: ...
    @property
    def authorization_enabled(self) -> bool: ...
    @property
    def superuser_roles(self) -> tuple[str, ...]: ...


class BacklogQuotaType(enum.Enum):
    DESTINATION_STORAGE = "destination_storage"
    MESSAGE_AGE = "message_age"


class RetentionAction(enum.Enum):
    """What happens when a backlog quota is exceeded (Pulsar's ``RetentionPolicy``)."""

    PRODUCER_REQUEST_HOLD = "producer_request_hold"
    PRODUCER_EXCEPTION = "producer_exception"
    CONSUMER_BACKLOG_EVICTION = "consumer_backlog_eviction"


class RetentionPolicies(msgspec.Struct, rename="camel"):
    """``{"retentionTimeInMinutes": m, "retentionSizeInMB": mb}``; -1 is unbounded."""

    retention_time_in_minutes: int = 0
    retention_size_in_mb: int = msgspec.field(default=0, name="retentionSizeInMB")

    def validate(self) -> None:
        if self.retention_time_in_minutes < -1 or self.retention_size_in_mb < -1:
            raise InvalidArgumentError("Invalid retention policy: values must be >= -1")


class BacklogQuota(msgspec.Struct, rename="camel"):
    """``{"limitSize": bytes, "limitTime": seconds, "policy": action}``; -1 (or absent) is no limit."""

    limit_size: int | None = None
    limit_time: int | None = None
    policy: RetentionAction = RetentionAction.PRODUCER_REQUEST_HOLD

    def validate(self) -> None:
        if (self.limit_size is not None and self.limit_size < -1) or (
                self.limit_time is not None and self.limit_time < -1):
            raise InvalidArgumentError("Invalid backlog quota: limits must be >= -1")


class PublishRate(msgspec.Struct, rename="camel"):
    """Per-topic publish throttling; -1 or 0 on a field means no limit on it."""

    publish_throttling_rate_in_msg: int = -1
    publish_throttling_rate_in_byte: int = -1

    def validate(self) -> None:
        if self.publish_throttling_rate_in_msg < -1 or self.publish_throttling_rate_in_byte < -1:
            raise InvalidArgumentError("Invalid publish rate: values must be >= -1")


class DelayedDeliveryPolicies(msgspec.Struct, rename="camel"):
    active: bool = True
    tick_time: int = 1000
    max_delivery_delay_in_millis: int = 0

    def validate(self) -> None:
        if self.tick_time < 1 or self.max_delivery_delay_in_millis < 0:
            raise InvalidArgumentError("Invalid delayed delivery policy: tickTime >= 1, maxDeliveryDelayInMillis >= 0")


class TopicType(enum.Enum):
    PARTITIONED = "partitioned"
    NON_PARTITIONED = "non-partitioned"


class AutoTopicCreationOverride(msgspec.Struct, rename="camel"):
    allow_auto_topic_creation: bool = True
    topic_type: TopicType = TopicType.NON_PARTITIONED
    default_num_partitions: int | None = None

    def validate(self) -> None:
        partitions = self.default_num_partitions
        if self.topic_type is TopicType.PARTITIONED and (partitions is None or partitions < 1):
            raise InvalidArgumentError("Invalid configuration for autoTopicCreationOverride: defaultNumPartitions >= 1")
        if self.topic_type is TopicType.NON_PARTITIONED and partitions not in (None, 0):
            raise InvalidArgumentError("Invalid configuration for autoTopicCreationOverride: no defaultNumPartitions "
                                  "for non-partitioned topics")


DEFAULT_BUNDLE_BOUNDARIES: tuple[str, ...] = ("0x00000000", "0x40000000", "0x80000000", "0xc0000000", "0xffffffff")


def _default_boundaries() -> list[str]:
    return list(DEFAULT_BUNDLE_BOUNDARIES)


class BundlesData(msgspec.Struct, rename="camel"):
    boundaries: list[str] = msgspec.field(default_factory=_default_boundaries)
    num_bundles: int = 4


class AuthPolicies(msgspec.Struct):
    """A namespace's grants (Pulsar's ``auth_policies``): role -> actions on the namespace, topic
    (full name of the partitioned or plain topic) -> role -> actions, subscription -> roles."""

    namespace_auth: dict[str, list[AuthAction]] = msgspec.field(default_factory=dict)
    destination_auth: dict[str, dict[str, list[AuthAction]]] = msgspec.field(default_factory=dict)
    subscription_auth_roles: dict[str, list[str]] = msgspec.field(default_factory=dict)


class Policies(msgspec.Struct, omit_defaults=False):
    """A namespace's policies, as ``GET /admin/v2/namespaces/{t}/{ns}`` returns them."""

    auth_policies: AuthPolicies = msgspec.field(default_factory=AuthPolicies)
    replication_clusters: list[str] = msgspec.field(default_factory=list)
    bundles: BundlesData = msgspec.field(default_factory=BundlesData)
    backlog_quota_map: dict[str, BacklogQuota] = msgspec.field(default_factory=dict)
    publish_max_message_rate: dict[str, PublishRate] = msgspec.field(
        default_factory=dict, name="publishMaxMessageRate")
    message_ttl_in_seconds: int | None = None
    retention_policies: RetentionPolicies | None = None
    deleted: bool = False
    max_producers_per_topic: int | None = None
    max_consumers_per_topic: int | None = None
    deduplication_enabled: bool | None = msgspec.field(default=None, name="deduplicationEnabled")
    auto_topic_creation_override: AutoTopicCreationOverride | None = msgspec.field(
        default=None, name="autoTopicCreationOverride")
    delayed_delivery_policies: DelayedDeliveryPolicies | None = None
    schema_compatibility_strategy: str = "UNDEFINED"
    compaction_threshold: int | None = None  # bytes after the compaction horizon (topic compaction)
    offload_threshold: int | None = None  # bytes kept on bookies (tiered storage); negative: no auto offload
    offload_deletion_lag_ms: int | None = None  # how long bookie copies stay after an offload


class TopicPolicies(msgspec.Struct, rename="camel", omit_defaults=True):
    """Topic-level overrides (Pulsar's ``TopicPolicies``); ``None`` means 'inherit'."""

    retention_policies: RetentionPolicies | None = None
    message_ttl_in_seconds: int | None = msgspec.field(default=None, name="messageTTLInSeconds")
    back_log_quota_map: dict[str, BacklogQuota] | None = msgspec.field(default=None, name="backLogQuotaMap")
    deduplication_enabled: bool | None = None
    max_producer_per_topic: int | None = None
    max_consumer_per_topic: int | None = None
    publish_rate: PublishRate | None = None
    max_message_size: int | None = None
    delayed_delivery_enabled: bool | None = None
    delayed_delivery_tick_time_millis: int | None = None
    replication_clusters: list[str] | None = None
    compaction_threshold: int | None = None


@dataclass(frozen=True, slots=True)
class QuotaLimit:
    limit: int  # bytes (destination_storage) or seconds (message_age); > 0
    action: RetentionAction


@dataclass(frozen=True, slots=True)
class EffectivePolicies:
    """What a topic enforces now (units last; ``None``/0 means no limit)."""

    retention_time_s: float
    retention_size_bytes: int
    message_ttl_s: int
    backlog_size: QuotaLimit | None
    backlog_time: QuotaLimit | None
    deduplication: bool
    max_producers: int
    max_consumers: int
    publish_rate_msgs_per_s: int
    publish_rate_bytes_per_s: int
    max_message_size_bytes: int
    delayed_delivery: bool
    auto_topic_creation: bool
    auto_topic_partitions_count: int
    #: ``compactionThreshold`` in force: the topic's, else the namespace's, else 0 (off). Bytes
    #: after the compaction horizon that start a compaction (the broker's periodic check).
    compaction_threshold_bytes: int = 0


def namespace_path(namespace: str) -> str:
    return f"{POLICIES_ROOT}/{namespace}"


def topic_policies_path(topic: TopicName) -> str:
    base = topic.partitioned_topic_name
    return f"{TOPIC_POLICIES_ROOT}/{base.namespace}/{base.domain.value}/{quote(base.local_name, safe='')}"


def decode_policies(raw: bytes) -> Policies:
    return msgspec.json.decode(raw, type=Policies)


def decode_topic_policies(raw: bytes) -> TopicPolicies:
    return msgspec.json.decode(raw, type=TopicPolicies)


def _quota(quotas: dict[str, BacklogQuota] | None, kind: BacklogQuotaType) -> tuple[bool, QuotaLimit | None]:
    """(whether ``quotas`` sets ``kind``, the limit it sets: None for unlimited)."""
    if quotas is None or kind.value not in quotas:
        return False, None
    quota = quotas[kind.value]
    limit = quota.limit_size if kind is BacklogQuotaType.DESTINATION_STORAGE else quota.limit_time
    if limit is None or limit < 0:
        return True, None
    return True, QuotaLimit(limit, quota.policy)


def resolve(config: BrokerSettings, namespace: Policies | None, topic: TopicPolicies | None) -> EffectivePolicies:
    """Topic override, else namespace policy, else broker default."""
    ns = namespace or Policies()
    tp = topic or TopicPolicies()
    retention = tp.retention_policies or ns.retention_policies
    if retention is None:
        retention_time_s, retention_size = config.retention_time_s, config.retention_size_bytes
    else:
        minutes, mb = retention.retention_time_in_minutes, retention.retention_size_in_mb
        retention_time_s = -1.0 if minutes < 0 else minutes * 60.0
        retention_size = -1 if mb < 0 else mb * 1024 * 1024
    quotas: dict[BacklogQuotaType, QuotaLimit | None] = {}
    for kind in BacklogQuotaType:
        set_here, limit = _quota(tp.back_log_quota_map, kind)
        quotas[kind] = limit if set_here else _quota(ns.backlog_quota_map, kind)[1]
    rate = tp.publish_rate or ns.publish_max_message_rate.get(config.cluster_name)
    ttl = tp.message_ttl_in_seconds if tp.message_ttl_in_seconds is not None else ns.message_ttl_in_seconds
    dedup = tp.deduplication_enabled if tp.deduplication_enabled is not None else ns.deduplication_enabled
    max_producers = tp.max_producer_per_topic if tp.max_producer_per_topic is not None else ns.max_producers_per_topic
    max_consumers = tp.max_consumer_per_topic if tp.max_consumer_per_topic is not None else ns.max_consumers_per_topic
    delayed = tp.delayed_delivery_enabled
    if delayed is None:
        delayed = ns.delayed_delivery_policies.active if ns.delayed_delivery_policies is not None else (
            config.delayed_delivery)
    auto = ns.auto_topic_creation_override
    if auto is None:
        auto_allowed, auto_partitions = config.topic_auto_creation, config.auto_created_partitions_count
    else:
        auto_allowed = auto.allow_auto_topic_creation
        auto_partitions = (auto.default_num_partitions or 0) if auto.topic_type is TopicType.PARTITIONED else 0
    return EffectivePolicies(
        retention_time_s=retention_time_s,
        retention_size_bytes=retention_size,
        message_ttl_s=ttl if ttl is not None and ttl > 0 else config.message_ttl_s,
        backlog_size=quotas[BacklogQuotaType.DESTINATION_STORAGE],
        backlog_time=quotas[BacklogQuotaType.MESSAGE_AGE],
        deduplication=dedup if dedup is not None else config.deduplication,
        max_producers=max_producers or 0,
        max_consumers=max_consumers or 0,
        publish_rate_msgs_per_s=max(0, rate.publish_throttling_rate_in_msg) if rate else 0,
        publish_rate_bytes_per_s=max(0, rate.publish_throttling_rate_in_byte) if rate else 0,
        max_message_size_bytes=tp.max_message_size or 0,
        delayed_delivery=delayed,
        auto_topic_creation=auto_allowed,
        auto_topic_partitions_count=auto_partitions,
        compaction_threshold_bytes=(tp.compaction_threshold if tp.compaction_threshold is not None
                                    else ns.compaction_threshold or 0),
    )
