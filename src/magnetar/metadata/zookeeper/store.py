"""``MetadataStore`` over a real ZooKeeper ensemble, through kazoo.

One ``ZooKeeperMetadataStore`` is one kazoo client, hence one ZooKeeper session. kazoo runs its
own threads: every completion, watch and state callback is handed to the asyncio loop with
``call_soon_threadsafe`` and handled there, so all state of this object lives on the loop.
kazoo's exceptions are translated here into ``magnetar.metadata.errors``.

Paths are prefixed with the chroot by this adapter (not by kazoo), and the chroot node is
created on connect. Session expiry (kazoo ``LOST`` while not closing) moves the session to
``EXPIRED``, tells listeners, and stops the kazoo client: kazoo would otherwise open a fresh
session silently, and the owner of ephemeral nodes and locks must learn it lost them.

Watches: kazoo 2.11 offers only ZooKeeper's one-shot watches, so a watch here re-arms itself
after each trigger and compares what it then reads (creation zxid, version, child names) with
what it saw before, reporting the difference as events. Changes made while it re-arms are
coalesced, as the ``MetadataStore`` contract allows.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any, TypeVar

from kazoo import exceptions as kazoo_errors
from kazoo.client import KazooClient, KazooState
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.protocol.states import ZnodeStat

from magnetar.base.errors import BadVersionError, InvalidArgumentError, LimitExceededError
from magnetar.base.limits import (
    METADATA_CONNECT_TIMEOUT_MS_MAX,
    METADATA_OPERATION_TIMEOUT_MS_MAX,
    METADATA_SESSION_TIMEOUT_MS_DEFAULT,
    METADATA_WATCHES_PER_SESSION_MAX,
)
from magnetar.metadata.api import (
    EventKind,
    GetResult,
    MetadataStore,
    Session,
    SessionState,
    Watch,
    WatchCallback,
    WatchEvent,
)
from magnetar.metadata.errors import (
    MetadataError,
    MetadataUnavailableError,
    NoChildrenForEphemeralsError,
    NodeExistsError,
    NodeNotEmptyError,
    NoNodeError,
    SessionExpiredError,
)
from magnetar.metadata.paths import (
    ROOT,
    validate_expected_version,
    validate_node_path,
    validate_path,
    validate_value,
)

__all__ = ["ZooKeeperMetadataStore", "parse_zk_url"]

_log = logging.getLogger(__name__)
T = TypeVar("T")


def parse_zk_url(url: str) -> tuple[str, str]:
    """``zk://h1:p1,h2:p2/chroot`` -> (``"h1:p1,h2:p2"``, ``"/chroot"``; ``""`` when none)."""
    if not url.startswith("zk://"):
        raise InvalidArgumentError(f"not a zk:// url: {url!r}")
    rest = url[len("zk://") :]
    hosts, slash, chroot = rest.partition("/")
    if not hosts:
        raise InvalidArgumentError(f"zk url names no host: {url!r}")
    for host in hosts.split(","):
        name, colon, port = host.rpartition(":")
        if not colon or not name or not port.isdigit():
            raise InvalidArgumentError(f"zk url host must be host:port, got {host!r}")
    chroot = "/" + chroot if slash and chroot else ""
    if chroot:
        validate_node_path(chroot)
    return hosts, chroot


