"""``BookieServer`` in the simulator (virtual time): the idle partial-frame limit, journaled
WRITE_LAC over the wire, and the durability of an explicit LAC across a power cut."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from magnetar.ledger.bookie_client import BookieClient
from magnetar.protocol.bookie import (
    AddRequest,
    AddResponse,
    EncodedEntry,
    FrameDecoder,
    GetInfoRequest,
    GetInfoResponse,
    Status,
    encode,
)
from magnetar.runtime.bookie import BookieServer
from magnetar.sim import NodeContext, SimWorld
from magnetar.storage import Bookie, BookieConfig
from tests.storage.test_storage import KEY, SMALL, Node, entry, sim

IDLE_MS = 2_000


def _serve_and_probe(idle_ms: int) -> dict[str, object]:
    """A bookie node and a client node: one connection stops mid-frame, one idles between
    frames, one completes a request after the limit. Returns what the client observed."""
    world = SimWorld(3)
    seen: dict[str, object] = {}
    servers: list[BookieServer] = []

    async def bookie_main(ctx: NodeContext) -> None:
        bookie = Bookie(ctx.disk, ctx.kv("index"), ctx.clock, SMALL)
        await bookie.start()
        server = BookieServer(bookie, ctx.network, partial_frame_idle_ms=idle_ms)
        servers.append(server)
        await server.start(ctx.host, 3181)
        await ctx.clock.sleep(3600)

    async def client_main(ctx: NodeContext) -> None:
        frame = encode(GetInfoRequest(1))
        partial = await ctx.network.connect("bookie", 3181)
        partial.write(frame[:5])  # length and one byte: the rest never comes
        between = await ctx.network.connect("bookie", 3181)
        between.write(frame)  # a whole request, then silence
        first = await between.read(1024)
        seen["between_first_reply"] = FrameDecoder().feed(first)
        await ctx.clock.sleep(3 * idle_ms / 1000 if idle_ms else 6.0)
        seen["partial_after_limit"] = await _read_or_open(ctx, partial)
        between.write(encode(GetInfoRequest(2)))
        seen["between_after_limit"] = FrameDecoder().feed(await between.read(1024))
        seen["done"] = True

    _run_bookie_then_client(world, bookie_main, client_main, seen, step_s=0.5)
    seen["closed_count"] = servers[0].idle_partial_closed_count if servers else -1
    return seen


def _run_bookie_then_client(world: SimWorld, bookie_main: Callable[[NodeContext], Awaitable[None]],
                            client_main: Callable[[NodeContext], Awaitable[None]], seen: dict[str, object],
                            step_s: float = 0.1) -> None:
    """The bookie node, then the client node, until the client sets ``seen["done"]`` or a node
    fails (bounded: 1,000 steps of the world's virtual time)."""

    async def controller() -> None:
        world.add_node("bookie", bookie_main)
        await world.sleep(0.1)
        world.add_node("client", client_main)
        for _ in range(1000):
            if seen.get("done") or world.failures:
                break
            await world.sleep(step_s)

    world.run(controller())
    assert not world.failures, world.failures


async def _read_or_open(ctx: NodeContext, connection: object) -> str:
    # A closed connection reads b"" at once; an open one has nothing to say: bound the wait.
    read = asyncio.ensure_future(connection.read(1024))  # type: ignore[attr-defined]
    timer = asyncio.ensure_future(ctx.clock.sleep(1.0))
    done, _ = await asyncio.wait({read, timer}, return_when=asyncio.FIRST_COMPLETED)
    timer.cancel()
    if read in done:
        return "closed" if read.result() == b"" else "data"
    read.cancel()
    return "open"


def test_partial_frame_idle_past_the_limit_closes_only_that_connection() -> None:
    seen = _serve_and_probe(IDLE_MS)
    assert seen.get("done"), seen
    assert seen["partial_after_limit"] == "closed"
    assert seen["closed_count"] == 1
    for key in ("between_first_reply", "between_after_limit"):
        replies = seen[key]
        assert isinstance(replies, list) and len(replies) == 1 and isinstance(replies[0], GetInfoResponse), key


def test_negative_control_without_the_limit_the_partial_connection_stays_open() -> None:
    seen = _serve_and_probe(0)
    assert seen.get("done"), seen
    assert seen["partial_after_limit"] == "open"
    assert seen["closed_count"] == 0


def test_write_lac_is_journaled_before_its_reply_and_survives_a_power_cut() -> None:
    async def scenario() -> None:
        node = Node()
        bookie = await node.boot()
        assert await bookie.add(entry(3, 0), KEY) is Status.OK
        assert await bookie.write_lac(3, 0, KEY) == (Status.OK, 0)
        assert await bookie.write_lac(3, -1, KEY) == (Status.OK, 0)  # never lowers it
        assert await bookie.write_lac(3, 5, b"wrong") == (Status.UNAUTHORIZED, 0)
        assert await bookie.write_lac(99, 5, KEY) == (Status.NO_SUCH_LEDGER, -1)
        node.power_cut()
        bookie = await node.boot()
        assert bookie.read_lac(3) == (Status.OK, 0)
        await bookie.checkpoint()
        node.power_cut()
        bookie = await node.boot()
        assert bookie.read_lac(3) == (Status.OK, 0)  # and once checkpointed, from the index
        await bookie.stop()

    sim(scenario)


def test_negative_control_an_unanswered_write_lac_may_be_lost() -> None:
    async def scenario() -> None:
        node = Node()
        bookie = await node.boot()
        assert await bookie.add(entry(3, 0), KEY) is Status.OK
        pending = asyncio.ensure_future(bookie.write_lac(3, 0, KEY))
        await node.clock.sleep(0)  # queued and written, its fsync not finished
        assert not pending.done()
        node.power_cut()
        pending.cancel()
        bookie = await node.boot()
        assert bookie.read_lac(3) == (Status.OK, -1), "the check must see a LAC that never became durable"
        await bookie.stop()

    sim(scenario)


def test_write_lac_over_the_wire() -> None:
    world = SimWorld(5)
    seen: dict[str, object] = {}

    async def bookie_main(ctx: NodeContext) -> None:
        bookie = Bookie(ctx.disk, ctx.kv("index"), ctx.clock, BookieConfig(**_fields(SMALL)))
        await bookie.start()
        await BookieServer(bookie, ctx.network).start(ctx.host, 3181)
        await ctx.clock.sleep(3600)

    async def client_main(ctx: NodeContext) -> None:
        client = await BookieClient.connect(ctx.network, "bookie", 3181, ctx.clock)
        await client.add(EncodedEntry.build(8, 0, -1, b"x"), master_key=KEY)
        response = await client.write_lac(8, 0, master_key=KEY)
        seen["write"] = (response.status, response.lac)
        seen["read"] = (await client.read_lac(8)).lac
        await client.close()
        seen["done"] = True

    _run_bookie_then_client(world, bookie_main, client_main, seen)
    assert seen == {"write": (Status.OK, 0), "read": 0, "done": True}


def _fields(config: BookieConfig) -> dict[str, object]:
    return {name: getattr(config, name) for name in config.__dataclass_fields__}


def test_the_adds_of_one_read_are_stored_as_runs_and_each_answered_with_its_own_status() -> None:
    """One client write holding adds of three ledgers, a request between them, a wrong key and a
    fenced ledger: the server hands each stretch of one ledger's adds to the bookie as a run
    (``Bookie.add_entries_runs``); every add gets exactly its own answer, a refused one does not
    fail its neighbours, and each ledger's answers come in order."""
    world = SimWorld(11)
    seen: dict[str, object] = {}

    async def bookie_main(ctx: NodeContext) -> None:
        bookie = Bookie(ctx.disk, ctx.kv("index"), ctx.clock, SMALL)
        await bookie.start()
        assert await bookie.fence(3, KEY) is Status.OK
        await BookieServer(bookie, ctx.network).start(ctx.host, 3181)
        await ctx.clock.sleep(3600)

    async def client_main(ctx: NodeContext) -> None:
        requests = [
            AddRequest(1, EncodedEntry.build(1, 0, -1, b"a"), KEY),
            AddRequest(2, EncodedEntry.build(1, 1, 0, b"b"), KEY),
            GetInfoRequest(3),
            AddRequest(4, EncodedEntry.build(2, 0, -1, b"c"), KEY),
            AddRequest(5, EncodedEntry.build(1, 2, 1, b"d"), b"wrong"),
            AddRequest(6, EncodedEntry.build(2, 1, 0, b"e"), KEY),
            AddRequest(7, EncodedEntry.build(3, 0, -1, b"f"), KEY),
            AddRequest(8, EncodedEntry.build(1, 3, 1, b"g"), KEY),
        ]
        connection = await ctx.network.connect("bookie", 3181)
        connection.write(b"".join(encode(request) for request in requests))
        decoder = FrameDecoder()
        replies: list[object] = []
        while len(replies) < len(requests):
            data = await connection.read(65536)
            if not data:
                break
            replies.extend(decoder.feed(data))
        seen["adds"] = [(r.request_id, r.status, r.ledger_id, r.entry_id) for r in replies if isinstance(r, AddResponse)]
        seen["info"] = [r.request_id for r in replies if isinstance(r, GetInfoResponse)]
        seen["done"] = True

    _run_bookie_then_client(world, bookie_main, client_main, seen)
    adds = seen["adds"]
    assert isinstance(adds, list)
    assert sorted(adds) == [
        (1, Status.OK, 1, 0), (2, Status.OK, 1, 1), (4, Status.OK, 2, 0), (5, Status.UNAUTHORIZED, 1, 2),
        (6, Status.OK, 2, 1), (7, Status.FENCED, 3, 0), (8, Status.OK, 1, 3),
    ]
    assert seen["info"] == [3]
    for ledger in (1, 2):  # each ledger's OK answers in entry order
        oks = [entry_id for _, status, ledger_id, entry_id in adds if ledger_id == ledger and status is Status.OK]
        assert oks == sorted(oks)
