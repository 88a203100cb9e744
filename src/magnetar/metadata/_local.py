"""The in-process metadata tree shared by the memory and the embedded store.

Both stores are this one implementation, so they behave identically by construction; the
embedded store only adds a ``persist`` hook that writes every change durably before it is
applied and acknowledged. A mutation is planned (a list of node after-images) against the
*latest* tree, then staged and handed to ``persist`` in the same step, without yielding, so
mutations are totally ordered by their staging. The persist hook must take the plan's place in
the durable write order when it is called (the embedded store queues it for a group commit), and
its awaitable completes once the plan is durable. Mutations are pipelined: a second one is
planned on top of a first that is still being written, so N concurrent writers share syncs.

Two views of the tree, so that readers never see a change that could still be lost:

* the visible tree (``_nodes``/``_kids``): every plan that is durable, applied in staging order.
  Reads (``get``, ``children``, ``exists``) and watch events come only from it.
* the latest tree: the visible one plus the staged, not yet durable plans (``_staged_nodes``,
  ``_staged_kids``). Only planning reads it, so versions, sequence numbers and CAS checks chain.

When a plan's persist completes, it and every plan staged before it are durable (the store's
write order), so all of them are applied, in order, before its caller resumes. A mutation whose
check fails against the latest tree (``BadVersionError``, ``NodeExistsError``, ``NodeNotEmptyError`` ...) while
plans are in flight first waits for them to be durable and visible, then checks again: a caller
is never refused because of a change that readers cannot see yet (that would not be
linearizable). If a persist fails, the outcome of that plan and of those staged after it is
unknown: the server stops accepting mutations (``MetadataUnavailableError``; reopen the store),
reads keep serving the visible, durable tree. Without a persist hook (the memory store) a plan
is applied as it is staged.

Invariants: every node but the root has its parent in the tree; a parent's ``cversion`` counts
its child creations and deletions (it numbers sequential children, as ZooKeeper's does);
ephemeral nodes have no children and belong to a live session.
"""

from __future__ import annotations

import asyncio
import bisect
import collections
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from typing import TypeVar

from magnetar.base.clock import Clock
from magnetar.base.errors import BadVersionError, LimitExceededError
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
from magnetar.metadata.errors import (
    MetadataUnavailableError,
    NoChildrenForEphemeralsError,
    NodeExistsError,
    NodeNotEmptyError,
    NoNodeError,
)
from magnetar.metadata.paths import (
    ROOT,
    ancestors,
    parent_of,
    validate_expected_version,
    validate_node_path,
    validate_path,
    validate_value,
)

#: A parent with at least this many children keeps them in order once listed (``children``):
#: below it a sort per listing is cheaper than a second list kept per parent.
_SORTED_CHILDREN_COUNT_MIN = 1024


@dataclass(frozen=True, slots=True)
class Node:
    value: bytes
    version: int
    cversion: int
    ctime_ms: int
    mtime_ms: int
    ephemeral_owner: int  # 0: persistent


Plan = list[tuple[str, Node | None]]
#: Called when a plan is staged: queues it durably in staging order; the awaitable completes
#: once it (and every plan queued before it) is durable.
PersistHook = Callable[[Plan], Awaitable[None]]
_T = TypeVar("_T")
_STATE_ERRORS = (BadVersionError, NodeNotEmptyError, NoChildrenForEphemeralsError)


@dataclass(slots=True)
class _InFlight:
    plan: Plan
    persisted: asyncio.Future[None]
    applied: bool = False


