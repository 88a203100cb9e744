"""The bookie's bulk I/O paths: worker-thread writes of buffer lists (``LocalFile``), their
simulated twin's crash semantics (``SimFile``), the journal's one group path (armed or not),
the frame decoder fed in arbitrary pieces, and ``TcpNetwork`` reads and flow control."""

from __future__ import annotations

import asyncio
import os
import random
from collections.abc import Callable
from pathlib import Path

import pytest

from magnetar import faults
from magnetar.base.clock import Clock
from magnetar.base.io import Bytes, Disk, KeyValueStore
from magnetar.base.limits import NETWORK_READ_BUFFER_BYTES_MAX, NETWORK_WRITE_BUFFER_BYTES_MAX
from magnetar.base.rng import SeededRng
from magnetar.protocol.bookie import (
    AddRequest,
    EncodedEntry,
    FrameDecoder,
    GetInfoRequest,
    ReadRequest,
    Status,
    encode,
)
from magnetar.runtime import disk as runtime_disk
from magnetar.runtime import disk_buffers
from magnetar.runtime.clock import SystemClock
from magnetar.runtime.disk import LocalDisk
from magnetar.runtime.disk_buffers import pwritev_all
from magnetar.runtime.network import TcpNetwork
from magnetar.sim import SimClock, SimDisk, SimDiskConfig, SimKeyValueStore, run
from magnetar.storage import Bookie
from magnetar.storage.config import BookieConfig
from magnetar.storage.entry_log import log_ids
from magnetar.storage.journal import Journal, JournalPosition, add_record, replay
from tests.storage.test_storage import SMALL


def _parts(count: int, seed: int) -> list[bytes]:
    rng = random.Random(seed)
    return [rng.randbytes(rng.randint(0, 40)) for _ in range(count)]


def test_local_append_parts_writes_every_part_in_order_beyond_one_pwritev(tmp_path: Path) -> None:
    # More parts than one pwritev takes (IOV_MAX), empty parts included.
    parts = _parts(3000, seed=1)

    async def run() -> None:
        file = LocalDisk(str(tmp_path)).open("f")
        file.append(b"head")
        offset = await file.append_parts(parts)
        assert offset == 4
        assert file.size() == 4 + sum(map(len, parts))
        second = await file.append_and_sync([b"tail", memoryview(b"-end")])
        assert second == 4 + sum(map(len, parts))
        file.close()

    asyncio.run(run())
    assert (tmp_path / "f").read_bytes() == b"head" + b"".join(parts) + b"tail-end"


