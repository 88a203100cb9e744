"""Broker configuration: one frozen dataclass, units last in every name.

Hard bounds a deployment may lower but never raise are checked in ``__post_init__`` against the
broker section of ``magnetar.base.limits``.
"""

from __future__ import annotations

from dataclasses import dataclass

from magnetar.base.errors import InvalidArgumentError
from magnetar.base.limits import (
    AUTH_REFUSED_CONNECTION_LINGER_S,
    BROKER_DISPATCH_READ_COUNT_MAX,
    BROKER_PENDING_ACKS_PER_SUBSCRIPTION_COUNT_MAX,
    BROKER_PENDING_SENDS_PER_PRODUCER_COUNT_MAX,
    BROKER_REDELIVERY_TRACKER_COUNT_MAX,
    MIB,
    NAMESPACE_BUNDLES_COUNT_MAX,
    PULSAR_MESSAGE_BYTES_MAX,
    TLS_HANDSHAKE_TIMEOUT_S,
)
from magnetar.broker.policy_checks import RATE_SAMPLE_INTERVAL_MS, PolicyPeriods
from magnetar.catalog.listeners import parse_listeners
from magnetar.catalog.schema_compat import Compatibility

#: Offload driver names (Pulsar's ``managedLedgerOffloadDriver`` values) -> the driver that serves them.
OFFLOAD_DRIVERS = {"filesystem": "filesystem", "s3": "s3", "aws-s3": "s3", "S3": "s3", "none": "none", "": "none"}


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
    #: Off by default, as in Pulsar (brokerDeduplicationEnabled=false); a namespace or topic turns
    #: it on (deduplicationEnabled), as do MAGNETAR_BROKER_DEDUPLICATION=true and --pulsar-conf.
    #: The no-duplicates-after-retries guarantee (docs/faults.md invariant 8) holds for producers whose
    #: topic has it on.
    deduplication: bool = False
    #: Broker-wide policy defaults, used where neither the namespace nor the topic sets one
    #: (Pulsar: defaultRetentionTimeInMinutes/SizeInMB = 0, ttlDurationDefaultInSeconds = 0,
    #: delayedDeliveryEnabled = true). Retention -1 keeps consumed entries forever; TTL 0 never expires.
    retention_time_s: float = 0.0
    retention_size_bytes: int = 0
    message_ttl_s: int = 0
    delayed_delivery: bool = True
    #: Each periodic policy check has its own period, as in Pulsar (broker/policy_checks.py):
    #: message expiry (TTL; messageExpiryCheckIntervalInMinutes, 5 min), backlog quotas
    #: (backlogQuotaCheckIntervalInSeconds, 60 s), retention and the deletion of offloaded
    #: ledgers' bookie copies (retentionCheckIntervalInSeconds, 120 s), the compaction threshold
    #: (brokerServiceCompactionMonitorIntervalInSeconds, 60 s). None: Pulsar's default, or
    #: ``policy_check_interval_ms`` when that is set. Each pass visits every loaded topic.
    message_expiry_check_interval_s: int | None = None
    backlog_quota_check_interval_s: int | None = None
    retention_check_interval_s: int | None = None
    compaction_monitor_interval_s: int | None = None
    #: Magnetar's older single period for all of those checks (and the rate samples); None: unset.
    policy_check_interval_ms: int | None = None
    #: SENDs one producer may have between receipt and persist; reading pauses beyond it.
    pending_sends_per_producer_max: int = 1000
    #: SENDs all producers of one connection may have unanswered; reading from the connection
    #: pauses at it and resumes at half (Pulsar: maxPendingPublishRequestsPerConnection).
    pending_sends_per_connection_max: int = 1000
    #: SENDs to non-persistent topics one connection may have unanswered; a SEND beyond it is not
    #: published but dropped, answered with a (-1,-1) receipt and counted in the producer's
    #: ``msgDropRate`` (Pulsar: maxConcurrentNonPersistentMessagePerConnection, 1000).
    max_concurrent_non_persistent_messages_per_connection: int = 1000
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
    #: Tiered storage (``docs/tiered_storage.md``; Pulsar's keys in ``runtime/pulsar_conf.py``):
    #: where sealed ledgers are offloaded to.
    #: ``filesystem`` (a directory; a standalone's default is ``<data dir>/offload``), ``s3`` (an
    #: S3-compatible bucket through s3fs; ``aws-s3`` is an alias), or ``none``.
    offload_driver: str = "filesystem"
    #: The filesystem driver's directory; empty: the standalone's ``<data dir>/offload``, and no
    #: offload on a cluster broker.
    offload_directory: str = ""
    #: The s3 driver's bucket (``bucket`` or ``bucket/prefix``), endpoint URL (empty: AWS) and region.
    offload_s3_bucket: str = ""
    offload_s3_endpoint: str = ""
    offload_s3_region: str = "us-east-1"
    #: Broker defaults of the namespace policies ``offloadThreshold`` (bytes kept on bookies;
    #: negative: no automatic offload) and ``offloadDeletionLagMs`` (Pulsar: -1 and 4 h).
    offload_threshold_bytes: int = -1
    offload_deletion_lag_ms: int = 4 * 3600 * 1000
    # --- load balancer (``control.balancer``; the Pulsar key of each field: ``balancer.PULSAR_KEYS``) ---
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
    #: namespaceBundleUnloadingTimeoutMs (60000): an unload waits this long for its topics to close
    #: (cursor flush, ledger close), then releases the bundle anyway; the closes go on behind it
    #: and the next owner fences and recovers what they did not finish.
    namespace_bundle_unloading_timeout_ms: int = 60_000
    #: Bundles one shedding round may unload (no Pulsar key: Pulsar unloads until under threshold).
    load_balancer_unloads_per_cycle_max: int = 16
    #: loadBalancerCPUResourceWeight, loadBalancerBandwithInResourceWeight (+Out, averaged), and
    #: Magnetar's weights of message rate, topics and sessions in a broker's load score (0 = ignore).
    load_balancer_cpu_weight: float = 1.0
    load_balancer_bandwidth_weight: float = 1.0
    load_balancer_msg_rate_weight: float = 1.0
    load_balancer_topics_weight: float = 1.0
    load_balancer_sessions_weight: float = 1.0
    #: loadBalancerHistoryResourcePercentage (0.9): the weight of the history in each bundle's
    #: averaged figures (CPU share, bandwidth, message rate): avg = f * avg + (1 - f) * new report.
    load_balancer_history_resource_fraction: float = 0.9
    #: How far inside the threshold a shedding wave goes on once started (hysteresis; Pulsar's
    #: ThresholdShedder sheds a fixed 5% margin beyond its threshold, ADDITIONAL_THRESHOLD_PERCENT_MARGIN).
    load_balancer_shedding_margin_percent: float = 5.0
    #: loadBalancerSheddingConditionHitCountThreshold (3): a shedding wave starts only once its
    #: condition (a broker above or below the threshold band) has held for more than this many
    #: consecutive rounds, so a transient swing (a target's burst right after it received a wave)
    #: moves nothing.
    load_balancer_shedding_condition_hit_count_threshold: int = 3

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
    #: (``catalog.listeners``): LOOKUP answers the listener the client names; "" none but the
    #: internal one at the advertised address.
    advertised_listeners: str = ""
    #: Pulsar's internalListenerName: the listener of a LOOKUP that names none ("": the first).
    internal_listener_name: str = ""

    # --- security (Pulsar's broker.conf keys in brackets; ``magnetar.security`` verifies) ----------
    #: Clients must present credentials one of ``authentication_providers`` accepts
    #: [authenticationEnabled]. Off: every connection and HTTP request has role None.
    authentication_enabled: bool = False
    #: Provider names, several at once: "token", "basic", "tls" [authenticationProviders].
    authentication_providers: tuple[str, ...] = ()
    #: Role of a client that sends no credentials (or a method no provider serves); None refuses
    #: it [anonymousUserRole].
    anonymous_user_role: str | None = None
    #: HS256 secret key as Pulsar names it: ``file:///path`` (raw bytes) or ``data:;base64,...``
    #: [tokenSecretKey]. The runtime reads it; the broker never opens files.
    token_secret_key: str | None = None
    #: RS256/ES256 public key (DER or PEM), same forms [tokenPublicKey].
    token_public_key: str | None = None
    #: Claim that names the role [tokenAuthClaim].
    token_auth_claim: str = "sub"
    #: Claim checked against ``token_audience`` when that is set [tokenAudienceClaim, tokenAudience].
    token_audience_claim: str = "aud"
    token_audience: str | None = None
    #: Seconds an expired (or not-yet-valid) token is still accepted [tokenAllowedClockSkewSeconds].
    token_allowed_clock_skew_s: int = 0
    #: htpasswd (apr1, bcrypt, {SHA}) for the "basic" provider: a path, ``data:;base64,...`` or the
    #: content in base64 [basicAuthConf].
    basic_auth_conf_path: str | None = None
    #: A connection whose CONNECT failed authentication is closed after its first request, or
    #: after this long if it sends none.
    auth_refused_linger_s: float = AUTH_REFUSED_CONNECTION_LINGER_S
    #: How often open connections are checked for expired credentials; an expired one is sent
    #: AUTH_CHALLENGE and closed unless it answers with a valid credential within the same
    #: interval [authenticationRefreshCheckSeconds].
    auth_refresh_check_interval_s: int = 60
    #: TLS listeners (binary ``pulsar+ssl://`` and HTTPS) with these files [tlsCertificateFilePath,
    #: tlsKeyFilePath, tlsTrustCertsFilePath]; the ports live in the node's config.
    tls_enabled: bool = False
    tls_certificate_file_path: str | None = None
    tls_key_file_path: str | None = None
    tls_trust_certs_file_path: str | None = None
    #: mTLS: refuse a TLS client without a certificate signed by the trusted CA
    #: [tlsRequireTrustedClientCertOnConnect].
    tls_require_trusted_client_cert: bool = False
    #: How often the certificate files are checked for changes [tlsCertRefreshCheckDurationSec].
    tls_cert_refresh_check_interval_s: int = 300
    #: A TLS client that has not finished its handshake within this is dropped.
    tls_handshake_timeout_s: float = TLS_HANDSHAKE_TIMEOUT_S
    #: Port of the TLS binary listener clients are sent to by LOOKUP; set by the runtime.
    advertised_port_tls: int | None = None
    #: TLS from this broker to the bookies: the CA that signed their certificates turns it on;
    #: a certificate and key are presented when the bookies require one
    #: [bookkeeperTLSTrustCertsFilePath, bookkeeperTLSCertificateFilePath, bookkeeperTLSKeyFilePath].
    bookkeeper_tls_trust_certs_file_path: str | None = None
    bookkeeper_tls_certificate_file_path: str | None = None
    bookkeeper_tls_key_file_path: str | None = None
    #: Roles checked against grants [authorizationEnabled, superUserRoles].
    authorization_enabled: bool = False
    superuser_roles: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        bounds = (
            ("pending_sends_per_producer_max", self.pending_sends_per_producer_max,
             BROKER_PENDING_SENDS_PER_PRODUCER_COUNT_MAX),
            ("pending_sends_per_connection_max", self.pending_sends_per_connection_max,
             BROKER_PENDING_SENDS_PER_PRODUCER_COUNT_MAX),
            ("max_concurrent_non_persistent_messages_per_connection",
             self.max_concurrent_non_persistent_messages_per_connection, BROKER_PENDING_SENDS_PER_PRODUCER_COUNT_MAX),
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
                raise InvalidArgumentError(f"{name} must be 1..{bound}, got {value}")
        if self.connection_outbound_bytes_high < 64 * 1024:
            raise InvalidArgumentError("connection_outbound_bytes_high must be at least 64 KiB")
        if (self.policy_check_interval_ms is not None and self.policy_check_interval_ms < 1) or self.message_ttl_s < 0:
            raise InvalidArgumentError("policy_check_interval_ms must be >= 1 and message_ttl_s >= 0")
        for name in ("message_expiry_check_interval_s", "backlog_quota_check_interval_s",
                     "retention_check_interval_s", "compaction_monitor_interval_s"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise InvalidArgumentError(f"{name} must be >= 1 (seconds), got {value}")
        if self.retention_time_s < -1 or self.retention_size_bytes < -1:
            raise InvalidArgumentError("retention_time_s and retention_size_bytes must be >= -1")
        if not 1024 <= self.max_message_size_bytes <= PULSAR_MESSAGE_BYTES_MAX:
            raise InvalidArgumentError(f"max_message_size_bytes must be 1024..{PULSAR_MESSAGE_BYTES_MAX}, "
                                  f"got {self.max_message_size_bytes}")
        if self.schema_compatibility_strategy not in {c.value for c in Compatibility}:
            raise InvalidArgumentError(f"schema_compatibility_strategy must be one of "
                                  f"{sorted(c.value for c in Compatibility)}, got {self.schema_compatibility_strategy!r}")
        listeners = parse_listeners(self.advertised_listeners)  # raises InvalidArgumentError if malformed
        if listeners and self.internal_listener_name and self.internal_listener_name not in listeners:
            raise InvalidArgumentError(f"internal_listener_name {self.internal_listener_name!r} is not among "
                                  f"advertised_listeners {sorted(listeners)}")
        if self.auto_created_partitions_count < 0:
            raise InvalidArgumentError("auto_created_partitions_count must be >= 0")
        if self.offload_driver not in OFFLOAD_DRIVERS:
            raise InvalidArgumentError(f"offload_driver must be one of {sorted(OFFLOAD_DRIVERS)}, got {self.offload_driver!r}")
        if self.offload_deletion_lag_ms < 0:
            raise InvalidArgumentError("offload_deletion_lag_ms must be >= 0")
        self._check_load_balancer()
        unknown = [p for p in self.authentication_providers if p not in AUTHENTICATION_PROVIDERS]
        if unknown:
            raise InvalidArgumentError(f"authentication_providers: unknown {unknown}; known: {list(AUTHENTICATION_PROVIDERS)}")
        if self.authentication_enabled and not self.authentication_providers and self.anonymous_user_role is None:
            raise InvalidArgumentError("authentication_enabled needs authentication_providers or anonymous_user_role")
        if "token" in self.authentication_providers and not (self.token_secret_key or self.token_public_key):
            raise InvalidArgumentError("the token provider needs token_secret_key or token_public_key")
        if "basic" in self.authentication_providers and not self.basic_auth_conf_path:
            raise InvalidArgumentError("the basic provider needs basic_auth_conf_path (an htpasswd file)")
        if self.tls_enabled and not (self.tls_certificate_file_path and self.tls_key_file_path):
            raise InvalidArgumentError("tls_enabled needs tls_certificate_file_path and tls_key_file_path")
        if self.tls_require_trusted_client_cert and not self.tls_trust_certs_file_path:
            raise InvalidArgumentError("tls_require_trusted_client_cert needs tls_trust_certs_file_path")
        if not 0 < self.auth_refused_linger_s <= 600:
            raise InvalidArgumentError("auth_refused_linger_s must be in (0, 600]")
        if self.token_allowed_clock_skew_s < 0 or self.auth_refresh_check_interval_s < 1:
            raise InvalidArgumentError("token_allowed_clock_skew_s must be >= 0, auth_refresh_check_interval_s >= 1")
        if self.tls_cert_refresh_check_interval_s < 1 or not 0 < self.tls_handshake_timeout_s <= 600:
            raise InvalidArgumentError("tls_cert_refresh_check_interval_s must be >= 1, tls_handshake_timeout_s 0..600")

    def _check_load_balancer(self) -> None:
        if self.load_balancer_shedding_interval_ms < 100 or self.load_balancer_shedding_grace_period_ms < 0:
            raise InvalidArgumentError("load_balancer_shedding_interval_ms must be >= 100 and the grace period >= 0")
        if not 2 <= self.load_balancer_namespace_bundles_max <= NAMESPACE_BUNDLES_COUNT_MAX:
            raise InvalidArgumentError(f"load_balancer_namespace_bundles_max must be 2..{NAMESPACE_BUNDLES_COUNT_MAX}")
        if not 0 <= self.load_balancer_history_resource_fraction < 1:
            raise InvalidArgumentError("load_balancer_history_resource_fraction must be in [0, 1)")
        if self.load_balancer_shedding_condition_hit_count_threshold < 0:
            raise InvalidArgumentError("load_balancer_shedding_condition_hit_count_threshold must be >= 0")
        if not 0 <= self.load_balancer_shedding_margin_percent < self.load_balancer_broker_threshold_percent:
            raise InvalidArgumentError("load_balancer_shedding_margin_percent must be >= 0 and below "
                                       "load_balancer_broker_threshold_percent")

    def policy_periods(self) -> PolicyPeriods:
        """The period of each periodic policy check and of the rate samples, in force."""
        legacy = self.policy_check_interval_ms

        def period_ms(seconds: int | None, pulsar_default_s: int) -> int:
            if seconds is not None:
                return seconds * 1000
            return legacy if legacy is not None else pulsar_default_s * 1000

        return PolicyPeriods(
            expiry_ms=period_ms(self.message_expiry_check_interval_s, 5 * 60),
            backlog_quota_ms=period_ms(self.backlog_quota_check_interval_s, 60),
            retention_ms=period_ms(self.retention_check_interval_s, 120),
            compaction_ms=period_ms(self.compaction_monitor_interval_s, 60),
            rate_sample_ms=legacy if legacy is not None else RATE_SAMPLE_INTERVAL_MS,
        )

    @property
    def outbound_bytes_bound(self) -> int:
        """The queued outgoing bytes at which a connection stops being writable: the high mark, or
        never (a bound no connection reaches) with ``connection_outbound_bound_enabled`` off."""
        return self.connection_outbound_bytes_high if self.connection_outbound_bound_enabled else 1 << 62

    @property
    def service_url(self) -> str:
        return f"pulsar://{self.advertised_host}:{self.advertised_port}"

    @property
    def service_url_tls(self) -> str | None:
        if self.advertised_port_tls is None:
            return None
        return f"pulsar+ssl://{self.advertised_host}:{self.advertised_port_tls}"


#: Provider names ``authentication_providers`` accepts (Pulsar's AuthenticationProvider{Token,Basic,Tls}).
AUTHENTICATION_PROVIDERS = ("token", "basic", "tls")
