"""The writer's task-free add path (``PipelinedAdds`` of ``BookieClientTransport``) over real
bookies on 127.0.0.1: it carries the adds once a connection is open, falls back to ``add`` when
the connection is lost, maps statuses like ``add``, and is skipped while a reply-path fault point
is armed (the negative control: fault tests must keep seeing every point)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from magnetar import faults
from magnetar.base.errors import FencedError
from magnetar.base.rng import SeededRng
from magnetar.base.types import BookieId
from magnetar.ledger.bookie_transport import BookieClientTransport
from magnetar.ledger.manager import LedgerManager
from magnetar.ledger.transport import PipelinedAdds
from magnetar.metadata.memory import MemoryMetadataServer
from magnetar.node.ledger import close_ledger_manager, open_ledger_manager
from magnetar.protocol.bookie.codec import Entry
from magnetar.runtime.bookie import RunningBookie, start_bookie
from magnetar.runtime.clock import SystemClock
from magnetar.runtime.network import TcpNetwork
from magnetar.storage import BookieConfig
from tests.ledger.test_wiring import SMALL

pytestmark = pytest.mark.timeout(60)


class Counting:
    """Counts which path each add took, by wrapping the transport's two add methods."""

    def __init__(self, transport: BookieClientTransport) -> None:
        self.slow = 0
        self.fast = 0
        add, add_nowait = transport.add, transport.add_nowait

        async def counted_add(*args: Any, **kwargs: Any) -> None:
            self.slow += 1
            await add(*args, **kwargs)

        def counted_nowait(*args: Any, **kwargs: Any) -> Any:
            future = add_nowait(*args, **kwargs)
            self.fast += future is not None
            return future

        transport.add = counted_add  # type: ignore[method-assign]
        transport.add_nowait = counted_nowait  # type: ignore[method-assign]


async def cluster(tmp_path: Path) -> AsyncIterator[tuple[LedgerManager, list[RunningBookie]]]:
    clock = SystemClock()
    meta = await MemoryMetadataServer(clock).connect()
    running = [await start_bookie(BookieConfig(host="127.0.0.1", port=0, data_dir=str(tmp_path / f"b{i}"), **SMALL),
                                  store=meta, clock=clock, network=TcpNetwork()) for i in range(3)]
    manager = await open_ledger_manager(meta, network=TcpNetwork(), clock=clock, rng=SeededRng(3))
    try:
        yield manager, running
    finally:
        await close_ledger_manager(manager)
        for bookie in running:
            await bookie.stop()
        await meta.close()


def transport_of(manager: LedgerManager) -> BookieClientTransport:
    transport = manager._transport  # the test inspects the production wiring
    assert isinstance(transport, BookieClientTransport) and isinstance(transport, PipelinedAdds)
    return transport


async def test_adds_take_the_pipelined_path_once_connected(tmp_path: Path) -> None:
    async for manager, _running in cluster(tmp_path):
        counting = Counting(transport_of(manager))
        handle = await manager.create_ledger(3, 3, 2)
        assert await handle.add_entry(b"warm") == 0  # opens a connection to each bookie
        assert (counting.slow, counting.fast) == (3, 0)
        payloads = [b"p%d" % i for i in range(200)]
        assert await asyncio.gather(*(handle.add_entry(p) for p in payloads)) == list(range(1, 201))
        assert (counting.slow, counting.fast) == (3, 600)
        await handle.close()
        reader = await manager.open_ledger(handle.ledger_id)
        assert [e.payload for e in await reader.read_entries(1, 200)] == payloads
        assert transport_of(manager)._pipelined_bytes == {}  # every reply accounted for


async def test_lost_connection_falls_back_and_completes(tmp_path: Path) -> None:
    async for manager, running in cluster(tmp_path):
        counting = Counting(transport_of(manager))
        handle = await manager.create_ledger(3, 3, 2)
        await handle.add_entry(b"warm")
        adds = [asyncio.ensure_future(handle.add_entry(b"x%d" % i)) for i in range(100)]
        await asyncio.sleep(0)
        for connection in list(running[0].server._connections):  # the bookie drops its clients
            connection.close()
        assert await asyncio.gather(*adds) == list(range(1, 101))
        assert counting.slow > 3  # some adds were resent on a fresh connection
        await handle.close()
        reader = await manager.open_ledger(handle.ledger_id)
        assert [e.payload for e in await reader.read_entries(1, 100)] == [b"x%d" % i for i in range(100)]


async def test_outcome_maps_a_fenced_ledger(tmp_path: Path) -> None:
    async for manager, running in cluster(tmp_path):
        transport = transport_of(manager)
        target = BookieId.parse(running[0].bookie_id)
        await transport.add(target, Entry.build(9, 0, -1, b"zero"), recovery=False, master_key=b"")
        future = transport.add_nowait(target, Entry.build(9, 1, 0, b"one"), master_key=b"")
        assert future is not None
        await asyncio.wait({future})
        assert transport.add_outcome(target, Entry.build(9, 1, 0, b"one"), future) is True
        await transport.read_last_entry(target, 9, fence=True, master_key=b"")
        late = Entry.build(9, 2, 1, b"two")
        future = transport.add_nowait(target, late, master_key=b"")
        assert future is not None
        await asyncio.wait({future})
        with pytest.raises(FencedError):
            transport.add_outcome(target, late, future)


async def test_armed_reply_point_keeps_the_task_path(tmp_path: Path) -> None:
    """Negative control: with a reply-path fault point armed, no add may bypass it."""
    async for manager, _running in cluster(tmp_path):
        counting = Counting(transport_of(manager))
        faults.arm("ledger.after_reply_before_count", "delay", delay_ms=0)
        try:
            handle = await manager.create_ledger(3, 3, 2)
            for i in range(10):
                await handle.add_entry(b"%d" % i)
            # add_entry returns at the ack quorum (2 of 3): the last third reply may still be on its way.
            for _ in range(100):
                if faults.hits("ledger.after_reply_before_count") == 30:
                    break
                await asyncio.sleep(0.02)
            assert faults.hits("ledger.after_reply_before_count") == 30
        finally:
            faults.disarm_all()
        assert counting.fast == 0 and counting.slow == 30
        await handle.close()
