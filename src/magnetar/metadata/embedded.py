"""The embedded durable metadata store for ``magnetar standalone``: one process, one directory.

It is the memory store's tree (``_local``) with every change written to an injected
``KeyValueStore`` as one atomic batch with ``write_durable`` *before* the change becomes visible
and the caller is answered: a write that returned is durable, one that did not may or may not be
there (never half of it). ``write_durable`` queues the batch when ``_local`` stages the plan (so
the durable order is the staging order) and syncs the batches of concurrent writers together off
the event loop (group commit); ``_local`` keeps the change invisible to readers until then. The
fault point ``metadata.embedded.after_write_before_reply`` sits between that durable write and
the reply. ``inline_sync=True`` keeps the old path, one ``write(sync=True)`` per change on the
event loop: only a baseline for benchmarks and tests. On open the whole tree is read back
(metadata is small), version numbers included, and the ephemeral nodes of the previous
process's sessions are removed.

Key layout: ``md/n<path>`` -> msgpack ``[value, version, cversion, ctime_ms, mtime_ms, owner]``;
``md/s`` -> next session id (8 bytes big-endian), so session ids are never reused.
"""

from __future__ import annotations

from collections.abc import Awaitable

import msgspec

from magnetar import faults
from magnetar.base.clock import Clock
from magnetar.base.errors import CorruptDataError
from magnetar.base.io import KeyValueStore
from magnetar.base.limits import METADATA_SESSION_TIMEOUT_MS_DEFAULT
from magnetar.metadata._local import LocalClient, LocalServer, Node, Plan
from magnetar.metadata.paths import ROOT

__all__ = ["EmbeddedMetadataServer", "EmbeddedMetadataStore"]

_NODE_PREFIX = b"md/n"
_NODE_END = b"md/o"
_SESSION_KEY = b"md/s"
_NodeTuple = tuple[bytes, int, int, int, int, int]
_encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder(_NodeTuple)


async def _done() -> None:
    """An awaitable that is already complete (the inline path wrote synchronously)."""


class EmbeddedMetadataStore(LocalClient):
    """A client of an ``EmbeddedMetadataServer``; if it ``owns_server``, closing it closes the server."""

    owns_server = False

    async def close(self) -> None:
        await super().close()
        if self.owns_server:
            server = self.server
            assert isinstance(server, EmbeddedMetadataServer)
            await server.close()


class EmbeddedMetadataServer(LocalServer):
    def __init__(self, kv: KeyValueStore, clock: Clock, first_session_id: int, *, inline_sync: bool = False) -> None:
        super().__init__(clock, persist=self._write, first_session_id=first_session_id)
        self._kv = kv
        self._inline_sync = inline_sync
        # The session counter asked to be persisted so far (ids below it may be handed out).
        self._session_reserved = first_session_id
        self._closed = False

    @classmethod
    async def open(cls, kv: KeyValueStore, clock: Clock, *, inline_sync: bool = False) -> EmbeddedMetadataServer:
        """Load the tree from ``kv`` and drop the previous process's ephemeral nodes."""
        raw = kv.get(_SESSION_KEY)
        first_session_id = int.from_bytes(raw, "big") if raw else 1
        server = cls(kv, clock, first_session_id, inline_sync=inline_sync)
        for key, value in kv.scan(_NODE_PREFIX, _NODE_END):
            path = key[len(_NODE_PREFIX) :].decode("utf-8", "surrogatepass")
            try:
                fields = _decoder.decode(value)
            except msgspec.DecodeError as exc:
                raise CorruptDataError(f"embedded metadata node {path!r} cannot be decoded: {exc}") from exc
            if path == ROOT:
                server.load_root(Node(*fields))
            else:
                server.load_node(path, Node(*fields))
        stale = server.stale_ephemerals()
        if stale:
            await server.remove_nodes(stale)
        return server

    async def connect(
        self, session_timeout_ms: int = METADATA_SESSION_TIMEOUT_MS_DEFAULT, *, owns_server: bool = False
    ) -> EmbeddedMetadataStore:
        """A new client (session). ``owns_server``: closing that client closes this server and its store."""
        # Persist the counter before the id is used, so no id is handed out twice. Each connect
        # reserves one more id, so concurrent connects each wait for a counter above their id.
        self._session_reserved = max(self._session_reserved, self.next_session_id) + 1
        await self._durable([(_SESSION_KEY, self._session_reserved.to_bytes(8, "big"))])
        client = EmbeddedMetadataStore(self, session_timeout_ms)
        client.owns_server = owns_server
        return client

    def _write(self, plan: Plan) -> Awaitable[None]:
        """Queue ``plan``'s batch now (``_local`` calls this as it stages the plan); the result
        completes after the durable write and the fault point."""
        batch: list[tuple[bytes, bytes | None]] = []
        for path, node in plan:
            key = _NODE_PREFIX + path.encode("utf-8", "surrogatepass")
            if node is None:
                batch.append((key, None))
            else:
                fields = (node.value, node.version, node.cversion, node.ctime_ms, node.mtime_ms, node.ephemeral_owner)
                batch.append((key, _encoder.encode(fields)))
        durable = self._durable(batch)
        return self._reply_after(durable)

    def _durable(self, batch: list[tuple[bytes, bytes | None]]) -> Awaitable[None]:
        if self._inline_sync:
            self._kv.write(batch, sync=True)
            return _done()
        return self._kv.write_durable(batch)

    @staticmethod
    async def _reply_after(durable: Awaitable[None]) -> None:
        await durable
        await faults.point("metadata.embedded.after_write_before_reply")

    async def close(self) -> None:
        """Close every client, then the key/value store."""
        if self._closed:
            return
        self._closed = True
        for client in list(self.clients()):
            await client.close()
        self._kv.close()
