"""Real processes: kill -9 a bookie at each bookie fault point under a stream of adds and fences.

After a restart without faults, every acknowledged add reads back byte-identical and every
acknowledged fence still refuses normal adds. Also: bad input on one connection leaves the
bookie serving others, and a wiped data directory at the same address refuses to start.
"""

from __future__ import annotations

import asyncio
import signal
import struct
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from magnetar.base.errors import ClosedError, MagnetarError
from magnetar.ledger.bookie_client import BookieClient
from magnetar.protocol.bookie import Entry, GetInfoRequest, Status, encode
from magnetar.runtime import SystemClock, TcpNetwork
from tests.integration.bookie_proc import BookieProcess, start_bookie

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

KEY = b"k"
STREAM_LEDGER = 1
FENCE_LEDGER_BASE = 1000
# Checkpoints every 100 ms so the flush and checkpoint points are reached under the stream.
FAST_CHECKPOINTS = {"MAGNETAR_BOOKIE_CHECKPOINT_INTERVAL_MS": "100"}

POINTS = [
    ("bookie.before_journal_append", 40),
    ("bookie.journal.mid_write", 40),
    ("bookie.after_write_before_fsync", 40),
    ("bookie.after_fsync_before_reply", 40),
    ("bookie.after_reply", 40),
    ("bookie.entrylog.mid_flush", 4),
    ("bookie.index.before_checkpoint_mark", 4),
    ("bookie.fence.before_journal", 5),
]


def payload(ledger: int, entry: int) -> bytes:
    return struct.pack(">QQ", ledger, entry) * 64  # 1 KiB, distinct per entry


@dataclass
class Record:
    acked: dict[tuple[int, int], bytes] = field(default_factory=dict)
    fenced: list[int] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


