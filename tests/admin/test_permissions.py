"""Permission storage and endpoints, and the admin API's one access table, driven in process.

Roles authenticate as users do: a JWT signed with the broker's secret key in ``Authorization:
Bearer``; the authentication middleware turns it into ``request.state.role``.
"""

from __future__ import annotations

import asyncio
import base64
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute

from magnetar.admin import AdminContext, api_route, build_admin_app
from magnetar.admin.access import ROUTE_NEEDS, undeclared
from magnetar.admin.app import ROUTERS, admin_routes
from magnetar.admin.console import ConsoleContext, RateHistory
from magnetar.admin.console.api import routes as console_routes
from magnetar.admin.lookup import lookup_routes
from magnetar.base.types import TopicName
from magnetar.broker import BrokerConfig
from magnetar.broker.authorization import Operation, authorize
from magnetar.broker.errors import BrokerError
from magnetar.protocol.pulsar import pb
from magnetar.security import create_token
from magnetar.security.authorization import Need
from tests.admin.harness import AdminWorld, Reply, asgi_call, run_world

SECRET = b"permissions-test-secret-key-32b!"
SECURE = BrokerConfig(authorization_enabled=True, superuser_roles=("root",), authentication_enabled=True,
                      authentication_providers=("token",),
                      token_secret_key="data:;base64," + base64.b64encode(SECRET).decode())
NS = "/namespaces/acme/ns"


async def call(world: AdminWorld, role: str | None, method: str, path: str, body: Any = None,
               query: str = "") -> Reply:
    headers = {} if role is None else {"Authorization": f"Bearer {create_token(role, secret_key=SECRET)}"}
    return await asgi_call(world.app, method, path, body, query=query, headers=headers)


async def _tenant(world: AdminWorld) -> None:
    await world.ok("PUT", "/tenants/acme", {"adminRoles": ["ops"], "allowedClusters": ["standalone"]})


def test_auth_policies_in_a_create_body_are_stored_and_returned() -> None:
    async def body(world: AdminWorld) -> None:
        await _tenant(world)
        auth = {"namespace_auth": {"app": ["produce", "consume"]},
                "destination_auth": {"persistent://acme/ns/t": {"reader": ["consume"]}},
                "subscription_auth_roles": {"s": ["reader"]}}
        await world.ok("PUT", NS, {"auth_policies": auth})
        assert (await world.ok("GET", NS))["auth_policies"] == auth
        assert await world.ok("GET", f"{NS}/permissions") == {"app": ["produce", "consume"]}
        assert await world.ok("GET", f"{NS}/permissions/subscription") == {"s": ["reader"]}
        assert await world.ok("GET", "/persistent/acme/ns/t/permissions") == {
            "app": ["produce", "consume"], "reader": ["consume"]}
        bad = await world.call("PUT", "/namespaces/acme/ns2", {"auth_policies": {"namespace_auth": {"x": ["fly"]}}})
        assert bad.status == 400 and "fly" in bad.json()["reason"]
        # a namespace created without them has the empty shape Pulsar returns
        await world.ok("PUT", "/namespaces/acme/plain")
        assert (await world.ok("GET", "/namespaces/acme/plain"))["auth_policies"] == {
            "namespace_auth": {}, "destination_auth": {}, "subscription_auth_roles": {}}

    run_world(body)


def test_changing_grants_is_501_while_authorization_is_off() -> None:
    async def body(world: AdminWorld) -> None:
        await _tenant(world)
        await world.ok("PUT", NS)
        for method, path, payload in (("POST", f"{NS}/permissions/app", ["produce"]),
                                      ("DELETE", f"{NS}/permissions/app", None),
                                      ("POST", f"{NS}/permissions/subscription/s", ["app"]),
                                      ("POST", "/persistent/acme/ns/t/permissions/app", ["consume"])):
            reply = await world.call(method, path, payload)
            assert reply.status == 501, (path, reply.status)
            assert reply.json()["reason"] == "Authorization is not enabled"
        assert await world.ok("GET", f"{NS}/permissions") == {}

    run_world(body)


