"""The journal's native writer (issue 22, session 22): ``runtime/disk_cwriter.pyx`` (Cython threads
that never take the GIL between jobs) loaded by ``runtime.disk_writer``, and the groups of
``LocalFile.append_and_sync_then`` it takes (``runtime.disk_file``): one job per group while no
fault point of the write is armed, the same writes split into jobs at the armed points otherwise,
each point passed on the loop between them. Without a build (the pure run) the tests that need it
skip; the fallback's own tests run in both."""

from __future__ import annotations

import asyncio
import errno
import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from magnetar import faults
from magnetar.runtime import disk_file, disk_pace, disk_threads, disk_writer
from magnetar.runtime.disk import LocalDisk
from magnetar.runtime.disk_io import _Descriptors
from tests.forking import works_in_parent_then_forked_child
from tests.managed_ledger.harness import until

TORN = "bookie.journal.mid_write"
UNSYNCED = "bookie.after_write_before_fsync"
PAGE = 4096

needs_native = pytest.mark.skipif(not disk_writer.available(), reason=f"no native writer: {disk_writer.REASON}")


class _Jobs(list[list[Any]]):
    """The jobs submitted, and ``answered``: set once the loop has handed a job's answer to its group."""

    def __init__(self) -> None:
        super().__init__()
        self.answered = asyncio.Event()


class _Answering:
    """A job's owner as the writer sees it: the group's ``written``, then ``answered`` set."""

    def __init__(self, owner: Any, answered: asyncio.Event) -> None:
        self.owner = owner
        self.answered = answered

    def written(self, error: int, failed: int, took_ns: int) -> None:
        self.owner.written(error, failed, took_ns)
        self.answered.set()


@pytest.fixture
def native(monkeypatch: pytest.MonkeyPatch) -> _Jobs:
    """Every group off the loop goes to the native writer (a slow disk lately, and no probe: none
    is written inline); returns the jobs submitted, in order (each a list of ops, their buffers
    copied as ``bytes`` when submitted: the group releases its views once answered), and an event
    set at each answer the loop takes (a condition to wait on, not a timer)."""
    monkeypatch.setattr(disk_file, "_native", True)
    slow = disk_pace.InlinePace()
    slow.sync_ns = disk_pace.INLINE_SYNC_NS_MAX + 1_000_000
    slow.probe_in = 1_000_000
    monkeypatch.setattr(disk_file, "_PACE", slow)
    jobs = _Jobs()
    real_port_for = disk_writer.port_for

    class Recording:
        def __init__(self, port: Any) -> None:
            self.port = port

        def submit(self, owner: object, ops: list[Any]) -> None:
            jobs.append([(fd, None if buffers is None else [bytes(b) for b in buffers], offset, flags)
                         for fd, buffers, offset, flags in ops])
            self.port.submit(_Answering(owner, jobs.answered), ops)

    monkeypatch.setattr(disk_writer, "port_for", lambda loop: Recording(real_port_for(loop)))
    return jobs


def _direct_file(tmp_path: Path, name: str = "f") -> Any:
    file = LocalDisk(str(tmp_path)).open(name, direct=True)
    if file.write_alignment_bytes == 1:
        pytest.skip("this filesystem has no O_DIRECT")
    return file


@contextmanager
def unwritable(file: Any, path: Path) -> Iterator[None]:
    """``file``'s O_DIRECT descriptor swapped for a read-only one of ``path`` (a write fails with
    EBADF in the writer), the real one put back after."""
    read_only = os.open(path, os.O_RDONLY)
    real = file._descriptors.direct_fd
    file._descriptors.direct_fd = read_only
    try:
        yield
    finally:
        file._descriptors.direct_fd = real
        os.close(read_only)


async def _append(file: Any, parts: list[bytes], **points: str) -> BaseException | None:
    answer: asyncio.Future[BaseException | None] = asyncio.get_running_loop().create_future()
    threads: list[bool] = []

    def done(error: BaseException | None) -> None:
        threads.append(threading.current_thread() is threading.main_thread())
        answer.set_result(error)

    file.append_and_sync_then(parts, done, **points)
    error = await asyncio.wait_for(answer, 10)
    assert threads == [True]  # answered on the loop's thread
    return error


@needs_native
def test_an_aligned_group_is_one_job_one_synced_write(tmp_path: Path, native: list[list[Any]]) -> None:
    """Unarmed, a group is one job: its aligned copy written with ``RWF_DSYNC`` (durable when it
    returns, no ``fdatasync``). Negative control: the plan without the flag (``dsync`` False in
    ``_GroupWrite._plan``) makes it two ops, a write and a sync."""
    async def scenario() -> None:
        file = _direct_file(tmp_path)
        assert await _append(file, [b"a" * 5000, b"b" * 3192]) is None
        assert len(native) == 1 and len(native[0]) == 1
        fd, buffers, offset, flags = native[0][0]
        assert (fd, offset, flags) == (file._descriptors.direct_fd, 0, os.RWF_DSYNC)
        assert [len(b) for b in buffers] == [8192]
        assert file.read_at(0, 8192) == b"a" * 5000 + b"b" * 3192
        file.close()

    asyncio.run(scenario())


