"""The HTTP endpoint of a Magnetar process: ``/metrics`` (Prometheus text) and ``/health``.

Starlette app served by uvicorn inside the process's event loop. Later layers (the admin REST
API) mount their routes here; nothing outside ``runtime`` and ``admin`` imports the framework.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import uvicorn
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, generate_latest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

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


def build_app(health: Callable[[], dict[str, Any]]) -> Starlette:
    async def metrics(_: Request) -> Response:
        return Response(generate_latest(REGISTRY), media_type=CONTENT_TYPE_LATEST)

    async def health_route(_: Request) -> JSONResponse:
        return JSONResponse(health())

    return Starlette(routes=[Route("/metrics", metrics), Route("/health", health_route)])


async def start_http(host: str, port: int, *, health: Callable[[], dict[str, Any]]) -> HttpEndpoint:
    """Serve the app on ``host:port`` (0 picks a free port); returns once it is listening."""
    config = uvicorn.Config(build_app(health), host=host, port=port, log_level="warning", lifespan="off")
    server = _EmbeddedServer(config)
    task = asyncio.get_running_loop().create_task(server.serve(), name="http")
    while not server.started:
        if task.done():
            task.result()  # raises the start-up error (port in use, ...)
            raise RuntimeError("HTTP endpoint stopped during start-up")
        await asyncio.sleep(0.01)
    return HttpEndpoint(server, task)
