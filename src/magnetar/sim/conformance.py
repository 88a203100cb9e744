"""Static proof that the simulated twins implement the ``magnetar.base`` capability protocols.

mypy (strict on ``magnetar.sim``) checks these assignments; a signature drifting away from
``base.io``/``base.clock``/``base.rng`` fails the tooling tests, not a scenario at run time.
"""

from __future__ import annotations

from magnetar.base.clock import Clock
from magnetar.base.io import Connection, Disk, DiskFile, KeyValueStore, Listener, Network
from magnetar.base.rng import Rng, SeededRng
from magnetar.sim.clock import SimClock
from magnetar.sim.disk import SimDisk, SimFile
from magnetar.sim.kv import SimKeyValueStore
from magnetar.sim.network import SimConnection, SimListener, SimNodeNetwork


def as_capabilities(
    disk: SimDisk, file: SimFile, store: SimKeyValueStore, network: SimNodeNetwork,
    connection: SimConnection, listener: SimListener, clock: SimClock, rng: SeededRng,
) -> tuple[Disk, DiskFile, KeyValueStore, Network, Connection, Listener, Clock, Rng]:
    """The simulated objects typed as the interfaces cores receive."""
    return disk, file, store, network, connection, listener, clock, rng
