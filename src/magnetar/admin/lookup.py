"""Pulsar's HTTP lookup service, mounted at ``/lookup/v2`` on the broker's HTTP(S) port.

``GET /lookup/v2/topic/{persistent|non-persistent}/{tenant}/{namespace}/{topic}`` answers where a
topic is served, as Pulsar's ``LookupData``: ``brokerUrl`` (``pulsar://``), ``brokerUrlTls``
(``pulsar+ssl://``, when the broker has a TLS listener), ``httpUrl``, ``httpUrlTls`` and
``nativeUrl``. It is what a client given an ``http://`` or ``https://`` service URL asks before it
opens a binary connection; the partition count comes from the admin API's
``GET /admin/v2/{domain}/{t}/{ns}/{topic}/partitions``. Requests are authenticated like the admin
API's (``request.state.role``). In a cluster the answer for a topic another broker owns names that
broker's binary URL (Pulsar answers 307 to the owner's web URL; the client ends up at the same broker).
"""

from __future__ import annotations

from urllib.parse import unquote

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute

from magnetar.admin.access import guard_routes
from magnetar.admin.authn import AuthenticationMiddleware
from magnetar.admin.common import AdminContext, AdminError, api_route, error_response, json_response
from magnetar.base.errors import InvalidArgumentError
from magnetar.base.types import TopicName

LOOKUP_PATH = "/lookup/v2"
DOMAINS = ("persistent", "non-persistent")


def lookup_routes(ctx: AdminContext) -> list[BaseRoute]:
    @api_route("/topic/{domain}/{tenant}/{namespace}/{topic:path}", ["GET"], "Where a topic is served")
    async def lookup_topic(request: Request) -> Response:
        params = request.path_params
        if params["domain"] not in DOMAINS:
            raise AdminError(404, f"unknown topic domain {params['domain']!r}")
        try:
            topic = TopicName.parse(f"{params['domain']}://{params['tenant']}/{params['namespace']}/"
                                    f"{unquote(params['topic'])}")
        except InvalidArgumentError as error:
            raise AdminError(412, str(error)) from None
        answer = await ctx.service.lookup.lookup(topic, False)
        return json_response({
            "brokerUrl": answer.url,
            "brokerUrlTls": answer.url_tls or "",
            "httpUrl": ctx.service_url,
            "httpUrlTls": ctx.service_url_tls,
            "nativeUrl": answer.url,
        })

    return [lookup_topic]


def build_lookup_app(ctx: AdminContext) -> Starlette:
    async def http_error(_: Request, error: Exception) -> Response:
        if isinstance(error, HTTPException):
            return JSONResponse({"reason": error.detail}, status_code=error.status_code)
        return error_response(error)

    routes = lookup_routes(ctx)
    guard_routes(ctx, routes)  # authorization: the same need as a binary LOOKUP
    return Starlette(routes=routes, exception_handlers={HTTPException: http_error, Exception: http_error},
                     middleware=[Middleware(AuthenticationMiddleware, lambda: ctx.service.authenticator)])
