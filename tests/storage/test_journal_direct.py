"""The journal's direct group path: ``DiskFile.append_and_sync_then`` and the answers given
straight from its completion (no task per group) while no journal fault point is armed. Which
path a group takes, and that both are durable: ``test_io_paths``."""

from __future__ import annotations

import asyncio
import errno
import functools
import struct
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from magnetar.protocol.bookie import EncodedEntry
from magnetar.runtime import disk as runtime_disk
from magnetar.runtime.disk import LocalDisk
from magnetar.sim import SimClock
from magnetar.storage.config import BookieConfig
from magnetar.storage.journal import Journal, add_record


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


def _failing_writes(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every write and sync of the disk module fails with EIO (as a dying disk does)."""
    def fail(*_args: object) -> int:
        raise OSError(errno.EIO, "injected")

    for name in ("pwritev", "pwrite", "fdatasync"):
        monkeypatch.setattr(runtime_disk.os, name, fail)


def test_local_append_and_sync_then_hands_a_write_error_to_done(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    async def scenario() -> None:
        file = LocalDisk(str(tmp_path)).open("f")
        got: asyncio.Future[BaseException | None] = asyncio.get_running_loop().create_future()
        file.append_and_sync_then([b"x" * 10], got.set_result)
        error = await asyncio.wait_for(got, 10)
        assert isinstance(error, OSError) and error.errno == errno.EIO
        file.close()  # the writer released the descriptors

    _failing_writes(monkeypatch)
    asyncio.run(scenario())


def test_a_failed_direct_group_fails_the_journal_and_answers_its_records_with_the_error(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    async def scenario() -> None:
        journal = Journal(LocalDisk(str(tmp_path)), SimClock(), BookieConfig(), first_file_id=1)
        await journal.start()
        _failing_writes(monkeypatch)
        results = await asyncio.wait_for(
            asyncio.gather(*(journal.append(_record(i)) for i in range(5)), return_exceptions=True), 10)
        assert all(isinstance(r, OSError) and r.errno == errno.EIO for r in results), results
        assert journal.status.value == "failed"
        await journal.stop()

    asyncio.run(scenario())


def test_a_group_that_cannot_start_fails_the_journal_instead_of_hanging(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """``append_and_sync_then`` raising (no writer thread could start) answers the group's
    records with the error (without the guard they would wait forever: the control)."""
    def refuse(*_args: object) -> object:
        raise RuntimeError("can't start new thread")

    async def scenario() -> None:
        journal = Journal(LocalDisk(str(tmp_path)), SimClock(), BookieConfig(), first_file_id=1)
        await journal.start()
        monkeypatch.setattr(runtime_disk, "_WriterThreads", refuse)
        results = await asyncio.wait_for(
            asyncio.gather(*(journal.append(_record(i)) for i in range(3)), return_exceptions=True), 10)
        assert all(isinstance(r, RuntimeError) for r in results), results
        assert journal.status.value == "failed"
        await journal.stop()

    asyncio.run(scenario())


def test_a_forked_child_gets_its_own_writer_thread(tmp_path: Path) -> None:
    """A child forked after the parent's disk started its writer thread still gets its writes
    done through the same disk (the inherited writer has no thread in the child and would never
    run them)."""
    import os

    disk = LocalDisk(str(tmp_path))

    async def write_once(name: str) -> None:
        file = disk.open(name)
        got: asyncio.Future[BaseException | None] = asyncio.get_running_loop().create_future()
        file.append_and_sync_then([b"y" * 4096], got.set_result)
        assert await asyncio.wait_for(got, 10) is None
        file.close()

    asyncio.run(write_once("parent"))
    pid = os.fork()
    if pid == 0:  # the child: exit 0 only if its write completed
        code = 1
        try:
            asyncio.run(write_once("child"))
            code = 0
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0


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


def _groups_behind_a_slow_sync(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str,
                               unsynced_point: str) -> tuple[dict[str, int], list[int]]:
    """Four groups on a buffered file; the first one's fdatasync blocks until the other three are
    queued. Returns the disk calls made and the groups answered per loop callback."""
    counts = {"fdatasync": 0, "pwritev": 0}
    real_sync, real_pwritev = runtime_disk.os.fdatasync, runtime_disk.os.pwritev
    release = threading.Event()

    def fdatasync(fd: int) -> None:
        counts["fdatasync"] += 1
        if counts["fdatasync"] == 1:
            assert release.wait(10)
        real_sync(fd)

    def pwritev(fd: int, buffers: object, offset: int, flags: int = 0) -> int:
        counts["pwritev"] += 1
        return real_pwritev(fd, buffers, offset, flags)  # type: ignore[arg-type]

    monkeypatch.setattr(runtime_disk.os, "fdatasync", fdatasync)
    monkeypatch.setattr(runtime_disk.os, "pwritev", pwritev)
    batches: list[int] = []
    real_answer = runtime_disk._answer_jobs

    def answer_jobs(jobs: list[object]) -> None:
        batches.append(len(jobs))
        real_answer(jobs)  # type: ignore[arg-type]

    monkeypatch.setattr(runtime_disk, "_answer_jobs", answer_jobs)
    monkeypatch.setattr(runtime_disk, "DISK_SYNC_THREADS_COUNT_MAX", 1)  # the batching of one thread

    async def scenario() -> None:
        file = LocalDisk(str(tmp_path)).open(name)
        answered: list[int] = []
        all_done = asyncio.Event()

        def done(index: int, error: BaseException | None) -> None:
            assert error is None
            answered.append(index)
            if len(answered) == 4:
                all_done.set()

        for index in range(4):
            file.append_and_sync_then([bytes([index]) * 1000, b"z" * 24], functools.partial(done, index),
                                      unsynced_point=unsynced_point)
            if index == 0:  # the writer is now inside the first group's sync (or about to be)
                await asyncio.to_thread(lambda: _wait_until(lambda: counts["fdatasync"] >= 1))
        release.set()
        await asyncio.wait_for(all_done.wait(), 10)
        assert answered == [0, 1, 2, 3]
        assert file.read_at(0, 4096) == b"".join(bytes([i]) * 1000 + b"z" * 24 for i in range(4))
        file.close()

    asyncio.run(scenario())
    return counts, batches


def _wait_until(condition: Callable[[], bool]) -> None:
    deadline = time.monotonic() + 10
    while not condition():
        assert time.monotonic() < deadline, "condition not met in 10 s"
        threading.Event().wait(0.001)


def test_the_writer_takes_every_queued_group_in_one_write_and_one_sync(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """Groups queued while the (only) writer thread syncs an earlier one are written with one
    ``pwritev``, synced with one ``fdatasync`` and answered in one loop callback, in order; with
    the point between write and sync armed, each group is written and synced on its own (the
    control: it must stop there once per group)."""
    from magnetar import faults

    counts, batches = _groups_behind_a_slow_sync(tmp_path, monkeypatch, "batched", "")
    assert counts == {"fdatasync": 2, "pwritev": 2}
    assert batches == [1, 3]
    faults.observe(True)
    try:
        counts, batches = _groups_behind_a_slow_sync(tmp_path, monkeypatch, "armed", "bookie.after_write_before_fsync")
        assert faults.hits("bookie.after_write_before_fsync") == 4
    finally:
        faults.observe(False)
    assert counts == {"fdatasync": 4, "pwritev": 4}
    assert batches == [1, 3]  # still answered together


def test_the_pad_record_is_cached_by_size_and_replays_as_padding() -> None:
    """``pad_record`` gives the exact size, a CRC that checks, and the same header object for a
    size seen before (no CRC pass per group)."""
    from magnetar.base.checksum import crc32c
    from magnetar.storage.journal import KIND_PAD, pad_record, parse_body

    for size in (9, 10, 100, 4096, 4104, 3 * 4096):
        header, body = pad_record(size)
        assert len(header) + len(body) == size
        length, crc = struct.unpack(">II", header)
        assert length == len(body) and crc == crc32c(bytes(body))
        assert parse_body(bytes(body)).kind == KIND_PAD
    assert pad_record(100)[0] == pad_record(100)[0]


def test_a_second_writer_thread_overlaps_the_next_group_with_a_slow_sync(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """While the first group's sync is stuck, the next group is written, synced and answered by
    a second thread (the journal keeps two groups in flight so the next write overlaps the
    previous sync); with one thread allowed it is not (the control)."""
    real_sync = runtime_disk.os.fdatasync

    def second_group_done_while_first_syncs(threads_max: int) -> bool:
        release, syncing = threading.Event(), threading.Event()
        calls = [0]

        def fdatasync(fd: int) -> None:
            calls[0] += 1
            if calls[0] == 1:
                syncing.set()
                release.wait(10)
            real_sync(fd)

        monkeypatch.setattr(runtime_disk.os, "fdatasync", fdatasync)
        monkeypatch.setattr(runtime_disk, "DISK_SYNC_THREADS_COUNT_MAX", threads_max)

        async def scenario() -> bool:
            file = LocalDisk(str(tmp_path)).open(f"overlap-{threads_max}")
            loop = asyncio.get_running_loop()
            first: asyncio.Future[BaseException | None] = loop.create_future()
            second: asyncio.Future[BaseException | None] = loop.create_future()
            file.append_and_sync_then([b"a" * 100], first.set_result)
            assert await asyncio.to_thread(syncing.wait, 10)
            file.append_and_sync_then([b"b" * 100], second.set_result)
            try:
                # Two threads: answered within a few syncs; one thread: not before the release
                # (the half second the control waits bounds this test's cost).
                await asyncio.wait_for(asyncio.shield(second), 10 if threads_max > 1 else 0.5)
                overlapped = True
            except TimeoutError:
                overlapped = False
            release.set()
            assert await asyncio.wait_for(first, 10) is None
            assert await asyncio.wait_for(second, 10) is None
            assert file.read_at(0, 200) == b"a" * 100 + b"b" * 100
            file.close()
            return overlapped

        return asyncio.run(scenario())

    assert second_group_done_while_first_syncs(2)
    assert not second_group_done_while_first_syncs(1)
