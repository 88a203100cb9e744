"""The broker's side of tiered storage: which policy and schema a topic's offload uses.

A loaded topic on managed ledgers gets (``install``) its schema source (the registered schema's
latest version, when it is Avro or JSON, becomes typed columns) and its policy; the broker's
periodic policy pass (``refresh``) adopts policy changes and deletes the bookie copies whose
``offloadDeletionLag`` ran out. Policy: the namespace's ``offload_threshold`` and
``offload_deletion_lag_ms`` (Pulsar's names in ``Policies``), else the broker's
``offload_threshold_bytes`` / ``offload_deletion_lag_ms``. The offload itself (steps, fault points,
crash safety) is ``managed_ledger/offload.py``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from magnetar.broker.config import BrokerConfig
from magnetar.broker.managed_log import ManagedTopicLog
from magnetar.broker.topic import Topic
from magnetar.catalog.policies import decode_policies, namespace_path
from magnetar.catalog.policy_cache import PolicyCache
from magnetar.catalog.schema import SchemaRegistry
from magnetar.managed_ledger.managed_ledger import ManagedLedger
from magnetar.managed_ledger.offload import ManagedLedgerOffload, OffloadSchema
from magnetar.protocol.pulsar import pb

_KINDS = {int(pb.Schema.Avro): "AVRO", int(pb.Schema.Json): "JSON"}


def offload_of(topic: Topic) -> ManagedLedgerOffload | None:
    """The topic's offload, None for a topic without a managed ledger of its own (in memory,
    non-persistent, or read through a read-only broker, which never offloads: only owners do)."""
    log = topic.log
    if not isinstance(log, ManagedTopicLog) or not isinstance(log.managed_ledger, ManagedLedger):
        return None
    return log.managed_ledger.offload


async def offload_policy(policies: PolicyCache, config: BrokerConfig, topic: Topic) -> tuple[int, int]:
    """(threshold bytes, deletion lag ms) in force for ``topic``."""
    namespace = await policies.decoded(namespace_path(topic.name.namespace), decode_policies)  # once per change
    threshold = namespace.offload_threshold if namespace is not None else None
    lag = namespace.offload_deletion_lag_ms if namespace is not None else None
    return (config.offload_threshold_bytes if threshold is None else threshold,
            config.offload_deletion_lag_ms if lag is None else lag)


def _schema_source(schemas: SchemaRegistry, topic: Topic) -> Callable[[], Awaitable[OffloadSchema | None]]:
    async def latest() -> OffloadSchema | None:
        found = await schemas.get(topic.name)
        if found is None:
            return None
        version, record = found
        kind = _KINDS.get(record.type)
        if kind is None:
            return None
        return OffloadSchema(version, kind, record.data.decode("utf-8", errors="replace"))

    return latest


async def install(topic: Topic, policies: PolicyCache, config: BrokerConfig, schemas: SchemaRegistry) -> None:
    """Give a newly loaded topic's offload its schema source and policy."""
    offload = offload_of(topic)
    if offload is None or not offload.configured:
        return
    offload.schema_source = _schema_source(schemas, topic)
    offload.set_policy(*await offload_policy(policies, config, topic))


async def refresh(topic: Topic, policies: PolicyCache, config: BrokerConfig) -> None:
    """The periodic pass: adopt the policy in force, delete bookie copies now due."""
    offload = offload_of(topic)
    if offload is None or not offload.configured:
        return
    offload.set_policy(*await offload_policy(policies, config, topic))
    await offload.check()
