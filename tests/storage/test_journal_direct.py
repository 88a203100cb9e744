"""The journal's direct group path: ``DiskFile.append_and_sync_then`` and the answers given
straight from its completion (no task per group) while no journal fault point is armed. Which
path a group takes, and that both are durable: ``test_io_paths``."""

from __future__ import annotations

import asyncio
import errno
import struct
import threading
from pathlib import Path

import pytest

from magnetar.protocol.bookie import EncodedEntry
from magnetar.runtime import disk as runtime_disk
from magnetar.runtime import disk_file, disk_pace, disk_threads
from magnetar.runtime.disk import LocalDisk
from magnetar.sim import SimClock
from magnetar.storage.config import BookieConfig
from magnetar.storage.journal import Journal, add_record
from tests.forking import works_in_parent_then_forked_child


def _record(i: int) -> tuple[bytes, bytes]:
    return add_record(b"k", EncodedEntry.build(3, i, i - 1, bytes([i % 256]) * 300).raw)


def test_local_append_and_sync_then_writes_and_answers_on_the_loop_thread(tmp_path: Path) -> None:
    async def scenario() -> None:
        disk = LocalDisk(str(tmp_path))
        file = disk.open("f")
        answers: list[tuple[BaseException | None, bool]] = []
        answered = asyncio.Event()

        def done(error: BaseException | None) -> None:
            answers.append((error, threading.current_thread() is threading.main_thread()))
            answered.set()

        first = file.append_and_sync_then([b"abc", b"defg"], done)
        assert (first, file.size()) == (0, 7)  # reserved at once
        await asyncio.wait_for(answered.wait(), 10)
        assert answers == [(None, True)]
        assert file.read_at(0, 7) == b"abcdefg"
        file.close()

    asyncio.run(scenario())


def _failing_job(descriptors: object, *_args: object) -> bool:
    try:
        raise OSError(errno.EIO, "injected")
    finally:
        descriptors.release()  # type: ignore[attr-defined]  # as the real job does


