"""The journal's direct group path: ``DiskFile.append_and_sync_then`` and the answers given
straight from its completion (no task per group) while no journal fault point is armed. Which
path a group takes, and that both are durable: ``test_io_paths``."""

from __future__ import annotations

import asyncio
import errno
import threading
from pathlib import Path

import pytest

from magnetar.protocol.bookie import Entry
from magnetar.runtime import disk as runtime_disk
from magnetar.runtime.disk import LocalDisk
from magnetar.sim import SimClock
from magnetar.storage.config import BookieConfig
from magnetar.storage.journal import Journal, add_record


def _record(i: int) -> tuple[bytes, bytes]:
    return add_record(b"k", Entry.build(3, i, i - 1, bytes([i % 256]) * 300).raw)


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

    monkeypatch.setattr(runtime_disk, "_write_job", _failing_job)
    asyncio.run(scenario())


def test_a_failed_direct_group_fails_the_journal_and_answers_its_records_with_the_error(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    async def scenario() -> None:
        journal = Journal(LocalDisk(str(tmp_path)), SimClock(), BookieConfig(), first_file_id=1)
        await journal.start()
        monkeypatch.setattr(runtime_disk, "_write_job", _failing_job)
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

    async def scenario() -> None:
        journal = Journal(LocalDisk(str(tmp_path)), SimClock(), BookieConfig(), first_file_id=1)
        await journal.start()
        monkeypatch.setattr(runtime_disk, "_sync_workers", lambda: type("Refusing", (), {"submit": refuse})())
        results = await asyncio.wait_for(
            asyncio.gather(*(journal.append(_record(i)) for i in range(3)), return_exceptions=True), 10)
        assert all(isinstance(r, RuntimeError) for r in results), results
        assert journal.status.value == "failed"
        await journal.stop()

    asyncio.run(scenario())


def test_a_forked_child_gets_its_own_sync_threads(tmp_path: Path) -> None:
    """The pool is per process: a child forked after the parent used it still gets its writes
    done (an inherited pool has no threads in the child and would never run them)."""
    import os

    async def write_once(name: str) -> None:
        file = LocalDisk(str(tmp_path)).open(name)
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
