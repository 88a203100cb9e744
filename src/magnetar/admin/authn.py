"""Authentication of HTTP requests: ``request.state.role`` for every admin and lookup handler.

``AuthenticationMiddleware`` wraps an ASGI app. Per HTTP request it asks the broker's
``Authenticator`` (read at request time, so a broker that swaps services keeps one app) for the
role of the ``Authorization`` header or, over HTTPS with a client certificate, of the
certificate's CN (the runtime puts it in ``scope["extensions"]["tls"]["client_cert_cn"]``). It
sets ``request.state.role`` (None when authentication is off) and ``request.state.principal``;
bad or missing credentials end the request with 401 and JSON ``{"reason": ...}``, before any
handler runs.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from starlette.datastructures import Headers
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from magnetar.security import AuthenticationFailedError, Authenticator

log = logging.getLogger(__name__)


def tls_peer_cn(scope: Scope) -> str | None:
    """The client certificate's CN the runtime recorded for this HTTPS connection, if any."""
    extensions: dict[str, Any] = scope.get("extensions") or {}
    tls: dict[str, Any] = extensions.get("tls") or {}
    cn = tls.get("client_cert_cn")
    return cn if isinstance(cn, str) and cn else None


class AuthenticationMiddleware:
    def __init__(self, app: ASGIApp, authenticator: Callable[[], Authenticator | None]) -> None:
        self.app = app
        self._authenticator = authenticator

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        state = scope.setdefault("state", {})
        authenticator = self._authenticator()
        if authenticator is None:
            state["role"] = None
            state["principal"] = None
            await self.app(scope, receive, send)
            return
        header = Headers(scope=scope).get("authorization")
        try:
            principal = authenticator.authenticate_http(header, tls_peer_cn(scope))
        except AuthenticationFailedError as error:
            log.info("HTTP %s %s refused: %s", scope.get("method"), scope.get("path"), error.reason)
            # Basic first when offered: a browser (the console) then asks for a user and password.
            scheme = "Basic" if "basic" in authenticator.providers else "Bearer"
            response = JSONResponse({"reason": f"Authentication required: {error.reason}"}, status_code=401,
                                    headers={"WWW-Authenticate": f'{scheme} realm="magnetar"'})
            await response(scope, receive, send)
            return
        state["role"] = principal.role
        state["principal"] = principal
        await self.app(scope, receive, send)