def test_grant_revoke_namespace_topic_and_subscription_permissions() -> None:
    async def body(world: AdminWorld) -> None:
        root = "root"
        assert (await call(world, root, "PUT", "/tenants/acme",
                           {"adminRoles": ["ops"], "allowedClusters": ["standalone"]})).status == 204
        assert (await call(world, "ops", "PUT", NS)).status == 204
        assert (await call(world, "ops", "POST", f"{NS}/permissions/app", ["produce", "consume", "produce"])).status == 204
        assert (await call(world, "ops", "POST", f"{NS}/permissions/fn", ["functions"])).status == 204
        assert (await call(world, "ops", "GET", f"{NS}/permissions")).json() == {
            "app": ["consume", "produce"], "fn": ["functions"]}
        unknown = await call(world, "ops", "POST", f"{NS}/permissions/app", ["produce", "teleport"])
        assert unknown.status == 400 and "teleport" in unknown.json()["reason"]
        assert (await call(world, "ops", "POST", f"{NS}/permissions/app", {"not": "a list"})).status == 400
        # the grant replaces the role's actions, as Pulsar's does
        assert (await call(world, "ops", "POST", f"{NS}/permissions/app", ["consume"])).status == 204
        assert (await call(world, "ops", "GET", f"{NS}/permissions")).json()["app"] == ["consume"]
        assert (await call(world, "ops", "DELETE", f"{NS}/permissions/app")).status == 204
        assert "app" not in (await call(world, "ops", "GET", f"{NS}/permissions")).json()
        # topic level: adds to the namespace's; a partition's name means its partitioned topic
        topic = "/persistent/acme/ns/t"
        assert (await call(world, "ops", "POST", f"{NS}/permissions/app", ["produce"])).status == 204
        assert (await call(world, "ops", "POST", f"{topic}-partition-1/permissions/app", ["consume"])).status == 204
        assert (await call(world, "ops", "GET", f"{topic}/permissions")).json()["app"] == ["consume", "produce"]
        assert (await call(world, "ops", "GET", NS)).json()["auth_policies"]["destination_auth"] == {
            "persistent://acme/ns/t": {"app": ["consume"]}}
        assert (await call(world, "ops", "DELETE", f"{topic}/permissions/app")).status == 204
        assert (await call(world, "ops", "DELETE", f"{topic}/permissions/app")).status == 412
        assert (await call(world, "ops", "GET", f"{topic}/permissions")).json()["app"] == ["produce"]
        # subscription role lists
        assert (await call(world, "ops", "POST", f"{NS}/permissions/subscription/s", ["a", "b", "c"])).status == 204
        assert (await call(world, "ops", "DELETE", f"{NS}/permissions/subscription/s", ["a"])).status == 204
        assert (await call(world, "ops", "DELETE", f"{NS}/permissions/s/b")).status == 204
        assert (await call(world, "ops", "GET", f"{NS}/permissions/subscription")).json() == {"s": ["c"]}
        assert (await call(world, "ops", "DELETE", f"{NS}/permissions/subscription/s")).status == 204
        assert (await call(world, "ops", "GET", f"{NS}/permissions/subscription")).json() == {}
        assert (await call(world, "ops", "DELETE", f"{NS}/permissions/subscription/s")).status == 404
        bad_role = await call(world, "ops", "POST", f"{NS}/permissions/subscription/s", ["ok", ""])
        assert bad_role.status == 412
        # another tenant's admin, and a role with only grants, may not touch the grants
        for role in ("stranger", "app"):
            denied = await call(world, role, "POST", f"{NS}/permissions/{role}", ["produce"])
            assert denied.status == 403 and role in denied.json()["reason"]

    run_world(body, SECURE)


