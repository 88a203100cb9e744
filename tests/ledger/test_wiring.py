"""Production wiring: ``LedgerManager`` from ``open_ledger_manager`` over real ``BookieServer``s.

Once over TCP on 127.0.0.1 (``LocalDisk`` + RocksDB in tmp dirs, memory metadata store), once in
``SimWorld`` over ``SimNetwork``/``SimDisk``/``SimKeyValueStore``. Each creates a (3,3,2) ledger,
writes, closes, reads back; then writes a second ledger whose writer is abandoned, recovers it
from another manager, and checks that the old writer is fenced and every acknowledged entry reads.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from magnetar.base.errors import FencedError, MagnetarError
from magnetar.base.rng import SeededRng
from magnetar.base.types import BookieId
from magnetar.ledger.bookie_transport import BookieClientTransport
from magnetar.ledger.directory import MetadataBookieDirectory
from magnetar.ledger.errors import BookieUnavailableError, NoSuchEntryError
from magnetar.ledger.manager import LedgerManager
from magnetar.metadata.memory import MemoryMetadataServer
from magnetar.node.ledger import close_ledger_manager, open_ledger_manager
from magnetar.protocol.bookie.codec import EncodedEntry
from magnetar.runtime.bookie import BookieServer, RunningBookie, start_bookie
from magnetar.runtime.clock import SystemClock
from magnetar.runtime.network import TcpNetwork
from magnetar.sim import NodeContext, SimClock, SimWorld
from magnetar.storage import Bookie, BookieConfig, BookieStatus

SMALL = dict(
    write_cache_bytes_max=4 * 1024 * 1024,
    entry_bytes_max=512 * 1024,
    journal_queue_bytes_max=2 * 1024 * 1024,
    journal_group_bytes_max=64 * 1024,
    journal_file_bytes_max=256 * 1024,
    entry_log_bytes_max=256 * 1024,
    checkpoint_interval_ms=200,
    disk_free_bytes_min=0,
)


async def exercise(manager: LedgerManager, recoverer: LedgerManager) -> None:
    """The shared workload: write/close/read, then abandon a writer and recover from elsewhere."""
    handle = await manager.create_ledger(3, 3, 2)
    payloads = [f"entry-{i}".encode() * (i + 1) for i in range(40)]
    ids = await asyncio.gather(*(handle.add_entry(p) for p in payloads))
    assert ids == list(range(40))
    closed = await handle.close()
    assert closed.last_entry_id == 39
    reader = await manager.open_ledger(handle.ledger_id)
    entries = await reader.read_entries(0, 39)
    assert [e.payload for e in entries] == payloads

    writer = await manager.create_ledger(3, 3, 2)
    acked = [await writer.add_entry(b"x%d" % i) for i in range(10)]
    recovered = await recoverer.recover_ledger(writer.ledger_id)
    assert recovered.last_entry_id >= acked[-1]
    with pytest.raises(FencedError):
        await writer.add_entry(b"late")
    reader = await recoverer.open_ledger(writer.ledger_id)
    assert [e.payload for e in await reader.read_entries(0, 9)] == [b"x%d" % i for i in range(10)]
    assert sorted(await recoverer.list_ledgers()) == sorted([handle.ledger_id, writer.ledger_id])


async def test_real_bookies_over_tcp(tmp_path: Path) -> None:
    clock = SystemClock()
    meta_server = MemoryMetadataServer(clock)
    meta = await meta_server.connect()
    running: list[RunningBookie] = []
    managers: list[LedgerManager] = []
    try:
        for i in range(4):
            config = BookieConfig(host="127.0.0.1", port=0, data_dir=str(tmp_path / f"b{i}"), **SMALL)
            running.append(await start_bookie(config, store=meta, clock=clock, network=TcpNetwork()))
        for seed in (1, 2):
            managers.append(await open_ledger_manager(meta, network=TcpNetwork(), clock=clock, rng=SeededRng(seed)))
        directory = MetadataBookieDirectory(meta)
        assert sorted(map(str, await directory.available_bookies())) == sorted(r.bookie_id for r in running)
        await exercise(managers[0], managers[1])

        # A bookie of the ensemble dies mid-ledger: the writer changes ensemble and goes on.
        handle = await managers[0].create_ledger(3, 3, 2)
        for i in range(5):
            await handle.add_entry(b"a%d" % i)
        victim = next(r for r in running if BookieId.parse(r.bookie_id) in handle.ensemble)
        await victim.stop()
        running.remove(victim)
        await meta.delete(f"/ledgers/available/{victim.bookie_id}")
        for i in range(5, 15):
            await handle.add_entry(b"a%d" % i)
        assert BookieId.parse(victim.bookie_id) not in handle.ensemble
        await handle.close()
        reader = await managers[1].open_ledger(handle.ledger_id)
        assert [e.payload for e in await reader.read_entries(0, 14)] == [b"a%d" % i for i in range(15)]
    finally:
        for manager in managers:
            await close_ledger_manager(manager)
        for bookie in running:
            await bookie.stop()
        await meta.close()


async def test_transport_maps_statuses_and_reconnects(tmp_path: Path) -> None:
    clock = SystemClock()
    meta = await MemoryMetadataServer(clock).connect()
    config = BookieConfig(host="127.0.0.1", port=0, data_dir=str(tmp_path / "b"), **SMALL)
    bookie = await start_bookie(config, store=meta, clock=clock, network=TcpNetwork())
    transport = BookieClientTransport(TcpNetwork(), clock)
    target = BookieId.parse(bookie.bookie_id)
    stopped = False
    try:
        with pytest.raises(NoSuchEntryError):
            await transport.read(target, 7, 0, fence=False, master_key=b"")
        await transport.add(target, EncodedEntry.build(7, 0, -1, b"zero"), recovery=False, master_key=b"")
        assert (await transport.read(target, 7, 0, fence=False, master_key=b"")).payload == b"zero"
        with pytest.raises(NoSuchEntryError):
            await transport.read(target, 7, 1, fence=True, master_key=b"")
        with pytest.raises(FencedError):
            await transport.add(target, EncodedEntry.build(7, 1, 0, b"one"), recovery=False, master_key=b"")
        await transport.add(target, EncodedEntry.build(7, 1, 0, b"one"), recovery=True, master_key=b"")
        reply = await transport.read_last_entry(target, 7, fence=False, master_key=b"")
        assert (reply.last_entry_id, reply.lac) == (1, 0)
        empty = await transport.read_last_entry(target, 8, fence=False, master_key=b"")
        assert empty.last_entry_id == -1
        await transport.write_lac(target, 7, 1, master_key=b"")
        # The server side drops every connection: the next call reconnects transparently.
        for connection in list(bookie.server._connections):
            connection.close()
        assert (await transport.read(target, 7, 1, fence=False, master_key=b"")).payload == b"one"
        assert transport.connection_count == 1
        # A bookie that is gone is "unavailable", never a negative answer.
        await bookie.stop()
        stopped = True
        with pytest.raises(BookieUnavailableError):
            await transport.read(target, 7, 0, fence=False, master_key=b"")
    finally:
        await transport.close()
        if not stopped:
            await bookie.stop()
        await meta.close()


async def test_directory_lists_only_writable_registrations() -> None:
    meta = await MemoryMetadataServer(SystemClock()).connect()
    try:
        await meta.create("/ledgers/available/h1:3181", b"{}", ephemeral=True)
        await meta.create("/ledgers/available/readonly/h2:3181", b"{}", ephemeral=True)
        await meta.create("/ledgers/available/not-a-bookie", b"", ephemeral=True)
        directory = MetadataBookieDirectory(meta)
        assert await directory.available_bookies() == [BookieId("h1", 3181)]
        assert await directory.read_only_bookies() == [BookieId("h2", 3181)]
    finally:
        await meta.close()


async def test_directory_gives_a_registered_bookie_the_same_instance_while_it_stays_registered() -> None:
    """Every ledger's ensemble shares one ``BookieId`` per bookie (memory per topic, and the local
    transport's identity check): a listing reuses the last listing's instances, and forgets a
    registration that went away. (Negative control, run: parsing every name anew fails the first
    identity assertion.)"""
    meta = await MemoryMetadataServer(SystemClock()).connect()
    try:
        await meta.create("/ledgers/available/h1:3181", b"{}", ephemeral=True)
        await meta.create("/ledgers/available/h2:3181", b"{}", ephemeral=True)
        directory = MetadataBookieDirectory(meta)
        first = await directory.available_bookies()
        second = await directory.available_bookies()
        assert first == second == [BookieId("h1", 3181), BookieId("h2", 3181)]
        assert all(a is b for a, b in zip(first, second, strict=True))
        await meta.delete("/ledgers/available/h2:3181")
        assert await directory.available_bookies() == [BookieId("h1", 3181)]
        await meta.create("/ledgers/available/h2:3181", b"{}", ephemeral=True)
        again = await directory.available_bookies()
        assert again[0] is first[0] and again[1] == first[1] and again[1] is not first[1]
    finally:
        await meta.close()


def test_real_bookies_in_simworld() -> None:
    world = SimWorld(7)
    meta_server = MemoryMetadataServer(SimClock())
    failures: list[BaseException] = []
    done: list[bool] = []

    def bookie_main(index: int):  # type: ignore[no-untyped-def]
        async def main(ctx: NodeContext) -> None:
            bookie = Bookie(ctx.disk, ctx.kv("index"), ctx.clock, BookieConfig(**SMALL))
            await bookie.start()
            server = BookieServer(bookie, ctx.network)
            port = await server.start(ctx.host, 3181)
            session = await meta_server.connect()
            await session.create(f"/ledgers/available/{ctx.host}:{port}", b"{}", ephemeral=True)
            while bookie.status is BookieStatus.WRITABLE:
                await ctx.clock.sleep(3600)

        return main

    async def client_main(ctx: NodeContext) -> None:
        meta = await meta_server.connect()
        try:
            first = await open_ledger_manager(meta, network=ctx.network, clock=ctx.clock, rng=ctx.rng.fork("a"))
            second = await open_ledger_manager(meta, network=ctx.network, clock=ctx.clock, rng=ctx.rng.fork("b"))
            await exercise(first, second)
            await close_ledger_manager(first)
            await close_ledger_manager(second)
        except (MagnetarError, AssertionError) as exc:
            failures.append(exc)
            raise
        done.append(True)

    async def controller() -> None:
        for i in range(3):
            world.add_node(f"bookie{i}", bookie_main(i))
        await world.sleep(0.5)
        world.add_node("client", client_main)
        for _ in range(10_000):
            if done or failures or world.failures:
                return
            await world.sleep(0.05)

    world.run(controller())
    assert not failures and not world.failures, (failures, world.failures)
    assert done