@needs_native
def test_a_buffered_group_is_a_write_and_a_sync(tmp_path: Path, native: list[list[Any]]) -> None:
    """A write the O_DIRECT descriptor cannot take (not aligned) is the buffered write of its
    parts and an ``fdatasync``, in one job."""
    async def scenario() -> None:
        file = LocalDisk(str(tmp_path)).open("f")
        assert await _append(file, [b"abc", b"defg"]) is None
        assert [(op[0], op[1], op[2]) for op in native[0]] == [
            (file._descriptors.fd, [b"abc", b"defg"], 0), (file._descriptors.fd, None, 0)]
        assert file.read_at(0, 7) == b"abcdefg"
        file.close()

    asyncio.run(scenario())


@needs_native
@pytest.mark.parametrize("point", [TORN, UNSYNCED])
def test_an_armed_point_splits_the_group_and_a_hang_holds_it_on_the_loop_not_the_writer(
        tmp_path: Path, native: _Jobs, point: str) -> None:
    """Armed, the point sits between the jobs, passed on the loop: torn, the first half is on disk
    while the point hangs and the second is not; unsynced, the whole group is written (without
    the flag) and its sync waits. The loop runs meanwhile (it takes the writer's answer), the group is not
    answered until the point is released. Negative control: with the plan ignoring armed points
    (``tear`` and ``unsynced`` False) the point is never reached and ``holding`` stays False."""
    async def scenario() -> None:
        file = _direct_file(tmp_path)
        faults.arm(point, "hang")
        answer: asyncio.Future[BaseException | None] = asyncio.get_running_loop().create_future()
        try:
            file.append_and_sync_then([b"h" * PAGE, b"t" * PAGE], answer.set_result, torn_point=TORN,
                                      unsynced_point=UNSYNCED)
            # The first job's answer passes the point on the loop, which then holds the group.
            await asyncio.wait_for(native.answered.wait(), 10)
            assert faults.holding(point) and not answer.done()
            if point == TORN:
                assert file.read_at(0, 2 * PAGE) == b"h" * PAGE  # the file ends after the first half
                assert [[op[2] for op in job] for job in native] == [[0]]
            else:
                assert file.read_at(0, 2 * PAGE) == b"h" * PAGE + b"t" * PAGE
                assert [[(op[2], op[3]) for op in job] for job in native] == [[(0, 0)]]
        finally:
            faults.release(point)
        assert await asyncio.wait_for(answer, 10) is None
        assert file.read_at(0, 2 * PAGE) == b"h" * PAGE + b"t" * PAGE
        last = native[-1]
        assert last[-1][1] is None  # the group ends with its fdatasync
        file.close()

    try:
        asyncio.run(scenario())
    finally:
        faults.disarm_all()


@needs_native
def test_a_point_armed_with_error_fails_the_group_with_it(tmp_path: Path, native: list[list[Any]]) -> None:
    async def scenario() -> None:
        file = _direct_file(tmp_path)
        faults.arm(UNSYNCED, "error")
        error = await _append(file, [b"e" * PAGE], torn_point=TORN, unsynced_point=UNSYNCED)
        assert isinstance(error, faults.InjectedFaultError)
        assert [len(job) for job in native] == [1]  # written, never synced
        file.close()

    try:
        asyncio.run(scenario())
    finally:
        faults.disarm_all()


@needs_native
def test_a_write_error_is_answered_with_its_errno(tmp_path: Path, native: list[list[Any]]) -> None:
    """The writer's failure (here a descriptor that cannot write: EBADF) reaches ``done`` as an
    ``OSError`` with the errno, and the file's descriptors are released (closed with the file)."""
    async def scenario() -> None:
        file = _direct_file(tmp_path)
        with unwritable(file, tmp_path / "f"):
            error = await _append(file, [b"x" * PAGE])
        assert isinstance(error, OSError) and error.errno == errno.EBADF, error
        assert file._descriptors._users == 0
        file.close()

    asyncio.run(scenario())