def test_every_admin_route_declares_its_need() -> None:
    async def body(world: AdminWorld) -> None:
        ctx = AdminContext(world.service, "standalone")
        console = console_routes(ConsoleContext(ctx, RateHistory()))
        routes = [*admin_routes(ctx), *lookup_routes(ctx), *console]
        served = {(m, r.path) for r in routes for m in (r.methods or ()) if m != "HEAD"}  # type: ignore[attr-defined]
        assert len(served) > 90 and ("GET", "/topic/{domain}/{tenant}/{namespace}/{topic:path}") in served
        assert undeclared(routes) == []
        assert served <= set(ROUTE_NEEDS)
        # the spec lists exactly what is served, so the OpenAPI view agrees with the table too
        spec = (await world.ok("GET", "/openapi.json"))["paths"]
        # the lookup and console routes are served apart from /admin/v2
        assert sum(len(methods) for methods in spec.values()) == len(served) - 1 - len(console)

    run_world(body)


def test_an_undeclared_route_is_reported_and_served_to_superusers_only() -> None:
    """Negative control of the table check: a route nobody declared is caught and fails closed."""

    def extra(ctx: AdminContext) -> list[BaseRoute]:
        @api_route("/tenants/{tenant}/forgotten", ["GET"], "A route someone forgot to declare")
        async def forgotten(request: Request) -> Response:
            return Response(status_code=204)

        return [forgotten]

    async def body(world: AdminWorld) -> None:
        ctx = AdminContext(world.service, "standalone")
        routers = [*ROUTERS, extra]
        assert undeclared(admin_routes(ctx, routers)) == [("GET", "/tenants/{tenant}/forgotten")]
        world.app = build_admin_app(ctx, routers)
        await call(world, "root", "PUT", "/tenants/acme", {"adminRoles": ["ops"], "allowedClusters": ["standalone"]})
        assert (await call(world, "ops", "GET", "/tenants/acme/forgotten")).status == 403
        assert (await call(world, "root", "GET", "/tenants/acme/forgotten")).status == 204

    run_world(body, SECURE)


def test_no_role_is_401_and_a_bad_path_keeps_its_own_answer() -> None:
    async def body(world: AdminWorld) -> None:
        reply = await call(world, None, "GET", "/tenants")
        assert reply.status == 401 and reply.json()["reason"].startswith("Authentication required")
        assert (await call(world, "root", "GET", "/tenants")).status == 200
        assert (await call(world, "ops", "GET", "/tenants")).status == 403
        assert (await call(world, "ops", "GET", "/clusters")).status == 200
        assert (await call(world, "root", "GET", "/persistent/acme/ns/%20bad%20/stats")).status == 412
        assert (await call(world, "root", "GET", "/namespaces/b@d/ns")).status == 412
        assert (await call(world, "ops", "GET", "/namespaces/b@d/ns")).status == 403

    run_world(body, SECURE)


def test_authorization_without_authentication_refuses_with_401() -> None:
    """Authorization on, authentication off: no request has a role, so every route answers 401."""

    async def body(world: AdminWorld) -> None:
        for path in ("/tenants", "/clusters", "/namespaces/public/default"):
            reply = await world.call("GET", path)
            assert reply.status == 401 and reply.json() == {"reason": "Authentication required"}

    run_world(body, BrokerConfig(authorization_enabled=True, superuser_roles=("root",)))


def test_authorization_off_checks_nothing() -> None:
    async def body(world: AdminWorld) -> None:
        assert (await call(world, None, "GET", "/tenants")).status == 200
        assert (await call(world, "nobody", "PUT", "/tenants/x", {"allowedClusters": ["standalone"]})).status == 204

    run_world(body)


