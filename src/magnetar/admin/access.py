"""Who may call each admin route: one table, enforced in one place for every route.

``ROUTE_NEEDS`` maps ``(METHOD, route path)`` to the ``Need`` the caller's role must meet, Pulsar's
choices (``PulsarAuthorizationProvider`` and the admin resources):

* clusters and tenants: listing and changing them is for superusers (listing clusters: any role);
* a namespace, its policies, topics, partitions, bundles and permissions: the tenant's admins;
* listing a namespace's topics: also a role with ``consume`` on the namespace;
* a topic's partition count and stats: a role that may look it up (``produce`` or ``consume``);
* a topic's subscriptions, every subscription operation and reading messages (peek, examine, by
  id, and ``readLayout``, the ledgers a reader like the Spark connector reads from bookies and the
  lakehouse itself): a role with ``consume`` (for the named subscription, its role list too);
* schemas: reading them needs lookup, changing them the tenant's admins; terminating, trimming
  and compacting a topic: the tenant's admins.

``guard_routes`` wraps every route of the app: with ``authorization_enabled`` a request without an
authenticated role (``request.state.role``, set by the authentication middleware) gets 401, one
whose role lacks the need gets 403, both with ``{"reason": ...}``. The HTTP lookup service
(``/lookup/v2``) is guarded by the same table. A route missing from the table
is treated as superuser-only (fail closed), and ``undeclared`` lists it so a test can fail.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import BaseRoute, Route
from starlette.types import ASGIApp, Receive, Scope, Send

from magnetar.admin.common import AdminContext, error_response, topic_of
from magnetar.admin.policy_routes import SPECS
from magnetar.base.types import TopicName
from magnetar.broker.authorization import Operation, decide_operation
from magnetar.security.authorization import Need

_NS = "/namespaces/{tenant}/{namespace}"
_TOPICS = "/persistent/{tenant}/{namespace}"
_TOPIC = "/persistent/{tenant}/{namespace}/{topic}"
_SUB = f"{_TOPIC}/subscription/{{subscription}}"
_SCHEMAS = "/schemas/{tenant}/{namespace}/{topic}"
_NP = "/non-persistent/{tenant}/{namespace}"

S, A, NC, L, C, ANY = (Need.SUPERUSER, Need.TENANT_ADMIN, Need.NAMESPACE_CONSUME, Need.LOOKUP, Need.CONSUME,
                       Need.AUTHENTICATED)


def _policy_needs() -> dict[tuple[str, str], Need]:
    out: dict[tuple[str, str], Need] = {}
    for spec in SPECS:
        for method in ("GET", "POST", "DELETE"):
            if spec.segment is not None:
                out[(method, f"{_NS}/{spec.segment}")] = A
            if spec.topic_segment is not None:
                out[(method, f"{_TOPIC}/{spec.topic_segment}")] = A
    for base in (_NS, _TOPIC):
        out[("GET", f"{base}/backlogQuotaMap")] = A
        out[("POST", f"{base}/backlogQuota")] = A
        out[("DELETE", f"{base}/backlogQuota")] = A
    return out


ROUTE_NEEDS: dict[tuple[str, str], Need] = {
    ("GET", "/openapi.json"): ANY,
    ("GET", "/clusters"): ANY,
    ("GET", "/clusters/{cluster}"): S,
    ("PUT", "/clusters/{cluster}"): S,
    ("GET", "/tenants"): S,
    ("GET", "/tenants/{tenant}"): S,
    ("PUT", "/tenants/{tenant}"): S,
    ("POST", "/tenants/{tenant}"): S,
    ("DELETE", "/tenants/{tenant}"): S,
    ("GET", "/namespaces/{tenant}"): A,
    ("PUT", _NS): A,
    ("GET", _NS): A,
    ("DELETE", _NS): A,
    ("GET", f"{_NS}/topics"): NC,
    ("GET", f"{_NS}/bundles"): NC,
    ("PUT", f"{_NS}/{{bundle}}/unload"): A,
    ("PUT", f"{_NS}/{{bundle}}/split"): A,
    ("GET", f"{_NS}/permissions"): A,
    ("GET", f"{_NS}/permissions/subscription"): A,
    ("POST", f"{_NS}/permissions/subscription/{{subscription}}"): A,
    ("DELETE", f"{_NS}/permissions/subscription/{{subscription}}"): A,
    ("DELETE", f"{_NS}/permissions/{{subscription}}/{{role}}"): A,
    ("POST", f"{_NS}/permissions/{{role}}"): A,
    ("DELETE", f"{_NS}/permissions/{{role}}"): A,
    ("GET", _TOPICS): NC,
    ("GET", f"{_TOPICS}/partitioned"): NC,
    ("PUT", _TOPIC): A,
    ("DELETE", _TOPIC): A,
    ("PUT", f"{_TOPIC}/partitions"): A,
    ("POST", f"{_TOPIC}/partitions"): A,
    ("GET", f"{_TOPIC}/partitions"): L,
    ("DELETE", f"{_TOPIC}/partitions"): A,
    ("GET", f"{_TOPIC}/stats"): L,
    ("GET", f"{_TOPIC}/partitioned-stats"): L,
    ("GET", f"{_TOPIC}/internalStats"): L,
    ("PUT", f"{_TOPIC}/unload"): A,
    ("GET", f"{_TOPIC}/permissions"): A,
    ("POST", f"{_TOPIC}/permissions/{{role}}"): A,
    ("DELETE", f"{_TOPIC}/permissions/{{role}}"): A,
    ("GET", f"{_TOPIC}/subscriptions"): C,
    ("PUT", _SUB): C,
    ("DELETE", _SUB): C,
    ("POST", f"{_SUB}/skip_all"): C,
    ("POST", f"{_SUB}/skip/{{count:int}}"): C,
    ("POST", f"{_SUB}/expireMessages/{{seconds:int}}"): C,
    ("POST", f"{_TOPIC}/all_subscription/expireMessages/{{seconds:int}}"): C,
    ("POST", f"{_SUB}/resetcursor/{{timestamp:int}}"): C,
    ("POST", f"{_SUB}/resetcursor"): C,
    # the HTTP lookup service (mounted at /lookup/v2): what a binary LOOKUP needs
    ("GET", "/topic/{domain}/{tenant}/{namespace}/{topic:path}"): L,
    # routes other branches add (parity, compact, geo, elastic, main): declared here so a merge
    # keeps every route declared
    ("GET", f"{_SUB}/position/{{position}}"): C,  # peek
    ("GET", f"{_TOPIC}/ledger/{{ledger}}/entry/{{entry}}"): C,  # get a message by id
    ("GET", f"{_TOPIC}/examinemessage"): C,
    ("POST", f"{_TOPIC}/terminate"): A,
    ("POST", f"{_TOPIC}/trim"): A,
    ("GET", f"{_NS}/schemaCompatibilityStrategy"): A,
    ("PUT", f"{_NS}/schemaCompatibilityStrategy"): A,
    ("GET", f"{_SCHEMAS}/schema"): L,
    ("GET", f"{_SCHEMAS}/schema/{{version:int}}"): L,
    ("GET", f"{_SCHEMAS}/schemas"): L,
    ("POST", f"{_SCHEMAS}/schema"): A,
    ("POST", f"{_SCHEMAS}/compatibility"): A,
    ("DELETE", f"{_SCHEMAS}/schema"): A,
    ("PUT", f"{_TOPIC}/compaction"): A,
    ("GET", f"{_TOPIC}/compaction"): A,
    ("PUT", f"{_NS}/compactionThreshold"): A,
    ("PUT", f"{_TOPIC}/compactionThreshold"): A,
    ("PUT", f"{_TOPIC}/offload"): A,  # tiered storage (Pulsar: the tenant's admins)
    ("GET", f"{_TOPIC}/offload"): A,
    ("GET", f"{_NS}/offloadThreshold"): A,
    ("PUT", f"{_NS}/offloadThreshold"): A,
    ("GET", f"{_NS}/offloadDeletionLagMs"): A,
    ("PUT", f"{_NS}/offloadDeletionLagMs"): A,
    ("DELETE", f"{_NS}/offloadDeletionLagMs"): A,
    # what a reader needs to read entries itself (the Spark connector): what consuming allows
    ("GET", f"{_TOPIC}/readLayout"): C,
    ("GET", _NP): NC,
    ("GET", f"{_NP}/{{topic}}/stats"): L,
    ("DELETE", f"{_NP}/{{topic}}"): A,
    ("GET", f"{_NP}/partitioned"): NC,
    ("PUT", f"{_NP}/{{topic}}/partitions"): A,
    ("POST", f"{_NP}/{{topic}}/partitions"): A,
    ("GET", f"{_NP}/{{topic}}/partitions"): L,
    ("DELETE", f"{_NP}/{{topic}}/partitions"): A,
    ("GET", f"{_NP}/{{topic}}/partitioned-stats"): L,
    ("GET", f"{_NS}/replication"): A,  # geo
    ("POST", f"{_NS}/replication"): A,
    ("GET", f"{_TOPIC}/replication"): A,
    ("POST", f"{_TOPIC}/replication"): A,
    ("DELETE", f"{_TOPIC}/replication"): A,
    ("POST", "/clusters/{cluster}"): S,
    ("DELETE", "/clusters/{cluster}"): S,
    ("GET", "/brokers/leaderBroker"): S,  # elastic
    ("GET", "/broker-stats/load-report"): S,
    ("GET", "/broker-stats/load-balancer/decisions"): S,
    ("GET", "/bookies/racks-info"): S,
    ("GET", "/bookies/racks-info/{bookie}"): S,
    ("POST", "/bookies/racks-info/{bookie}"): S,
    ("DELETE", "/bookies/racks-info/{bookie}"): S,
    # the web console's API (/console/api)
    ("GET", "/overview"): S,
    ("GET", "/tree"): S,
    ("GET", "/cluster"): S,
    ("GET", "/whoami"): ANY,
    ("GET", "/topic/{tenant}/{namespace}/{topic}"): L,
    ("GET", "/topic/{tenant}/{namespace}/{topic}/ledgers"): A,
    ("GET", "/topic/{tenant}/{namespace}/{topic}/peek"): C,
    **_policy_needs(),
}


def _methods(route: Route) -> list[str]:
    return sorted(m for m in (route.methods or ()) if m != "HEAD")


def undeclared(routes: Iterable[BaseRoute]) -> list[tuple[str, str]]:
    """(method, path) of every route ``ROUTE_NEEDS`` does not declare."""
    return [(method, route.path) for route in routes if isinstance(route, Route)
            for method in _methods(route) if (method, route.path) not in ROUTE_NEEDS]


def need_of(route: Route) -> Need:
    """The route's need (superuser when undeclared: fail closed)."""
    needs = {ROUTE_NEEDS.get((method, route.path), Need.SUPERUSER) for method in _methods(route)}
    # A route serving several methods gets the strictest of their needs.
    return min(needs, key=list(Need).index) if needs else Need.SUPERUSER