async def _stream(port: int, record: Record, adds_max: int = 20_000, window: int = 32) -> None:
    """Adds (pipelined) plus a fencing read every 50 adds, until the bookie dies."""
    client = await BookieClient.connect(TcpNetwork(), "127.0.0.1", port, SystemClock(), request_timeout_ms=10_000)
    pending: set[asyncio.Future[object]] = set()

    async def add(ledger: int, entry: int) -> None:
        data = payload(ledger, entry)
        try:
            response = await client.add(Entry.build(ledger, entry, entry - 1, data), master_key=KEY)
        except MagnetarError:
            return  # the bookie died with this add in flight: not acknowledged
        if response.status is Status.OK:
            record.acked[(ledger, entry)] = data

    async def fence(ledger: int) -> None:
        await add(ledger, 0)
        try:
            response = await client.read(ledger, 0, fence=True, master_key=KEY)
        except MagnetarError:
            return
        if response.status is Status.OK:
            record.fenced.append(ledger)

    try:
        for i in range(adds_max):
            if client.closed:
                break
            task = asyncio.ensure_future(add(STREAM_LEDGER, i))
            pending.add(task)
            task.add_done_callback(pending.discard)
            if i % 50 == 49:
                fence_task = asyncio.ensure_future(fence(FENCE_LEDGER_BASE + i // 50))
                pending.add(fence_task)
                fence_task.add_done_callback(pending.discard)
            if len(pending) >= window:
                await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
        if pending:
            await asyncio.wait(pending)
    finally:
        for task in pending:
            if task.done() and task.exception() is not None and not isinstance(task.exception(), MagnetarError):
                record.errors.append(repr(task.exception()))
        await client.close()


async def _verify(port: int, record: Record) -> None:
    client = await BookieClient.connect(TcpNetwork(), "127.0.0.1", port, SystemClock())
    try:
        for (ledger, entry), data in record.acked.items():
            response = await client.read(ledger, entry)
            assert response.status is Status.OK, (ledger, entry, response.status)
            assert response.entry is not None and response.entry.payload == data
        for ledger in record.fenced:
            late = await client.add(Entry.build(ledger, 1, 0, b"late"), master_key=KEY)
            assert late.status is Status.FENCED, (ledger, late.status)
        # The stream ledger itself was never fenced: it still takes adds.
        fresh = await client.add(Entry.build(STREAM_LEDGER, 10**6, -1, b"after"), master_key=KEY)
        assert fresh.status is Status.OK
    finally:
        await client.close()


def _run_with_crash(tmp_path: Path, point: str, hit: int) -> tuple[Record, int | None]:
    data_dir = tmp_path / "bookie"
    metadata = f"embedded:{tmp_path / 'metadata'}"
    env = dict(FAST_CHECKPOINTS)
    proc = start_bookie(data_dir, metadata, faults=f"{point}:crash@{hit}", extra_env=env)
    record = Record()
    try:
        asyncio.run(asyncio.wait_for(_stream(proc.port, record), timeout=60))
        returncode = proc.wait(timeout_s=30)
    finally:
        proc.stop()
    restarted = start_bookie(data_dir, metadata, port=proc.port, extra_env=env)
    try:
        asyncio.run(asyncio.wait_for(_verify(restarted.port, record), timeout=60))
    finally:
        restarted.stop()
    return record, returncode


@pytest.mark.parametrize(("point", "hit"), POINTS, ids=[p for p, _ in POINTS])
def test_kill_at_fault_point_keeps_every_acknowledged_add_and_fence(tmp_path: Path, point: str, hit: int) -> None:
    record, returncode = _run_with_crash(tmp_path, point, hit)
    assert returncode == -signal.SIGKILL, f"the bookie should have died at {point}"
    assert record.acked, "some adds must have been acknowledged before the crash"
    assert not record.errors, record.errors
    if point == "bookie.fence.before_journal":
        assert record.fenced, "fences must have been acknowledged before the crash"


def test_garbage_oversized_and_bad_digest_do_not_harm_the_bookie(tmp_path: Path) -> None:
    proc = start_bookie(tmp_path / "bookie", f"embedded:{tmp_path / 'metadata'}")

    async def scenario() -> None:
        network, clock = TcpNetwork(), SystemClock()
        good = await BookieClient.connect(network, "127.0.0.1", proc.port, clock)
        assert (await good.add(Entry.build(5, 0, -1, b"kept"), master_key=KEY)).status is Status.OK
        for junk in (
            b"\xff" * 64,  # length far above BOOKIE_FRAME_BYTES_MAX
            struct.pack(">I", 12) + b"\x09" * 12,  # wrong version
            encode(GetInfoRequest(1)) + struct.pack(">I", 3) + b"abc",  # runt frame after a good one
        ):
            conn = await network.connect("127.0.0.1", proc.port)
            conn.write(junk)
            await conn.drain()
            while await conn.read(65536):
                pass  # the bookie answers what it can, then closes this connection
            conn.close()
        entry = Entry.build(5, 1, 0, b"tampered")
        bad = Entry.parse(entry.raw[:-1] + bytes([entry.raw[-1] ^ 1]))  # payload flipped in flight
        assert (await good.add(bad, master_key=KEY)).status is Status.BAD_DIGEST
        read = await good.read(5, 0)
        assert read.status is Status.OK and read.entry is not None and read.entry.payload == b"kept"
        assert (await good.read(5, 1)).status is Status.NO_SUCH_ENTRY
        info = await good.get_info()
        assert info.status is Status.OK and not info.read_only
        await good.close()
        with pytest.raises(ClosedError):
            await good.get_info()

    try:
        asyncio.run(asyncio.wait_for(scenario(), timeout=30))
    finally:
        proc.stop()


def test_wiped_data_directory_at_the_same_address_refuses_to_start(tmp_path: Path) -> None:
    metadata = f"embedded:{tmp_path / 'metadata'}"
    proc = start_bookie(tmp_path / "bookie", metadata)
    port = proc.port
    proc.stop()
    with pytest.raises(RuntimeError, match="decommission the old identity"):
        start_bookie(tmp_path / "wiped", metadata, port=port)
    again = start_bookie(tmp_path / "bookie", metadata, port=port)  # its own directory: fine
    again.stop()


def test_negative_control_the_checker_sees_a_lost_acknowledged_add(tmp_path: Path) -> None:
    record = Record(acked={(STREAM_LEDGER, 10**7): b"never stored"})
    proc: BookieProcess = start_bookie(tmp_path / "bookie", f"embedded:{tmp_path / 'metadata'}")
    try:
        with pytest.raises(AssertionError):
            asyncio.run(asyncio.wait_for(_verify(proc.port, record), timeout=30))
    finally:
        proc.stop()
