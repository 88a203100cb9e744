"""The authorization matrix: every role kind x every operation x own and other tenant.

The world (built by the superuser through the admin API):

* tenant ``acme`` (admin role ``acme-ops``) with namespace ``acme/ns`` granting ``acme-producer``
  produce and ``acme-consumer`` consume; its subscription ``locked`` is limited to ``acme-ops``;
* tenant ``globex`` (admin role ``globex-ops``) with ``globex/ns`` granting the anonymous role
  consume (the anonymous role is just a role); its ``locked`` is limited to ``globex-ops``;
* in each namespace a topic ``topic`` with a subscription ``sub``, and a partitioned topic ``solo``
  with topic-level grants (``stranger`` may produce to ``acme/ns/solo``, ``acme-consumer`` may
  produce to and consume from ``globex/ns/solo``), which cover its partitions.

Roles: the superuser ``root``, the tenant admin ``acme-ops``, ``acme-producer``,
``acme-consumer``, ``stranger`` (authenticated, nothing granted) and ``anonymous``. "Own tenant"
is ``acme`` (the tenant the admin, producer and consumer roles belong to), "other" is ``globex``.

``expected`` is the oracle, written from the rules as Pulsar states them (not from the code under
test). A case *leaks* when the oracle says no and the broker let the role through (any answer but
401/403, or anything but ``AuthorizationError`` on the binary protocol), and *over-denies* in the
reverse case. Mutating operations act on throwaway resources the superuser creates before the case
and removes after it, so the fixed world stays as described for every case.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

ROOT, OPS, PRODUCER, CONSUMER, STRANGER, ANONYMOUS = (
    "root", "acme-ops", "acme-producer", "acme-consumer", "stranger", "anonymous")
ROLES = (ROOT, OPS, PRODUCER, CONSUMER, STRANGER, ANONYMOUS)
OWN, OTHER = "acme", "globex"
TENANT_ADMINS = {OWN: "acme-ops", OTHER: "globex-ops"}
GRANTS = {(OWN, PRODUCER): {"produce"}, (OWN, CONSUMER): {"consume"}, (OTHER, ANONYMOUS): {"consume"}}
#: Topic-level grants on the partitioned topic ``solo`` (2 partitions) of each namespace: they add
#: to the namespace's, on that topic only, and cover its partitions.
SOLO_GRANTS = {(OWN, STRANGER): {"produce"}, (OTHER, CONSUMER): {"produce", "consume"}}
DUMMY_ROLE = "grant-target"

#: What an operation needs, in the words of the rules (the oracle's input).
ANY, SUPER, ADMIN, NS_CONSUME, LOOKUP, PRODUCE, CONSUME, LOCKED = (
    "any role", "superuser", "tenant admin", "consume on the namespace", "produce or consume",
    "produce", "consume", "consume on a locked subscription")

# (status, body) of one HTTP request made as a role (None: no credentials)
HttpCall = Callable[[str | None, str, str, Any], tuple[int, Any]]
# whether the official client, as a role, was let through ("lookup", "produce", "subscribe", ...)
BinaryCall = Callable[[str | None, str, str, str], bool]


def expected(role: str, need: str, tenant: str, topic: str = "topic") -> bool:
    if role == ROOT:
        return True
    if need == ANY:
        return True
    if need == SUPER:
        return False
    if role == TENANT_ADMINS[tenant]:
        return True
    held = GRANTS.get((tenant, role), set()) | (SOLO_GRANTS.get((tenant, role), set()) if topic == "solo" else set())
    return {
        ADMIN: False,
        LOCKED: False,  # the locked subscriptions list only the tenant admin
        NS_CONSUME: "consume" in held,
        LOOKUP: bool(held & {"produce", "consume"}),
        PRODUCE: "produce" in held,
        CONSUME: "consume" in held,
    }[need]


@dataclass
class Op:
    name: str
    need: str
    method: str
    path: str  # under /admin/v2 unless it starts with /lookup/ or /console/; {t}: tenant, {x}: unique name
    body: Any = None
    setup: tuple[tuple[str, str, Any], ...] = ()  # (method, path, body) as root before
    cleanup: tuple[tuple[str, str, Any], ...] = ()  # as root after (failures ignored)


_NS = "/namespaces/{t}/ns"
_TOPIC = "/persistent/{t}/ns/topic"
_SPARE = "/persistent/{t}/ns/spare-{x}"


def http_ops() -> list[Op]:
    tenant_body = {"adminRoles": ["{admin}"], "allowedClusters": ["standalone"]}
    return [
        Op("list clusters", ANY, "GET", "/clusters"),
        Op("get cluster", SUPER, "GET", "/clusters/standalone"),
        Op("create cluster", SUPER, "PUT", "/clusters/c-{x}", {"serviceUrl": "http://127.0.0.1:1"}),
        Op("list tenants", SUPER, "GET", "/tenants"),
        Op("get tenant", SUPER, "GET", "/tenants/{t}"),
        Op("update tenant", SUPER, "POST", "/tenants/{t}", tenant_body),
        Op("create tenant", SUPER, "PUT", "/tenants/{t}-{x}", tenant_body,
           cleanup=(("DELETE", "/tenants/{t}-{x}", None),)),
        Op("delete tenant", SUPER, "DELETE", "/tenants/{t}-{x}",
           setup=(("PUT", "/tenants/{t}-{x}", tenant_body),), cleanup=(("DELETE", "/tenants/{t}-{x}", None),)),
        Op("list namespaces", ADMIN, "GET", "/namespaces/{t}"),
        Op("create namespace", ADMIN, "PUT", "/namespaces/{t}/n-{x}",
           cleanup=(("DELETE", "/namespaces/{t}/n-{x}", None),)),
        Op("get namespace policies", ADMIN, "GET", _NS),
        Op("delete namespace", ADMIN, "DELETE", "/namespaces/{t}/n-{x}",
           setup=(("PUT", "/namespaces/{t}/n-{x}", None),), cleanup=(("DELETE", "/namespaces/{t}/n-{x}", None),)),
        Op("set namespace retention", ADMIN, "POST", f"{_NS}/retention",
           {"retentionTimeInMinutes": 5, "retentionSizeInMB": 5}),
        Op("get namespace retention", ADMIN, "GET", f"{_NS}/retention"),
        Op("remove namespace message TTL", ADMIN, "DELETE", f"{_NS}/messageTTL"),
        Op("list namespace topics", NS_CONSUME, "GET", f"{_NS}/topics"),
        Op("list topics", NS_CONSUME, "GET", "/persistent/{t}/ns"),
        Op("list partitioned topics", NS_CONSUME, "GET", "/persistent/{t}/ns/partitioned"),
        Op("create topic", ADMIN, "PUT", _SPARE, cleanup=(("DELETE", _SPARE, None),)),
        Op("delete topic", ADMIN, "DELETE", _SPARE, setup=(("PUT", _SPARE, None),),
           cleanup=(("DELETE", _SPARE, None),)),
        Op("create partitioned topic", ADMIN, "PUT", f"{_SPARE}/partitions", 2,
           cleanup=(("DELETE", f"{_SPARE}/partitions", None),)),
        Op("get partitions", LOOKUP, "GET", f"{_TOPIC}/partitions"),
        Op("HTTP lookup", LOOKUP, "GET", "/lookup/v2/topic/persistent/{t}/ns/topic"),
        Op("topic stats", LOOKUP, "GET", f"{_TOPIC}/stats"),
        Op("topic internal stats", LOOKUP, "GET", f"{_TOPIC}/internalStats"),
        Op("unload topic", ADMIN, "PUT", f"{_TOPIC}/unload"),
        Op("set topic message TTL", ADMIN, "POST", f"{_TOPIC}/messageTTL", 60,
           cleanup=(("DELETE", f"{_TOPIC}/messageTTL", None),)),
        Op("list subscriptions", CONSUME, "GET", f"{_TOPIC}/subscriptions"),
        Op("create subscription", CONSUME, "PUT", f"{_TOPIC}/subscription/s-{{x}}",
           cleanup=(("DELETE", f"{_TOPIC}/subscription/s-{{x}}", None),)),
        Op("delete subscription", CONSUME, "DELETE", f"{_TOPIC}/subscription/s-{{x}}",
           setup=(("PUT", f"{_TOPIC}/subscription/s-{{x}}", None),),
           cleanup=(("DELETE", f"{_TOPIC}/subscription/s-{{x}}", None),)),
        Op("clear backlog", CONSUME, "POST", f"{_TOPIC}/subscription/sub/skip_all"),
        Op("reset cursor", CONSUME, "POST", f"{_TOPIC}/subscription/sub/resetcursor/0"),
        Op("expire messages", CONSUME, "POST", f"{_TOPIC}/subscription/sub/expireMessages/3600"),
        Op("clear backlog of a locked subscription", LOCKED, "POST", f"{_TOPIC}/subscription/locked/skip_all"),
        Op("trigger compaction", ADMIN, "PUT", f"{_TOPIC}/compaction"),
        Op("compaction status", ADMIN, "GET", f"{_TOPIC}/compaction"),
        Op("list non-persistent topics", NS_CONSUME, "GET", "/non-persistent/{t}/ns"),
        Op("non-persistent topic stats", LOOKUP, "GET", "/non-persistent/{t}/ns/np/stats"),
        Op("console tree", SUPER, "GET", "/console/api/tree"),
        Op("console topic page", LOOKUP, "GET", "/console/api/topic/{t}/ns/topic"),
        Op("console ledgers", ADMIN, "GET", "/console/api/topic/{t}/ns/topic/ledgers"),
        Op("console peek", CONSUME, "GET", "/console/api/topic/{t}/ns/topic/peek?subscription=sub&count=1"),
        Op("console peek of a locked subscription", LOCKED, "GET",
           "/console/api/topic/{t}/ns/topic/peek?subscription=locked&count=1"),
        Op("get namespace permissions", ADMIN, "GET", f"{_NS}/permissions"),
        Op("grant namespace permission", ADMIN, "POST", f"{_NS}/permissions/{DUMMY_ROLE}-{{x}}", ["produce"],
           cleanup=(("DELETE", f"{_NS}/permissions/{DUMMY_ROLE}-{{x}}", None),)),
        Op("revoke namespace permission", ADMIN, "DELETE", f"{_NS}/permissions/{DUMMY_ROLE}-{{x}}",
           setup=(("POST", f"{_NS}/permissions/{DUMMY_ROLE}-{{x}}", ["produce"]),),
           cleanup=(("DELETE", f"{_NS}/permissions/{DUMMY_ROLE}-{{x}}", None),)),
        Op("get subscription permissions", ADMIN, "GET", f"{_NS}/permissions/subscription"),
        Op("grant subscription permission", ADMIN, "POST", f"{_NS}/permissions/subscription/s-{{x}}", [DUMMY_ROLE],
           cleanup=(("DELETE", f"{_NS}/permissions/subscription/s-{{x}}", None),)),
        Op("revoke subscription permission", ADMIN, "DELETE", f"{_NS}/permissions/s-{{x}}/{DUMMY_ROLE}",
           setup=(("POST", f"{_NS}/permissions/subscription/s-{{x}}", [DUMMY_ROLE]),),
           cleanup=(("DELETE", f"{_NS}/permissions/subscription/s-{{x}}", None),)),
        Op("get topic permissions", ADMIN, "GET", f"{_TOPIC}/permissions"),
        Op("grant topic permission", ADMIN, "POST", f"{_TOPIC}/permissions/{DUMMY_ROLE}-{{x}}", ["consume"],
           cleanup=(("DELETE", f"{_TOPIC}/permissions/{DUMMY_ROLE}-{{x}}", None),)),
        Op("revoke topic permission", ADMIN, "DELETE", f"{_TOPIC}/permissions/{DUMMY_ROLE}-{{x}}",
           setup=(("POST", f"{_TOPIC}/permissions/{DUMMY_ROLE}-{{x}}", ["consume"]),),
           cleanup=(("DELETE", f"{_TOPIC}/permissions/{DUMMY_ROLE}-{{x}}", None),)),
    ]


#: Binary-protocol operations: (name, need, subscription, topic).
BINARY_OPS = (
    ("lookup", LOOKUP, "", "topic"),
    ("produce", PRODUCE, "", "topic"),
    ("subscribe", CONSUME, "sub", "topic"),
    ("reader", CONSUME, "", "topic"),
    ("subscribe to a locked subscription", LOCKED, "locked", "topic"),
    ("lookup a topic with topic grants", LOOKUP, "", "solo"),
    ("produce to a topic with topic grants", PRODUCE, "", "solo"),
    ("subscribe to a topic with topic grants", CONSUME, "sub", "solo"),
    ("produce over an http service URL", PRODUCE, "", "topic"),  # lookups over HTTP, then binary
    ("subscribe over an http service URL", CONSUME, "sub", "topic"),
)

#: Single protocol commands, sent by Magnetar's own client (the official one has no call that sends
#: GET_TOPICS_OF_NAMESPACE or GET_SCHEMA alone, and it reports a refused namespace listing as a
#: LookupError): (command, need).
RAW_OPS = (
    ("LOOKUP", LOOKUP),
    ("PARTITIONED_METADATA", LOOKUP),
    ("GET_TOPICS_OF_NAMESPACE", NS_CONSUME),
    ("GET_SCHEMA", LOOKUP),
)


@dataclass
class Report:
    cases: int = 0
    leaks: list[str] = field(default_factory=list)
    over_denials: list[str] = field(default_factory=list)

    def record(self, role: str, name: str, tenant: str, want: bool, got: bool, detail: str) -> None:
        self.cases += 1
        line = f"{role} {name} on {tenant}: expected {'allowed' if want else 'denied'}, {detail}"
        if got and not want:
            self.leaks.append(line)
        elif want and not got:
            self.over_denials.append(line)

    def summary(self) -> str:
        return f"{self.cases} cases, {len(self.leaks)} leaks, {len(self.over_denials)} over-denials"


def _fill(text: str, tenant: str, unique: str) -> str:
    return text.replace("{t}", tenant).replace("{x}", unique)


def _fill_body(body: Any, tenant: str) -> Any:
    if isinstance(body, dict):
        return {k: ([TENANT_ADMINS[tenant]] if v == ["{admin}"] else v) for k, v in body.items()}
    return body


def build_world(http: HttpCall) -> None:
    """The fixed world, made by the superuser."""
    for tenant in (OWN, OTHER):
        for method, path, body in (
                ("PUT", f"/tenants/{tenant}", {"adminRoles": [TENANT_ADMINS[tenant]], "allowedClusters": ["standalone"]}),
                ("PUT", f"/namespaces/{tenant}/ns", None),
                ("PUT", f"/persistent/{tenant}/ns/topic", None),
                ("PUT", f"/persistent/{tenant}/ns/topic/subscription/sub", None),
                ("PUT", f"/persistent/{tenant}/ns/topic/subscription/locked", None),
                ("POST", f"/namespaces/{tenant}/ns/permissions/subscription/locked", [TENANT_ADMINS[tenant]])):
            status, reply = http(ROOT, method, path, body)
            assert status in (200, 204), (method, path, status, reply)
    for (tenant, role), actions in GRANTS.items():
        status, reply = http(ROOT, "POST", f"/namespaces/{tenant}/ns/permissions/{role}", sorted(actions))
        assert status == 204, (tenant, role, status, reply)
    for tenant in (OWN, OTHER):
        status, reply = http(ROOT, "PUT", f"/persistent/{tenant}/ns/solo/partitions", 2)
        assert status == 204, (tenant, status, reply)
    for (tenant, role), actions in SOLO_GRANTS.items():
        status, reply = http(ROOT, "POST", f"/persistent/{tenant}/ns/solo/permissions/{role}", sorted(actions))
        assert status == 204, (tenant, role, status, reply)


def run_http(http: HttpCall, report: Report, roles: tuple[str, ...] = ROLES) -> None:
    counter = itertools.count()
    for op, tenant, role in itertools.product(http_ops(), (OWN, OTHER), roles):
        unique = f"{next(counter)}"
        for method, path, body in op.setup:
            status, reply = http(ROOT, method, _fill(path, tenant, unique), _fill_body(body, tenant))
            # 501: grants cannot be set while authorization is off (the negative control's broker)
            assert status in (200, 204, 501), ("setup", op.name, path, status, reply)
        status, reply = http(role, op.method, _fill(op.path, tenant, unique), _fill_body(op.body, tenant))
        let_through = status not in (401, 403)
        if not let_through:
            assert isinstance(reply, dict) and reply.get("reason"), (op.name, status, reply)
        report.record(role, op.name, tenant, expected(role, op.need, tenant), let_through, f"HTTP {status}")
        for method, path, body in op.cleanup:
            http(ROOT, method, _fill(path, tenant, unique), _fill_body(body, tenant))


def run_binary(binary: BinaryCall, report: Report, roles: tuple[str, ...] = ROLES) -> None:
    for (name, need, subscription, topic), tenant, role in itertools.product(BINARY_OPS, (OWN, OTHER), roles):
        got = binary(role, name, f"persistent://{tenant}/ns/{topic}", subscription)
        report.record(role, name, tenant, expected(role, need, tenant, topic), got,
                      "let through" if got else "refused")


def run_raw(raw: BinaryCall, report: Report, roles: tuple[str, ...] = ROLES) -> None:
    for (name, need), tenant, role in itertools.product(RAW_OPS, (OWN, OTHER), roles):
        got = raw(role, name, f"persistent://{tenant}/ns/topic", "")
        report.record(role, name, tenant, expected(role, need, tenant), got, "let through" if got else "refused")
