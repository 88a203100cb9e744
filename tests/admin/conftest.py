"""A broker with its HTTP endpoint (admin API, /metrics) on an event-loop thread, for the CLI and
the official client."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from magnetar.broker import BrokerConfig
from magnetar.metadata.memory import MemoryMetadataServer
from magnetar.node.broker_generation import bootstrap_cluster
from magnetar.runtime.clock import SystemClock
from magnetar.runtime.http import BrokerHttp, start_broker_http
from tests.compat.harness import BrokerThread


@dataclass
class HttpBroker:
    thread: BrokerThread
    http: BrokerHttp

    @property
    def http_url(self) -> str:
        return f"http://127.0.0.1:{self.http.port}"


@contextlib.contextmanager
def running_http_broker(config: BrokerConfig | None = None) -> Iterator[HttpBroker]:
    """A broker thread with the memory metadata store, bootstrapped, serving HTTP on a free port
    (and, with ``config.tls_enabled``, the binary protocol over TLS too)."""
    thread = BrokerThread(config)
    try:
        thread.metadata = thread.call(MemoryMetadataServer(SystemClock()).connect())
        thread.start()
        assert thread.server is not None
        service = thread.server.service
        thread.call(bootstrap_cluster(service, web_url="http://127.0.0.1:0"))
        http = thread.call(start_broker_http("127.0.0.1", 0, service=service, health=lambda: {"status": "ok"}))
        try:
            yield HttpBroker(thread, http)
        finally:
            thread.call(http.stop())
    finally:
        thread.stop()


@pytest.fixture
def http_broker() -> Iterator[HttpBroker]:
    with running_http_broker() as running:
        yield running