def _operation(need: Need, request: Request, non_persistent: bool) -> Operation:
    params = request.path_params
    if "topic" in params:
        topic = topic_of(request)
        if non_persistent or params.get("domain") == "non-persistent":  # the lookup service names the domain
            topic = TopicName.parse(f"non-persistent://{topic.namespace}/{topic.local_name}")
        # the console's peek names its subscription in the query
        subscription = params.get("subscription") or request.query_params.get("subscription")
        return Operation.on_topic(need, topic, subscription if need is Need.CONSUME else None)
    if "namespace" in params:
        return Operation.on_namespace(need, f"{params['tenant']}/{params['namespace']}")
    return Operation(need, params.get("tenant"))


class _Guard:
    """The route's app behind the authorization check."""

    def __init__(self, ctx: AdminContext, app: ASGIApp, need: Need, non_persistent: bool) -> None:
        self._ctx = ctx
        self._app = app
        self.need = need
        self._non_persistent = non_persistent

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        config = self._ctx.service.config
        if config.authorization_enabled:
            request = Request(scope)
            role: Any = getattr(request.state, "role", None)
            try:
                decision = await decide_operation(self._ctx.service.policies, frozenset(config.superuser_roles),
                                                  role, _operation(self.need, request, self._non_persistent))
            except Exception as error:  # a bad name in the path: the route's own answer for it
                await error_response(error)(scope, receive, send)
                return
            if not decision.allowed:
                status = 401 if role is None else 403
                await JSONResponse({"reason": decision.reason}, status_code=status)(scope, receive, send)
                return
        await self._app(scope, receive, send)


def guard_routes(ctx: AdminContext, routes: list[BaseRoute]) -> None:
    """Put every route (API routes and plain ones) behind its declared need, in place."""
    for route in routes:
        if isinstance(route, Route) and not isinstance(route.app, _Guard):
            route.app = _Guard(ctx, route.app, need_of(route), route.path.startswith("/non-persistent/"))
