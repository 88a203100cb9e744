"""The web console: pages served by every broker (and ``magnetar standalone``) on its HTTP port.

``build_console_app(ctx)`` is a Starlette app mounted at the root of the HTTP endpoint (after
``/metrics``, ``/health`` and ``/admin/v2``):

* ``/``: the single page (``static/index.html``), whose script (``static/app.js``) draws the
  overview, the tenant/namespace/topic tree, a topic page, the durability view and the cluster
  view from ``/console/api`` and ``/admin/v2``, and sends every action to ``/admin/v2``.
* ``/console/static/<file>``: the page's script and style, shipped in the package (no CDN, no
  network at run time).
* ``/console/api/...``: the JSON the pages need beyond ``/admin/v2`` (``api``).

With authentication on, the page asks for a token, keeps it in the browser's session storage and
sends it as ``Authorization: Bearer`` on every call; it never puts it in a URL. The server decides
what a role may do, as for any other admin call.
"""

from __future__ import annotations

from importlib import resources

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Mount, Route

from magnetar.admin.access import guard_routes
from magnetar.admin.authn import AuthenticationMiddleware
from magnetar.admin.common import error_response
from magnetar.admin.console.api import API_PATH, BookieInfo, ConsoleContext, routes, sample_now
from magnetar.admin.console.history import RateHistory

__all__ = ["API_PATH", "BookieInfo", "ConsoleContext", "RateHistory", "build_console_app", "sample_now"]

STATIC_PATH = "/console/static"
_TYPES = {".html": "text/html; charset=utf-8", ".js": "text/javascript; charset=utf-8",
          ".css": "text/css; charset=utf-8", ".svg": "image/svg+xml"}


def _static_files() -> dict[str, tuple[bytes, str]]:
    """The shipped files, read once: name -> (bytes, content type)."""
    root = resources.files("magnetar.admin.console") / "static"
    out = {}
    for item in root.iterdir():
        suffix = item.name[item.name.rfind("."):]
        if item.is_file() and suffix in _TYPES:
            out[item.name] = (item.read_bytes(), _TYPES[suffix])
    return out


def build_console_app(ctx: ConsoleContext) -> Starlette:
    files = _static_files()
    headers = {"Cache-Control": "no-cache", "X-Content-Type-Options": "nosniff",
               "Content-Security-Policy": "default-src 'self'; img-src 'self' data:; style-src 'self'; "
                                          "script-src 'self'; connect-src 'self'; frame-ancestors 'none'"}

    async def index(_: Request) -> Response:
        body, kind = files["index.html"]
        return Response(body, media_type=kind, headers=headers)

    async def static(request: Request) -> Response:
        found = files.get(request.path_params["name"])
        if found is None:
            return Response("not found", status_code=404, media_type="text/plain")
        return Response(found[0], media_type=found[1], headers=headers)

    async def failed(_: Request, error: Exception) -> Response:
        return error_response(error)

    # The API shows messages and acts on cursors: authenticated like /admin/v2 (request.state.role)
    # and authorized by the same table (access.ROUTE_NEEDS).
    api_routes = routes(ctx)
    guard_routes(ctx.admin, api_routes)
    api = Starlette(routes=api_routes, exception_handlers={Exception: failed},
                    middleware=[Middleware(AuthenticationMiddleware, lambda: ctx.admin.service.authenticator)])
    return Starlette(routes=[Route("/", index, methods=["GET"]),
                             Route(f"{STATIC_PATH}/{{name}}", static, methods=["GET"]),
                             Mount(API_PATH, app=api)])
