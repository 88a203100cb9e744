"""Scenario ``durable-log``: acknowledged records survive crashes, partitions and drops.

Workload: a ``server`` node appends each record a client sends to one file, as a CRC32C frame,
and acknowledges it with its offset only once an fsync covering it has completed (group commit:
one sync covers every record appended before it). Records carry ``client/seq/`` ids; a record
the server already has (a client retry after a lost ack) is acknowledged at its first offset,
not appended twice. On start the server replays its file, stops at a torn tail (short frame or
checksum mismatch), truncates it and syncs. Clients ``c0..`` send one record at a time, retry
on timeout or broken connection, and log every acknowledgement they receive.

Faults, from the world's seeded ``Rng``: server crashes (with power cut) and restarts,
partitions between a client and the server, connection drops, clogging the server's links.

Checking is separate (``durable_log_check``): after a final crash and recovery every
acknowledged record is in the file at its acknowledged offset with the same bytes, and no
record id is stored at two offsets. ``ops_count`` records per client; the ``ack-before-fsync``
break makes the server acknowledge right after the append, which the checker must catch.
"""

from __future__ import annotations

import asyncio
import struct
from dataclasses import dataclass, field

from magnetar.base.errors import ChecksumMismatchError, ClosedError, CorruptDataError, LimitExceededError
from magnetar.base.io import Connection, DiskFile
from magnetar.sim.scenarios import durable_log_check
from magnetar.sim.scenarios.base import ScenarioOptions, Verdict
from magnetar.sim.scenarios.frames import FrameReader, encode, scan
from magnetar.sim.world import NodeContext, SimWorld

SERVER = "server"
PORT = 7000
LOG_DIR = "log"
LOG_PATH = "log/records"
CLIENT_COUNT = 3
ACK_TIMEOUT_S = 0.3
RETRY_BACKOFF_S = 0.02
THINK_TIME_MEAN_S = 0.001
FAULT_GAP_MEAN_S = 0.02
FAULT_PHASE_S_MAX = 20.0
COMPLETION_DEADLINE_S = 120.0
SERVER_PENDING_ACKS_MAX = 1024
BREAK_ACK_BEFORE_FSYNC = "ack-before-fsync"
ACK = struct.Struct("<Q")


@dataclass(frozen=True, slots=True)
class Ack:
    record_id: bytes
    payload: bytes
    offset: int


@dataclass(slots=True)
class History:
    """What the clients observed and what the controller did: the checker's input."""

    acks: list[Ack] = field(default_factory=list)
    clients_done: int = 0
    crash_count: int = 0
    all_done: asyncio.Event = field(default_factory=asyncio.Event)
    server_ready: asyncio.Event = field(default_factory=asyncio.Event)


def record_id(payload: bytes) -> bytes:
    client, seq, _body = payload.split(b"/", 2)
    return client + b"/" + seq


