"""``Disk`` over the local filesystem, rooted at a node's data directory.

``append``/``write_at`` call ``os.pwrite`` in the event loop (small, rare writes: file headers).
The bulk paths run in a worker thread so the event loop keeps serving meanwhile (group commit
relies on that): ``append_parts`` (``os.pwritev`` of the caller's buffers, no joined copy; the
copy into the page cache is the costly part and ``pwritev`` releases the GIL), ``sync``
(``fdatasync``) and ``append_and_sync`` (both in one worker call: one thread hand-off per
journal group).

A file opened with ``direct=True`` also gets an ``O_DIRECT`` descriptor: a bulk write whose
offset and length are multiples of ``DISK_DIRECT_ALIGNMENT_BYTES`` is copied through a reusable
aligned buffer and written past the page cache (``write_alignment_bytes`` tells the owner, who
pads its writes to it). In a VM the page-cache copy of buffered writes was most of the bookie's
CPU (``copy_folio_from_iter_atomic`` in ``perf``); the direct path costs one user-space copy into
a buffer that stays resident. Any other write, and every read, goes through the ordinary
descriptor (the kernel keeps the two coherent). A filesystem without ``O_DIRECT`` support
(tmpfs) simply keeps the buffered path. ``fdatasync`` covers both: it applies to the file.

A worker call works on its own duplicates of the file descriptors, so ``close()`` while a call is
still running (a cancelled caller) never lets the call write into a file that reused the number.
"""

from __future__ import annotations

import asyncio
import errno
import mmap
import os
import shutil
from collections.abc import Sequence

from magnetar.base.errors import InvalidArgument, NotFound
from magnetar.base.io import Bytes
from magnetar.base.limits import DISK_DIRECT_ALIGNMENT_BYTES, DISK_DIRECT_BUFFER_BYTES

#: Buffers one ``pwritev`` call takes (the kernel's IOV_MAX); longer part lists take several.
_IOV_COUNT_MAX = min(os.sysconf("SC_IOV_MAX"), 1024) if hasattr(os, "sysconf") else 1024


def pwritev_all(fd: int, parts: Sequence[Bytes], offset: int) -> None:
    """Write ``parts`` back to back at ``offset``, retrying short writes (blocking; any thread)."""
    pending: list[Bytes] = [part for part in parts if len(part)]
    start = 0
    while start < len(pending):
        batch = pending[start : start + _IOV_COUNT_MAX]
        written = os.pwritev(fd, batch, offset)
        if written <= 0:
            raise OSError(errno.EIO, f"pwritev wrote nothing at offset {offset}")
        offset += written
        for part in batch:
            size = len(part)
            if written < size:
                # A short write (rare on files: a signal, a full disk): go on from the byte after.
                pending[start] = memoryview(part)[written:] if written else part
                break
            written -= size
            start += 1


def _pwrite_all(fd: int, data: memoryview, offset: int) -> None:
    written = 0
    while written < len(data):
        count = os.pwrite(fd, data[written:], offset + written)
        if count <= 0:
            raise OSError(errno.EIO, f"pwrite wrote nothing at offset {offset + written}")
        written += count


def write_direct(fd: int, buffer: mmap.mmap, parts: Sequence[Bytes], offset: int) -> None:
    """Copy ``parts`` through the aligned ``buffer`` and write them with ``O_DIRECT`` descriptor
    ``fd`` at ``offset``; offset, total length and buffer size are multiples of the alignment,
    so every write is too (blocking; any thread)."""
    with memoryview(buffer) as view:
        fill = 0
        for part in parts:
            with memoryview(part) as source:
                at = 0
                while at < len(source):
                    count = min(len(source) - at, len(view) - fill)
                    view[fill : fill + count] = source[at : at + count]
                    fill += count
                    at += count
                    if fill == len(view):
                        _pwrite_all(fd, view, offset)
                        offset += fill
                        fill = 0
        if fill:
            _pwrite_all(fd, view[:fill], offset)


def _write_then_sync(
    fd: int, parts: Sequence[Bytes], offset: int, sync: bool, direct: tuple[int, mmap.mmap] | None
) -> bool:
    """The worker-thread write (and sync); returns whether the direct path took the bytes."""
    try:
        written_direct = False
        if direct is not None:
            try:
                write_direct(direct[0], direct[1], parts, offset)
                written_direct = True
            except OSError as exc:
                if exc.errno != errno.EINVAL:
                    raise
                # The filesystem refuses O_DIRECT writes after all: the same bytes, buffered.
        if not written_direct:
            pwritev_all(fd, parts, offset)
        if sync:
            os.fdatasync(fd)
        return written_direct
    finally:
        os.close(fd)
        if direct is not None:
            os.close(direct[0])


def _sync_fd(fd: int) -> None:
    try:
        os.fdatasync(fd)
    finally:
        os.close(fd)


