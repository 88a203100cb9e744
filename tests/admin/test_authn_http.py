"""HTTP authentication of the admin API: ``request.state.role`` and 401 with a reason."""

from __future__ import annotations

import base64
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from magnetar.admin.authn import AuthenticationMiddleware
from magnetar.broker import BrokerConfig
from magnetar.security import Authenticator, TokenVerifier, create_token
from tests.admin.harness import AdminWorld, asgi_call, run_world
from tests.manual_clock import ManualClock

SECRET = b"http-secret-http-secret-http-sec"
CONFIG = BrokerConfig(authentication_enabled=True, authentication_providers=("token",),
                      token_secret_key="data:;base64," + base64.b64encode(SECRET).decode())


def test_admin_api_needs_credentials_when_authentication_is_on() -> None:
    async def body(world: AdminWorld) -> None:
        refused = await world.call("GET", "/tenants")
        assert refused.status == 401 and "Authentication required" in refused.json()["reason"]
        junk = await world.call("GET", "/tenants", headers={"Authorization": "Bearer junk"})
        assert junk.status == 401 and junk.json()["reason"]
        good = await world.call("GET", "/tenants",
                                headers={"Authorization": f"Bearer {create_token('admin', secret_key=SECRET)}"})
        assert good.status == 200 and "public" in good.json()

    run_world(body, CONFIG)


def test_admin_api_stays_open_without_authentication() -> None:
    async def body(world: AdminWorld) -> None:
        assert (await world.call("GET", "/tenants")).status == 200

    run_world(body, BrokerConfig())


def role_app(authenticator: Authenticator | None) -> Any:
    async def whoami(request: Request) -> JSONResponse:
        return JSONResponse({"role": request.state.role})

    app = Starlette(routes=[Route("/whoami", whoami)])
    return AuthenticationMiddleware(app, lambda: authenticator)


def test_request_state_role_is_the_authenticated_role_or_none() -> None:
    import asyncio

    async def main() -> None:
        tokens = TokenVerifier(clock=ManualClock(), secret_key=SECRET)
        anonymous = Authenticator(("token",), anonymous_role="anon", tokens=tokens)
        assert (await asgi_call(role_app(None), "GET", "/whoami")).json() == {"role": None}
        assert (await asgi_call(role_app(anonymous), "GET", "/whoami")).json() == {"role": "anon"}
        bearer = {"Authorization": f"Bearer {create_token('alice', secret_key=SECRET)}"}
        reply = await asgi_call(role_app(anonymous), "GET", "/whoami", headers=bearer)
        assert reply.json() == {"role": "alice"}

    asyncio.run(main())