def _translate(exc: BaseException, path: str) -> BaseException:
    if isinstance(exc, kazoo_errors.NodeExistsError):
        return NodeExistsError(f"metadata node exists: {path}")
    if isinstance(exc, kazoo_errors.NoNodeError):
        return NoNodeError(f"metadata node does not exist: {path}")
    if isinstance(exc, kazoo_errors.BadVersionError):
        return BadVersionError(f"{path}: version conflict")
    if isinstance(exc, kazoo_errors.NotEmptyError):
        return NodeNotEmptyError(f"metadata node has children: {path}")
    if isinstance(exc, kazoo_errors.NoChildrenForEphemeralsError):
        return NoChildrenForEphemeralsError(f"parent of {path} is ephemeral and cannot have children")
    if isinstance(exc, kazoo_errors.SessionExpiredError):
        return SessionExpiredError(f"ZooKeeper session expired ({path})")
    if isinstance(exc, kazoo_errors.ConnectionLoss | kazoo_errors.ConnectionClosedError | kazoo_errors.OperationTimeoutError | KazooTimeoutError):
        return MetadataUnavailableError(f"ZooKeeper unavailable ({path}): {type(exc).__name__}")
    if isinstance(exc, kazoo_errors.BadArgumentsError):
        return InvalidArgumentError(f"ZooKeeper rejected the arguments for {path}: {exc}")
    if isinstance(exc, kazoo_errors.KazooException):
        return MetadataError(f"ZooKeeper error on {path}: {type(exc).__name__}: {exc}")
    return exc


class _ZkWatch(Watch):
    def __init__(self, store: ZooKeeperMetadataStore, path: str, callback: WatchCallback) -> None:
        self.path = path
        self._store = store
        self._callback = callback
        self._node: tuple[int, int] | None = None  # (czxid, version)
        self._children: frozenset[str] | None = None
        self._running = False
        self._again = False
        self.active = True

    def _fired(self, _event: object) -> None:  # kazoo's thread
        self._store.call_in_loop(self._schedule)

    def _schedule(self) -> None:
        if not self.active or not self._store.session.alive:
            return
        if self._running:
            self._again = True
            return
        self._store.spawn(self._resync())

    async def _resync(self) -> None:
        self._running = True
        try:
            while self.active:
                self._again = False
                await self.arm(report=True)
                if not self._again:
                    break
        except (MetadataUnavailableError, SessionExpiredError):
            # Connection trouble: the session listener reports it; a reconnect re-triggers watches.
            pass
        finally:
            self._running = False

    async def arm(self, *, report: bool) -> None:
        zk_path = self._store.zk_path(self.path)
        client = self._store.client
        stat: ZnodeStat | None = await self._store.call(client.exists_async, zk_path, watch=self._fired, path=self.path)
        node = None if stat is None else (stat.czxid, stat.version)
        children: frozenset[str] | None = None
        if stat is not None:
            try:
                names = await self._store.call(client.get_children_async, zk_path, watch=self._fired, path=self.path)
                children = frozenset(names)
            except NoNodeError:
                node = None  # deleted in between: the exists watch fires and we re-read
        if report and self.active:
            for event in self._diff(node, children):
                self._callback(event)
        self._node, self._children = node, children

    def _diff(self, node: tuple[int, int] | None, children: frozenset[str] | None) -> list[WatchEvent]:
        events: list[WatchEvent] = []
        old = self._node
        if old != node:
            if old is None:
                events.append(WatchEvent(EventKind.CREATED, self.path))
            elif node is None:
                events.append(WatchEvent(EventKind.DELETED, self.path))
            elif old[0] != node[0]:
                events += [WatchEvent(EventKind.DELETED, self.path), WatchEvent(EventKind.CREATED, self.path)]
            else:
                events.append(WatchEvent(EventKind.DATA_CHANGED, self.path))
        if self._children is not None and children is not None and children != self._children:
            events.append(WatchEvent(EventKind.CHILDREN_CHANGED, self.path))
        return events

    def cancel(self) -> None:
        if self.active:
            self.active = False
            self._store.forget_watch(self)


