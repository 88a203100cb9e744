"""Read-only access to a metadata store from a process that does not own it.

``open_metadata_view(url)`` serves tools that only read the tree (the Spark connector's planner
and tasks): ``zk://`` opens an ordinary ZooKeeper client (many readers are normal there), and
``embedded:/dir`` opens the standalone's RocksDB as a *secondary* instance in a private temporary
directory, caught up with its owner at open, so the owner keeps running undisturbed and nothing
is ever written. ``memory:`` has no other process to share with and is refused.
"""

from __future__ import annotations

import shutil
import tempfile
from typing import Protocol

from rocksdict import AccessType, Options, Rdict

from magnetar.base.errors import InvalidArgumentError
from magnetar.metadata.api import GetResult
from magnetar.metadata.embedded_view import EmbeddedTreeView
from magnetar.runtime.kv import RocksKeyValueStore
from magnetar.runtime.metadata import open_metadata_store


class MetadataView(Protocol):
    """What readers of the tree need: ``get``, ``children``, ``close``."""

    async def get(self, path: str) -> GetResult | None:
        """``(value, version)`` or ``None``."""

    async def children(self, path: str) -> list[str]:
        """Names of the children of ``path``."""

    async def close(self) -> None:
        """Release the handle."""


class _SecondaryRocks(RocksKeyValueStore):
    """A RocksDB secondary handle over another process's database (reads only)."""

    def __init__(self, path: str) -> None:  # does not call the writer's __init__: nothing is created
        self._scratch = tempfile.mkdtemp(prefix="magnetar-md-view-")
        self._db = Rdict(path, Options(raw_mode=True), access_type=AccessType.secondary(self._scratch))
        self._db.try_catch_up_with_primary()

    def write(self, puts: object, *, sync: bool) -> None:
        raise InvalidArgumentError("a secondary metadata view is read-only")

    def close(self) -> None:
        try:
            self._db.close()
        finally:
            shutil.rmtree(self._scratch, ignore_errors=True)


async def open_metadata_view(url: str) -> MetadataView:
    """A read-only view of the store ``url`` names (see the module docstring)."""
    if url.startswith("embedded:"):
        path = url[len("embedded:") :]
        if path.startswith("//"):
            path = path[2:]
        if not path:
            raise InvalidArgumentError(f"embedded: url needs a directory, got {url!r}")
        try:
            kv = _SecondaryRocks(path)
        except Exception as exc:  # rocksdict raises plain exceptions for a missing/foreign directory
            raise InvalidArgumentError(f"cannot open the embedded metadata store at {path}: {exc}") from exc
        return EmbeddedTreeView(kv)
    if url.startswith("memory:"):
        raise InvalidArgumentError("a memory: store lives inside one process; give the owner's embedded: or zk:// url")
    return await open_metadata_store(url)
