"""The transport's one add operation (``BookieClientTransport.add``) over real bookies on
127.0.0.1: sent at once on an open connection, after a connect (or a wait for room) otherwise,
resent on a fresh connection when one is lost, statuses mapped; an armed reply-path fault point
is a gate on the same path (the same sends armed or not)."""

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
from magnetar.ledger.bookie_client import BookieClient
from magnetar.ledger.bookie_transport import BookieClientTransport
from magnetar.ledger.manager import LedgerManager
from magnetar.metadata.memory import MemoryMetadataServer
from magnetar.node.ledger import close_ledger_manager, open_ledger_manager
from magnetar.protocol.bookie.codec import EncodedEntry
from magnetar.runtime.bookie import RunningBookie, start_bookie
from magnetar.runtime.clock import SystemClock
from magnetar.runtime.network import TcpNetwork
from magnetar.storage import BookieConfig
from tests.ledger.test_wiring import SMALL

pytestmark = pytest.mark.timeout(60)


class Counting:
    """Counts the adds sent on a connection and the writes that carried them
    (``BookieClient.add_run_then``, what every add of the transport ends in) and the waits for a
    connection or room (``_send_when_ready``)."""

    def __init__(self, transport: BookieClientTransport, monkeypatch: pytest.MonkeyPatch) -> None:
        self.sent = 0
        self.writes = 0
        self.waits = 0
        send, wait = BookieClient.add_run_then, transport._send_when_ready

        def counted_send(client: BookieClient, entries: Any, *args: Any, **kwargs: Any) -> Any:
            self.sent += len(entries)
            self.writes += 1
            return send(client, entries, *args, **kwargs)

        async def counted_wait(*args: Any, **kwargs: Any) -> None:
            self.waits += 1
            await wait(*args, **kwargs)

        monkeypatch.setattr(BookieClient, "add_run_then", counted_send)
        monkeypatch.setattr(transport, "_send_when_ready", counted_wait)


class Told:
    """The outcomes an add callback was told, in order; ``all_told`` once ``count`` came."""

    def __init__(self, count: int) -> None:
        self.count = count
        self.outcomes: list[tuple[int | None, BaseException | None]] = []
        self.all_told = asyncio.Event()

    def on_done(self, entry_id: int | None, error: BaseException | None) -> None:
        self.outcomes.append((entry_id, error))
        if len(self.outcomes) == self.count:
            self.all_told.set()

    def reply_of(self, index: int) -> Any:
        """A ``BookieClient`` reply callback telling ``(index, None)`` for an OK answer."""
        def reply(response: Any, error: BaseException | None) -> None:
            ok = error is None and response.status == 0
            self.on_done(index if ok else None, error)

        return reply


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
    assert isinstance(transport, BookieClientTransport)
    return transport