class ZooKeeperMetadataStore(MetadataStore):
    """A kazoo client (one ZooKeeper session). Build with ``await ZooKeeperMetadataStore.connect(...)``."""

    def __init__(
        self, client: KazooClient, hosts: str, chroot: str, loop: asyncio.AbstractEventLoop, session_timeout_ms: int
    ) -> None:
        self.client = client
        self.session_timeout_ms = session_timeout_ms
        self.hosts = hosts
        self.chroot = chroot
        self._loop = loop
        session_id, _ = client.client_id
        self.session = Session(int(session_id))
        self._closing = False
        self._stopping: asyncio.Future[None] | None = None
        self._watches: set[_ZkWatch] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        client.add_listener(self._on_kazoo_state)

    @classmethod
    async def connect(
        cls,
        url: str,
        *,
        session_timeout_ms: int = METADATA_SESSION_TIMEOUT_MS_DEFAULT,
        connect_timeout_ms: int = METADATA_CONNECT_TIMEOUT_MS_MAX,
    ) -> ZooKeeperMetadataStore:
        """Connect to ``zk://host:port[,host:port]/chroot``; creates the chroot node if missing."""
        hosts, chroot = parse_zk_url(url)
        loop = asyncio.get_running_loop()
        client = KazooClient(hosts=hosts, timeout=session_timeout_ms / 1000, connection_retry={"max_tries": -1})
        try:
            await loop.run_in_executor(None, client.start, connect_timeout_ms / 1000)
            if chroot:
                await loop.run_in_executor(None, client.ensure_path, chroot)
        except (kazoo_errors.KazooException, KazooTimeoutError) as exc:
            await loop.run_in_executor(None, _stop_and_close, client)
            raise MetadataUnavailableError(f"cannot connect to ZooKeeper at {hosts}: {type(exc).__name__}") from exc
        return cls(client, hosts, chroot, loop, session_timeout_ms)

    # --- plumbing ------------------------------------------------------------------------
    def zk_path(self, path: str) -> str:
        if not self.chroot:
            return path
        return self.chroot if path == ROOT else self.chroot + path

    def _unchroot(self, zk_path: str) -> str:
        if not self.chroot:
            return zk_path
        return zk_path[len(self.chroot) :] or ROOT

    def call_in_loop(self, fn: Callable[[], None]) -> None:
        if not self._loop.is_closed():
            self._loop.call_soon_threadsafe(fn)

    def spawn(self, coro: Any) -> None:
        task = self._loop.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def call(self, method: Callable[..., Any], *args: Any, path: str, **kwargs: Any) -> Any:
        """Run a kazoo ``*_async`` method and await its result on the loop, errors translated."""
        self.session.check_alive()
        future: asyncio.Future[Any] = self._loop.create_future()

        def on_loop(result: Any) -> None:
            if future.done():
                return
            try:
                future.set_result(result.get_nowait())
            except BaseException as exc:
                future.set_exception(_translate(exc, path))

        try:
            async_result = method(*args, **kwargs)
        except kazoo_errors.KazooException as exc:
            raise _translate(exc, path) from exc
        async_result.rawlink(lambda result: self.call_in_loop(lambda: on_loop(result)))
        try:
            return await asyncio.wait_for(future, METADATA_OPERATION_TIMEOUT_MS_MAX / 1000)
        except TimeoutError:
            raise MetadataUnavailableError(f"ZooKeeper did not answer within {METADATA_OPERATION_TIMEOUT_MS_MAX} ms ({path})") from None

    def _on_kazoo_state(self, state: str) -> None:  # kazoo's thread
        self.call_in_loop(lambda: self._apply_state(state))

    def _apply_state(self, state: str) -> None:
        if self._closing or not self.session.alive:
            return
        if state == KazooState.SUSPENDED:
            self.session.transition(SessionState.SUSPENDED)
        elif state == KazooState.CONNECTED:
            if self.client.client_id is not None and int(self.client.client_id[0]) != self.session.session_id:
                self._expired()  # a new session behind our back: the old one expired
            else:
                self.session.transition(SessionState.CONNECTED)
        elif state == KazooState.LOST:
            self._expired()

    def _expired(self) -> None:
        _log.warning("ZooKeeper session %#x expired", self.session.session_id)
        for watch in list(self._watches):
            watch.cancel()
        self.session.transition(SessionState.EXPIRED)
        self.spawn(self._stop_client())

    async def _stop_client(self) -> None:
        # One stop only: kazoo's close() fails if a second stop() returned while the first runs.
        if self._stopping is None:
            self._stopping = self._loop.run_in_executor(None, _stop_and_close, self.client)
        await self._stopping

    # --- MetadataStore ---------------------------------------------------------------------
    async def get(self, path: str) -> GetResult | None:
        path = validate_path(path)
        try:
            value, stat = await self.call(self.client.get_async, self.zk_path(path), path=path)
        except NoNodeError:
            return None
        return GetResult(bytes(value), stat.version)

    async def put(self, path: str, value: bytes, expected_version: int) -> int:
        path = validate_node_path(path)
        value = validate_value(value)
        expected_version = validate_expected_version(expected_version)
        if expected_version == -1:
            await self.call(self.client.create_async, self.zk_path(path), value, makepath=True, path=path)
            return 0
        stat = await self.call(self.client.set_async, self.zk_path(path), value, version=expected_version, path=path)
        return int(stat.version)

    async def create(self, path: str, value: bytes, *, ephemeral: bool = False, sequential: bool = False) -> str:
        path = validate_node_path(path)
        value = validate_value(value)
        created = await self.call(
            self.client.create_async,
            self.zk_path(path),
            value,
            ephemeral=ephemeral,
            sequence=sequential,
            makepath=True,
            path=path,
        )
        return self._unchroot(created)

    async def delete(self, path: str, expected_version: int | None = None) -> None:
        path = validate_node_path(path)
        version = -1 if expected_version is None else validate_expected_version(expected_version)
        if version == -1 and expected_version is not None:
            raise InvalidArgumentError("delete: expected_version must be >= 0 or None")
        await self.call(self.client.delete_async, self.zk_path(path), version=version, path=path)

    async def children(self, path: str) -> list[str]:
        path = validate_path(path)
        try:
            names = await self.call(self.client.get_children_async, self.zk_path(path), path=path)
        except NoNodeError:
            return []
        return sorted(names)

    async def exists(self, path: str) -> bool:
        path = validate_path(path)
        return await self.call(self.client.exists_async, self.zk_path(path), path=path) is not None

    async def watch(self, path: str, callback: WatchCallback) -> Watch:
        path = validate_path(path)
        self.session.check_alive()
        if len(self._watches) >= METADATA_WATCHES_PER_SESSION_MAX:
            raise LimitExceededError("METADATA_WATCHES_PER_SESSION_MAX", len(self._watches) + 1, METADATA_WATCHES_PER_SESSION_MAX)
        watch = _ZkWatch(self, path, callback)
        self._watches.add(watch)
        try:
            await watch.arm(report=False)
        except BaseException:
            watch.cancel()
            raise
        return watch

    def forget_watch(self, watch: _ZkWatch) -> None:
        self._watches.discard(watch)

    async def close(self) -> None:
        if self.session.state is SessionState.CLOSED:
            return
        self._closing = True
        for watch in list(self._watches):
            watch.cancel()
        await self._stop_client()
        for task in list(self._tasks):
            task.cancel()
        self.session.transition(SessionState.CLOSED)

    async def expire_for_test(self) -> None:
        """Expire this session from outside, as a network partition would: a second client joins
        the session with its id and password and closes it (the standard ZooKeeper test trick)."""
        loop = self._loop
        other = KazooClient(hosts=self.hosts, client_id=self.client.client_id, timeout=self.session_timeout_ms / 1000)
        await loop.run_in_executor(None, other.start, METADATA_CONNECT_TIMEOUT_MS_MAX / 1000)
        await loop.run_in_executor(None, _stop_and_close, other)


def _stop_and_close(client: KazooClient) -> None:
    try:
        client.stop()
    finally:
        client.close()
