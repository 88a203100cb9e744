"""Authorization enforcement: load the grants an operation's resource has, then ask ``decide``.

``Operation`` names what is being done (its ``Need``) and on what: a tenant, a namespace, a topic,
a subscription. ``grants_for`` reads the tenant's ``adminRoles`` and the namespace's
``auth_policies`` through the ``PolicyCache`` (read once, watched, written through by the admin
API, decoded again only when a node changes), so a check on a hot path (LOOKUP, PRODUCER,
SUBSCRIBE) costs no metadata round trip and no JSON decoding after the first. A partition
``t-partition-N`` is checked with the grants of ``t``, as grants are given on the partitioned topic.

Both the binary protocol (``Session``) and the admin API use ``authorize``; when
``BrokerConfig.authorization_enabled`` is off every operation is allowed without reading anything.
"""

from __future__ import annotations

from dataclasses import dataclass

import msgspec

from magnetar.base.types import TopicName
from magnetar.broker.errors import BrokerError
from magnetar.catalog.policies import (
    POLICIES_ROOT,
    AuthPolicies,
    decode_policies,
    namespace_path,
)
from magnetar.catalog.policy_cache import PolicyCache
from magnetar.catalog.resources import TenantInfo
from magnetar.faults import breaks
from magnetar.protocol.pulsar import pb
from magnetar.security.authorization import AuthAction, Decision, Grants, Need, decide


@dataclass(frozen=True, slots=True)
class Operation:
    need: Need
    tenant: str | None = None
    namespace: str | None = None  # "tenant/ns"
    topic: TopicName | None = None
    subscription: str | None = None

    @classmethod
    def on_topic(cls, need: Need, topic: TopicName, subscription: str | None = None) -> Operation:
        return cls(need, topic.tenant, topic.namespace, topic, subscription)

    @classmethod
    def on_namespace(cls, need: Need, namespace: str) -> Operation:
        tenant, sep, _ = namespace.partition("/")
        return cls(need, tenant, namespace if sep else None)  # "tenant" alone names no namespace


def _actions(granted: dict[str, list[AuthAction]]) -> dict[str, frozenset[AuthAction]]:
    return {role: frozenset(actions) for role, actions in granted.items()}


@dataclass(frozen=True, slots=True)
class _NamespaceGrants:
    """A namespace's ``auth_policies`` as ``decide`` reads them (decoded once per node version)."""

    namespace: dict[str, frozenset[AuthAction]]
    topics: dict[str, dict[str, frozenset[AuthAction]]]
    subscriptions: dict[str, frozenset[str]]


_NO_GRANTS = _NamespaceGrants({}, {}, {})


def _tenant_admins(raw: bytes) -> frozenset[str]:
    return frozenset(msgspec.json.decode(raw, type=TenantInfo).admin_roles)


def _namespace_grants(raw: bytes) -> _NamespaceGrants:
    auth: AuthPolicies = decode_policies(raw).auth_policies
    return _NamespaceGrants(_actions(auth.namespace_auth),
                            {topic: _actions(grants) for topic, grants in auth.destination_auth.items()},
                            {sub: frozenset(roles) for sub, roles in auth.subscription_auth_roles.items()})


async def grants_for(cache: PolicyCache, superuser_roles: frozenset[str], operation: Operation) -> Grants:
    """The ``Grants`` of the resource ``operation`` names, as the store holds them now."""
    admins: frozenset[str] = frozenset()
    if operation.tenant:
        admins = await cache.decoded(f"{POLICIES_ROOT}/{operation.tenant}", _tenant_admins) or frozenset()
    grants = _NO_GRANTS
    if operation.namespace:
        grants = await cache.decoded(namespace_path(operation.namespace), _namespace_grants) or _NO_GRANTS
    topic_actions: dict[str, frozenset[AuthAction]] = {}
    if operation.topic is not None:
        topic_actions = grants.topics.get(str(operation.topic.partitioned_topic_name), {})
    sub_roles: frozenset[str] = frozenset()
    if operation.subscription and not breaks.active(breaks.Break.NO_SUBSCRIPTION_AUTH):  # negative control only
        sub_roles = grants.subscriptions.get(operation.subscription, frozenset())
    return Grants(superuser_roles, admins, grants.namespace, topic_actions, sub_roles)


async def decide_operation(cache: PolicyCache, superuser_roles: frozenset[str], role: str | None,
                           operation: Operation) -> Decision:
    if role is None or role in superuser_roles or operation.need in _NEEDS_NO_GRANTS:
        # decided without the store: nothing is read (and cached) for names a caller made up
        return decide(role, operation.need, Grants(superuser_roles))
    return decide(role, operation.need, await grants_for(cache, superuser_roles, operation))


_NEEDS_NO_GRANTS = frozenset({Need.SUPERUSER, Need.AUTHENTICATED})


async def authorize(cache: PolicyCache, role: str | None, operation: Operation) -> None:
    """Raise ``BrokerError(AuthorizationError)`` unless ``role`` may do ``operation``; a no-op when
    authorization is off."""
    config = cache.config
    if not config.authorization_enabled:
        return
    decision = await decide_operation(cache, frozenset(config.superuser_roles), role, operation)
    if not decision.allowed:
        target = operation.topic or operation.namespace or operation.tenant or "the cluster"
        raise BrokerError(pb.AuthorizationError, f"{decision.reason} ({operation.need.value} on {target})")
