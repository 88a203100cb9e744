"""``SimWorld``: a whole cluster in one seeded process, on one virtual-time loop.

The world owns the loop, the network, the trace, and per node a disk, key/value stores and a
clock that outlive the node's crashes. ``add_node(name, main)`` runs ``main(NodeContext)`` as
that node; every task the node creates carries the node's name in
``magnetar.faults.current_node`` and its incarnation (see ``incarnation``).

``crash(name)`` is ``kill -9`` plus a power cut: the node's tasks are cancelled (oldest first),
its incarnation dies (its leftover tasks meet ``SimCrashError`` at their next I/O), its connections
break, its listeners close, and its disk and stores lose what was not made durable (possibly
leaving a torn tail). ``restart(name)`` runs ``main`` again on what survived. A fault point armed
with ``crash`` for a node crashes that node, not the test process (the world installs the crash
hook while it runs); one armed with ``hang`` blocks the task until ``release``.

Invariant: everything a run does is decided by the seed and the program: one seed, one trace.
"""

from __future__ import annotations

import asyncio
import contextvars
import enum
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any, NoReturn, TypeVar

from magnetar import faults
from magnetar.base.errors import AlreadyExistsError, InvalidArgumentError, LimitExceededError, NotFoundError
from magnetar.base.invariant import invariant
from magnetar.base.limits import SIM_NODES_MAX, SIM_STEPS_MAX
from magnetar.base.rng import Rng, SeededRng
from magnetar.faults import current_node
from magnetar.sim.clock import SimClock
from magnetar.sim.disk import SimDisk, SimDiskConfig
from magnetar.sim.errors import SimCrashError
from magnetar.sim.incarnation import Incarnation, current_incarnation
from magnetar.sim.kv import SimKeyValueStore
from magnetar.sim.loop import SimLoop
from magnetar.sim.network import SimNetwork, SimNetworkConfig, SimNodeNetwork
from magnetar.sim.trace import Trace

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class SimConfig:
    disk: SimDiskConfig = field(default_factory=SimDiskConfig)
    network: SimNetworkConfig = field(default_factory=SimNetworkConfig)
    steps_max: int = SIM_STEPS_MAX
    #: Reorders every set of the loop's tasks and futures (``SimLoop``); 0 in every replay. A run
    #: under another salt must give the same trace: a check that nothing depends on set order.
    order_salt: int = 0


class NodeState(enum.Enum):
    RUNNING = "running"
    CRASHED = "crashed"
    STOPPED = "stopped"


_TRANSITIONS: dict[NodeState, frozenset[NodeState]] = {
    NodeState.RUNNING: frozenset({NodeState.CRASHED, NodeState.STOPPED}),
    NodeState.CRASHED: frozenset({NodeState.RUNNING}),
    NodeState.STOPPED: frozenset({NodeState.RUNNING, NodeState.CRASHED}),
}


class NodeContext:
    """What a node's ``main`` is given: its capabilities for this incarnation."""

    def __init__(self, world: SimWorld, node: _Node) -> None:
        self._world = world
        self._node = node
        self.name = node.name
        self.incarnation = node.incarnation.number
        self.clock: SimClock = node.clock
        self.disk: SimDisk = node.disk
        self.network: SimNodeNetwork = world.network.view(node.name)
        self.rng: Rng = world.rng.fork(f"node/{node.name}/{self.incarnation}")

    @property
    def host(self) -> str:
        """The host name other nodes connect to."""
        return self.name

    def kv(self, name: str = "default") -> SimKeyValueStore:
        """The node's key/value store ``name`` (created empty on first use, durable across crashes)."""
        return self._node.kv(name).reopen()

    def trace(self, kind: str, detail: str = "") -> None:
        self._world.record(self.name, kind, detail)


NodeMain = Callable[[NodeContext], Awaitable[None]]


class _Node:
    def __init__(self, world: SimWorld, name: str, main: NodeMain) -> None:
        self.name = name
        self.main = main
        self.state = NodeState.STOPPED
        self.incarnation = Incarnation(name, 0, alive=False)
        self.disk = SimDisk(world.config.disk, world.rng.fork(f"disk/{name}"))
        self.clock = SimClock()
        self.stores: dict[str, SimKeyValueStore] = {}
        self.main_task: asyncio.Task[None] | None = None

    def kv(self, name: str) -> SimKeyValueStore:
        store = self.stores.get(name)
        if store is None:
            store = self.stores[name] = SimKeyValueStore()
        return store

    def move(self, new: NodeState) -> None:
        invariant(new in _TRANSITIONS[self.state], f"node {self.name}: {self.state.value} -> {new.value}")
        self.state = new


