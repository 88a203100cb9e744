"""The admin REST application, mounted at ``/admin/v2`` on the broker's HTTP port.

One router module per resource; ``ROUTERS`` lists them in matching order (more specific paths
first). Another module extends the API by appending its ``routes(ctx)`` function to ``ROUTERS``
before the app is built (e.g. bundle unload/split). ``/openapi.json`` serves the spec generated
from these routes. Unknown paths and methods get JSON ``{"reason": ...}`` too. Every route is
guarded by the need ``access.ROUTE_NEEDS`` declares for it (checked when authorization is on).
"""

from __future__ import annotations

from collections.abc import Callable

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from magnetar import __version__
from magnetar.admin import (
    bundles,
    clusters,
    compaction,
    messages,
    namespaces,
    non_persistent,
    offload,
    permissions,
    policy_routes,
    read_layout,
    replication,
    schemas,
    subscriptions,
    tenants,
    topics,
)
from magnetar.admin.access import guard_routes
from magnetar.admin.authn import AuthenticationMiddleware
from magnetar.admin.balancer import routes as balancer_routes
from magnetar.admin.common import AdminContext, error_response
from magnetar.admin.openapi import openapi_spec
from magnetar.admin.redirect import OwnerRedirect

ADMIN_PATH = "/admin/v2"

ROUTERS: list[Callable[[AdminContext], list[BaseRoute]]] = [
    clusters.routes,
    tenants.routes,
    namespaces.routes,
    replication.routes,
    permissions.namespace_routes,
    policy_routes.namespace_routes,
    compaction.routes,
    offload.routes,
    read_layout.routes,
    non_persistent.routes,
    topics.routes,
    subscriptions.routes,
    messages.routes,
    policy_routes.topic_routes,
    permissions.topic_routes,
    bundles.routes,
    schemas.routes,
    balancer_routes,
]


def admin_routes(ctx: AdminContext,
                 routers: list[Callable[[AdminContext], list[BaseRoute]]] | None = None) -> list[BaseRoute]:
    return [route for router in (ROUTERS if routers is None else routers) for route in router(ctx)]


def build_admin_app(ctx: AdminContext,
                    routers: list[Callable[[AdminContext], list[BaseRoute]]] | None = None) -> Starlette:
    """The app over ``routers`` (default ``ROUTERS``)."""
    routes = admin_routes(ctx, routers)
    spec = openapi_spec(routes, title="Magnetar admin API (Pulsar /admin/v2)", version=__version__,
                        server_path=ADMIN_PATH)

    async def openapi(_: Request) -> Response:
        return JSONResponse(spec)

    async def http_error(_: Request, error: Exception) -> Response:
        if isinstance(error, HTTPException):
            return JSONResponse({"reason": error.detail}, status_code=error.status_code)
        return error_response(error)

    served: list[BaseRoute] = [*routes, Route("/openapi.json", openapi, methods=["GET"])]
    guard_routes(ctx, served)
    # Authentication outermost, then the 307 to a topic's owner (the owner authorizes the request).
    return Starlette(routes=served,
                     exception_handlers={HTTPException: http_error, Exception: http_error},
                     middleware=[Middleware(AuthenticationMiddleware, lambda: ctx.service.authenticator),
                                 Middleware(OwnerRedirect, ctx=ctx)])
