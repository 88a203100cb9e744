"""SimNetwork: latency, FIFO order, partitions, clogs, drops, refusals."""

from __future__ import annotations

import asyncio

import pytest

from magnetar.base.errors import ClosedError
from magnetar.base.io import Connection
from magnetar.sim import NodeContext, SimConfig, SimNetworkConfig, SimWorld


async def _echo_server(ctx: NodeContext) -> None:
    async def handle(connection: Connection) -> None:
        while data := await connection.read(1024):
            connection.write(data)
            await connection.drain()

    await ctx.network.listen(ctx.host, 9000, handle)
    await asyncio.Event().wait()


async def _read_exactly(connection: Connection, count: int) -> bytes:
    data = b""
    while len(data) < count:
        chunk = await connection.read(count - len(data))
        if not chunk:
            break
        data += chunk
    return data


def _world(seed: int = 7, **network: int | float) -> SimWorld:
    return SimWorld(seed, SimConfig(network=SimNetworkConfig(**network)))  # type: ignore[arg-type]


def test_messages_take_virtual_latency_and_keep_their_order() -> None:
    world = _world(latency_us_min=1_000, latency_us_max=5_000, fragment_probability=0.5)
    world.add_node("srv", _echo_server)
    result: dict[str, object] = {}

    async def client(ctx: NodeContext) -> None:
        connection = await ctx.network.connect("srv", 9000)
        started = ctx.clock.monotonic_ns()
        payload = b"".join(b"%04d" % i for i in range(500))
        for i in range(0, len(payload), 7):
            connection.write(payload[i : i + 7])
        await connection.drain()
        result["echo"] = await _read_exactly(connection, len(payload)) == payload
        result["rtt_ns"] = ctx.clock.monotonic_ns() - started

    world.add_node("cli", client)

    async def controller() -> None:
        await world.sleep(5)

    world.run(controller())
    assert result["echo"] is True
    assert 2_000_000 <= result["rtt_ns"] <= 1_000_000_000  # type: ignore[operator]


def test_partition_holds_traffic_until_heal_and_refuses_new_connections() -> None:
    world = _world()
    world.add_node("srv", _echo_server)
    log: list[tuple[str, float]] = []

    async def client(ctx: NodeContext) -> None:
        connection = await ctx.network.connect("srv", 9000)
        world.network.partition("cli", "srv")
        connection.write(b"ping")
        try:
            await ctx.network.connect("srv", 9000)
        except ConnectionError:
            log.append(("connect-failed", world.now_s()))
        reply = await _read_exactly(connection, 4)
        log.append((reply.decode(), world.now_s()))

    world.add_node("cli", client)

    async def controller() -> None:
        await world.sleep(3)
        world.network.heal()
        await world.sleep(1)

    world.run(controller())
    assert [kind for kind, _ in log] == ["connect-failed", "ping"]
    assert log[1][1] >= 3.0, "nothing crossed the partition before heal"


def test_one_way_partition_blocks_one_direction_only() -> None:
    world = _world()
    got: list[bytes] = []

    async def server(ctx: NodeContext) -> None:
        async def handle(connection: Connection) -> None:
            got.append(await connection.read(100))
            connection.write(b"reply")

        await ctx.network.listen(ctx.host, 9000, handle)
        await asyncio.Event().wait()

    world.add_node("srv", server)
    replies: list[bytes] = []

    async def client(ctx: NodeContext) -> None:
        connection = await ctx.network.connect("srv", 9000)
        world.network.partition("srv", "cli", symmetric=False)
        connection.write(b"hello")
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(connection.read(100), 2)
        world.network.heal()
        replies.append(await connection.read(100))

    world.add_node("cli", client)

    async def controller() -> None:
        await world.sleep(5)

    world.run(controller())
    assert got == [b"hello"] and replies == [b"reply"]


def test_clog_delays_and_drop_breaks_both_ends() -> None:
    world = _world()
    world.add_node("srv", _echo_server)
    events: list[str] = []

    async def client(ctx: NodeContext) -> None:
        connection = await ctx.network.connect("srv", 9000)
        world.network.clog("srv")
        connection.write(b"abc")
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(connection.read(10), 1)
        world.network.unclog("srv")
        events.append((await _read_exactly(connection, 3)).decode())
        assert world.network.drop("cli", "srv") == 1
        events.append(repr(await connection.read(10)))
        with pytest.raises(ClosedError):
            connection.write(b"more")
        with pytest.raises(ClosedError):
            await connection.drain()
        events.append("closed")

    world.add_node("cli", client)

    async def controller() -> None:
        await world.sleep(5)

    world.run(controller())
    assert events == ["abc", "b''", "closed"]


def test_connecting_to_nobody_is_refused_after_a_delay() -> None:
    world = _world()
    outcome: list[str] = []

    async def client(ctx: NodeContext) -> None:
        with pytest.raises(ConnectionRefusedError):
            await ctx.network.connect("ghost", 1)
        outcome.append("refused")
        assert ctx.clock.monotonic_ns() > 0

    world.add_node("cli", client)

    async def controller() -> None:
        await world.sleep(1)

    world.run(controller())
    assert outcome == ["refused"]


def test_peer_close_is_eof_and_a_crashed_peer_is_eof_too() -> None:
    world = _world()
    world.add_node("srv", _echo_server)
    reads: list[bytes] = []

    async def client(ctx: NodeContext) -> None:
        connection = await ctx.network.connect("srv", 9000)
        connection.write(b"x")
        reads.append(await connection.read(10))
        world.crash("srv")
        reads.append(await connection.read(10))

    world.add_node("cli", client)

    async def controller() -> None:
        await world.sleep(1)

    world.run(controller())
    assert reads == [b"x", b""]


def test_drain_waits_for_the_reader_when_the_link_is_full() -> None:
    world = _world(link_queue_bytes_max=1_000)
    progress: list[str] = []

    async def server(ctx: NodeContext) -> None:
        async def handle(connection: Connection) -> None:
            await ctx.clock.sleep(2)
            progress.append("reading")
            while await connection.read(10_000):
                pass

        await ctx.network.listen(ctx.host, 9000, handle)
        await asyncio.Event().wait()

    async def client(ctx: NodeContext) -> None:
        connection = await ctx.network.connect("srv", 9000)
        connection.write(b"z" * 1_500)
        await connection.drain()
        progress.append("drained")

    world.add_node("srv", server)
    world.add_node("cli", client)

    async def controller() -> None:
        await world.sleep(5)

    world.run(controller())
    assert progress == ["reading", "drained"]
