"""The public surface of ``magnetar.sim`` that other layers' tests and scenarios build on."""

from __future__ import annotations

import contextvars

import magnetar.sim as sim
from magnetar.base.rng import SeededRng
from magnetar.sim.conformance import as_capabilities


def test_public_names_are_pinned() -> None:
    assert sorted(sim.__all__) == sorted([
        "EPOCH_BASE_MS", "ConnState", "NodeContext", "NodeMain", "NodeState", "Rng", "SimClock",
        "SimConfig", "SimConnection", "SimCrashError", "SimDeadlockError", "SimDisk", "SimDiskConfig", "SimFile",
        "SimKeyValueStore", "SimListener", "SimLivelockError", "SimLoop", "SimNetwork", "SimNetworkConfig",
        "SimNodeNetwork", "SimWorld", "Trace", "check_alive", "run",
    ])
    for name in sim.__all__:
        assert hasattr(sim, name), name


def test_simulated_objects_serve_as_capabilities() -> None:
    world = sim.SimWorld(1)
    disk = sim.SimDisk()
    network = world.network.view("n")
    connection = sim.SimConnection(world.network, "n", "n:1", "m:2")
    listener = sim.SimListener(world.network, "n", 1, _handler, contextvars.copy_context())
    got = as_capabilities(disk, disk.open("f"), sim.SimKeyValueStore(), network, connection, listener,
                          sim.SimClock(), SeededRng(1))
    assert len(got) == 8
    world.loop.close()


async def _handler(connection: object) -> None:
    return None
