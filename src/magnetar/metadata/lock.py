"""A distributed lock and leader election over any ``MetadataStore``.

``MetadataLock(store, path, value)``: the holder is whoever created the ephemeral node ``path``
(create-if-absent); waiters watch ``path`` and retry when it is deleted. Because the node is
ephemeral, the lock passes to the next waiter when the holder's session closes or expires. The
holder learns it lost the lock (state ``LOST``, ``lost`` event, ``on_lost`` callbacks) when its
session expires or closes, or when the node is deleted or replaced behind its back; it never
keeps believing it holds a lock the store no longer gives it.

Leader election is the same thing: each candidate ``acquire()``s the election path, the holder
is the leader, and ``holder()`` reads who it is (the value it wrote, e.g. its service URL).
Used for topic-bundle ownership and the AutoRecovery auditor.
"""

from __future__ import annotations

import asyncio
import enum
from collections.abc import Callable

from magnetar.base.errors import ClosedError
from magnetar.base.invariant import invariant
from magnetar.metadata.api import EventKind, MetadataStore, SessionState, Watch, WatchEvent
from magnetar.metadata.errors import NodeExistsError, NoNodeError, SessionClosedError, SessionExpiredError
from magnetar.metadata.paths import validate_node_path, validate_value

__all__ = ["LockLostError", "LockState", "MetadataLock"]


class LockState(enum.Enum):
    IDLE = "idle"
    WAITING = "waiting"
    HELD = "held"
    RELEASED = "released"
    LOST = "lost"


_TRANSITIONS: dict[LockState, frozenset[LockState]] = {
    LockState.IDLE: frozenset({LockState.WAITING}),
    LockState.WAITING: frozenset({LockState.HELD, LockState.RELEASED, LockState.LOST}),
    LockState.HELD: frozenset({LockState.RELEASED, LockState.LOST}),
    LockState.RELEASED: frozenset(),
    LockState.LOST: frozenset(),
}


class LockLostError(ClosedError):
    """The lock was lost (or could not be acquired) because the session ended."""


class MetadataLock:
    """One attempt to hold ``path``; a lock object is used once (IDLE -> ... -> RELEASED/LOST)."""

    def __init__(self, store: MetadataStore, path: str, value: bytes) -> None:
        self._store = store
        self.path = validate_node_path(path)
        self.value = validate_value(value)
        self._state = LockState.IDLE
        self._changed = asyncio.Event()
        self.lost = asyncio.Event()
        self._on_lost: list[Callable[[], None]] = []
        self._watch: Watch | None = None
        self._version = 0
        self._verify_task: asyncio.Task[None] | None = None

    @property
    def state(self) -> LockState:
        return self._state

    def on_lost(self, callback: Callable[[], None]) -> None:
        """Call ``callback()`` once if the lock is lost while held."""
        self._on_lost.append(callback)

    def _to(self, new_state: LockState) -> None:
        invariant(new_state in _TRANSITIONS[self._state], f"lock {self.path}: {self._state} -> {new_state}")
        self._state = new_state
        if new_state in (LockState.RELEASED, LockState.LOST):
            self._store.session.remove_listener(self._on_session)
            if self._watch is not None:
                self._watch.cancel()
        if new_state is LockState.LOST:
            self.lost.set()
            for callback in self._on_lost:
                callback()
        self._changed.set()

    async def acquire(self) -> None:
        """Wait until this client holds the lock. Raises ``LockLostError`` if the session ends first."""
        await self._start()
        while self._state is LockState.WAITING:
            self._changed.clear()
            if await self._try_create():
                break
            await self._changed.wait()
        if self._state is not LockState.HELD:
            raise LockLostError(f"lock {self.path}: session ended or lock lost before acquire returned")

    async def try_acquire(self) -> bool:
        """Take the lock if free now; otherwise leave it (state RELEASED) and return False."""
        await self._start()
        if await self._try_create():
            return self._state is LockState.HELD
        if self._state is LockState.WAITING:
            self._to(LockState.RELEASED)
        return False

    async def _start(self) -> None:
        invariant(self._state is LockState.IDLE, f"lock {self.path} used twice")
        self._store.session.check_alive()
        self._to(LockState.WAITING)
        self._store.session.add_listener(self._on_session)
        # Watch before the first attempt, so a deletion between a failed create and the wait is seen.
        self._watch = await self._store.watch(self.path, self._on_event)

    async def _try_create(self) -> bool:
        try:
            await self._store.create(self.path, self.value, ephemeral=True)
        except NodeExistsError:
            return False
        except (SessionExpiredError, SessionClosedError):
            if self._state is LockState.WAITING:
                self._to(LockState.LOST)
            return False
        if self._state is not LockState.WAITING:
            return False
        self._version = 0
        if self._watch is not None:
            self._watch.cancel()  # its queued events are about earlier holders
            self._watch = None
        self._to(LockState.HELD)
        # Watch the node we now own, then read it: a deletion before the watch was armed is seen
        # by the read, any later one by the watch (whose initial state is our node).
        try:
            self._watch = await self._store.watch(self.path, self._on_event)
        except (SessionExpiredError, SessionClosedError):
            self._lose_if_held()
            return True
        await self._verify()
        return True

    def _on_event(self, event: WatchEvent) -> None:
        if event.kind is not EventKind.DELETED:
            return  # CREATED is our own node (or a rival's, which retries on our deletion)
        if self._state is LockState.HELD:
            # Possibly our node went away; possibly a stale event about the previous holder's
            # node, queued before we created ours. Read to tell which.
            self._verify_task = asyncio.get_running_loop().create_task(self._verify())
        elif self._state is LockState.WAITING:
            self._changed.set()

    def _lose_if_held(self) -> None:
        if self._state is LockState.HELD:
            self._to(LockState.LOST)

    async def _verify(self) -> None:
        try:
            current = await self._store.get(self.path)
        except (SessionExpiredError, SessionClosedError):
            current = None
        if self._state is LockState.HELD and (
            current is None or current.version != self._version or current.value != self.value
        ):
            self._to(LockState.LOST)

    def _on_session(self, state: SessionState) -> None:
        if state in (SessionState.EXPIRED, SessionState.CLOSED) and self._state in (LockState.WAITING, LockState.HELD):
            self._to(LockState.LOST)

    async def holder(self) -> bytes | None:
        """The value the current holder wrote, or ``None`` if nobody holds ``path``."""
        result = await self._store.get(self.path)
        return None if result is None else result.value

    async def release(self) -> None:
        """Give the lock up (deleting the node if held). Idempotent; a no-op once LOST."""
        if self._state in (LockState.RELEASED, LockState.LOST):
            return
        was_held = self._state is LockState.HELD
        if self._state is LockState.IDLE:
            self._state = LockState.RELEASED
            return
        self._to(LockState.RELEASED)
        if was_held:
            try:
                await self._store.delete(self.path, self._version)
            except (NoNodeError, SessionExpiredError, SessionClosedError):
                pass