class _GroupCommit:
    """Appends wait here until one sync covers them; one sync at a time covers all pending."""

    def __init__(self, file: DiskFile, durable_end: int) -> None:
        self._file = file
        self.durable_end = durable_end
        self._waiters: list[tuple[int, asyncio.Future[None]]] = []
        self._wake = asyncio.Event()

    def kick(self) -> None:
        self._wake.set()

    async def wait_durable(self, end: int) -> None:
        if end <= self.durable_end:
            return
        if len(self._waiters) >= SERVER_PENDING_ACKS_MAX:
            raise LimitExceededError("SERVER_PENDING_ACKS_MAX", len(self._waiters) + 1, SERVER_PENDING_ACKS_MAX)
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append((end, future))
        self._wake.set()
        await future

    async def run(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            target = self._file.size()
            await self._file.sync()
            self.durable_end = max(self.durable_end, target)
            still: list[tuple[int, asyncio.Future[None]]] = []
            for end, future in self._waiters:
                if end <= target:
                    if not future.done():
                        future.set_result(None)
                else:
                    still.append((end, future))
            self._waiters = still


async def server_main(ctx: NodeContext, history: History, ack_before_fsync: bool) -> None:
    disk = ctx.disk
    disk.makedirs(LOG_DIR)
    created = not disk.exists(LOG_PATH)
    file = disk.open(LOG_PATH)
    if created:
        await disk.sync_dir(LOG_DIR)
    size = file.size()
    records, good_end, reason = scan(file.read_at(0, size))
    if good_end < size:
        ctx.trace("torn-tail", f"{size - good_end} bytes at {good_end} ({reason}), truncated")
        file.truncate(good_end)
    await file.sync()
    index: dict[bytes, tuple[int, int]] = {}
    for offset, payload in records:
        index.setdefault(record_id(payload), (offset, offset + len(encode(payload))))
    ctx.trace("recovered", f"{len(records)} records, {good_end} bytes")
    commit = _GroupCommit(file, good_end)

    async def handle(connection: Connection) -> None:
        reader = FrameReader(connection)
        while True:
            try:
                payload = await reader.read_frame()
            except (ChecksumMismatchError, CorruptDataError):
                return
            if payload is None:
                return
            rid = record_id(payload)
            stored = index.get(rid)
            if stored is None:
                frame = encode(payload)
                offset = file.append(frame)
                stored = index[rid] = (offset, offset + len(frame))
            if ack_before_fsync:
                commit.kick()  # the broken mechanism: reply first, make durable later
            else:
                await commit.wait_durable(stored[1])
            try:
                connection.write(encode(ACK.pack(stored[0]) + rid))
                await connection.drain()
            except ClosedError:
                return

    committer = asyncio.get_running_loop().create_task(commit.run())
    await ctx.network.listen(ctx.host, PORT, handle)
    history.server_ready.set()
    await committer


async def client_main(ctx: NodeContext, history: History, ops_count: int) -> None:
    connection: Connection | None = None
    reader: FrameReader | None = None
    for seq in range(ops_count):
        body = ctx.rng.randbytes(ctx.rng.randint(8, 64))
        payload = f"{ctx.name}/{seq}/".encode() + body
        while True:
            if connection is None:
                try:
                    connection = await ctx.network.connect(SERVER, PORT)
                    reader = FrameReader(connection)
                except ConnectionError:
                    await ctx.clock.sleep(RETRY_BACKOFF_S)
                    continue
            assert reader is not None
            try:
                connection.write(encode(payload))
                await connection.drain()
                reply = await asyncio.wait_for(reader.read_frame(), ACK_TIMEOUT_S)
            except (ClosedError, TimeoutError, ChecksumMismatchError, CorruptDataError):
                reply = None
            if reply is None or reply[ACK.size :] != record_id(payload):
                # No (or no matching) ack on this connection: start over on a fresh one.
                connection.close()
                connection = reader = None
                await ctx.clock.sleep(RETRY_BACKOFF_S)
                continue
            (offset,) = ACK.unpack_from(reply)
            history.acks.append(Ack(record_id(payload), payload, offset))
            ctx.trace("ack", f"seq {seq} offset {offset}")
            break
        await ctx.clock.sleep(ctx.rng.expovariate(1 / THINK_TIME_MEAN_S))
    if connection is not None:
        connection.close()
    history.clients_done += 1
    if history.clients_done == CLIENT_COUNT:
        history.all_done.set()


async def _controller(world: SimWorld, history: History) -> None:
    rng = world.rng.fork("durable-log/faults")
    clients = [f"c{i}" for i in range(CLIENT_COUNT)]
    while not history.all_done.is_set() and world.now_s() < FAULT_PHASE_S_MAX:
        await world.sleep(rng.expovariate(1 / FAULT_GAP_MEAN_S))
        pick = rng.random()
        if pick < 0.35:
            history.server_ready.clear()
            world.crash(SERVER, "fault")
            history.crash_count += 1
            await world.sleep(rng.randint(5, 50) / 1000)
            world.restart(SERVER)
        elif pick < 0.55:
            client = rng.choice(clients)
            world.network.partition(client, SERVER, symmetric=rng.random() < 0.7)
            await world.sleep(rng.randint(10, 400) / 1000)
            world.network.heal(client, SERVER)
        elif pick < 0.75:
            world.network.drop(SERVER, rng.choice(clients))
        elif pick < 0.9:
            world.network.clog(SERVER)
            await world.sleep(rng.randint(10, 200) / 1000)
            world.network.unclog(SERVER)
    world.network.heal()
    try:
        await asyncio.wait_for(history.all_done.wait(), COMPLETION_DEADLINE_S)
    except TimeoutError:
        world.record("world", "deadline", f"{history.clients_done} of {CLIENT_COUNT} clients finished")
    # Final power cut and recovery: what the checker reads is what survives.
    history.server_ready.clear()
    world.crash(SERVER, "final")
    world.restart(SERVER)
    await asyncio.wait_for(history.server_ready.wait(), COMPLETION_DEADLINE_S)


def run(world: SimWorld, options: ScenarioOptions) -> Verdict:
    history = History()
    ack_before_fsync = BREAK_ACK_BEFORE_FSYNC in options.breaks

    async def server(ctx: NodeContext) -> None:
        await server_main(ctx, history, ack_before_fsync)

    async def client(ctx: NodeContext) -> None:
        await client_main(ctx, history, options.ops_count)

    world.add_node(SERVER, server)
    for i in range(CLIENT_COUNT):
        world.add_node(f"c{i}", client)
    world.run(_controller(world, history))
    return durable_log_check.check(world.disk(SERVER), LOG_PATH, history.acks,
                                   clients_done=history.clients_done, clients=CLIENT_COUNT,
                                   crash_count=history.crash_count, failures=world.failures)
