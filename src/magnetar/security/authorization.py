"""Authorization: may this role do this operation? One pure decision over roles and grants.

Pulsar's model, as its brokers enforce it (``PulsarAuthorizationProvider``):

* a **superuser** role (``superUserRoles``) may do everything;
* a tenant's **admin roles** (``adminRoles``) administer that tenant: its namespaces, topics,
  subscriptions, policies and permissions, and may also look up, produce and consume there.
  Creating, updating, listing or deleting tenants and clusters is for superusers only;
* **grants** on a namespace (``auth_policies.namespace_auth``) and on a topic
  (``destination_auth``; they add to the namespace's) give actions: ``produce`` lets a role create
  producers, ``consume`` lets it subscribe (readers included); either lets it look the topic up;
* a **subscription role list** (``subscription_auth_roles``), when a subscription has one, narrows
  who may use that subscription name: only listed roles that also hold ``consume``.

The anonymous role is just a role. ``None`` (no authenticated role) is refused everything.
``decide`` sees only what the caller loaded for the one resource an operation names (its tenant's
admin roles, its namespace's and topic's grants, its subscription's role list): tenants are
isolated because another tenant's admin roles are never in the ``Grants`` of this one.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field


class AuthAction(enum.Enum):
    """Pulsar's ``AuthAction`` (its JSON values)."""

    PRODUCE = "produce"
    CONSUME = "consume"
    FUNCTIONS = "functions"
    SOURCES = "sources"
    SINKS = "sinks"
    PACKAGES = "packages"


class Need(enum.Enum):
    """What an operation requires of the role, from the most to the least privileged."""

    SUPERUSER = "superuser"  # clusters and tenants: list, create, update, delete
    TENANT_ADMIN = "tenant-admin"  # a tenant's namespaces, topics, policies and permissions
    NAMESPACE_CONSUME = "namespace-consume"  # list a namespace's topics: consume on the namespace
    LOOKUP = "lookup"  # produce or consume on the topic: lookup, metadata, stats, schema
    PRODUCE = "produce"
    CONSUME = "consume"  # consume on the topic, and on the subscription if it has a role list
    AUTHENTICATED = "authenticated"  # any role (e.g. list the clusters)


@dataclass(frozen=True, slots=True)
class Grants:
    """What the store says about the resource one operation names."""

    superuser_roles: frozenset[str] = frozenset()
    tenant_admin_roles: frozenset[str] = frozenset()
    namespace_actions: Mapping[str, frozenset[AuthAction]] = field(default_factory=dict)  # role -> actions
    topic_actions: Mapping[str, frozenset[AuthAction]] = field(default_factory=dict)  # adds to the namespace's
    subscription_roles: frozenset[str] = frozenset()  # empty: any role with consume may use the subscription


@dataclass(frozen=True, slots=True)
class Decision:
    allowed: bool
    reason: str


_NEEDS_TOPIC_ACTIONS = {
    Need.PRODUCE: frozenset({AuthAction.PRODUCE}),
    Need.CONSUME: frozenset({AuthAction.CONSUME}),
    Need.LOOKUP: frozenset({AuthAction.PRODUCE, AuthAction.CONSUME}),
}


def decide(role: str | None, need: Need, grants: Grants) -> Decision:
    """Whether ``role`` may do an operation needing ``need`` on the resource ``grants`` describe."""
    if role is None:
        return Decision(False, "Authentication required")
    if role in grants.superuser_roles:
        return Decision(True, f"{role} is a superuser")
    if need is Need.AUTHENTICATED:
        return Decision(True, f"{role} is authenticated")
    if need is Need.SUPERUSER:
        return Decision(False, f"{role} is not a superuser")
    if role in grants.tenant_admin_roles:
        return Decision(True, f"{role} administers the tenant")
    if need is Need.TENANT_ADMIN:
        return Decision(False, f"{role} is not a superuser or an admin of the tenant")
    if need is Need.NAMESPACE_CONSUME:
        if AuthAction.CONSUME in grants.namespace_actions.get(role, frozenset()):
            return Decision(True, f"{role} may consume from the namespace")
        return Decision(False, f"{role} lacks consume permission on the namespace")
    held = grants.namespace_actions.get(role, frozenset()) | grants.topic_actions.get(role, frozenset())
    wanted = _NEEDS_TOPIC_ACTIONS[need]
    if not held & wanted:
        names = " or ".join(sorted(a.value for a in wanted))
        return Decision(False, f"{role} lacks {names} permission on the topic")
    if need is Need.CONSUME and grants.subscription_roles and role not in grants.subscription_roles:
        return Decision(False, f"{role} is not allowed to use this subscription")
    return Decision(True, f"{role} holds {need.value} permission")
