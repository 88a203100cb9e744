"""The in-process metadata tree shared by the memory and the embedded store.

Both stores are this one implementation, so they behave identically by construction; the
embedded store only adds a ``persist`` hook that writes every change durably before it is
applied and acknowledged. A mutation is planned first (a list of node after-images, nothing
changed yet), then persisted, then applied and its watch events queued, all without yielding to
the event loop in between, so concurrent callers see mutations as atomic and in one order.

Invariants: every node but the root has its parent in the tree; a parent's ``cversion`` counts
its child creations and deletions (it numbers sequential children, as ZooKeeper's does);
ephemeral nodes have no children and belong to a live session.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace

from magnetar.base.clock import Clock
from magnetar.base.errors import BadVersion, LimitExceeded
from magnetar.base.invariant import invariant
from magnetar.base.limits import METADATA_WATCHES_PER_SESSION_MAX
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
from magnetar.metadata.errors import NoChildrenForEphemerals, NodeExists, NoNode, NotEmpty
from magnetar.metadata.paths import (
    ROOT,
    ancestors,
    parent_of,
    validate_expected_version,
    validate_node_path,
    validate_path,
    validate_value,
)


@dataclass(frozen=True, slots=True)
class Node:
    value: bytes
    version: int
    cversion: int
    ctime_ms: int
    mtime_ms: int
    ephemeral_owner: int  # 0: persistent


Plan = list[tuple[str, Node | None]]
PersistHook = Callable[[Plan], Awaitable[None]]


class LocalServer:
    """The tree and its sessions; clients (``LocalClient``) share one server."""

    def __init__(self, clock: Clock, *, persist: PersistHook | None = None, first_session_id: int = 1) -> None:
        self._clock = clock
        self._persist = persist
        self._nodes: dict[str, Node] = {ROOT: Node(b"", 0, 0, 0, 0, 0)}
        self._kids: dict[str, set[str]] = {ROOT: set()}
        self._ephemerals: dict[int, set[str]] = {}
        self._clients: dict[int, LocalClient] = {}
        self._watches: dict[str, list[_LocalWatch]] = {}
        self._next_session_id = first_session_id
        self._expiry_tasks: dict[int, asyncio.Task[None]] = {}
        # Serialises mutations whose persist hook yields, so plans never interleave.
        self._write_lock = asyncio.Lock()

    # --- loading (embedded store) ---------------------------------------------------------
    def load_node(self, path: str, node: Node) -> None:
        """Insert a node read back from storage; parents must be loaded first."""
        invariant(parent_of(path) in self._nodes, f"loaded {path} before its parent")
        self._nodes[path] = node
        self._kids[path] = set()
        self._kids[parent_of(path)].add(path.rsplit("/", 1)[1])

    def load_root(self, node: Node) -> None:
        self._nodes[ROOT] = node

    def stale_ephemerals(self) -> list[str]:
        """Ephemeral nodes of sessions this server does not know (a previous process's)."""
        return [p for p, n in self._nodes.items() if n.ephemeral_owner and n.ephemeral_owner not in self._clients]

    async def remove_nodes(self, paths: list[str]) -> None:
        async with self._write_lock:
            plan: Plan = []
            overlay: dict[str, Node | None] = {}
            # A path may have been deleted by another client since it was listed.
            for path in sorted((p for p in paths if p in self._nodes), key=lambda p: -p.count("/")):
                self._plan_delete(plan, overlay, path, None)
            await self._commit(plan)

    # --- sessions ------------------------------------------------------------------------
    def allocate_session_id(self) -> int:
        session_id = self._next_session_id
        self._next_session_id += 1
        return session_id

    @property
    def next_session_id(self) -> int:
        return self._next_session_id

    def clients(self) -> list[LocalClient]:
        return list(self._clients.values())

    def register(self, client: LocalClient) -> None:
        self._clients[client.session.session_id] = client
        self._ephemerals[client.session.session_id] = set()

    async def end_session(self, session_id: int, state: SessionState) -> None:
        """Close or expire a session: remove its ephemeral nodes, then tell its listeners."""
        client = self._clients.get(session_id)
        if client is None or not client.session.alive:
            return
        task = self._expiry_tasks.pop(session_id, None)
        if task is not None and task is not asyncio.current_task():
            task.cancel()
        # The session stops serving first, so its own watches do not see its cleanup.
        client.detach_watches()
        owned = sorted(self._ephemerals.pop(session_id, set()))
        if owned:
            await self.remove_nodes(owned)
        del self._clients[session_id]
        client.session.transition(state)

    async def expire_session(self, session_id: int) -> None:
        """Expire a session now (tests, the simulator): as if its timeout passed."""
        await self.end_session(session_id, SessionState.EXPIRED)

    def suspend_session(self, session_id: int) -> None:
        """The client lost its connection: it expires after its timeout on the injected clock
        unless ``resume_session`` comes first."""
        client = self._clients.get(session_id)
        if client is None or client.session.state is not SessionState.CONNECTED:
            return
        client.session.transition(SessionState.SUSPENDED)
        timeout_s = client.session_timeout_ms / 1000

        async def expire_later() -> None:
            await self._clock.sleep(timeout_s)
            if client.session.state is SessionState.SUSPENDED:
                await self.end_session(session_id, SessionState.EXPIRED)

        self._expiry_tasks[session_id] = asyncio.get_running_loop().create_task(expire_later())

    def resume_session(self, session_id: int) -> None:
        client = self._clients.get(session_id)
        if client is None or client.session.state is not SessionState.SUSPENDED:
            return
        task = self._expiry_tasks.pop(session_id, None)
        if task is not None:
            task.cancel()
        client.session.transition(SessionState.CONNECTED)

    # --- reads ---------------------------------------------------------------------------
    def get(self, path: str) -> GetResult | None:
        node = self._nodes.get(path)
        return None if node is None else GetResult(node.value, node.version)

    def children(self, path: str) -> list[str]:
        return sorted(self._kids.get(path, ()))

    def exists(self, path: str) -> bool:
        return path in self._nodes

    def node(self, path: str) -> Node | None:
        return self._nodes.get(path)

    def all_nodes(self) -> dict[str, Node]:
        return dict(self._nodes)

    # --- writes --------------------------------------------------------------------------
    async def create(self, path: str, value: bytes, owner: int, sequential: bool) -> str:
        async with self._write_lock:
            plan: Plan = []
            overlay: dict[str, Node | None] = {}
            now = self._clock.now_ms()
            for ancestor in ancestors(path):
                if self._current(overlay, ancestor) is None:
                    self._plan_child(plan, overlay, ancestor, Node(b"", 0, 0, now, now, 0))
            parent = self._current(overlay, parent_of(path))
            invariant(parent is not None, "parent planned")
            if sequential:
                assert parent is not None
                path = f"{path}{parent.cversion:010d}"
            if self._current(overlay, path) is not None:
                raise NodeExists(f"metadata node exists: {path}")
            self._plan_child(plan, overlay, path, Node(value, 0, 0, now, now, owner))
            await self._commit(plan)
            if owner:
                self._ephemerals[owner].add(path)
            return path

    async def set(self, path: str, value: bytes, expected_version: int) -> int:
        async with self._write_lock:
            node = self._nodes.get(path)
            if node is None:
                raise NoNode(f"metadata node does not exist: {path}")
            if node.version != expected_version:
                raise BadVersion(f"{path}: version is {node.version}, expected {expected_version}")
            new = replace(node, value=value, version=node.version + 1, mtime_ms=self._clock.now_ms())
            await self._commit([(path, new)])
            return new.version

    async def delete(self, path: str, expected_version: int | None) -> None:
        async with self._write_lock:
            plan: Plan = []
            self._plan_delete(plan, {}, path, expected_version)
            owner = self._nodes[path].ephemeral_owner
            await self._commit(plan)
            if owner and owner in self._ephemerals:
                self._ephemerals[owner].discard(path)

    # --- planning ------------------------------------------------------------------------
    def _current(self, overlay: dict[str, Node | None], path: str) -> Node | None:
        return overlay[path] if path in overlay else self._nodes.get(path)

    def _plan_child(self, plan: Plan, overlay: dict[str, Node | None], path: str, node: Node) -> None:
        parent_path = parent_of(path)
        parent = self._current(overlay, parent_path)
        invariant(parent is not None, f"parent of {path} exists")
        assert parent is not None
        if parent.ephemeral_owner:
            raise NoChildrenForEphemerals(f"{parent_path} is ephemeral and cannot have children")
        bumped = replace(parent, cversion=parent.cversion + 1)
        overlay[parent_path] = bumped
        overlay[path] = node
        plan.append((parent_path, bumped))
        plan.append((path, node))

    def _plan_delete(
        self, plan: Plan, overlay: dict[str, Node | None], path: str, expected_version: int | None
    ) -> None:
        node = self._current(overlay, path)
        if node is None:
            raise NoNode(f"metadata node does not exist: {path}")
        if expected_version is not None and node.version != expected_version:
            raise BadVersion(f"{path}: version is {node.version}, expected {expected_version}")
        if self._kids.get(path):
            raise NotEmpty(f"metadata node has children: {path}")
        parent_path = parent_of(path)
        parent = self._current(overlay, parent_path)
        assert parent is not None
        bumped = replace(parent, cversion=parent.cversion + 1)
        overlay[path] = None
        overlay[parent_path] = bumped
        plan.append((path, None))
        plan.append((parent_path, bumped))

    async def _commit(self, plan: Plan) -> None:
        if self._persist is not None:
            await self._persist(plan)
        events: list[WatchEvent] = []
        for path, node in plan:
            old = self._nodes.get(path)
            if node is None:
                del self._nodes[path]
                del self._kids[path]
                self._kids[parent_of(path)].discard(path.rsplit("/", 1)[1])
                events += [WatchEvent(EventKind.DELETED, path), WatchEvent(EventKind.CHILDREN_CHANGED, parent_of(path))]
                continue
            self._nodes[path] = node
            if old is None:
                self._kids[path] = set()
                if path != ROOT:
                    self._kids[parent_of(path)].add(path.rsplit("/", 1)[1])
                events += [WatchEvent(EventKind.CREATED, path), WatchEvent(EventKind.CHILDREN_CHANGED, parent_of(path))]
            elif old.version != node.version:
                events.append(WatchEvent(EventKind.DATA_CHANGED, path))
        for event in events:
            for watch in self._watches.get(event.path, ()):
                watch.deliver(event)

    # --- watches -------------------------------------------------------------------------
    def add_watch(self, watch: _LocalWatch) -> None:
        self._watches.setdefault(watch.path, []).append(watch)

    def remove_watch(self, watch: _LocalWatch) -> None:
        watches = self._watches.get(watch.path)
        if watches and watch in watches:
            watches.remove(watch)
            if not watches:
                del self._watches[watch.path]


class _LocalWatch(Watch):
    def __init__(self, client: LocalClient, path: str, callback: WatchCallback) -> None:
        self.path = path
        self._client = client
        self._callback = callback
        self._loop = asyncio.get_running_loop()
        self.active = True

    def deliver(self, event: WatchEvent) -> None:
        if self.active:
            # call_soon keeps the order events were produced in; the check at run time drops
            # events for a watch cancelled in between.
            self._loop.call_soon(self._run, event)

    def _run(self, event: WatchEvent) -> None:
        if self.active:
            self._callback(event)

    def cancel(self) -> None:
        if self.active:
            self.active = False
            self._client.forget_watch(self)


class LocalClient(MetadataStore):
    """A client (one session) of a ``LocalServer``."""

    def __init__(self, server: LocalServer, session_timeout_ms: int) -> None:
        self.server = server
        self.session_timeout_ms = session_timeout_ms
        self.session = Session(server.allocate_session_id())
        self._watches: set[_LocalWatch] = set()
        server.register(self)

    async def get(self, path: str) -> GetResult | None:
        path = validate_path(path)
        self.session.check_alive()
        return self.server.get(path)

    async def put(self, path: str, value: bytes, expected_version: int) -> int:
        path = validate_node_path(path)
        value = validate_value(value)
        expected_version = validate_expected_version(expected_version)
        self.session.check_alive()
        if expected_version == -1:
            await self.server.create(path, value, 0, False)
            return 0
        return await self.server.set(path, value, expected_version)

    async def create(self, path: str, value: bytes, *, ephemeral: bool = False, sequential: bool = False) -> str:
        path = validate_node_path(path)
        value = validate_value(value)
        self.session.check_alive()
        owner = self.session.session_id if ephemeral else 0
        return await self.server.create(path, value, owner, sequential)

    async def delete(self, path: str, expected_version: int | None = None) -> None:
        path = validate_node_path(path)
        if expected_version is not None:
            validate_expected_version(expected_version)
        self.session.check_alive()
        await self.server.delete(path, expected_version)

    async def children(self, path: str) -> list[str]:
        path = validate_path(path)
        self.session.check_alive()
        return self.server.children(path)

    async def exists(self, path: str) -> bool:
        path = validate_path(path)
        self.session.check_alive()
        return self.server.exists(path)

    async def watch(self, path: str, callback: WatchCallback) -> Watch:
        path = validate_path(path)
        self.session.check_alive()
        if len(self._watches) >= METADATA_WATCHES_PER_SESSION_MAX:
            raise LimitExceeded("METADATA_WATCHES_PER_SESSION_MAX", len(self._watches) + 1, METADATA_WATCHES_PER_SESSION_MAX)
        watch = _LocalWatch(self, path, callback)
        self._watches.add(watch)
        self.server.add_watch(watch)
        return watch

    def forget_watch(self, watch: _LocalWatch) -> None:
        self._watches.discard(watch)
        self.server.remove_watch(watch)

    def detach_watches(self) -> None:
        for watch in list(self._watches):
            watch.cancel()

    async def expire(self) -> None:
        """Expire this client's session now (tests and the simulator)."""
        await self.server.expire_session(self.session.session_id)

    async def close(self) -> None:
        if self.session.state is SessionState.CLOSED:
            return
        if self.session.alive:
            await self.server.end_session(self.session.session_id, SessionState.CLOSED)
        self.detach_watches()
        self.session.transition(SessionState.CLOSED)
