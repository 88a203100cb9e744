"""Build a ``MetadataStore`` client from a URL (the composition root's one entry point).

* ``memory:`` — a fresh in-memory tree (tests, throwaway runs);
* ``embedded:/path/to/dir`` — the durable embedded store over RocksDB in that directory;
* ``zk://host:port[,host:port]/chroot`` — a ZooKeeper ensemble.

The returned client owns what it opened: ``await store.close()`` also closes the tree or the
RocksDB it was built on (``memory:``/``embedded:``). Use ``store.server.connect()`` for more
clients (sessions) of the same memory or embedded tree.
"""

from __future__ import annotations

from magnetar.base.clock import Clock
from magnetar.base.errors import InvalidArgumentError
from magnetar.base.limits import METADATA_SESSION_TIMEOUT_MS_DEFAULT
from magnetar.metadata.api import MetadataStore
from magnetar.metadata.embedded import EmbeddedMetadataServer
from magnetar.metadata.memory import MemoryMetadataServer
from magnetar.metadata.zookeeper import ZooKeeperMetadataStore
from magnetar.runtime.clock import SystemClock
from magnetar.runtime.kv import RocksKeyValueStore

__all__ = ["open_metadata_store"]


async def open_metadata_store(
    url: str,
    *,
    clock: Clock | None = None,
    session_timeout_ms: int = METADATA_SESSION_TIMEOUT_MS_DEFAULT,
) -> MetadataStore:
    """Open a client of the store ``url`` names. Raises ``InvalidArgumentError`` for unknown schemes."""
    clock = clock or SystemClock()
    if url == "memory:" or url.startswith("memory:"):
        return await MemoryMetadataServer(clock).connect(session_timeout_ms)
    if url.startswith("embedded:"):
        path = url[len("embedded:") :]
        if path.startswith("//"):
            path = path[2:]
        if not path:
            raise InvalidArgumentError(f"embedded: url needs a directory, got {url!r}")
        server = await EmbeddedMetadataServer.open(RocksKeyValueStore(path), clock)
        return await server.connect(session_timeout_ms, owns_server=True)
    if url.startswith("zk://"):
        return await ZooKeeperMetadataStore.connect(url, session_timeout_ms=session_timeout_ms)
    raise InvalidArgumentError(f"unknown metadata store url {url!r}: use memory:, embedded:/dir or zk://host:port/chroot")
