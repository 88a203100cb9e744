"""The simulated world: one seeded process runs a whole cluster on virtual time.

Owns: the deterministic virtual-time event loop (``SimLoop``, ``run``), the simulated twins of the
``magnetar.base`` capabilities (``SimClock``, ``SimDisk``/``SimFile``, ``SimKeyValueStore``,
``SimNetwork`` and its per-node ``SimNodeNetwork``/``SimConnection``), the world that runs nodes
and injects crashes, partitions and drops (``SimWorld``), the trace, and the scenarios with their
checkers (``magnetar.sim.scenarios``) behind ``magnetar sim --seed N``.

Invariants: no real I/O, thread or wall clock in a run; every random choice comes from the
world's ``SeededRng``; one seed gives one byte-identical trace. Production code runs unchanged in
here: it only sees the ``Clock``/``Rng``/``Disk``/``KeyValueStore``/``Network`` interfaces.
"""

from magnetar.base.rng import SeededRng as Rng
from magnetar.sim.clock import EPOCH_BASE_MS, SimClock
from magnetar.sim.disk import SimDisk, SimDiskConfig, SimFile
from magnetar.sim.errors import SimCrashError, SimDeadlockError, SimLivelockError
from magnetar.sim.incarnation import check_alive
from magnetar.sim.kv import SimKeyValueStore
from magnetar.sim.loop import SimLoop, run
from magnetar.sim.network import (
    ConnState,
    SimConnection,
    SimListener,
    SimNetwork,
    SimNetworkConfig,
    SimNodeNetwork,
)
from magnetar.sim.trace import Trace
from magnetar.sim.world import NodeContext, NodeMain, NodeState, SimConfig, SimWorld

__all__ = [
    "EPOCH_BASE_MS",
    "ConnState",
    "NodeContext",
    "NodeMain",
    "NodeState",
    "Rng",
    "SimClock",
    "SimConfig",
    "SimConnection",
    "SimCrashError",
    "SimDeadlockError",
    "SimDisk",
    "SimDiskConfig",
    "SimFile",
    "SimKeyValueStore",
    "SimListener",
    "SimLivelockError",
    "SimLoop",
    "SimNetwork",
    "SimNetworkConfig",
    "SimNodeNetwork",
    "SimWorld",
    "Trace",
    "check_alive",
    "run",
]
