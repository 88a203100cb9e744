"""The HTTP endpoint of a Magnetar process: ``/metrics`` (Prometheus text), ``/health`` and, on a
broker, the admin REST API mounted at ``/admin/v2``, the lookup service at ``/lookup/v2`` (both
authenticated when the broker's authentication is on) and the web console at ``/``
(``runtime.console``), over HTTP and, with TLS, HTTPS.

Starlette app served by uvicorn inside the process's event loop; nothing outside ``runtime`` and
``admin`` imports the framework. ``/metrics`` renders the process-wide registry followed by the
given extra registries (a broker's per-topic collector lives in its own registry, so two brokers
in one test process do not collide).
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import uvicorn
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, CollectorRegistry, generate_latest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.types import Receive, Scope, Send

from magnetar.admin import ADMIN_PATH, AdminContext, build_admin_app
from magnetar.admin.lookup import LOOKUP_PATH, build_lookup_app
from magnetar.base.limits import TLS_HANDSHAKE_TIMEOUT_S
from magnetar.broker.metrics import BrokerCollector
from magnetar.broker.service import BrokerService
from magnetar.runtime.console import start_console
from magnetar.runtime.processes import free_port
from magnetar.runtime.tls import TlsFiles, peer_cn

#: How long a stopping endpoint waits for open HTTP requests before closing them.
HTTP_SHUTDOWN_S_MAX = 5.0


class _EmbeddedServer(uvicorn.Server):
    """uvicorn inside a process whose composition root owns SIGTERM/SIGINT."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


class _TlsServer(_EmbeddedServer):
    """HTTPS: the listening server is made here, not by uvicorn, so that the TLS handshake is
    bounded (``ssl_handshake_timeout``: uvicorn passes none, which leaves asyncio's 60 s). A client
    that connects and never finishes its handshake is dropped after ``handshake_timeout_s``; the
    connections uvicorn's protocol sees have finished theirs. Everything else (protocol, state,
    shutdown of ``servers``) is uvicorn's."""

    def __init__(self, config: uvicorn.Config, context: ssl.SSLContext, handshake_timeout_s: float) -> None:
        super().__init__(config)
        self._context = context
        self._handshake_timeout_s = handshake_timeout_s

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await self.lifespan.startup()
        config = self.config

        def create_protocol(_loop: asyncio.AbstractEventLoop | None = None) -> asyncio.Protocol:
            protocol: asyncio.Protocol = config.http_protocol_class(  # type: ignore[call-arg]
                config=config, server_state=self.server_state, app_state=self.lifespan.state, _loop=_loop)
            return protocol

        server = await asyncio.get_running_loop().create_server(
            create_protocol, host=config.host, port=config.port, ssl=self._context, backlog=config.backlog,
            ssl_handshake_timeout=self._handshake_timeout_s)
        self.servers = [server]
        self.started = True


class HttpEndpoint:
    def __init__(self, server: uvicorn.Server, task: asyncio.Task[None]) -> None:
        self._server = server
        self._task = task
        #: Run after the server stopped (what was served with it: the console's sampler).
        self.on_stop: list[Callable[[], Awaitable[None]]] = []

    @property
    def port(self) -> int:
        for server in self._server.servers:
            for sock in server.sockets:
                return int(sock.getsockname()[1])
        raise RuntimeError("HTTP endpoint is not listening")

    async def stop(self) -> None:
        self._server.should_exit = True
        try:
            await asyncio.wait_for(asyncio.shield(self._task), HTTP_SHUTDOWN_S_MAX)
        except TimeoutError:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        for stop in self.on_stop:
            await stop()


def build_app(health: Callable[[], dict[str, Any]], *, mounts: dict[str, Starlette] | None = None,
              registries: list[CollectorRegistry] | None = None) -> Starlette:
    extra = list(registries or ())

    async def metrics(_: Request) -> Response:
        body = generate_latest(REGISTRY) + b"".join(generate_latest(r) for r in extra)
        return Response(body, media_type=CONTENT_TYPE_LATEST)

    async def health_route(_: Request) -> JSONResponse:
        return JSONResponse(health())

    routes: list[BaseRoute] = [Route("/metrics", metrics), Route("/health", health_route)]
    routes += [Mount(path, app=app) for path, app in (mounts or {}).items()]
    return Starlette(routes=routes)


def _tls_aware_protocol() -> type[Any]:
    """uvicorn's HTTP protocol, recording a verified client certificate's CN in each request's
    scope (``extensions.tls.client_cert_cn``) for the ``tls`` authentication provider."""
    from uvicorn.protocols.http.auto import AutoHTTPProtocol

    class TlsAwareProtocol(AutoHTTPProtocol):  # type: ignore[misc, valid-type]
        def connection_made(self, transport: Any) -> None:
            super().connection_made(transport)
            cn = peer_cn(transport.get_extra_info("ssl_object"))
            if cn is None:
                return
            inner: Any = getattr(self, "app")  # noqa: B009 - uvicorn's attribute, untyped here

            async def with_peer(scope: Scope, receive: Receive, send: Send) -> None:
                scope["extensions"] = {**(scope.get("extensions") or {}), "tls": {"client_cert_cn": cn}}
                await inner(scope, receive, send)

            setattr(self, "app", with_peer)  # noqa: B010

    return TlsAwareProtocol


