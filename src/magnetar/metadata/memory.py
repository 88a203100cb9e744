"""The in-memory reference metadata store, used by unit tests and the simulator.

``MemoryMetadataServer`` is the shared tree; ``await server.connect()`` opens a client (one
session). Session expiry runs on the injected ``Clock``: ``suspend_session`` starts the timeout,
``expire_session`` expires at once (tests).
"""

from __future__ import annotations

from magnetar.base.clock import Clock
from magnetar.base.limits import METADATA_SESSION_TIMEOUT_MS_DEFAULT
from magnetar.metadata._local import LocalClient, LocalServer

__all__ = ["MemoryMetadataServer", "MemoryMetadataStore"]


class MemoryMetadataStore(LocalClient):
    """A client of a ``MemoryMetadataServer``."""


class MemoryMetadataServer(LocalServer):
    def __init__(self, clock: Clock) -> None:
        super().__init__(clock)

    async def connect(self, session_timeout_ms: int = METADATA_SESSION_TIMEOUT_MS_DEFAULT) -> MemoryMetadataStore:
        return MemoryMetadataStore(self, session_timeout_ms)
