"""Our client against the real broker and bookie *nodes* on the simulated world (virtual time).

``real_run(body)`` starts one bookie and one broker exactly as ``magnetar sim --scenario cluster``
does (``magnetar.node`` over ``SimDisk``/``SimNetwork``, in-memory metadata), then runs
``body(client, world)`` as a client node; the fake broker (``fake_broker.py``) stays for what
only a fake can do (golden command sequences, refused receipts, corrupt frames).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from magnetar.client import ClientOptions, PulsarClient
from magnetar.sim import NodeContext, SimWorld
from magnetar.sim.scenarios import cluster
from magnetar.sim.scenarios.cluster_faults import start_servers, until
from magnetar.sim.world import NodeState

R = TypeVar("R")
Body = Callable[[PulsarClient, SimWorld], Awaitable[R]]
OPTIONS = ClientOptions(operation_timeout_ms=5_000, connection_timeout_ms=1_000, keep_alive_interval_ms=1_000)
SMALL = cluster.ClusterOptions(bookies_count=1, brokers_count=1, quorum=(1, 1, 1))


def real_run(body: Body[R], *, seed: int = 1) -> R:
    world = cluster.new_world(seed)
    run = cluster.ClusterRun.new(world, SMALL)
    results: list[Any] = []

    async def client_main(ctx: NodeContext) -> None:
        client = PulsarClient(("broker0", cluster.BROKER_PORT), network=ctx.network, clock=ctx.clock,
                              rng=ctx.rng, options=OPTIONS)
        try:
            results.append(await body(client, world))
        finally:
            await client.close()

    async def controller() -> None:
        assert await start_servers(run), world.failures
        world.add_node("client", client_main)
        await until(run, lambda: bool(results) or world.state("client") is not NodeState.RUNNING, "the client")

    world.loop.set_exception_handler(cluster.quiet_crashes)
    world.run(controller())
    assert not world.failures, world.failures
    assert results, "the client node ended without a result"
    return results[0]  # type: ignore[no-any-return]
