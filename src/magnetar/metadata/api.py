"""The ``MetadataStore`` interface: a versioned tree of small values with compare-and-set,
watches, one session per client with ephemeral nodes, and sequential nodes.

One client object is one session, as in ZooKeeper and Pulsar's ``MetadataStoreExtended``:
ephemeral nodes a client creates live as long as its session; open several clients for several
sessions. Contracts every implementation (memory, embedded, ZooKeeper) keeps, proven by the
conformance suite in ``tests/metadata``:

* Paths are ZooKeeper-style absolute paths (``magnetar.metadata.paths``); bad paths raise
  ``InvalidArgumentError``, oversized paths/values ``LimitExceededError`` (``METADATA_PATH_BYTES_MAX``,
  ``METADATA_VALUE_BYTES_MAX``).
* Versions: a node is created with version 0; each successful ``put`` adds 1.
  ``put(path, value, -1)`` creates (``NodeExistsError`` if present); ``put(path, value, v)`` with
  ``v >= 0`` is a compare-and-set (``BadVersionError`` on conflict, ``NoNodeError`` if absent).
* Parents are created implicitly, empty and persistent, by every create (as Pulsar's store does);
  they stay after their children are deleted. ``delete`` of a node with children raises
  ``NodeNotEmptyError``. Ephemeral nodes cannot have children (``NoChildrenForEphemeralsError``).
* ``children`` of a missing node is ``[]``; names are sorted.
* Sequential nodes get ``path`` + a 10-digit counter (the parent's child-change count), so they
  sort in creation order under one parent.
* Watches are persistent until cancelled and deliver, in order per watch, one ``WatchEvent`` per
  change they observe on the node (CREATED, DATA_CHANGED, DELETED) or its child list
  (CHILDREN_CHANGED, path = the watched node). ZooKeeper may coalesce changes that happen while a
  watch re-arms, so watchers re-read state after an event rather than count events. Callbacks run
  on the event loop that created the client.
* Session: ``CONNECTED`` -> ``SUSPENDED`` (connection lost, may come back) -> ``CONNECTED``, or
  -> ``EXPIRED`` / ``CLOSED`` (terminal). On expiry the store has removed the session's ephemeral
  nodes; listeners are told so owners learn they lost them (and their locks); every later call
  raises ``SessionExpiredError`` (after ``close()``: ``SessionClosedError``).
"""

from __future__ import annotations

import enum
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

from magnetar.base.invariant import invariant
from magnetar.metadata.errors import SessionClosedError, SessionExpiredError

__all__ = [
    "EventKind",
    "GetResult",
    "MetadataStore",
    "Session",
    "SessionListener",
    "SessionState",
    "Watch",
    "WatchCallback",
    "WatchEvent",
]


class GetResult(NamedTuple):
    value: bytes
    version: int


class EventKind(enum.Enum):
    CREATED = "created"
    DATA_CHANGED = "data_changed"
    DELETED = "deleted"
    CHILDREN_CHANGED = "children_changed"


@dataclass(frozen=True, slots=True)
class WatchEvent:
    kind: EventKind
    path: str


WatchCallback = Callable[[WatchEvent], None]


class SessionState(enum.Enum):
    CONNECTED = "connected"
    SUSPENDED = "suspended"
    EXPIRED = "expired"
    CLOSED = "closed"


_SESSION_TRANSITIONS: dict[SessionState, frozenset[SessionState]] = {
    SessionState.CONNECTED: frozenset({SessionState.SUSPENDED, SessionState.EXPIRED, SessionState.CLOSED}),
    SessionState.SUSPENDED: frozenset({SessionState.CONNECTED, SessionState.EXPIRED, SessionState.CLOSED}),
    SessionState.EXPIRED: frozenset({SessionState.CLOSED}),
    SessionState.CLOSED: frozenset(),
}

SessionListener = Callable[[SessionState], None]


class Session:
    """A client's session: its id, state and the listeners told of every state change."""

    def __init__(self, session_id: int) -> None:
        self.session_id = session_id
        self._state = SessionState.CONNECTED
        self._listeners: list[SessionListener] = []

    @property
    def state(self) -> SessionState:
        return self._state

    @property
    def alive(self) -> bool:
        return self._state in (SessionState.CONNECTED, SessionState.SUSPENDED)

    def add_listener(self, listener: SessionListener) -> None:
        """Call ``listener(new_state)`` on every transition, on the event loop, in order."""
        self._listeners.append(listener)

    def remove_listener(self, listener: SessionListener) -> None:
        if listener in self._listeners:
            self._listeners.remove(listener)

    def transition(self, new_state: SessionState) -> bool:
        """Move to ``new_state``; returns False (and does nothing) if already there.

        EXPIRED after CLOSED is ignored: a closed session cannot expire any more.
        """
        if new_state is self._state or (self._state is SessionState.CLOSED):
            return False
        invariant(new_state in _SESSION_TRANSITIONS[self._state], f"session {self._state} -> {new_state}")
        self._state = new_state
        for listener in list(self._listeners):
            listener(new_state)
        return True

    def check_alive(self) -> None:
        """Raise ``SessionExpiredError``/``SessionClosedError`` unless the session can serve calls."""
        if self._state is SessionState.EXPIRED:
            raise SessionExpiredError(f"metadata session {self.session_id:#x} expired")
        if self._state is SessionState.CLOSED:
            raise SessionClosedError(f"metadata session {self.session_id:#x} closed")


class Watch(ABC):
    """A registered watch; ``cancel()`` stops delivery (idempotent)."""

    __slots__ = ()  # a subclass may keep its attributes in slots (``_LocalWatch``: one per watched node)
    path: str

    @abstractmethod
    def cancel(self) -> None: ...


class MetadataStore(ABC):
    """One client of a metadata store, with one session. All methods are coroutines."""

    session: Session

    @abstractmethod
    async def get(self, path: str) -> GetResult | None:
        """``(value, version)``, or ``None`` if the node does not exist."""

    @abstractmethod
    async def put(self, path: str, value: bytes, expected_version: int) -> int:
        """Create (``expected_version=-1``) or compare-and-set a persistent node; returns the new version.

        Raises ``NodeExistsError`` / ``BadVersionError`` / ``NoNodeError`` (all ``BadVersionError``) when the CAS loses.
        """

    @abstractmethod
    async def create(self, path: str, value: bytes, *, ephemeral: bool = False, sequential: bool = False) -> str:
        """Create a node (version 0) and return its path (with the counter if ``sequential``).

        ``ephemeral``: owned by this client's session, removed when it closes or expires.
        """

    @abstractmethod
    async def delete(self, path: str, expected_version: int | None = None) -> None:
        """Delete a node (any version if ``None``). Raises ``NoNodeError``, ``BadVersionError``, ``NodeNotEmptyError``."""

    @abstractmethod
    async def children(self, path: str) -> list[str]:
        """Sorted child names (not paths); ``[]`` if the node does not exist."""

    @abstractmethod
    async def exists(self, path: str) -> bool: ...

    @abstractmethod
    async def watch(self, path: str, callback: WatchCallback) -> Watch:
        """Watch ``path`` (which need not exist yet) and its child list until cancelled.

        Changes made after this returns are reported. Bounded by ``METADATA_WATCHES_PER_SESSION_MAX``.
        """

    @abstractmethod
    async def close(self) -> None:
        """End the session (its ephemeral nodes go at once) and release resources. Idempotent."""
