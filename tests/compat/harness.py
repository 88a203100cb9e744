"""A Magnetar broker on its own event-loop thread, for tests that drive the blocking official client.

The broker listens on 127.0.0.1 with an OS-chosen port. ``restart()`` stops it and starts a new one
on the same port over the same ``MemoryLogStore`` (what a broker restart over the same bookies
looks like to clients). Everything is stopped in ``stop()``; fixtures call it in ``finally``.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

from magnetar.broker import BrokerConfig, MemoryLogStore
from magnetar.broker.log import LogStore
from magnetar.node.broker_generation import bootstrap_cluster
from magnetar.runtime.broker_server import BrokerServer, start_broker
from magnetar.runtime.clock import SystemClock

R = TypeVar("R")
STEP_TIMEOUT_S = 30.0


class BrokerThread:
    def __init__(self, config: BrokerConfig | None = None, log_store: LogStore | None = None) -> None:
        self.config = config or BrokerConfig(advertised_port=0)
        self.log_store: LogStore = log_store or MemoryLogStore()
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="magnetar-broker", daemon=True)
        self._thread.start()
        self.server: BrokerServer | None = None
        self.port = 0
        self.metadata: Any = None

    def call(self, coro: Coroutine[Any, Any, R], timeout_s: float = STEP_TIMEOUT_S) -> R:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout_s)

    def start(self) -> BrokerThread:
        async def _start() -> BrokerServer:
            server = await start_broker(self.config, log_store=self.log_store, clock=SystemClock(),
                                        port=self.port, metadata=self.metadata,
                                        tls_port=0 if self.config.tls_enabled else None)
            # with a metadata store, public/default exists as on a standalone (topics are only
            # created in namespaces that exist)
            await bootstrap_cluster(server.service, web_url="http://127.0.0.1:0")
            return server

        self.server = self.call(_start())
        self.port = self.server.port
        return self

    @property
    def url(self) -> str:
        return f"pulsar://127.0.0.1:{self.port}"

    def stop_server(self) -> None:
        if self.server is not None:
            server, self.server = self.server, None
            self.call(server.close())

    def restart(self) -> None:
        self.stop_server()
        self.start()

    def stop(self) -> None:
        try:
            self.stop_server()
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(timeout=10)
            if not self._thread.is_alive():
                self.loop.close()