def test_local_append_and_sync_then_hands_a_write_error_to_done(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    async def scenario() -> None:
        file = LocalDisk(str(tmp_path)).open("f")
        got: asyncio.Future[BaseException | None] = asyncio.get_running_loop().create_future()
        file.append_and_sync_then([b"x" * 10], got.set_result)
        error = await asyncio.wait_for(got, 10)
        assert isinstance(error, OSError) and error.errno == errno.EIO
        file.close()  # the worker released the descriptors

    monkeypatch.setattr(disk_file, "_native", False)  # Python's writer threads (the native writer: test_disk_native)
    monkeypatch.setattr(disk_file, "_write_job", _failing_job)
    asyncio.run(scenario())


def test_a_failed_direct_group_fails_the_journal_and_answers_its_records_with_the_error(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(disk_file, "_native", False)  # Python's writer threads (the native writer: test_disk_native)

    async def scenario() -> None:
        journal = Journal(LocalDisk(str(tmp_path)), SimClock(), BookieConfig(), first_file_id=1)
        await journal.start()
        monkeypatch.setattr(disk_file, "_write_job", _failing_job)
        results = await asyncio.wait_for(
            asyncio.gather(*(journal.append(_record(i)) for i in range(5)), return_exceptions=True), 10)
        assert all(isinstance(r, OSError) and r.errno == errno.EIO for r in results), results
        assert journal.status.value == "failed"
        await journal.stop()

    asyncio.run(scenario())


def test_a_group_that_cannot_start_fails_the_journal_instead_of_hanging(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """``append_and_sync_then`` raising (no worker thread could take the write) answers the
    group's records with the error (without the guard they would wait forever: the control)."""
    def refuse(*_args: object) -> object:
        raise RuntimeError("cannot schedule new futures after shutdown")

    monkeypatch.setattr(disk_file, "_native", False)  # Python's writer threads (the native writer: test_disk_native)

    async def scenario() -> None:
        journal = Journal(LocalDisk(str(tmp_path)), SimClock(), BookieConfig(), first_file_id=1)
        await journal.start()
        monkeypatch.setattr(disk_threads, "_sync_workers", lambda: type("Refusing", (), {"submit": refuse})())
        # The disk was slow lately: every group goes to the writer threads (a lone fast group is
        # written on the loop's thread and never asks them, ``runtime.disk_pace.InlinePace``).
        slow = disk_pace.InlinePace()
        slow.sync_ns = disk_pace.INLINE_SYNC_NS_MAX + 1_000_000
        slow.probe_in = 1_000  # and no probe of the disk among these groups
        monkeypatch.setattr(disk_file, "_PACE", slow)
        results = await asyncio.wait_for(
            asyncio.gather(*(journal.append(_record(i)) for i in range(3)), return_exceptions=True), 10)
        assert all(isinstance(r, RuntimeError) for r in results), results
        assert journal.status.value == "failed"
        await journal.stop()

    asyncio.run(scenario())


def test_a_forked_child_gets_its_own_sync_threads(tmp_path: Path) -> None:
    """The pool is per process: a child forked after the parent used it still gets its writes
    done (an inherited pool has no threads in the child and would never run them)."""

    async def write_once(name: str) -> None:
        file = LocalDisk(str(tmp_path)).open(name)
        got: asyncio.Future[BaseException | None] = asyncio.get_running_loop().create_future()
        file.append_and_sync_then([b"y" * 4096], got.set_result)
        assert await asyncio.wait_for(got, 10) is None
        file.close()

    works_in_parent_then_forked_child(write_once)


def _count_calls(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    counts = {"fdatasync": 0, "dsync_writes": 0}
    real_sync, real_pwritev = runtime_disk.os.fdatasync, runtime_disk.os.pwritev

    def fdatasync(fd: int) -> None:
        counts["fdatasync"] += 1
        real_sync(fd)

    def pwritev(fd: int, buffers: object, offset: int, flags: int = 0) -> int:
        if flags & getattr(runtime_disk.os, "RWF_DSYNC", 0):
            counts["dsync_writes"] += 1
        return real_pwritev(fd, buffers, offset, flags)  # type: ignore[arg-type]

    monkeypatch.setattr(runtime_disk.os, "fdatasync", fdatasync)
    monkeypatch.setattr(runtime_disk.os, "pwritev", pwritev)
    return counts


def _one_group(tmp_path: Path, name: str) -> bytes:
    async def scenario() -> bytes:
        file = LocalDisk(str(tmp_path)).open(name, direct=True)
        got: asyncio.Future[BaseException | None] = asyncio.get_running_loop().create_future()
        file.append_and_sync_then([b"a" * 5000, b"b" * 3192], got.set_result,
                                  unsynced_point="bookie.after_write_before_fsync")
        assert await asyncio.wait_for(got, 10) is None
        data = file.read_at(0, 8192)
        file.close()
        return data

    return asyncio.run(scenario())


@pytest.mark.skipif(not hasattr(runtime_disk.os, "RWF_DSYNC"), reason="no RWF_DSYNC on this platform")
def test_an_aligned_group_is_one_write_that_syncs_itself(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """On an O_DIRECT disk an aligned group is written with RWF_DSYNC and no fdatasync follows;
    with the point between write and sync armed, the group is written, the point passed, then
    synced (the control: the same group takes the two-step path)."""
    from magnetar import faults

    if not LocalDisk(str(tmp_path)).open("probe", direct=True).write_alignment_bytes > 1:
        pytest.skip("this filesystem has no O_DIRECT")
    monkeypatch.setattr(disk_file, "_native", False)  # Python's system calls (the native writer: test_disk_native)
    counts = _count_calls(monkeypatch)
    assert _one_group(tmp_path, "plain") == b"a" * 5000 + b"b" * 3192
    assert counts == {"fdatasync": 0, "dsync_writes": 1}
    counts.update(fdatasync=0, dsync_writes=0)
    faults.observe(True)
    try:
        assert _one_group(tmp_path, "armed") == b"a" * 5000 + b"b" * 3192
        assert "bookie.after_write_before_fsync" in faults.reached()
    finally:
        faults.observe(False)
    assert counts == {"fdatasync": 1, "dsync_writes": 0}


def test_sync_threads_start_only_when_no_thread_is_idle() -> None:
    """``_SyncThreads`` runs every job; a second thread starts only while the first is busy."""
    threads = disk_threads._SyncThreads(4, "t")
    release, started, done = threading.Event(), threading.Event(), threading.Semaphore(0)

    def blocking() -> None:
        started.set()
        release.wait(10)
        done.release()

    threads.submit(blocking)
    assert started.wait(10)
    threads.submit(done.release)  # the first thread is busy: a second one takes this
    assert done.acquire(timeout=10)
    release.set()
    assert done.acquire(timeout=10)
    for _ in range(20):  # both idle now: no third thread for sequential jobs
        threads.submit(done.release)
        assert done.acquire(timeout=10)
    assert threads._threads == 2


def test_the_pad_record_is_cached_by_size_and_replays_as_padding() -> None:
    """``pad_record`` gives the exact size, a CRC that checks, and the same record (header and
    body) for a size seen before: no CRC pass, packing or view per group (session 23; negative
    control: the record made again per call, as before, is an equal header and a new view)."""
    from magnetar.base.checksum import crc32c
    from magnetar.storage.journal import KIND_PAD, pad_record, parse_body

    for size in (9, 10, 100, 4096, 4104, 3 * 4096):
        header, body = pad_record(size)
        assert len(header) + len(body) == size
        length, crc = struct.unpack(">II", header)
        assert length == len(body) and crc == crc32c(bytes(body))
        assert parse_body(bytes(body)).kind == KIND_PAD
    assert pad_record(100)[0] == pad_record(100)[0]
    first, again = pad_record(100), pad_record(100)
    assert first[0] is again[0] and first[1] is again[1]  # (compiled, the pair itself is boxed per call)