class LocalServer:
    """The tree and its sessions; clients (``LocalClient``) share one server."""

    def __init__(self, clock: Clock, *, persist: PersistHook | None = None, first_session_id: int = 1) -> None:
        self._clock = clock
        self._persist = persist
        self._nodes: dict[str, Node] = {ROOT: Node(b"", 0, 0, 0, 0, 0)}
        self._kids: dict[str, set[str]] = {ROOT: set()}
        #: The children of large parents in order, kept once listed (``children``): the ledger
        #: list of a bookie's GC round is not sorted again each round (issue 22).
        self._sorted_kids: dict[str, list[str]] = {}
        self._ephemerals: dict[int, set[str]] = {}
        self._clients: dict[int, LocalClient] = {}
        self._watches: dict[str, list[_LocalWatch]] = {}
        self._next_session_id = first_session_id
        self._expiry_tasks: dict[int, asyncio.Task[None]] = {}
        # The latest tree over the visible one: staged, not yet durable after-images, and the
        # child names they add (True) or remove (False) per parent.
        self._staged_nodes: dict[str, Node | None] = {}
        self._staged_kids: dict[str, dict[str, bool]] = {}
        self._in_flight: collections.deque[_InFlight] = collections.deque()
        self._failure: BaseException | None = None

    # --- loading (embedded store) ---------------------------------------------------------
    def load_node(self, path: str, node: Node) -> None:
        """Insert a node read back from storage; parents must be loaded first."""
        invariant(parent_of(path) in self._nodes, f"loaded {path} before its parent")
        self._nodes[path] = node
        self._kids[path] = set()
        self._add_kid(parent_of(path), path.rsplit("/", 1)[1])

    def load_root(self, node: Node) -> None:
        self._nodes[ROOT] = node

    def stale_ephemerals(self) -> list[str]:
        """Ephemeral nodes of sessions this server does not know (a previous process's)."""
        return [p for p, n in self._nodes.items() if n.ephemeral_owner and n.ephemeral_owner not in self._clients]

    async def remove_nodes(self, paths: list[str]) -> None:
        def planner() -> tuple[Plan, None]:
            plan: Plan = []
            overlay: dict[str, Node | None] = {}
            # A path may have been deleted by another client since it was listed.
            present = (p for p in paths if self._latest(p) is not None)
            for path in sorted(present, key=lambda p: -p.count("/")):
                self._plan_delete(plan, overlay, path, None)
            return plan, None

        await self._mutate(planner)

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
        if owned and self._failure is None:  # a failed store drops them at its next open
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
        """The names of ``path``'s children, sorted (a large parent's order is kept: a copy)."""
        ordered = self._sorted_kids.get(path)
        if ordered is not None:
            return list(ordered)
        kids = self._kids.get(path, ())
        names = sorted(kids)
        if len(names) >= _SORTED_CHILDREN_COUNT_MIN:
            self._sorted_kids[path] = list(names)  # kept in order by ``_add_kid``/``_drop_kid`` from now on
        return names

    def _add_kid(self, parent: str, name: str) -> None:
        kids = self._kids[parent]
        if name in kids:
            return
        kids.add(name)
        ordered = self._sorted_kids.get(parent)
        if ordered is not None:
            bisect.insort(ordered, name)  # new ledgers' ids grow: at the end, mostly

    def _drop_kid(self, parent: str, name: str) -> None:
        kids = self._kids[parent]
        if name not in kids:
            return
        kids.discard(name)
        ordered = self._sorted_kids.get(parent)
        if ordered is not None:
            del ordered[bisect.bisect_left(ordered, name)]

    def exists(self, path: str) -> bool:
        return path in self._nodes

    def node(self, path: str) -> Node | None:
        return self._nodes.get(path)

    def all_nodes(self) -> dict[str, Node]:
        return dict(self._nodes)

    # --- writes --------------------------------------------------------------------------
    async def create(self, path: str, value: bytes, owner: int, sequential: bool) -> str:
        def planner() -> tuple[Plan, str]:
            plan: Plan = []
            overlay: dict[str, Node | None] = {}
            now = self._clock.now_ms()
            for ancestor in ancestors(path):
                if self._current(overlay, ancestor) is None:
                    self._plan_child(plan, overlay, ancestor, Node(b"", 0, 0, now, now, 0))
            parent = self._current(overlay, parent_of(path))
            invariant(parent is not None, "parent planned")
            assert parent is not None
            created = f"{path}{parent.cversion:010d}" if sequential else path
            if self._current(overlay, created) is not None:
                raise NodeExistsError(f"metadata node exists: {created}")
            self._plan_child(plan, overlay, created, Node(value, 0, 0, now, now, owner))
            return plan, created

        return await self._mutate(planner)

    async def set(self, path: str, value: bytes, expected_version: int) -> int:
        def planner() -> tuple[Plan, int]:
            node = self._latest(path)
            if node is None:
                raise NoNodeError(f"metadata node does not exist: {path}")
            if node.version != expected_version:
                raise BadVersionError(f"{path}: version is {node.version}, expected {expected_version}")
            new = replace(node, value=value, version=node.version + 1, mtime_ms=self._clock.now_ms())
            return [(path, new)], new.version

        return await self._mutate(planner)

    async def delete(self, path: str, expected_version: int | None) -> None:
        def planner() -> tuple[Plan, None]:
            plan: Plan = []
            self._plan_delete(plan, {}, path, expected_version)
            return plan, None

        await self._mutate(planner)

    async def _mutate(self, planner: Callable[[], tuple[Plan, _T]]) -> _T:
        """Plan against the latest tree and commit; a failed check is final only once no plan
        staged before it is still in flight (see the module docstring)."""
        while True:
            self._check_writable()
            try:
                plan, result = planner()
            except _STATE_ERRORS:
                if not self._in_flight:
                    raise
                await asyncio.wait({self._in_flight[-1].persisted})
                continue
            await self._commit(plan)
            return result

    def _check_writable(self) -> None:
        if self._failure is not None:
            raise MetadataUnavailableError(f"metadata store stopped after a failed durable write: {self._failure!r}")

    # --- planning ------------------------------------------------------------------------
    def _current(self, overlay: dict[str, Node | None], path: str) -> Node | None:
        return overlay[path] if path in overlay else self._latest(path)

    def _latest(self, path: str) -> Node | None:
        """The node in the latest tree (visible plus staged plans)."""
        return self._staged_nodes[path] if path in self._staged_nodes else self._nodes.get(path)

    def _has_children(self, path: str) -> bool:
        """Whether ``path`` has children in the latest tree."""
        visible = self._kids.get(path, set())
        delta = self._staged_kids.get(path)
        if not delta:
            return bool(visible)
        count = len(visible)
        for name, added in delta.items():
            if added and name not in visible:
                count += 1
            elif not added and name in visible:
                count -= 1
        return count > 0

    def _plan_child(self, plan: Plan, overlay: dict[str, Node | None], path: str, node: Node) -> None:
        parent_path = parent_of(path)
        parent = self._current(overlay, parent_path)
        invariant(parent is not None, f"parent of {path} exists")
        assert parent is not None
        if parent.ephemeral_owner:
            raise NoChildrenForEphemeralsError(f"{parent_path} is ephemeral and cannot have children")
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
            raise NoNodeError(f"metadata node does not exist: {path}")
        if expected_version is not None and node.version != expected_version:
            raise BadVersionError(f"{path}: version is {node.version}, expected {expected_version}")
        if self._has_children(path):
            raise NodeNotEmptyError(f"metadata node has children: {path}")
        parent_path = parent_of(path)
        parent = self._current(overlay, parent_path)
        assert parent is not None
        bumped = replace(parent, cversion=parent.cversion + 1)
        overlay[path] = None
        overlay[parent_path] = bumped
        plan.append((path, None))
        plan.append((parent_path, bumped))

    async def _commit(self, plan: Plan) -> None:
        """Stage ``plan`` and hand it to the persist hook now; return once it is applied."""
        self._track_ephemerals(plan)
        if self._persist is None:
            self._apply(plan)
            return
        for path, node in plan:
            parent_path = parent_of(path)
            name = path.rsplit("/", 1)[1]
            if node is None:
                self._staged_kids.setdefault(parent_path, {})[name] = False
            elif self._latest(path) is None and path != ROOT:
                self._staged_kids.setdefault(parent_path, {})[name] = True
            self._staged_nodes[path] = node
        try:
            persisted = asyncio.ensure_future(self._persist(plan))
        except BaseException as exc:
            self._failure = exc
            raise
        entry = _InFlight(plan, persisted)
        self._in_flight.append(entry)
        # Registered before anyone awaits it, so it runs before the caller resumes.
        persisted.add_done_callback(lambda _: self._persisted(entry))
        # A cancelled caller does not cancel the write: its plan is applied when durable.
        await asyncio.shield(persisted)
        invariant(entry.applied, "a persisted plan is applied before its caller resumes")

    def _persisted(self, entry: _InFlight) -> None:
        """Apply every plan staged up to ``entry`` once its persist succeeded; stop on failure."""
        persisted = entry.persisted
        if persisted.cancelled() or persisted.exception() is not None:
            if self._failure is None:
                self._failure = persisted.exception() or asyncio.CancelledError()
            return
        if entry.applied:
            return
        while self._in_flight:
            head = self._in_flight.popleft()
            self._apply(head.plan)
            head.applied = True
            if head is entry:
                break
        if not self._in_flight and self._failure is None:
            self._staged_nodes.clear()
            self._staged_kids.clear()

    def _track_ephemerals(self, plan: Plan) -> None:
        """Keep ``_ephemerals`` (per session) in step with the latest tree."""
        for path, node in plan:
            old = self._latest(path)
            if node is None and old is not None and old.ephemeral_owner:
                self._ephemerals.get(old.ephemeral_owner, set()).discard(path)
            elif node is not None and old is None and node.ephemeral_owner in self._ephemerals:
                self._ephemerals[node.ephemeral_owner].add(path)

    def _apply(self, plan: Plan) -> None:
        """Apply a durable plan to the visible tree and queue its watch events."""
        events: list[WatchEvent] = []
        for path, node in plan:
            old = self._nodes.get(path)
            if node is None:
                del self._nodes[path]
                del self._kids[path]
                self._sorted_kids.pop(path, None)
                self._drop_kid(parent_of(path), path.rsplit("/", 1)[1])
                events += [WatchEvent(EventKind.DELETED, path), WatchEvent(EventKind.CHILDREN_CHANGED, parent_of(path))]
                continue
            self._nodes[path] = node
            if old is None:
                self._kids[path] = set()
                if path != ROOT:
                    self._add_kid(parent_of(path), path.rsplit("/", 1)[1])
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
    __slots__ = ("_callback", "_client", "_loop", "active", "path")  # one per watched node (per topic)

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
            raise LimitExceededError("METADATA_WATCHES_PER_SESSION_MAX", len(self._watches) + 1, METADATA_WATCHES_PER_SESSION_MAX)
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