async def start_http(host: str, port: int, *, health: Callable[[], dict[str, Any]],
                     mounts: dict[str, Starlette] | None = None,
                     registries: list[CollectorRegistry] | None = None,
                     tls: TlsFiles | None = None,
                     tls_handshake_timeout_s: float = TLS_HANDSHAKE_TIMEOUT_S) -> HttpEndpoint:
    """Serve the app on ``host:port`` (0 picks a free port); returns once it is listening.

    With ``tls`` it serves HTTPS with that context (reloaded in place when its files change); a
    handshake not finished within ``tls_handshake_timeout_s`` (the binary TLS listener's bound,
    ``BrokerConfig.tls_handshake_timeout_s``) drops the connection.
    """
    app = build_app(health, mounts=mounts, registries=registries)
    return await serve_app(app, host, port, tls=tls, tls_handshake_timeout_s=tls_handshake_timeout_s)


async def serve_app(app: Any, host: str, port: int, *, tls: TlsFiles | None = None,
                    tls_handshake_timeout_s: float = TLS_HANDSHAKE_TIMEOUT_S) -> HttpEndpoint:
    server: _EmbeddedServer
    if tls is not None:
        config = uvicorn.Config(app, host=host, port=port, log_level="warning", lifespan="off",
                                http=_tls_aware_protocol())
        server = _TlsServer(config, tls.context, tls_handshake_timeout_s)
    else:
        config = uvicorn.Config(app, host=host, port=port, log_level="warning", lifespan="off")
        server = _EmbeddedServer(config)
    task = asyncio.get_running_loop().create_task(server.serve(), name="https" if tls else "http")
    while not server.started:
        if task.done():
            task.result()  # raises the start-up error (port in use, ...)
            raise RuntimeError("HTTP endpoint stopped during start-up")
        await asyncio.sleep(0.01)
    return HttpEndpoint(server, task)


class BrokerHttp:
    """A broker's web endpoints: HTTP on ``port`` and, with TLS, HTTPS on ``tls_port``."""

    def __init__(self, plain: HttpEndpoint, secure: HttpEndpoint | None) -> None:
        self.plain = plain
        self.secure = secure

    @property
    def port(self) -> int:
        return self.plain.port

    @property
    def tls_port(self) -> int | None:
        return self.secure.port if self.secure is not None else None

    async def stop(self) -> None:
        for endpoint in (self.secure, self.plain):
            if endpoint is not None:
                await endpoint.stop()


async def start_broker_http(host: str, port: int, *, service: BrokerService,
                            health: Callable[[], dict[str, Any]], metadata_url: str = "",
                            tls_port: int | None = None, tls: TlsFiles | None = None) -> BrokerHttp:
    """A broker's HTTP endpoint: ``/metrics`` with per-topic and per-subscription series,
    ``/health`` and, when the broker has a metadata store, the admin API at ``/admin/v2``, the
    lookup service at ``/lookup/v2`` and the web console at ``/`` (``runtime.console``). With
    ``tls`` and ``tls_port`` the same app is also served over HTTPS (Pulsar's
    ``webServicePortTls``). A port 0 is chosen before the app is built, so lookup answers can name it."""
    port = port or free_port(host)
    tls_port = (tls_port or free_port(host)) if tls is not None and tls_port is not None else None
    registry = CollectorRegistry()
    registry.register(BrokerCollector(service))
    mounts: dict[str, Starlette] = {}
    console = None
    if service.resources is not None:
        context = AdminContext(service, cluster=service.config.cluster_name,
                               service_url=f"http://{service.config.advertised_host}:{port}",
                               service_url_tls=(f"https://{service.config.advertised_host}:{tls_port}"
                                                if tls_port is not None else ""),
                               broker_service_url=service.config.service_url)
        mounts[ADMIN_PATH] = build_admin_app(context)
        mounts[LOOKUP_PATH] = build_lookup_app(context)
        console = start_console(context, metadata_url=metadata_url)
        mounts[""] = console.app  # last: everything the routes above do not serve
    app = build_app(health, mounts=mounts, registries=[registry])
    plain: HttpEndpoint | None = None
    try:
        plain = await serve_app(app, host, port)
        secure = (await serve_app(app, host, tls_port, tls=tls,
                                  tls_handshake_timeout_s=service.config.tls_handshake_timeout_s)
                  if tls_port is not None else None)
    except BaseException:
        if plain is not None:
            await plain.stop()
        if console is not None:
            await console.stop()
        raise
    if console is not None:
        plain.on_stop.append(console.stop)  # plain stops last (BrokerHttp stops secure first)
    return BrokerHttp(plain, secure)