async def test_adds_are_sent_at_once_on_an_open_connection(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    async for manager, _running in cluster(tmp_path):
        counting = Counting(transport_of(manager), monkeypatch)
        handle = await manager.create_ledger(3, 3, 2)
        assert await handle.add_entry(b"warm") == 0  # waits for a connection to each bookie
        assert (counting.sent, counting.waits) == (3, 3)
        payloads = [b"p%d" % i for i in range(200)]
        assert await asyncio.gather(*(handle.add_entry(p) for p in payloads)) == list(range(1, 201))
        assert (counting.sent, counting.waits) == (603, 3)
        await handle.close()
        reader = await manager.open_ledger(handle.ledger_id)
        assert [e.payload for e in await reader.read_entries(1, 200)] == payloads
        transport = transport_of(manager)
        assert transport._add_bytes == {} and transport._waiting == {}  # every reply accounted for


async def test_a_run_of_adds_is_one_write_per_bookie(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``LedgerHandle.append_run``: the adds of one run reach each bookie in one write (three
    writes for 100 adds at (3,3,2)); control: the same adds one ``append_then`` each are 300."""
    async for manager, _running in cluster(tmp_path):
        counting = Counting(transport_of(manager), monkeypatch)
        handle = await manager.create_ledger(3, 3, 2)
        assert await handle.add_entry(b"warm") == 0  # opens the connections
        told = Told(200)
        on_done = told.on_done
        before = counting.writes, counting.sent
        handle.append_run([(b"r%d" % i, on_done) for i in range(100)])
        assert (counting.writes - before[0], counting.sent - before[1]) == (3, 300)
        before = counting.writes, counting.sent
        for i in range(100):
            handle.append_then(b"s%d" % i, on_done)
        assert (counting.writes - before[0], counting.sent - before[1]) == (300, 300)
        await asyncio.wait_for(told.all_told.wait(), 30)
        assert told.outcomes == [(i, None) for i in range(1, 201)]  # in entry order, each once
        await handle.close()
        reader = await manager.open_ledger(handle.ledger_id)
        expected = [b"r%d" % i for i in range(100)] + [b"s%d" % i for i in range(100)]
        assert [e.payload for e in await reader.read_entries(1, 200)] == expected


async def test_lost_connection_is_reconnected_and_the_adds_complete(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    async for manager, running in cluster(tmp_path):
        counting = Counting(transport_of(manager), monkeypatch)
        handle = await manager.create_ledger(3, 3, 2)
        await handle.add_entry(b"warm")
        adds = [asyncio.ensure_future(handle.add_entry(b"x%d" % i)) for i in range(100)]
        await asyncio.sleep(0)
        for connection in list(running[0].server._connections):  # the bookie drops its clients
            connection.close()
        assert await asyncio.gather(*adds) == list(range(1, 101))
        assert counting.waits > 3  # some adds were resent on a fresh connection
        await handle.close()
        reader = await manager.open_ledger(handle.ledger_id)
        assert [e.payload for e in await reader.read_entries(1, 100)] == [b"x%d" % i for i in range(100)]


async def test_add_maps_a_fenced_ledger(tmp_path: Path) -> None:
    async for manager, running in cluster(tmp_path):
        transport = transport_of(manager)
        target = BookieId.parse(running[0].bookie_id)
        await transport.add(target, EncodedEntry.build(9, 0, -1, b"zero"), recovery=False, master_key=b"")
        await transport.add(target, EncodedEntry.build(9, 1, 0, b"one"), recovery=False, master_key=b"")
        await transport.read_last_entry(target, 9, fence=True, master_key=b"")
        with pytest.raises(FencedError):
            await transport.add(target, EncodedEntry.build(9, 2, 1, b"two"), recovery=False, master_key=b"")
        await transport.add(target, EncodedEntry.build(9, 2, 1, b"two"), recovery=True, master_key=b"")


@pytest.mark.parametrize("armed", [False, True], ids=["unarmed", "armed"])
async def test_an_armed_reply_point_is_a_gate_on_the_same_path(armed: bool, tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """Armed or not, every add is sent the same way (one ``add_run_then`` per bookie, no extra
    waits); armed, every reply passes the point (the control: unarmed, no hit is counted)."""
    async for manager, _running in cluster(tmp_path):
        counting = Counting(transport_of(manager), monkeypatch)
        if armed:
            faults.arm("ledger.after_reply_before_count", "delay", delay_ms=0)
        try:
            handle = await manager.create_ledger(3, 3, 2)
            for i in range(10):
                await handle.add_entry(b"%d" % i)
            await handle.close()  # waits for every pending add; the third replies may still come
            deadline = asyncio.get_running_loop().time() + 10
            while armed and faults.hits("ledger.after_reply_before_count") < 30:
                assert asyncio.get_running_loop().time() < deadline
                await asyncio.sleep(0.01)  # replies arrive over real sockets: poll, bounded by the deadline
            assert faults.hits("ledger.after_reply_before_count") == (30 if armed else 0)
        finally:
            faults.disarm_all()
        assert (counting.sent, counting.waits) == (30, 3)


async def test_a_refused_run_registers_nothing_and_the_connection_goes_on(tmp_path: Path) -> None:
    """``BookieClient.add_run_then`` with a frame over the bound in the run: refused before
    anything is registered or written (no request left to time out); the next run on the same
    connection is answered, each entry through its own callback."""
    from magnetar.base.errors import LimitExceededError
    from magnetar.base.limits import BOOKIE_FRAME_BYTES_MAX

    async for manager, running in cluster(tmp_path):
        transport = transport_of(manager)
        target = BookieId.parse(running[0].bookie_id)
        client = await transport._client(target)  # the test drives the pooled connection itself
        told = Told(2)
        reply = told.reply_of
        big = EncodedEntry.build(5, 1, 0, b"x" * BOOKIE_FRAME_BYTES_MAX)
        with pytest.raises(LimitExceededError):
            client.add_run_then([EncodedEntry.build(5, 0, -1, b"ok"), big], [reply(0), reply(1)])
        assert client.inflight_count == 0
        client.add_run_then([EncodedEntry.build(5, 0, -1, b"a"), EncodedEntry.build(5, 1, 0, b"b")],
                            [reply(0), reply(1)])
        await asyncio.wait_for(told.all_told.wait(), 10)
        assert sorted(told.outcomes, key=str) == [(0, None), (1, None)]
        assert client.inflight_count == 0
