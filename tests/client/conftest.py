"""Fixtures for client tests: a fake broker and our client on one simulated, virtual-time network."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from magnetar.base.rng import SeededRng
from magnetar.client import ClientOptions, PulsarClient
from magnetar.sim import SimClock, SimNetwork, run
from tests.client.fake_broker import FakeBroker

R = TypeVar("R")
Body = Callable[[FakeBroker, PulsarClient, SimNetwork], Awaitable[R]]


def sim_run(body: Body[R], *, seed: int = 1, options: ClientOptions | None = None, **broker: Any) -> R:
    """Run ``body(broker, client, network)`` on virtual time; the client is closed afterwards."""

    async def main() -> R:
        import asyncio

        network = SimNetwork(asyncio.get_running_loop(), SeededRng(seed))  # type: ignore[arg-type]
        fake = await FakeBroker(network.view("broker"), host="broker", port=6650, **broker).start()
        client = PulsarClient(fake.url, network=network.view("client"), clock=SimClock(), rng=SeededRng(seed + 1),
                              options=options)
        try:
            return await body(fake, client, network)
        finally:
            await client.close()

    return run(main())
