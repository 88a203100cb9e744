"""``Disk`` over the local filesystem, rooted at a node's data directory.

``append``/``write_at`` call ``os.pwrite`` in the event loop (small, rare writes: file headers).
The bulk paths run in a worker thread so the event loop keeps serving meanwhile (group commit
relies on that): ``append_parts`` (``os.pwritev`` of the caller's buffers, no joined copy; the
copy into the page cache is the costly part and ``pwritev`` releases the GIL), ``sync``
(``fdatasync``) and ``append_and_sync`` (both in one worker call: one thread hand-off per
journal group).

A file opened with ``direct=True`` also gets an ``O_DIRECT`` descriptor: a bulk write whose
offset and length are multiples of ``DISK_DIRECT_ALIGNMENT_BYTES`` (and at most
``DISK_DIRECT_BUFFER_BYTES_MAX``) is copied into a page-aligned buffer (from a pool the files of
one ``LocalDisk`` share, so rotating to a new file reuses them) and written past the page cache (``write_alignment_bytes`` tells the owner, who
pads its writes to it). In a VM the page-cache copy of buffered writes was most of the bookie's
CPU (``copy_folio_from_iter_atomic`` in ``perf``); the direct path costs one user-space copy into
a buffer that stays resident. Any other write, and every read, goes through the ordinary
descriptor (the kernel keeps the two coherent). A filesystem without ``O_DIRECT`` support
(tmpfs) simply keeps the buffered path. ``fdatasync`` covers both: it applies to the file.
A write of ``_WORKER_COPY_BYTES_MIN`` or more is copied into its aligned buffer by the worker
thread (one ``pwritev`` into the buffer's ``memfd``, GIL released: ``_AlignedBuffer``), a
smaller one on the event loop before the worker call.

``preallocate(end)`` writes zeros past every byte reserved so far (``O_DIRECT`` from anonymous
zero pages, in a worker thread, then ``fdatasync``) without moving ``size()``: a later synced
write below ``end`` changes no file metadata (ext4 commits its journal for an extending or
unwritten-extent write; ``fallocate`` measured the same as extending, docs/performance.md
session 16). A write reserved meanwhile that may reach the zeros waits for them in its thread.

``close()`` while a worker call still runs (its caller was cancelled) defers closing the
descriptors to the end of that call, so a call never writes into a file that reused the number.

``remove`` of a file renames it into ``<root>/.trash`` (cheap, on the event loop: the path is
gone at once, and durably so after ``sync_dir`` of its directory, as with an unlink) and one
background thread deletes it gently: it shrinks the file ``_TRIM_STEP_BYTES`` at a time with a
pause between steps, then unlinks it. Unlinking a large file in one step frees all its extents
in one filesystem transaction (and, with the ``discard`` mount option, one large discard): on the
bench VM unlinking a 512 MiB journal file took ~65 ms on the event loop and a concurrent 4 KiB
``fdatasync`` (the journal's group commit) waited up to 30-45 ms; trimmed in 16 MiB steps, every
such ``fdatasync`` stayed under 2.5 ms. Files left in the trash by a crash are deleted when the
next ``LocalDisk`` opens the directory.

The modules (session 19): ``LocalFile`` is ``runtime.disk_file`` and its blocking writes
``runtime.disk_io`` (both compiled: a journal group's work on the loop thread), the writer threads
and the zeros and sync jobs ``runtime.disk_threads`` (interpreted), the aligned buffers
``runtime.disk_buffers``, the inline-write rule ``runtime.disk_pace``; this module keeps
``LocalDisk`` and the trash.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import queue
import shutil
import threading
import time

from magnetar.base.errors import InvalidArgumentError, NotFoundError
from magnetar.base.limits import MIB
from magnetar.runtime.disk_buffers import _AlignedBuffers
from magnetar.runtime.disk_file import LocalFile

__all__ = ["TRASH", "TRASH_DIR", "LocalDisk", "LocalFile", "delete_gently"]

log = logging.getLogger(__name__)


#: Where ``LocalDisk.remove`` moves a file before it is deleted in the background.
TRASH_DIR = ".trash"
#: Bytes one trimming step cuts off a removed file, and the pause after each step.
_TRIM_STEP_BYTES = 16 * MIB
_TRIM_PAUSE_S = 0.002


def delete_gently(path: str) -> None:
    """Shrink ``path`` by ``_TRIM_STEP_BYTES`` at a time (pausing ``_TRIM_PAUSE_S`` after each
    step), then unlink it (blocking: the trash thread's job)."""
    size = os.stat(path).st_size
    while size > _TRIM_STEP_BYTES:
        size -= _TRIM_STEP_BYTES
        os.truncate(path, size)
        time.sleep(_TRIM_PAUSE_S)
    os.remove(path)


class _Trash:
    """The one background thread (started on first use) that deletes trashed files in turn."""

    def __init__(self) -> None:
        self._queue: queue.SimpleQueue[str] = queue.SimpleQueue()
        self._lock = threading.Condition()
        self._thread: threading.Thread | None = None
        self._names = itertools.count()
        self.pending = 0  # files queued or being deleted

    def unique_name(self, name: str) -> str:
        return f"{os.getpid()}-{time.monotonic_ns()}-{next(self._names)}-{name}"

    def put(self, path: str) -> None:
        with self._lock:
            self.pending += 1
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="magnetar-disk-trash", daemon=True)
                self._thread.start()
        self._queue.put(path)

    def _run(self) -> None:
        while True:
            path = self._queue.get()
            try:
                delete_gently(path)
            except OSError:
                pass  # already gone (its directory was deleted) or not a plain file: nothing to keep
            finally:
                with self._lock:
                    self.pending -= 1
                    if not self.pending:
                        self._lock.notify_all()

    def wait_idle(self, timeout_s: float) -> bool:
        """Wait until every trashed file is deleted (at most ``timeout_s``); whether it was."""
        with self._lock:
            return self._lock.wait_for(lambda: not self.pending, timeout_s)


