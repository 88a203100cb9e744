"""``LocalFirstTransport`` (standalone's direct calls into its own bookies) answers every
operation as the bookie protocol over TCP does: the same script runs against one real bookie
both ways (one ledger each) and the outcomes must be equal."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from magnetar.base.types import BookieId
from magnetar.ledger.bookie_transport import BookieClientTransport
from magnetar.node.ledger import LocalFirstTransport
from magnetar.protocol.bookie import ENTRY_HEADER_BYTES, Entry, Status
from magnetar.runtime.bookie import RunningBookie, start_bookie
from magnetar.runtime.clock import SystemClock
from magnetar.runtime.metadata import open_metadata_store
from magnetar.runtime.network import TcpNetwork
from magnetar.storage import BookieConfig

KEY = b"key"


def _entry(ledger: int, entry_id: int, lac: int) -> Entry:
    return Entry.build(ledger, entry_id, lac, f"entry {entry_id};".encode() * 50)


async def _outcome(call: Any) -> object:
    """What a call gave: its value, or its error's type and status name."""
    try:
        value = await call
    except Exception as error:  # the outcome compared
        return ("error", type(error).__name__)
    if isinstance(value, Entry):
        return ("entry", value.entry_id, bytes(value.raw)[ENTRY_HEADER_BYTES:])  # the header names the ledger
    return ("value", value)


async def _script(transport: Any, bookie: BookieId, ledger: int) -> list[object]:
    """Adds (one by one and pipelined), reads, a wrong key, an explicit LAC, a fence."""
    results: list[object] = []
    for i in range(5):
        results.append(await _outcome(transport.add(bookie, _entry(ledger, i, i - 1), recovery=False,
                                                     master_key=KEY)))
    adds = [transport.add(bookie, _entry(ledger, i, i - 1), recovery=False, master_key=KEY) for i in range(5, 10)]
    for add in adds:  # started together (pipelined), answered each
        results.append(await _outcome(add))
    results.append(await _outcome(transport.add(bookie, _entry(ledger, 10, 9), recovery=False,
                                                 master_key=b"wrong")))
    results.append(await _outcome(transport.read(bookie, ledger, 7, fence=False, master_key=KEY)))
    results.append(await _outcome(transport.read(bookie, ledger, 99, fence=False, master_key=KEY)))
    results.append(await _outcome(transport.read_last_entry(bookie, ledger, fence=False, master_key=KEY)))
    results.append(await _outcome(transport.read_last_entry(bookie, ledger + 1000, fence=False,
                                                            master_key=KEY)))
    results.append(await _outcome(transport.write_lac(bookie, ledger, 9, master_key=KEY)))
    results.append(await _outcome(transport.write_lac(bookie, ledger, 9, master_key=b"wrong")))
    results.append(await _outcome(transport.read_last_entry(bookie, ledger, fence=True, master_key=KEY)))
    results.append(await _outcome(transport.add(bookie, _entry(ledger, 10, 9), recovery=False,
                                                 master_key=KEY)))  # fenced now
    results.append(await _outcome(transport.add(bookie, _entry(ledger, 10, 9), recovery=True,
                                                 master_key=KEY)))  # recovery adds pass a fence
    return results


async def _with_bookie(tmp_path: Path, body: Any) -> None:
    store = await open_metadata_store("memory:")
    config = BookieConfig(host="127.0.0.1", port=0, data_dir=str(tmp_path / "bookie"), gc_interval_ms=0,
                          disk_free_bytes_min=0)
    running: RunningBookie = await start_bookie(config, store=store, clock=SystemClock(), network=TcpNetwork())
    try:
        await body(running, BookieId.parse(running.bookie_id))
    finally:
        await running.stop()
        await store.close()


def test_local_calls_answer_as_the_bookie_protocol_does(tmp_path: Path) -> None:
    async def body(running: RunningBookie, bookie: BookieId) -> None:
        tcp = BookieClientTransport(TcpNetwork(), SystemClock())
        local = LocalFirstTransport({bookie: running.bookie}, BookieClientTransport(TcpNetwork(), SystemClock()))
        try:
            over_tcp = await _script(tcp, bookie, 1)
            direct = await _script(local, bookie, 2)
        finally:
            await tcp.close()
            await local.close()
        assert over_tcp[:10] == [("value", None)] * 10  # it did work
        assert ("error", "FencedError") in over_tcp and ("error", "NoSuchEntryError") in over_tcp
        assert direct == over_tcp
        assert running.bookie.read_entry(2, 10).status is Status.OK  # the recovery add is stored

    asyncio.run(_with_bookie(tmp_path, body))


def test_a_bookie_not_in_this_process_is_reached_over_the_network(tmp_path: Path) -> None:
    """Only the bookies given are called directly (the control: the same bookie, not given,
    answers over TCP: its server sees the connection)."""
    async def body(running: RunningBookie, bookie: BookieId) -> None:
        other = BookieId("127.0.0.1", 1)
        transport = LocalFirstTransport({other: running.bookie}, BookieClientTransport(TcpNetwork(), SystemClock()))
        try:
            await transport.add(bookie, _entry(3, 0, -1), recovery=False, master_key=KEY)
            assert len(running.server._connections) == 1
            await transport.add(other, _entry(4, 0, -1), recovery=False, master_key=KEY)
            assert len(running.server._connections) == 1  # no new connection for the local one
        finally:
            await transport.close()
        assert running.bookie.read_entry(4, 0).status is Status.OK

    asyncio.run(_with_bookie(tmp_path, body))


def test_a_full_bookie_makes_the_writer_wait_instead_of_piling_up(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    async def body(running: RunningBookie, bookie: BookieId) -> None:
        transport = LocalFirstTransport({bookie: running.bookie}, BookieClientTransport(TcpNetwork(), SystemClock()))
        running.bookie.checkpointer.room.clear()  # the write cache is full: the bookie needs backpressure
        assert running.bookie.needs_backpressure()
        try:
            add = transport.add(bookie, _entry(5, 0, -1), recovery=False, master_key=KEY)
            for _ in range(20):
                await asyncio.sleep(0)
            assert not add.done() and running.bookie.read_entry(5, 0).status is not Status.OK  # it waits
            running.bookie.checkpointer.room.set()  # room again
            await asyncio.wait_for(add, 10)
            assert running.bookie.read_entry(5, 0).status is Status.OK
        finally:
            await transport.close()

    asyncio.run(_with_bookie(tmp_path, body))


def test_an_entry_read_as_a_view_of_a_mapped_log_reaches_the_broker_as_bytes() -> None:
    """The storage core may answer with a view of an entry log mapped into memory; the local
    transport copies it, since the broker keeps entries (its cache). Control: the core's answer
    is a view."""
    from magnetar.node.ledger import _read_local
    from magnetar.storage.bookie import ReadResult

    stored = _entry(3, 0, -1)
    view = memoryview(stored.raw)

    class Core:
        def read_entry_or_last(self, ledger_id: int, entry_id: int | None) -> ReadResult:
            return ReadResult(Status.OK, 0, -1, view)

    response = asyncio.run(_read_local(Core(), BookieId("127.0.0.1", 1), "read", 3, 0, False, b""))  # type: ignore[arg-type]
    assert response.entry is not None
    assert type(response.entry.raw) is bytes and response.entry.raw == stored.raw
    assert isinstance(Core().read_entry_or_last(3, 0).raw, memoryview)
