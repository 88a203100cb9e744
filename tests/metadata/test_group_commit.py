"""The embedded store's durable writes: grouped, off the event loop, invisible until durable.

Each property has a negative control: the old path (``inline_sync=True``: one synchronous
``write(sync=True)`` per change on the event loop) fails the same check.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable
from pathlib import Path

import pytest

from magnetar import faults
from magnetar.base.errors import BadVersionError
from magnetar.metadata import EmbeddedMetadataServer, GetResult
from magnetar.metadata.errors import MetadataUnavailableError
from magnetar.runtime import SystemClock
from magnetar.runtime.kv import DurableWriteFailedError, RocksKeyValueStore
from magnetar.sim import SimKeyValueStore
from tests.metadata.conftest import run

CONCURRENT_WRITES = 200
SLOW_SYNC_S = 0.2
TICK_S = 0.01


class CountingRocks(RocksKeyValueStore):
    """Counts syncs (grouped WAL syncs and inline ``sync=True`` writes); each can be slowed."""

    def __init__(self, path: str, sync_delay_s: float = 0.0, fail: bool = False) -> None:
        super().__init__(path)
        self.syncs = 0
        self.sync_delay_s = sync_delay_s
        self.fail = fail

    def _synced(self) -> None:
        self.syncs += 1
        time.sleep(self.sync_delay_s)  # in the worker thread when grouped, on the loop when inline
        if self.fail:
            raise OSError("injected sync failure")

    def write(self, puts: Iterable[tuple[bytes, bytes | None]], *, sync: bool) -> None:
        super().write(puts, sync=sync)
        if sync:
            self._synced()

    def sync_wal(self) -> None:
        super().sync_wal()
        self._synced()


async def _open(directory: Path, *, inline: bool) -> tuple[EmbeddedMetadataServer, CountingRocks]:
    kv = CountingRocks(str(directory))
    return await EmbeddedMetadataServer.open(kv, SystemClock(), inline_sync=inline), kv


def _syncs_for_concurrent_writes(directory: Path, inline: bool) -> int:
    async def body() -> int:
        server, kv = await _open(directory, inline=inline)
        store = await server.connect()
        await store.put("/w", b"", -1)
        before = kv.syncs
        versions = await asyncio.gather(*(store.put(f"/w/k{i}", b"v", -1) for i in range(CONCURRENT_WRITES)))
        assert versions == [0] * CONCURRENT_WRITES
        assert await store.children("/w") == sorted(f"k{i}" for i in range(CONCURRENT_WRITES))
        syncs = kv.syncs - before
        await server.close()
        return syncs

    return run(body)


def test_concurrent_writes_share_syncs(tmp_path: Path) -> None:
    grouped = _syncs_for_concurrent_writes(tmp_path / "grouped", inline=False)
    assert grouped <= CONCURRENT_WRITES // 10, f"{grouped} syncs for {CONCURRENT_WRITES} writes"


def test_negative_control_inline_path_syncs_every_write(tmp_path: Path) -> None:
    inline = _syncs_for_concurrent_writes(tmp_path / "inline", inline=True)
    assert inline >= CONCURRENT_WRITES, "the sync counter must see one sync per inline write"


def _ticks_during_slow_write(directory: Path, inline: bool) -> int:
    async def body() -> int:
        server, kv = await _open(directory, inline=inline)
        store = await server.connect()
        kv.sync_delay_s = SLOW_SYNC_S
        ticks = 0

        async def ticker() -> None:
            nonlocal ticks
            while True:
                await asyncio.sleep(TICK_S)
                ticks += 1

        task = asyncio.get_running_loop().create_task(ticker())
        await asyncio.sleep(0)
        ticks = 0
        await store.put("/slow", b"x", -1)
        counted = ticks
        task.cancel()
        kv.sync_delay_s = 0
        await server.close()
        return counted

    return run(body)


def test_loop_keeps_running_during_a_slow_sync(tmp_path: Path) -> None:
    ticks = _ticks_during_slow_write(tmp_path / "grouped", inline=False)
    assert ticks >= SLOW_SYNC_S / TICK_S / 2, f"only {ticks} ticks during a {SLOW_SYNC_S}s sync"


def test_negative_control_inline_sync_blocks_the_loop(tmp_path: Path) -> None:
    assert _ticks_during_slow_write(tmp_path / "inline", inline=True) <= 1


def test_pending_write_is_invisible_and_cas_against_it_waits(tmp_path: Path) -> None:
    async def body() -> None:
        server, kv = await _open(tmp_path, inline=False)
        writer = await server.connect()
        reader = await server.connect()
        await writer.put("/k", b"0", -1)
        kv.sync_delay_s = SLOW_SYNC_S
        pending = asyncio.get_running_loop().create_task(writer.put("/k", b"1", 0))
        await asyncio.sleep(SLOW_SYNC_S / 4)
        assert not pending.done()
        assert await reader.get("/k") == GetResult(b"0", 0), "a write not yet durable is not visible"
        # A CAS that only the pending write refutes waits for it instead of failing early.
        with pytest.raises(BadVersionError):
            await reader.put("/k", b"2", 0)
        assert pending.done() and pending.result() == 1
        assert await reader.get("/k") == GetResult(b"1", 1)
        kv.sync_delay_s = 0
        # Chained CAS planned on pending state: both succeed, in order, one sync for both.
        first = writer.put("/k", b"a", 1)
        second = writer.put("/k", b"b", 2)
        assert list(await asyncio.gather(first, second)) == [2, 3]
        assert await reader.get("/k") == GetResult(b"b", 3)
        await server.close()

    run(body)


def test_fault_point_sits_between_durable_write_and_reply(tmp_path: Path) -> None:
    async def body() -> None:
        server, kv = await _open(tmp_path, inline=False)
        store = await server.connect()
        faults.arm("metadata.embedded.after_write_before_reply", "hang")
        try:
            task = asyncio.get_running_loop().create_task(store.put("/f", b"x", -1))
            for _ in range(200):
                if kv.get(b"md/n/f") is not None:
                    break
                await asyncio.sleep(0.005)
            assert kv.get(b"md/n/f") is not None, "durable before the fault point"
            await asyncio.sleep(0.02)
            assert not task.done(), "the caller is not answered while the point hangs"
            faults.release("metadata.embedded.after_write_before_reply")
            await task
        finally:
            faults.disarm_all()
        assert await store.get("/f") == GetResult(b"x", 0)
        await server.close()

    run(body)


def test_failed_sync_stops_writes_and_hides_the_change(tmp_path: Path) -> None:
    async def body() -> None:
        server, kv = await _open(tmp_path, inline=False)
        store = await server.connect()
        await store.put("/ok", b"", -1)
        kv.fail = True
        with pytest.raises(DurableWriteFailedError):
            await store.put("/lost", b"", -1)
        assert not await store.exists("/lost")
        with pytest.raises(MetadataUnavailableError):
            await store.put("/after", b"", -1)
        assert await store.exists("/ok")
        kv.fail = False
        await server.close()

    run(body)


def test_sim_store_groups_and_a_crash_loses_unsynced_writes_whole() -> None:
    async def body() -> None:
        kv = SimKeyValueStore()
        server = await EmbeddedMetadataServer.open(kv, SystemClock())
        store = await server.connect()
        before = kv.durable_groups
        await asyncio.gather(*(store.put(f"/s{i}", b"v", -1) for i in range(20)))
        assert kv.durable_groups - before == 1
        # Staged and queued, not yet synced: a crash now loses the batch whole.
        task = asyncio.get_running_loop().create_task(store.put("/gone", b"v", -1))
        await asyncio.sleep(0)
        assert kv.pending_batch_count() == 1
        kv.crash()
        assert kv.get(b"md/n/gone") is None and kv.get(b"md/n/s19") is not None
        with pytest.raises(asyncio.CancelledError):
            await task

    run(body)