TRASH = _Trash()


class LocalDisk:
    """A ``Disk`` rooted at ``root``; relative paths only, no escaping the root."""

    def __init__(self, root: str) -> None:
        self.root = os.path.abspath(root)
        os.makedirs(self.root, exist_ok=True)
        self._trash = os.path.join(self.root, TRASH_DIR)
        self._buffers = _AlignedBuffers()
        for name in self._trash_leftovers():
            TRASH.put(os.path.join(self._trash, name))

    def _trash_leftovers(self) -> list[str]:
        try:
            return sorted(os.listdir(self._trash))
        except FileNotFoundError:
            return []

    def _abs(self, path: str) -> str:
        full = os.path.normpath(os.path.join(self.root, path))
        if full != self.root and not full.startswith(self.root + os.sep):
            raise InvalidArgumentError(f"path {path!r} escapes the data directory")
        return full

    def open(self, path: str, *, create: bool = True, direct: bool = False) -> LocalFile:
        flags = os.O_RDWR | (os.O_CREAT if create else 0)
        full = self._abs(path)
        try:
            fd = os.open(full, flags, 0o644)
        except FileNotFoundError:
            raise NotFoundError(f"no file {path!r}") from None
        direct_fd = -1
        if direct and hasattr(os, "O_DIRECT"):
            try:
                direct_fd = os.open(full, os.O_WRONLY | os.O_DIRECT)
            except OSError:
                direct_fd = -1  # no O_DIRECT here (tmpfs): buffered writes only
        return LocalFile(path, fd, direct_fd, self._buffers if direct_fd >= 0 else None)

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
        """Remove a directory tree at once, a file by moving it to the trash (module docstring)."""
        full = self._abs(path)
        if os.path.isdir(full):
            shutil.rmtree(full)
            return
        os.makedirs(self._trash, exist_ok=True)
        trashed = os.path.join(self._trash, TRASH.unique_name(os.path.basename(full)))
        try:
            os.rename(full, trashed)
        except FileNotFoundError:
            return
        TRASH.put(trashed)

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