def test_concurrent_grants_all_land() -> None:
    async def body(world: AdminWorld) -> None:
        await call(world, "root", "PUT", "/tenants/acme", {"adminRoles": ["ops"], "allowedClusters": ["standalone"]})
        await call(world, "root", "PUT", NS)
        replies = await asyncio.gather(*(call(world, "root", "POST", f"{NS}/permissions/r{i}", ["consume"])
                                         for i in range(8)))
        assert {r.status for r in replies} == {204}
        assert sorted((await call(world, "ops", "GET", f"{NS}/permissions")).json()) == [f"r{i}" for i in range(8)]

    run_world(body, SECURE)


def test_grant_changes_reach_the_brokers_checks_at_once_and_cover_partitions() -> None:
    """The check the binary protocol makes (``authorize``) sees each admin change at once, through
    the policy cache (decoded again only when a node changes)."""

    async def body(world: AdminWorld) -> None:
        cache = world.service.policies
        part = TopicName.parse("persistent://acme/ns/t-partition-3")

        async def may(role: str, need: Need, subscription: str | None = None) -> bool:
            try:
                await authorize(cache, role, Operation.on_topic(need, part, subscription))
            except BrokerError as error:
                assert error.code == pb.AuthorizationError
                return False
            return True

        await call(world, "root", "PUT", "/tenants/acme", {"adminRoles": ["ops"], "allowedClusters": ["standalone"]})
        await call(world, "root", "PUT", NS)
        assert not await may("app", Need.PRODUCE)
        assert await may("ops", Need.PRODUCE) and not await may("ops2", Need.PRODUCE)
        assert (await call(world, "ops", "POST", "/persistent/acme/ns/t/permissions/app", ["produce"])).status == 204
        assert await may("app", Need.PRODUCE) and await may("app", Need.LOOKUP)
        assert not await may("app", Need.CONSUME)
        assert (await call(world, "ops", "POST", f"{NS}/permissions/app", ["consume"])).status == 204
        assert await may("app", Need.CONSUME, "s")
        assert (await call(world, "ops", "POST", f"{NS}/permissions/subscription/s", ["bi"])).status == 204
        assert not await may("app", Need.CONSUME, "s") and await may("app", Need.CONSUME, "other")
        assert (await call(world, "ops", "DELETE", "/persistent/acme/ns/t/permissions/app")).status == 204
        assert not await may("app", Need.PRODUCE)
        # the tenant's admins change too: the old admin loses, the new one gains
        assert (await call(world, "root", "POST", "/tenants/acme",
                           {"adminRoles": ["ops2"], "allowedClusters": ["standalone"]})).status == 204
        assert await may("ops2", Need.PRODUCE) and not await may("ops", Need.PRODUCE)

    run_world(body, SECURE)


def test_deleting_a_topic_deletes_its_grants() -> None:
    """As Pulsar does: a topic created again under the same name does not inherit old grants."""

    async def body(world: AdminWorld) -> None:
        await call(world, "root", "PUT", "/tenants/acme", {"adminRoles": ["ops"], "allowedClusters": ["standalone"]})
        await call(world, "root", "PUT", NS, {"auth_policies": {"namespace_auth": {"app": ["produce"]}}})
        for path, create, delete in (("/persistent/acme/ns/plain", ("PUT", None), "DELETE"),
                                     ("/persistent/acme/ns/parted", ("PUT", 2), "DELETE")):
            suffix = "/partitions" if create[1] else ""
            assert (await call(world, "ops", create[0], path + suffix, create[1])).status == 204
            assert (await call(world, "ops", "POST", f"{path}/permissions/bi", ["consume"])).status == 204
            assert "bi" in (await call(world, "ops", "GET", f"{path}/permissions")).json()
            assert (await call(world, "ops", delete, path + suffix)).status == 204
            assert (await call(world, "ops", "GET", f"{path}/permissions")).json() == {"app": ["produce"]}
        auth = (await call(world, "ops", "GET", NS)).json()["auth_policies"]
        assert auth["destination_auth"] == {} and auth["namespace_auth"] == {"app": ["produce"]}

    run_world(body, SECURE)