@needs_native
def test_a_group_reaching_zeros_being_written_waits_for_them(tmp_path: Path, native: list[list[Any]],
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """While ``preallocate`` writes zeros (held here), a group that reaches them is not submitted
    until they are written, so they never land over it. Negative control: submitting it at once
    (no ``_waiting_zeros`` in ``_native_write``) fails the first assertion after ``until``."""
    release = threading.Event()
    real_zeros = disk_threads._zeros_job

    def held_zeros(descriptors: _Descriptors, start: int, end: int, done: threading.Event) -> None:
        release.wait(10)
        real_zeros(descriptors, start, end, done)

    async def scenario() -> None:
        file = _direct_file(tmp_path)
        monkeypatch.setattr(disk_threads, "_zeros_job", held_zeros)
        zeros = asyncio.ensure_future(file.preallocate(64 * 1024))
        await until(lambda: file._zeroing is not None)
        answer: asyncio.Future[BaseException | None] = asyncio.get_running_loop().create_future()
        file.append_and_sync_then([b"z" * PAGE], answer.set_result)
        assert native == [] and len(file._waiting_zeros) == 1
        release.set()
        await asyncio.wait_for(zeros, 10)
        assert await asyncio.wait_for(answer, 10) is None
        assert len(native) == 1 and file._waiting_zeros == []
        assert file.read_at(0, PAGE) == b"z" * PAGE
        file.close()

    asyncio.run(scenario())


@needs_native
def test_the_writer_runs_a_jobs_ops_in_order_and_stops_at_the_first_failure(tmp_path: Path) -> None:
    """The Cython writer itself: ops in order, the failed op's index and errno in the answer, the
    ops after it not run; answers come through the port's eventfd."""
    good = os.open(tmp_path / "g", os.O_RDWR | os.O_CREAT, 0o600)
    bad = os.open(tmp_path / "g", os.O_RDONLY)
    later = os.open(tmp_path / "later", os.O_RDWR | os.O_CREAT, 0o600)
    answers: list[tuple[int, int]] = []

    class Owner:
        def written(self, error: int, failed: int, took_ns: int) -> None:
            answers.append((error, failed))

    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        port = disk_writer.port_for(loop)
        port.submit(Owner(), [(good, [b"ab", memoryview(b"cd")], 0, 0), (bad, [b"x"], 0, 0), (later, [b"no"], 0, 0)])
        port.submit(Owner(), [(good, [b"ef"], 4, os.RWF_DSYNC), (good, None, 0, 0)])
        await until(lambda: len(answers) == 2)

    try:
        asyncio.run(scenario())
        assert sorted(answers) == [(0, 2), (errno.EBADF, 1)]
        assert os.pread(good, 10, 0) == b"abcdef" and os.pread(later, 10, 0) == b""
    finally:
        for fd in (good, bad, later):
            os.close(fd)


@needs_native
def test_a_forked_child_gets_its_own_native_writer(tmp_path: Path, native: list[list[Any]]) -> None:
    """The writer is per process: a child forked after the parent used it still gets its writes
    done (its threads are the parent's; the child has none of them)."""
    async def write_once(name: str) -> None:
        file = _direct_file(tmp_path, name)
        assert await _append(file, [b"y" * PAGE]) is None
        file.close()

    works_in_parent_then_forked_child(write_once)
    assert len(native) >= 1


def _mode_in_child(env: dict[str, str], unset: tuple[str, ...] = ()) -> tuple[str, str]:
    probe = "import magnetar.runtime.disk_writer as w; print(w.MODE); print(w.REASON)"
    root = Path(__file__).resolve().parents[2]
    full = dict(os.environ, PYTHONPATH=str(root / "src"), **env)
    for name in unset:
        full.pop(name, None)
    out = subprocess.run([sys.executable, "-c", probe], env=full, capture_output=True, text=True, timeout=60,
                         check=True).stdout.splitlines()
    return out[0], out[1]


def test_without_a_build_or_with_pure_python_the_journal_uses_the_writer_threads(tmp_path: Path) -> None:
    """The fallback: no build, ``MAGNETAR_PURE_PYTHON=1``, a build of another source (its
    manifest's digest differs), or ``MAGNETAR_NATIVE_WRITER=0`` leave
    ``MODE`` at ``threads``, with the reason."""
    on = {"MAGNETAR_NATIVE_WRITER": "1", "MAGNETAR_PURE_PYTHON": "0"}
    assert _mode_in_child({"MAGNETAR_CYTHON_DIR": str(tmp_path / "none"), **on}) == (
        "threads", f"no native writer build in {tmp_path / 'none'} (`make compile` makes one)")
    assert _mode_in_child({**on, "MAGNETAR_PURE_PYTHON": "1"})[0] == "threads"
    if disk_writer.available():
        built = {"MAGNETAR_CYTHON_DIR": str(disk_writer.BUILD_DIR)}
        mode, reason = _mode_in_child({**built, **on, "MAGNETAR_NATIVE_WRITER": "0"})
        assert mode == "threads" and reason.startswith("MAGNETAR_NATIVE_WRITER=0")
        # On by default: the build, the variable unset.
        assert _mode_in_child({**built, **on}, unset=("MAGNETAR_NATIVE_WRITER",))[0] == "native"
        stale = tmp_path / "stale"
        stale.mkdir()
        manifest = disk_writer.manifest()
        manifest["modules"] = {disk_writer.NATIVE_MODULE: "0" * 64}
        (stale / disk_writer.MANIFEST).write_text(json.dumps(manifest))
        mode, reason = _mode_in_child({"MAGNETAR_CYTHON_DIR": str(stale), **on})
        assert mode == "threads" and "not of today's" in reason
        # The control: the real build's directory, enabled, loads.
        assert _mode_in_child({**built, **on})[0] == "native"