def test_pwritev_all_resumes_after_short_writes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real = os.pwritev
    calls = []

    def short(fd: int, buffers: list[bytes], offset: int) -> int:
        # Write at most 7 bytes per call: every part boundary case is crossed.
        calls.append(offset)
        flat = b"".join(bytes(b) for b in buffers)[:7]
        return real(fd, [flat], offset)

    monkeypatch.setattr(runtime_disk.os, "pwritev", short)
    parts = _parts(50, seed=2)
    fd = os.open(tmp_path / "f", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        pwritev_all(fd, parts, 3)
    finally:
        os.close(fd)
    assert (tmp_path / "f").read_bytes()[3:] == b"".join(parts)
    assert len(calls) > len(parts) // 2


def test_pwritev_all_writes_many_parts_in_one_call_per_iov_batch(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """More parts than one ``pwritev`` takes (an entry-log chunk: two parts per entry): one call
    per ``_IOV_COUNT_MAX`` parts and no more when nothing comes back short, each batch at the
    offset the previous one ended; with short writes (at most 1,000 bytes per call) the bytes are
    the same. Negative control: without ``offset += size`` between batches the second batch
    overwrites the first and the content assertion fails (shown)."""
    from magnetar.runtime import disk_buffers

    real = os.pwritev
    calls: list[int] = []
    limit = [1 << 40]

    def counted(fd: int, buffers: list[bytes], offset: int) -> int:
        calls.append(len(buffers))
        flat = b"".join(bytes(b) for b in buffers)[: limit[0]]
        return real(fd, [flat], offset)

    monkeypatch.setattr(runtime_disk.os, "pwritev", counted)
    iov = disk_buffers._IOV_COUNT_MAX
    parts = [bytes([i % 251]) * (1 + i % 9) for i in range(2 * iov + 5)]
    parts[7] = b""  # an empty part anywhere is fine
    for short in (False, True):
        calls.clear()
        limit[0] = 1_000 if short else 1 << 40
        fd = os.open(tmp_path / f"f{short}", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            pwritev_all(fd, parts, 5)
        finally:
            os.close(fd)
        assert (tmp_path / f"f{short}").read_bytes()[5:] == b"".join(parts)
        if not short:
            assert calls == [iov, iov, 5]
        else:
            assert len(calls) > 3


def test_sim_append_parts_is_lost_by_a_crash_unless_synced() -> None:
    async def scenario() -> None:
        disk = SimDisk()
        disk.makedirs("d")
        file = disk.open("d/f")
        await disk.sync_dir("d")
        await file.append_and_sync([b"durable", b"!"])
        await file.append_parts([b"volatile"])
        assert file.size() == len(b"durable!volatile")
        disk.crash()
        assert disk.open("d/f").read_at(0, 100) == b"durable!"

    run(scenario())


JOURNAL_POINTS = ["bookie.before_journal_append", "bookie.journal.mid_write", "bookie.after_write_before_fsync",
                  "bookie.after_fsync_before_reply", "bookie.after_reply"]


@pytest.mark.parametrize("armed", [None, *JOURNAL_POINTS])
def test_journal_groups_take_one_path_armed_or_not(armed: str | None, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every group is one ``append_and_sync_then``, whether a journal point is armed or not (an
    armed point is a gate on that path, here a zero delay that defers what follows it). The
    same bytes reach the journal and replay either way, and the armed point is reached."""
    from magnetar.sim.disk import SimFile

    calls = 0
    one_call = SimFile.append_and_sync_then

    def counted(self: SimFile, *args: object, **kwargs: object) -> int:
        nonlocal calls
        calls += 1
        return one_call(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(SimFile, "append_and_sync_then", counted)

    async def scenario() -> None:
        disk = SimDisk()
        journal = Journal(disk, SimClock(), BookieConfig(), first_file_id=1)
        await journal.start()
        if armed is not None:
            faults.arm(armed, "delay", delay_ms=0)
        entries = [EncodedEntry.build(7, i, i - 1, bytes([i]) * (100 + i)) for i in range(20)]
        await asyncio.gather(*(journal.append(add_record(b"k", e.raw)) for e in entries))
        assert calls == journal.groups_count >= 1
        if armed is not None:
            assert faults.hits(armed) >= 1
        await journal.stop()
        disk.crash()
        result = await replay(disk, JournalPosition(0, 0))
        assert [r.entry_raw for _, r in result.records] == [e.raw for e in entries]

    try:
        run(scenario())
    finally:
        faults.disarm_all()


@pytest.mark.parametrize("point", ["bookie.after_fsync_before_reply", "bookie.after_reply"])
def test_a_group_held_at_a_reply_gate_holds_every_later_group(point: str) -> None:
    """The reply gates are on the one path: a hang there holds its group's answers (or what
    follows them) and every later group's, which all come in order once released."""

    async def scenario() -> None:
        disk = SimDisk()
        journal = Journal(disk, SimClock(), BookieConfig(journal_group_bytes_max=4096), first_file_id=1)
        await journal.start()
        faults.arm(point, "hang")
        answered: list[int] = []
        for i in range(6):  # one record per group: two do not fit in 4 KiB
            journal.submit(add_record(b"k", EncodedEntry.build(7, i, i - 1, bytes(3000)).raw),
                           lambda error, i=i: answered.append(i if error is None else -1))
        async def until(condition: Callable[[], bool]) -> None:  # in virtual time, bounded
            for _ in range(1000):
                if condition():
                    return
                await asyncio.sleep(0.001)  # a real disk worker thread acts meanwhile: poll, bounded
            raise AssertionError("condition never held")

        await until(lambda: faults.hits(point) == 1 and journal.groups_count >= 2)  # a later group synced
        # Held before the first group's answers, or after them (its records answered, no later one).
        assert answered == ([] if point == "bookie.after_fsync_before_reply" else [0])
        faults.release(point)
        await until(lambda: len(answered) == 6)
        assert answered == list(range(6))
        await journal.stop()

    try:
        run(scenario())
    finally:
        faults.disarm_all()


@pytest.mark.parametrize("point", ["bookie.journal.mid_write", "bookie.after_write_before_fsync"])
def test_real_journal_write_hangs_at_a_point_on_the_worker_thread_until_released(point: str,
                                                                                  tmp_path: Path) -> None:
    """On the real disk the points inside a group's write are passed on the worker thread: a hang
    there holds the add unanswered (the loop stays free) until ``release``; nothing is lost."""

    async def scenario() -> None:
        journal = Journal(LocalDisk(str(tmp_path)), SystemClock(), BookieConfig(), first_file_id=1)
        await journal.start()
        faults.arm(point, "hang")
        entry = EncodedEntry.build(7, 0, -1, b"x" * 5000)
        added = asyncio.ensure_future(journal.append(add_record(b"k", entry.raw)))
        deadline = asyncio.get_running_loop().time() + 10
        while faults.hits(point) < 1:  # the worker thread reached the point
            assert asyncio.get_running_loop().time() < deadline, "the write never reached the point"
            await asyncio.sleep(0.001)  # a real disk worker thread acts meanwhile: poll, bounded
        assert not added.done()
        faults.release(point)
        await asyncio.wait_for(added, 10)
        await journal.stop()
        result = await replay(LocalDisk(str(tmp_path)), JournalPosition(0, 0))
        assert [r.entry_raw for _, r in result.records] == [entry.raw]

    try:
        asyncio.run(scenario())
    finally:
        faults.disarm_all()


def test_real_journal_write_error_at_a_point_fails_the_journal(tmp_path: Path) -> None:
    async def scenario() -> None:
        journal = Journal(LocalDisk(str(tmp_path)), SystemClock(), BookieConfig(), first_file_id=1)
        await journal.start()
        faults.arm("bookie.after_write_before_fsync", "error")
        with pytest.raises(faults.InjectedFaultError):
            await asyncio.wait_for(journal.append(add_record(b"k", EncodedEntry.build(7, 0, -1, b"y").raw)), 10)
        await journal.stop()

    try:
        asyncio.run(scenario())
    finally:
        faults.disarm_all()


def test_frame_decoder_gives_the_same_messages_however_the_stream_is_cut() -> None:
    messages = [
        AddRequest(1, EncodedEntry.build(3, 0, -1, b"x" * 3000), b"key"),
        GetInfoRequest(2),
        ReadRequest(3, 3, 0, fence=True, master_key=b"key"),
        AddRequest(4, EncodedEntry.build(3, 1, 0, b""), b""),
    ]
    stream = b"".join(encode(m) for m in messages)
    rng = random.Random(3)
    cuts_list = [list(range(1, len(stream))), [], [4], [2, 5, 9, 3020]]
    cuts_list += [sorted(rng.sample(range(1, len(stream)), k)) for k in (1, 3, 10, 40) for _ in range(5)]
    for cuts in cuts_list:
        decoder = FrameDecoder()
        got = []
        for start, end in zip([0, *cuts], [*cuts, len(stream)], strict=True):
            got += decoder.feed(stream[start:end])
            frame_max = max(len(encode(m)) for m in messages)
            assert decoder.buffered_bytes < frame_max  # at most one partial frame is held
        assert got == messages, cuts
        assert decoder.buffered_bytes == 0


def test_tcp_connection_bounds_unread_bytes_and_delivers_them_intact() -> None:
    # More than the sender may buffer: its drain() has to wait for this reader.
    payload = random.Random(4).randbytes(3 * NETWORK_WRITE_BUFFER_BYTES_MAX)

    async def run() -> None:
        network = TcpNetwork()
        served: asyncio.Future[None] = asyncio.get_running_loop().create_future()

        async def send_all(connection: object) -> None:
            from magnetar.runtime.network import TcpConnection

            assert isinstance(connection, TcpConnection)
            for at in range(0, len(payload), 65536):
                connection.write(payload[at : at + 65536])
                await connection.drain()
            connection.close()
            served.set_result(None)

        listener = await network.listen("127.0.0.1", 0, send_all)
        client = await network.connect("127.0.0.1", listener.port)
        protocol = client._protocol  # the bound is internal state
        for _ in range(1000):  # the sender fills what the receiver may buffer, then waits
            if protocol.reading_paused:
                break
            await asyncio.sleep(0.005)
        assert protocol.reading_paused and not served.done()
        assert protocol.buffered_bytes <= NETWORK_READ_BUFFER_BYTES_MAX + 256 * 1024
        received = bytearray()
        while True:
            chunk = await client.read(100_000)
            if not chunk:
                break
            assert len(chunk) <= 100_000
            received += chunk
        await served
        assert bytes(received) == payload
        client.close()
        listener.close()

    asyncio.run(asyncio.wait_for(run(), timeout=20))


KEY = b"k"
ALIGNED_CONFIG = SMALL  # small files: rotations happen, groups and chunks pad often


async def _aligned_round_trip(disk: Disk, kv: KeyValueStore, clock: Clock) -> list[bytes]:
    """Adds of odd sizes, a checkpoint, more adds (every journal file ends aligned); returns the
    entries' raw bytes."""
    bookie = Bookie(disk, kv, clock, ALIGNED_CONFIG)
    await bookie.start()
    entries = [EncodedEntry.build(5, i, i - 1, bytes([i % 251]) * (37 * i + 1)) for i in range(120)]
    for chunk in (entries[:70], entries[70:]):
        statuses = await asyncio.gather(*(bookie.add(e, KEY) for e in chunk))
        assert set(statuses) == {Status.OK}
        if chunk is entries[:70]:
            await bookie.checkpoint()
    for name in disk.listdir("journal"):
        size = disk.open(f"journal/{name}").size()
        assert size == 12 or size % 4096 == 0, (name, size)  # the header alone, or aligned groups
    await bookie.stop()
    return [e.raw for e in entries]


def _reads(bookie: Bookie, count: int) -> list[bytes | None]:
    return [bookie.read_entry(5, i).raw for i in range(count)]


def test_aligned_sim_disk_pads_journal_and_entry_log_and_replays_after_a_power_cut() -> None:
    async def scenario() -> None:
        disk = SimDisk(SimDiskConfig(direct_alignment_bytes=4096))
        kv = SimKeyValueStore()
        raws = await _aligned_round_trip(disk, kv, SimClock())
        disk.crash()
        kv.crash()
        bookie = Bookie(disk, kv.reopen(), SimClock(), ALIGNED_CONFIG)
        await bookie.start()
        assert _reads(bookie, len(raws)) == raws
        await bookie.stop()

    run(scenario())


def test_local_disk_direct_path_round_trip_reads_views_of_mapped_logs(tmp_path: Path) -> None:
    """The real O_DIRECT path (or its buffered fallback where the filesystem has none). Entries
    read back from entry logs come as views of the mapped log (no copy) with the right bytes; the
    read-ahead caches views too. Removing a log empties the read cache, so no cached view keeps a
    removed log's disk space (negative control: the cache held views just before)."""

    async def scenario() -> None:
        disk = LocalDisk(str(tmp_path))
        kv = SimKeyValueStore()
        raws = await _aligned_round_trip(disk, kv, SystemClock())
        bookie = Bookie(disk, kv.reopen(), SystemClock(), ALIGNED_CONFIG)
        await bookie.start()
        got = _reads(bookie, len(raws))
        assert got == raws
        views = [raw for raw in got if isinstance(raw, memoryview)]
        assert len(views) >= 60 and all(v.readonly for v in views)  # the checkpointed first 70
        assert bookie._read_cache.bytes > 0
        bookie.collector.remove_log(log_ids(disk)[0])
        assert bookie._read_cache.bytes == 0
        await bookie.stop()
        # still the entries' bytes after the bookie closed its logs
        assert [bytes(v) for v in views] == [raws[i] for i, raw in enumerate(got) if isinstance(raw, memoryview)]

    asyncio.run(scenario())


@pytest.mark.parametrize("in_flight", [1, 2])
def test_journal_groups_overlap_but_complete_in_submission_order(in_flight: int) -> None:
    """With random sync latencies a later group's fsync often returns first; its records are
    still answered only after every earlier record (and never more groups than allowed fly)."""

    async def scenario() -> None:
        disk = SimDisk(rng=SeededRng(7))
        config = BookieConfig(journal_groups_in_flight_max=in_flight)
        journal = Journal(disk, SimClock(), config, first_file_id=1)
        await journal.start()
        answered: list[int] = []
        most_in_flight = 0
        futures = []
        for i in range(200):
            done: asyncio.Future[None] = asyncio.get_running_loop().create_future()

            def callback(error: BaseException | None, i: int = i, done: asyncio.Future[None] = done) -> None:
                assert error is None
                answered.append(i)
                done.set_result(None)

            journal.submit(add_record(b"k", EncodedEntry.build(9, i, i - 1, b"x" * 500).raw), callback)
            futures.append(done)
            await asyncio.sleep(0.0001)  # adds keep arriving while groups are written
            most_in_flight = max(most_in_flight, len(journal._inflight))
        await asyncio.gather(*futures)
        assert answered == list(range(200))
        assert most_in_flight == in_flight
        await journal.stop()

    run(scenario())


def test_local_file_views_are_mapped_reads_valid_after_growth_close_and_removal(tmp_path: Path) -> None:
    disk = LocalDisk(str(tmp_path))
    file = disk.open("log")
    file.append(b"a" * 5000)
    first = file.read_view(100, 10)
    assert isinstance(first, memoryview) and first.readonly and bytes(first) == b"a" * 10
    file.append(b"b" * 5000)  # past the map: the next view maps the file again at its new length
    second = file.read_view(4995, 10)
    assert isinstance(second, memoryview) and bytes(second) == b"aaaaabbbbb"
    assert file.read_view(9995, 10) == b"bbbbb"  # past the end: read_at's short copy
    file.close()
    disk.remove("log")
    assert bytes(first) == b"a" * 10 and bytes(second) == b"aaaaabbbbb"  # the maps live on in the views


@pytest.mark.parametrize("seed", range(6))
def test_aligned_copy_lays_mixed_parts_back_to_back(seed: int) -> None:
    """``_copy_into`` writes large parts straight into the aligned buffer and joins the runs of
    small parts between them: the buffer holds exactly the parts' bytes in order, for small-only,
    large-only and mixed lists (runs of small parts first, between and last, empty parts too)."""
    import mmap

    rng = random.Random(seed)
    size_min = disk_buffers._PART_COPY_BYTES_MIN
    shapes = [lambda: rng.randint(0, 40), lambda: rng.randint(size_min, 5 * size_min),
              lambda: rng.choice([0, 30, size_min - 1, size_min, 100_000])]
    parts: list[Bytes] = []
    for _ in range(rng.randint(1, 60)):
        data = rng.randbytes(rng.choice(shapes)())
        parts.append(memoryview(data) if rng.random() < 0.3 else data)
    total = sum(len(part) for part in parts)
    buffer = mmap.mmap(-1, total + 4096)
    buffer.write(b"\xff" * len(buffer))
    view = disk_buffers._copy_into(buffer, parts, total)
    assert len(view) == total and bytes(view) == b"".join(parts)
    assert buffer[total:] == b"\xff" * 4096  # nothing written past the parts
    view.release()


def test_local_direct_group_of_large_entries_reads_back_intact(tmp_path: Path) -> None:
    """A journal-like group on the real disk, aligned (the O_DIRECT path where the filesystem has
    it): framing parts of a few bytes around entries of ~100 KiB and a zero pad to the alignment,
    written with ``append_and_sync``; the file then holds exactly those bytes."""
    rng = random.Random(7)
    parts: list[Bytes] = []
    for _ in range(12):
        parts += [rng.randbytes(30), rng.randbytes(100_000 + rng.randint(0, 999))]
    parts.append(bytes(-sum(map(len, parts)) % 4096))

    async def scenario() -> None:
        file = LocalDisk(str(tmp_path)).open("group", direct=True)
        alignment = file.write_alignment_bytes  # 4096 where the filesystem takes O_DIRECT
        offset = await file.append_and_sync(parts)
        again = await file.append_and_sync(parts)  # the pooled buffer, reused
        assert offset == 0 and again == sum(map(len, parts))
        assert file.read_at(0, 2 * again) == b"".join(parts) * 2
        assert file.write_alignment_bytes == alignment  # the direct writes were not refused
        file.close()

    asyncio.run(scenario())


@pytest.mark.parametrize("memfd", [True, False])
def test_aligned_buffer_fill_copies_the_parts_with_or_without_a_memfd(memfd: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """``_AlignedBuffer.fill`` (a large write's copy, made by the worker thread) puts the parts
    back to back at the buffer's start through its memfd; without one (no ``memfd_create``, or
    a failing write to it) by copying in the calling thread: the same bytes either way."""
    if not memfd:
        monkeypatch.delattr(os, "memfd_create", raising=False)
    buffer = disk_buffers._AlignedBuffer(4 * 1024 * 1024)
    assert (buffer.fd >= 0) == (memfd and hasattr(os, "memfd_create"))
    rng = random.Random(3)
    parts: list[Bytes] = [rng.randbytes(rng.choice([12, 100_000])) for _ in range(30)]
    total = sum(map(len, parts))
    aligned = memoryview(buffer.map)[:total]
    buffer.fill(parts, aligned)
    assert bytes(aligned) == b"".join(parts)
    if buffer.fd >= 0:  # a failing memfd write: copied in this thread instead
        def refuse(*_args: object) -> int:
            raise OSError(12, "no memory")

        monkeypatch.setattr(os, "pwritev", refuse)
        again = list(reversed(parts))
        buffer.fill(again, aligned)
        assert bytes(aligned) == b"".join(again)
    aligned.release()
