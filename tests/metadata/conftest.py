"""Fixtures for the metadata tests: one ``Backend`` per store kind, and a real ZooKeeper.

The ZooKeeper server is started once per test session by ``scripts/zookeeper.sh`` on a private
directory and a free loopback port, health-checked by the script (ruok, with a deadline), and
stopped by PID in a ``finally``. If it cannot start, the ZooKeeper tests fail loudly.
Each test gets its own chroot, so tests never see each other's nodes.
"""

from __future__ import annotations

import asyncio
import itertools
import subprocess
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

from magnetar.metadata import EmbeddedMetadataServer, MemoryMetadataServer, MetadataStore, WatchEvent
from magnetar.metadata._local import LocalClient
from magnetar.metadata.zookeeper import ZooKeeperMetadataStore
from magnetar.runtime import RocksKeyValueStore, SystemClock
from tests.conftest import REPO

T = TypeVar("T")
TEST_DEADLINE_S = 60
ZK_SESSION_TIMEOUT_MS = 4_000
_chroots = itertools.count(1)


def run(body: Callable[[], Awaitable[T]], deadline_s: float = TEST_DEADLINE_S) -> T:
    """Run an async test body on a fresh event loop, bounded in time."""

    async def bounded() -> T:
        return await asyncio.wait_for(body(), deadline_s)

    return asyncio.run(bounded())


class Recorder:
    """Collects watch events; ``wait_for`` blocks until a condition on them holds."""

    def __init__(self) -> None:
        self.events: list[WatchEvent] = []
        self._changed = asyncio.Event()

    def __call__(self, event: WatchEvent) -> None:
        self.events.append(event)
        self._changed.set()

    async def wait_for(self, condition: Callable[[list[WatchEvent]], bool], timeout_s: float = 20) -> None:
        async def loop() -> None:
            while not condition(self.events):
                self._changed.clear()
                await self._changed.wait()

        await asyncio.wait_for(loop(), timeout_s)

    async def wait_count(self, count: int, timeout_s: float = 20) -> None:
        await self.wait_for(lambda events: len(events) >= count, timeout_s)


class Backend:
    """Opens clients of one store kind inside a running test loop."""

    name = ""

    async def open(self) -> None: ...

    async def client(self, session_timeout_ms: int = 10_000) -> MetadataStore:
        raise AssertionError("abstract")

    async def expire(self, store: MetadataStore) -> None:
        raise AssertionError("abstract")

    async def close(self) -> None: ...


class MemoryBackend(Backend):
    name = "memory"

    async def open(self) -> None:
        self.server = MemoryMetadataServer(SystemClock())

    async def client(self, session_timeout_ms: int = 10_000) -> MetadataStore:
        return await self.server.connect(session_timeout_ms)

    async def expire(self, store: MetadataStore) -> None:
        assert isinstance(store, LocalClient)
        await store.expire()


class EmbeddedBackend(Backend):
    name = "embedded"

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    async def open(self) -> None:
        self.server = await EmbeddedMetadataServer.open(RocksKeyValueStore(str(self.directory)), SystemClock())

    async def client(self, session_timeout_ms: int = 10_000) -> MetadataStore:
        return await self.server.connect(session_timeout_ms)

    async def expire(self, store: MetadataStore) -> None:
        assert isinstance(store, LocalClient)
        await store.expire()

    async def close(self) -> None:
        await self.server.close()


class ZooKeeperBackend(Backend):
    name = "zookeeper"

    def __init__(self, url: str) -> None:
        self.url = f"{url}/t{next(_chroots)}"
        self.clients: list[ZooKeeperMetadataStore] = []

    async def client(self, session_timeout_ms: int = ZK_SESSION_TIMEOUT_MS) -> MetadataStore:
        store = await ZooKeeperMetadataStore.connect(self.url, session_timeout_ms=session_timeout_ms)
        self.clients.append(store)
        return store

    async def expire(self, store: MetadataStore) -> None:
        assert isinstance(store, ZooKeeperMetadataStore)
        await store.expire_for_test()

    async def close(self) -> None:
        for store in self.clients:
            await store.close()


@pytest.fixture(scope="session")
def zookeeper_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    directory = tmp_path_factory.mktemp("zookeeper")
    script = str(REPO / "scripts" / "zookeeper.sh")
    try:
        started = subprocess.run(
            ["bash", script, "start", str(directory)], capture_output=True, text=True, timeout=120
        )
        assert started.returncode == 0, f"ZooKeeper did not start:\n{started.stdout}\n{started.stderr}"
        yield started.stdout.strip().splitlines()[-1]
    finally:
        subprocess.run(["bash", script, "stop", str(directory)], capture_output=True, timeout=60)


@pytest.fixture(
    params=["memory", "embedded", pytest.param("zookeeper", marks=pytest.mark.integration)]
)
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Backend:
    if request.param == "memory":
        return MemoryBackend()
    if request.param == "embedded":
        return EmbeddedBackend(tmp_path / "md")
    return ZooKeeperBackend(request.getfixturevalue("zookeeper_url"))


def with_backend(backend: Backend, body: Callable[[], Awaitable[Any]], deadline_s: float = TEST_DEADLINE_S) -> Any:
    """Open ``backend``, run ``body``, close the backend, all on one loop."""

    async def wrapped() -> Any:
        await backend.open()
        try:
            return await body()
        finally:
            await backend.close()

    return run(wrapped, deadline_s)
