"""A read-only view of an embedded store's tree, straight from its key/value store.

Another process (a Spark task reading a standalone's topics) cannot open the embedded store: its
RocksDB belongs to the standalone. It can read the same key/value layout through a secondary,
read-only handle (``magnetar.runtime.metadata_view``), and this view answers ``get`` and
``children`` from it, decoding nodes exactly as ``EmbeddedMetadataServer.open`` does. It never
writes, holds no session, and sees the tree as of the handle's last catch-up with its owner.
"""

from __future__ import annotations

import msgspec

from magnetar.base.errors import CorruptDataError
from magnetar.base.io import KeyValueStore
from magnetar.metadata.api import GetResult
from magnetar.metadata.embedded import _NODE_PREFIX, _decoder
from magnetar.metadata.paths import ROOT, validate_path

__all__ = ["EmbeddedTreeView"]


class EmbeddedTreeView:
    """``get``/``children`` over an embedded store's key/value layout (read-only)."""

    def __init__(self, kv: KeyValueStore) -> None:
        self._kv = kv

    async def get(self, path: str) -> GetResult | None:
        validate_path(path)
        raw = self._kv.get(_NODE_PREFIX + path.encode("utf-8", "surrogatepass"))
        if raw is None:
            return None
        try:
            value, version, *_ = _decoder.decode(raw)
        except msgspec.DecodeError as exc:
            raise CorruptDataError(f"embedded metadata node {path!r} cannot be decoded: {exc}") from exc
        return GetResult(value, version)

    async def children(self, path: str) -> list[str]:
        validate_path(path)
        prefix = _NODE_PREFIX + (b"/" if path == ROOT else path.encode("utf-8", "surrogatepass") + b"/")
        end = prefix[:-1] + bytes([prefix[-1] + 1])
        names = []
        for key, _ in self._kv.scan(prefix, end):
            rest = key[len(prefix) :]
            if rest and b"/" not in rest:
                names.append(rest.decode("utf-8", "surrogatepass"))
        return sorted(names)

    async def exists(self, path: str) -> bool:
        return await self.get(path) is not None

    async def close(self) -> None:
        self._kv.close()