class LocalFile:
    __slots__ = ("_direct_buffer", "_direct_fd", "_fd", "_path", "_size")

    def __init__(self, path: str, fd: int, direct_fd: int = -1) -> None:
        self._path = path
        self._fd = fd
        self._size = os.fstat(fd).st_size
        self._direct_fd = direct_fd
        self._direct_buffer: mmap.mmap | None = None

    @property
    def write_alignment_bytes(self) -> int:
        return DISK_DIRECT_ALIGNMENT_BYTES if self._direct_fd >= 0 else 1

    @property
    def path(self) -> str:
        return self._path

    def size(self) -> int:
        return self._size

    def append(self, data: bytes | bytearray | memoryview) -> int:
        offset = self._size
        self._write_all(offset, data)
        return offset

    def write_at(self, offset: int, data: bytes | bytearray | memoryview) -> None:
        self._write_all(offset, data)

    def _write_all(self, offset: int, data: bytes | bytearray | memoryview) -> None:
        view = memoryview(data)
        written = 0
        while written < len(view):
            written += os.pwrite(self._fd, view[written:], offset + written)
        self._size = max(self._size, offset + len(view))

    def read_at(self, offset: int, length: int) -> bytes:
        return os.pread(self._fd, length, offset)

    def truncate(self, size: int) -> None:
        os.ftruncate(self._fd, size)
        self._size = size

    async def append_parts(self, parts: Sequence[Bytes]) -> int:
        return await self._write_in_worker(parts, sync=False)

    async def append_and_sync(self, parts: Sequence[Bytes]) -> int:
        return await self._write_in_worker(parts, sync=True)

    async def _write_in_worker(self, parts: Sequence[Bytes], *, sync: bool) -> int:
        offset = self._size
        total = sum(len(part) for part in parts)
        self._size += total
        direct: tuple[int, mmap.mmap] | None = None
        if self._direct_fd >= 0 and total and not (offset | total) % DISK_DIRECT_ALIGNMENT_BYTES:
            if self._direct_buffer is None:
                self._direct_buffer = mmap.mmap(-1, DISK_DIRECT_BUFFER_BYTES)  # page-aligned
            direct = (os.dup(self._direct_fd), self._direct_buffer)
        fd = os.dup(self._fd)
        written_direct = await asyncio.get_running_loop().run_in_executor(
            None, _write_then_sync, fd, parts, offset, sync, direct
        )
        if direct is not None and not written_direct:
            self._close_direct()
        return offset

    async def sync(self) -> None:
        fd = os.dup(self._fd)
        await asyncio.get_running_loop().run_in_executor(None, _sync_fd, fd)

    def _close_direct(self) -> None:
        if self._direct_fd >= 0:
            os.close(self._direct_fd)
            self._direct_fd = -1
        # Not mmap.close(): a cancelled caller's worker call may still be copying into it.
        self._direct_buffer = None

    def close(self) -> None:
        self._close_direct()
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


class LocalDisk:
    """A ``Disk`` rooted at ``root``; relative paths only, no escaping the root."""

    def __init__(self, root: str) -> None:
        self.root = os.path.abspath(root)
        os.makedirs(self.root, exist_ok=True)

    def _abs(self, path: str) -> str:
        full = os.path.normpath(os.path.join(self.root, path))
        if full != self.root and not full.startswith(self.root + os.sep):
            raise InvalidArgument(f"path {path!r} escapes the data directory")
        return full

    def open(self, path: str, *, create: bool = True, direct: bool = False) -> LocalFile:
        flags = os.O_RDWR | (os.O_CREAT if create else 0)
        full = self._abs(path)
        try:
            fd = os.open(full, flags, 0o644)
        except FileNotFoundError:
            raise NotFound(f"no file {path!r}") from None
        direct_fd = -1
        if direct and hasattr(os, "O_DIRECT"):
            try:
                direct_fd = os.open(full, os.O_WRONLY | os.O_DIRECT)
            except OSError:
                direct_fd = -1  # no O_DIRECT here (tmpfs): buffered writes only
        return LocalFile(path, fd, direct_fd)

    def exists(self, path: str) -> bool:
        return os.path.exists(self._abs(path))

    def listdir(self, path: str) -> list[str]:
        try:
            return sorted(os.listdir(self._abs(path)))
        except FileNotFoundError:
            return []

    def makedirs(self, path: str) -> None:
        os.makedirs(self._abs(path), exist_ok=True)

    def remove(self, path: str) -> None:
        full = self._abs(path)
        if os.path.isdir(full):
            shutil.rmtree(full)
        else:
            try:
                os.remove(full)
            except FileNotFoundError:
                pass

    def rename(self, src: str, dst: str) -> None:
        os.replace(self._abs(src), self._abs(dst))

    async def sync_dir(self, path: str) -> None:
        def _sync() -> None:
            fd = os.open(self._abs(path), os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)

        await asyncio.get_running_loop().run_in_executor(None, _sync)

    def free_bytes(self) -> int:
        stat = os.statvfs(self.root)
        return stat.f_bavail * stat.f_frsize
