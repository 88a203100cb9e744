"""The entry log's writes and syncs on the native writer (issue 22, session 24): with the native
writer on, ``LocalFile.append_parts``, ``append_and_sync`` and ``sync`` go to its threads (no
GIL, answered through the loop's eventfd) as the journal's groups do, not to the default
executor's Python threads. Without a build (the pure run) these tests skip; the executor's path
keeps its own tests (``tests/storage``)."""

from __future__ import annotations

import asyncio
import errno
import os
from pathlib import Path
from typing import Any

import pytest

from magnetar.runtime.disk import LocalDisk
from magnetar.storage.entry_log import EntryLogger
from tests.runtime.test_disk_native import PAGE, _direct_file, native, needs_native, unwritable

__all__ = ["native"]  # the fixture, used by name below


def _no_executor(monkeypatch: pytest.MonkeyPatch) -> None:
    """The default executor must not be asked (the native writer does the work; the tests run
    asyncio's own loop)."""
    def refused(self: asyncio.AbstractEventLoop, *args: object) -> None:
        raise AssertionError(f"run_in_executor{args!r} with the native writer on")

    monkeypatch.setattr(asyncio.BaseEventLoop, "run_in_executor", refused)


@needs_native
def test_a_direct_unsynced_chunk_is_one_write_without_a_sync(tmp_path: Path, native: list[list[Any]],
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """``append_parts`` on an O_DIRECT file: one job, the aligned copy written with no
    ``RWF_DSYNC`` and no ``fdatasync`` (the entry log syncs once after its last chunk); then
    ``sync`` is one job of one ``fdatasync``. Negative control: ``group.sync = sync`` left out of
    ``_write_native`` (every bulk write synced) fails the flags and ops asserted here."""
    _no_executor(monkeypatch)

    async def scenario() -> None:
        file = _direct_file(tmp_path)
        assert await file.append_parts([b"a" * 5000, b"b" * 3192]) == 0
        assert native == [[(file._descriptors.direct_fd, [b"a" * 5000 + b"b" * 3192], 0, 0)]]
        await file.sync()
        assert native[1] == [(file._descriptors.fd, None, 0, 0)]
        assert file.size() == 2 * PAGE and file.read_at(0, 2 * PAGE) == b"a" * 5000 + b"b" * 3192
        assert file._descriptors._users == 0
        file.close()

    asyncio.run(scenario())


@needs_native
def test_a_synced_chunk_is_one_synced_write_and_a_buffered_one_a_write_and_a_sync(
        tmp_path: Path, native: list[list[Any]], monkeypatch: pytest.MonkeyPatch) -> None:
    """``append_and_sync``: on an O_DIRECT file one write with ``RWF_DSYNC``; on a buffered file
    the write of the parts and an ``fdatasync`` in one job; a buffered ``append_parts`` is the
    write alone."""
    _no_executor(monkeypatch)

    async def scenario() -> None:
        direct = _direct_file(tmp_path, "direct")
        assert await direct.append_and_sync([b"d" * PAGE]) == 0
        assert native == [[(direct._descriptors.direct_fd, [b"d" * PAGE], 0, os.RWF_DSYNC)]]
        buffered = LocalDisk(str(tmp_path)).open("buffered")
        fd = buffered._descriptors.fd
        assert await buffered.append_and_sync([b"abc", b"defg"]) == 0
        assert native[1] == [(fd, [b"abc", b"defg"], 0, 0), (fd, None, 0, 0)]
        assert await buffered.append_parts([b"hi"]) == 7
        assert native[2] == [(fd, [b"hi"], 7, 0)]
        assert buffered.read_at(0, 9) == b"abcdefghi"
        direct.close()
        buffered.close()

    asyncio.run(scenario())


@needs_native
def test_a_large_chunk_is_copied_by_the_writer_and_reads_back(tmp_path: Path, native: list[list[Any]]) -> None:
    """A chunk of 256 KiB or more is copied into its aligned buffer by the writer's thread (the
    fill op, first in the same job), then written: the bytes read back in order."""
    async def scenario() -> None:
        file = _direct_file(tmp_path)
        parts = [bytes([i]) * (64 * 1024 + 1000) for i in range(4)]
        parts.append(b"\0" * (-sum(map(len, parts)) % PAGE))
        total = sum(map(len, parts))
        assert await file.append_parts(parts) == 0
        assert len(native) == 1 and len(native[0]) == 2
        assert native[0][1][0] == file._descriptors.direct_fd and native[0][1][3] == 0
        assert file.read_at(0, total) == b"".join(parts)
        file.close()

    asyncio.run(scenario())


@needs_native
def test_a_failed_chunk_raises_its_errno_and_releases_the_file(tmp_path: Path, native: list[list[Any]]) -> None:
    """The writer's failure (a descriptor that cannot write: EBADF) is raised by ``append_parts``
    as an ``OSError`` with the errno; the descriptors and the aligned buffer are released."""
    async def scenario() -> None:
        file = _direct_file(tmp_path)
        with unwritable(file, tmp_path / "f"), pytest.raises(OSError) as raised:
            await file.append_parts([b"x" * PAGE])
        assert raised.value.errno == errno.EBADF
        assert file._descriptors._users == 0
        file.close()

    asyncio.run(scenario())


@needs_native
def test_the_entry_log_writes_its_chunks_and_syncs_on_the_native_writer(
        tmp_path: Path, native: list[list[Any]], monkeypatch: pytest.MonkeyPatch) -> None:
    """``EntryLogger.append_chunk`` (the checkpoint's flush) and ``sync``: jobs of the native
    writer, no executor; the entries read back at their offsets. Negative control: ``_native``
    False in ``_write_in_worker`` sends them to ``run_in_executor`` (refused here)."""
    async def scenario() -> None:
        logger = EntryLogger(LocalDisk(str(tmp_path)), 1 << 30)
        await logger.start()
        if logger.write_alignment_bytes == 1:
            pytest.skip("this filesystem has no O_DIRECT")
        _no_executor(monkeypatch)
        native.clear()
        raws = [os.urandom(1000 + i) for i in range(5)]
        log_id, offsets = await logger.append_chunk(raws)
        await logger.sync()
        assert len(native) == 2 and native[1][0][1] is None
        assert [logger.read(log_id, offset, len(raw)) for offset, raw in zip(offsets, raws, strict=True)] == raws
        logger.close()

    asyncio.run(scenario())
