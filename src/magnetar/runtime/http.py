"""The HTTP endpoint of a Magnetar process: ``/metrics`` (Prometheus text), ``/health`` and, on a
broker, the admin REST API mounted at ``/admin/v2`` and the web console at ``/`` (``runtime.console``).

Starlette app served by uvicorn inside the process's event loop; nothing outside ``runtime`` and
``admin`` imports the framework. ``/metrics`` renders the process-wide registry followed by the
given extra registries (a broker's per-topic collector lives in its own registry, so two brokers
in one test process do not collide).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import uvicorn
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, CollectorRegistry, generate_latest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Mount, Route

from magnetar.admin import ADMIN_PATH, AdminContext, build_admin_app
from magnetar.broker.metrics import BrokerCollector
from magnetar.broker.resources import ClusterData
from magnetar.broker.service import BrokerService
from magnetar.runtime.console import start_console

#: How long a stopping endpoint waits for open HTTP requests before closing them.
HTTP_SHUTDOWN_S_MAX = 5.0


class _EmbeddedServer(uvicorn.Server):
    """uvicorn inside a process whose composition root owns SIGTERM/SIGINT."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


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


async def start_http(host: str, port: int, *, health: Callable[[], dict[str, Any]],
                     mounts: dict[str, Starlette] | None = None,
                     registries: list[CollectorRegistry] | None = None) -> HttpEndpoint:
    """Serve the app on ``host:port`` (0 picks a free port); returns once it is listening."""
    app = build_app(health, mounts=mounts, registries=registries)
    config = uvicorn.Config(app, host=host, port=port, log_level="warning", lifespan="off")
    server = _EmbeddedServer(config)
    task = asyncio.get_running_loop().create_task(server.serve(), name="http")
    while not server.started:
        if task.done():
            task.result()  # raises the start-up error (port in use, ...)
            raise RuntimeError("HTTP endpoint stopped during start-up")
        await asyncio.sleep(0.01)
    return HttpEndpoint(server, task)


async def start_broker_http(host: str, port: int, *, service: BrokerService,
                            health: Callable[[], dict[str, Any]], metadata_url: str = "") -> HttpEndpoint:
    """A broker's HTTP endpoint: ``/metrics`` with per-topic and per-subscription series,
    ``/health`` and, when the broker has a metadata store, the admin API at ``/admin/v2`` and the
    web console at ``/`` (``runtime.console``)."""
    registry = CollectorRegistry()
    registry.register(BrokerCollector(service))
    mounts: dict[str, Starlette] = {}
    console = None
    if service.resources is not None:
        context = AdminContext(service, cluster=service.config.cluster_name,
                               broker_service_url=service.config.service_url)
        mounts[ADMIN_PATH] = build_admin_app(context)
        console = start_console(context, metadata_url=metadata_url)
        mounts[""] = console.app  # last: everything the routes above do not serve
    try:
        endpoint = await start_http(host, port, health=health, mounts=mounts, registries=[registry])
    except BaseException:
        if console is not None:
            await console.stop()
        raise
    if console is not None:
        endpoint.on_stop.append(console.stop)
    return endpoint


async def bootstrap_cluster(service: BrokerService, *, web_url: str) -> None:
    """First start: the broker's cluster, tenant ``public`` and namespace ``public/default``."""
    if service.resources is not None:
        await service.resources.bootstrap(service.config.cluster_name, ClusterData(
            service_url=web_url, broker_service_url=service.config.service_url))