class SimWorld:
    """One simulated run. Build it, add nodes, ``run`` a controller coroutine once."""

    def __init__(self, seed: int, config: SimConfig | None = None) -> None:
        self.seed = seed
        self.config = config or SimConfig()
        self.loop = SimLoop(steps_max=self.config.steps_max, order_salt=self.config.order_salt)
        self.rng: SeededRng = SeededRng(seed)
        self.trace = Trace(lambda: self.loop.now_ns)
        self.network = SimNetwork(self.loop, self.rng.fork("network"), self.config.network, self.record)
        self._nodes: dict[str, _Node] = {}
        self._fault_rng = self.rng.fork("crash")
        self.failures: list[str] = []
        self._ran = False
        self.record("world", "seed", str(seed))

    # --- nodes --------------------------------------------------------------------------------
    def add_node(self, name: str, main: NodeMain, *, start: bool = True) -> None:
        if name in self._nodes:
            raise AlreadyExistsError(f"node {name!r} exists")
        if not name or any(ch in name for ch in " :/"):
            raise InvalidArgumentError(f"node name {name!r} must be non-empty without spaces, ':' or '/'")
        if len(self._nodes) >= SIM_NODES_MAX:
            raise LimitExceededError("SIM_NODES_MAX", len(self._nodes) + 1, SIM_NODES_MAX)
        self._nodes[name] = _Node(self, name, main)
        if start:
            self.start(name)

    def start(self, name: str) -> None:
        """Run the node's ``main`` as a new incarnation on its surviving durable state."""
        node = self._node(name)
        node.move(NodeState.RUNNING)
        node.incarnation = Incarnation(name, node.incarnation.number + 1)
        self.record(name, "start", f"incarnation {node.incarnation.number}")
        context = contextvars.copy_context()
        context.run(current_node.set, name)
        context.run(current_incarnation.set, node.incarnation)
        node.main_task = self.loop.create_task(self._run_main(node), context=context)

    def restart(self, name: str) -> None:
        self.start(name)

    def crash(self, name: str, reason: str = "") -> None:
        """Kill the node and cut its power (see the module docstring)."""
        node = self._node(name)
        if node.state is NodeState.CRASHED:
            return
        node.move(NodeState.CRASHED)
        self.record(name, "crash", reason)
        self._kill(node)
        for line in node.disk.crash(self._fault_rng):
            self.record(name, "disk-lost", line)
        for store_name, store in node.stores.items():
            self.record(name, "kv-crash", f"{store_name}: {store.crash(self._fault_rng)}")

    def stop(self, name: str) -> None:
        """Stop the node's tasks without a power cut (buffered writes stay, unsynced)."""
        node = self._node(name)
        if node.state is not NodeState.RUNNING:
            return
        node.move(NodeState.STOPPED)
        self.record(name, "stop")
        self._kill(node)

    def state(self, name: str) -> NodeState:
        return self._node(name).state

    def disk(self, name: str) -> SimDisk:
        """The node's disk, for checkers (read it after a final crash to see what is durable)."""
        return self._node(name).disk

    def kv(self, name: str, store: str = "default") -> SimKeyValueStore:
        return self._node(name).kv(store)

    def clock(self, name: str) -> SimClock:
        return self._node(name).clock

    def nodes(self) -> list[str]:
        return list(self._nodes)

    # --- time, trace and running --------------------------------------------------------------
    def now_s(self) -> float:
        return self.loop.time()

    async def sleep(self, duration_s: float) -> None:
        """Let virtual time pass (for controllers, outside any node)."""
        await asyncio.sleep(duration_s)

    def record(self, node: str, kind: str, detail: str = "") -> None:
        self.trace.record(node, kind, detail)

    def trace_text(self) -> str:
        return self.trace.text()

    def release(self, point: str) -> None:
        """Let the tasks hanging at fault point ``point`` continue."""
        self.record("world", "release", point)
        faults.release(point)

    def run(self, controller: Coroutine[Any, Any, T]) -> T:
        """Run ``controller`` (outside any node) to completion, then stop every node and close."""
        invariant(not self._ran, "a SimWorld runs once")
        self._ran = True
        faults.set_crash_hook(self._crash_hook)
        try:
            return self.loop.run_until_complete(controller)
        finally:
            try:
                self.record("world", "end", f"steps {self.loop.steps}")
                self.loop.cancel_all_and_close()
            finally:
                faults.set_crash_hook(None)

    # --- internals ----------------------------------------------------------------------------
    def _node(self, name: str) -> _Node:
        node = self._nodes.get(name)
        if node is None:
            raise NotFoundError(f"no node {name!r}")
        return node

    async def _run_main(self, node: _Node) -> None:
        context = NodeContext(self, node)
        try:
            await node.main(context)
        except SimCrashError:
            return
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self.failures.append(f"{node.name}: {type(exc).__name__}: {exc}")
            self.record(node.name, "main-error", f"{type(exc).__name__}: {exc}")
            return
        self.record(node.name, "main-returned")

    def _kill(self, node: _Node) -> None:
        node.incarnation.alive = False
        current = asyncio.current_task(self.loop) if self.loop.is_running() else None
        for task in self.loop.tasks_of(node.name):
            if task is not current:
                task.cancel()
        self.network.crash_node(node.name)

    def _crash_hook(self, point: str) -> NoReturn:
        name = current_node.get()
        invariant(name is not None and name in self._nodes, f"fault point {point} fired outside a node")
        assert name is not None
        self.crash(name, f"fault point {point}")
        raise SimCrashError(f"{name} crashed at fault point {point}")
