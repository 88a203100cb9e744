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
"""

from __future__ import annotations

import asyncio
import errno
import itertools
import logging
import mmap
import os
import queue
import shutil
import sys
import threading
import time
from collections.abc import Callable, Sequence
from functools import partial

from magnetar import faults
from magnetar.base.errors import InvalidArgumentError, NotFoundError
from magnetar.base.invariant import invariant
from magnetar.base.io import Bytes
from magnetar.base.limits import (
    DISK_DIRECT_ALIGNMENT_BYTES,
    DISK_DIRECT_BUFFER_BYTES_MAX,
    DISK_SYNC_THREADS_COUNT_MAX,
    MIB,
)
from magnetar.runtime.disk_buffers import (
    _AlignedBuffer,
    _AlignedBuffers,
    _copy_into,
    pwritev_all,
)
from magnetar.runtime.disk_pace import InlinePace

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


def _pwrite_all(fd: int, data: memoryview, offset: int) -> None:
    written = 0
    while written < len(data):
        count = os.pwrite(fd, data[written:], offset + written)
        if count <= 0:
            raise OSError(errno.EIO, f"pwrite wrote nothing at offset {offset + written}")
        written += count


#: Whether ``pwritev(..., RWF_DSYNC)`` works here (Linux >= 4.7): cleared on the first refusal.
_RWF_DSYNC_WORKS = [hasattr(os, "RWF_DSYNC") and hasattr(os, "pwritev")]


def _pwrite_all_dsync(fd: int, data: memoryview, offset: int) -> bool:
    """Write ``data`` at ``offset`` with ``RWF_DSYNC`` (durable when this returns, as write +
    fdatasync). False when the kernel refuses the flag (nothing written): the caller writes and
    syncs the usual way. A short write goes on the usual way (write the rest, then fdatasync)."""
    try:
        count = os.pwritev(fd, [data], offset, os.RWF_DSYNC)
    except OSError as exc:
        if exc.errno not in (errno.EOPNOTSUPP, errno.ENOSYS):
            raise  # EINVAL (O_DIRECT refused) included: the caller writes buffered
        _RWF_DSYNC_WORKS[0] = False
        _pwrite_all(fd, data, offset)
        return False
    if count < len(data):
        _pwrite_all(fd, data[count:], offset + count)
        return False
    return True


class _Descriptors:
    """A file's descriptors, closed once the file is closed *and* no worker-thread call uses
    them (a cancelled caller's call may still run): a call never writes into a reused number."""

    __slots__ = ("_closed", "_lock", "_users", "direct_fd", "fd")

    def __init__(self, fd: int, direct_fd: int) -> None:
        self.fd = fd
        self.direct_fd = direct_fd
        self._lock = threading.Lock()
        self._users = 0
        self._closed = False

    def acquire(self) -> None:
        with self._lock:
            invariant(not self._closed, "a worker call on a closed file")
            self._users += 1

    def release(self) -> None:
        with self._lock:
            self._users -= 1
            last = self._closed and self._users == 0
        if last:
            self._close_all()

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            idle = self._users == 0
        if idle:
            self._close_all()

    def _close_all(self) -> None:
        for fd in (self.fd, self.direct_fd):
            if fd >= 0:
                os.close(fd)


def split_parts(parts: Sequence[Bytes], at: int) -> tuple[list[Bytes], list[Bytes]]:
    """``parts`` as two lists holding their first ``at`` bytes and the rest (views, no copy)."""
    first: list[Bytes] = []
    for index, part in enumerate(parts):
        if at < len(part):
            view = memoryview(part)
            return [*first, view[:at]], [view[at:], *parts[index + 1 :]]
        first.append(part)
        at -= len(part)
    return first, []


def _write_job(
    descriptors: _Descriptors, parts: Sequence[Bytes], offset: int, sync: bool, aligned: memoryview | None,
    torn_point: str = "", unsynced_point: str = "", fill: _AlignedBuffer | None = None,
    after: threading.Event | None = None,
) -> bool:
    """The worker-thread write (and sync); ``aligned`` is the page-aligned buffer's view for the
    O_DIRECT descriptor, holding the parts already, or filled here first when ``fill`` is its
    buffer (``_AlignedBuffer.fill``: a large write's copy made off the event loop). Returns
    whether the direct write took them.
    With ``torn_point`` armed (``faults.tears``), the bytes go in two writes with that fault point
    between them (split at half, rounded down to the alignment on the direct path: a one-page
    group is one write, the point passed before it); ``unsynced_point`` is passed between the
    write and the sync. ``after``: the zeros of a ``preallocate`` that may cover these bytes,
    written first (set once they are)."""
    if torn_point and not faults.tears(torn_point):
        torn_point = ""  # unarmed, the point half-way through the write does nothing: one write
    try:
        if after is not None:
            after.wait()
        if fill is not None and aligned is not None:
            fill.fill(parts, aligned)
        written_direct = False
        torn_passed = False
        synced = False
        if aligned is not None:
            half = len(aligned) // 2 if torn_point else 0
            half -= half % DISK_DIRECT_ALIGNMENT_BYTES
            if torn_point and not half:  # one page: the point comes before its only write
                faults.point_blocking(torn_point)
                torn_passed = True
            # One write that is its own data sync (RWF_DSYNC, O_DSYNC for this write only):
            # one system call and one GIL round trip less per journal group than write, then
            # fdatasync. Not while the point between write and sync is armed (it must sit there).
            dsync = (sync and not half and _RWF_DSYNC_WORKS[0]
                     and not (unsynced_point and faults.tears(unsynced_point)))
            try:
                if dsync:
                    synced = _pwrite_all_dsync(descriptors.direct_fd, aligned, offset)
                else:
                    _pwrite_all(descriptors.direct_fd, aligned[:half] if half else aligned, offset)
                written_direct = True
            except OSError as exc:
                if exc.errno != errno.EINVAL:
                    raise
                # The filesystem refuses O_DIRECT writes after all: the same bytes, buffered.
            if written_direct and half:
                faults.point_blocking(torn_point)
                _pwrite_all(descriptors.direct_fd, aligned[half:], offset + half)
        if not written_direct:
            tear = bool(torn_point) and not torn_passed
            half = sum(map(len, parts)) // 2 if tear else 0
            first, rest = split_parts(parts, half) if tear else ([], list(parts))
            pwritev_all(descriptors.fd, first, offset)
            if tear:
                faults.point_blocking(torn_point)
            pwritev_all(descriptors.fd, rest, offset + half)
        if synced:
            return written_direct
        if unsynced_point:
            faults.point_blocking(unsynced_point)
        if sync:
            os.fdatasync(descriptors.fd)
        return written_direct
    finally:
        descriptors.release()


class _SyncThreads:
    """The threads of ``append_and_sync_then``: a job is a plain callable on a ``SimpleQueue``.
    ``ThreadPoolExecutor.submit`` made a Future, a work item, an idle-semaphore round and
    Condition notifications per job: at 2,000 unbatched messages/s (one journal group each) that
    was ~20 us of GIL-held work and several futex calls per group (docs/performance.md, session 7
    of issue 22). A thread is started when a job finds no idle one, up to ``count_max``."""

    def __init__(self, count_max: int, name: str) -> None:
        self._jobs: queue.SimpleQueue[Callable[[], None]] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._count_max = count_max
        self._name = name
        self._threads = 0
        self._idle = 0
        self._unclaimed = 0  # submitted jobs no thread took yet

    def submit(self, job: Callable[[], None]) -> None:
        with self._lock:
            self._unclaimed += 1
            start = self._unclaimed > self._idle and self._threads < self._count_max
            if start:
                self._threads += 1
        if start:
            try:
                threading.Thread(target=self._work, name=f"{self._name}-{self._threads}", daemon=True).start()
            except BaseException:
                with self._lock:
                    self._threads -= 1
                    self._unclaimed -= 1
                raise
        self._jobs.put(job)

    def _work(self) -> None:
        jobs, lock = self._jobs, self._lock
        while True:
            with lock:
                self._idle += 1
            job = jobs.get()
            with lock:
                self._idle -= 1
                self._unclaimed -= 1
            try:
                job()  # jobs hand their own errors to the loop; this is a last resort
            except BaseException:
                log.exception("disk sync job failed")
            del job


_workers: _SyncThreads | None = None
_workers_lock = threading.Lock()


#: The GIL switch interval of a process once it has writer threads (CPython: 5 ms). A writer
#: thread needs the GIL twice per journal group (after the write returns; after the next job
#: arrives) and the event loop holds it while it works through a pass: a thread that asks for it
#: waits until the loop polls again or, at the latest, until the switch interval has passed and it
#: forces a switch. During a burst the loop works for several ms at a stretch, so every group's
#: answer waited up to 5 ms twice (the rounds of a ledger's window of adds with it).
SYNC_SWITCH_INTERVAL_S = 0.0005


_PACE = InlinePace()


def _sync_workers() -> _SyncThreads:
    """The threads of ``append_and_sync_then`` (made on first use, shared by every file); on
    first use the process's switch interval goes down to ``SYNC_SWITCH_INTERVAL_S``."""
    global _workers
    workers = _workers
    if workers is not None:  # made already: no lock per journal group
        return workers
    with _workers_lock:
        if _workers is None:
            if sys.getswitchinterval() > SYNC_SWITCH_INTERVAL_S:
                sys.setswitchinterval(SYNC_SWITCH_INTERVAL_S)
            _workers = _SyncThreads(DISK_SYNC_THREADS_COUNT_MAX, "magnetar-disk-sync")
        return _workers


def _forget_workers_in_child() -> None:
    # A forked child has none of the parent's threads: an inherited pool would queue work forever.
    global _workers, _workers_lock
    _workers = None
    _workers_lock = threading.Lock()
    _PACE.pending = 0  # the parent's writes are not the child's


os.register_at_fork(after_in_child=_forget_workers_in_child)


#: Bytes of zeros ``LocalFile.preallocate`` writes per system call.
_ZEROS_CHUNK_BYTES = 1 * MIB
_ZEROS: list[mmap.mmap] = []  # one page-aligned chunk of zeros (anonymous memory), made on first use


def _zeros_job(descriptors: _Descriptors, start: int, end: int, done: threading.Event) -> None:
    """Write zeros over ``[start, end)`` (``start`` page-aligned) and fdatasync; sets ``done``
    once they are written (blocking: a worker thread's job). ``O_DIRECT`` from one chunk of
    anonymous zero pages where the file takes it (no page-cache copy), else buffered."""
    try:
        if not _ZEROS:
            _ZEROS.append(mmap.mmap(-1, _ZEROS_CHUNK_BYTES))
        zeros = memoryview(_ZEROS[0])
        direct = descriptors.direct_fd >= 0
        offset = start
        while offset < end:
            count = min(_ZEROS_CHUNK_BYTES, end - offset)
            if direct and count % DISK_DIRECT_ALIGNMENT_BYTES == 0:
                try:
                    _pwrite_all(descriptors.direct_fd, zeros[:count], offset)
                    offset += count
                    continue
                except OSError as exc:
                    if exc.errno != errno.EINVAL:
                        raise
                    direct = False  # refused after all: the same zeros, buffered
            _pwrite_all(descriptors.fd, zeros[:count], offset)
            offset += count
        done.set()
        os.fdatasync(descriptors.fd)
    finally:
        done.set()
        descriptors.release()


def _sync_job(descriptors: _Descriptors) -> None:
    try:
        os.fdatasync(descriptors.fd)
    finally:
        descriptors.release()


#: A write of at least this many bytes has its aligned copy made by the worker thread
#: (``_AlignedBuffer.fill``) instead of on the event loop.
_WORKER_COPY_BYTES_MIN = 256 * 1024


class LocalFile:
    # A small write's aligned copy is made on the event loop, so the worker call only runs
    # pwrite and fdatasync (the GIL released in both): fewer GIL hand-offs between the loop and
    # the worker, which on a busy machine cost more than a copy of a few KiB. A large write's
    # copy (MiBs of batched entries) is the worker's, off the loop (``_AlignedBuffer.fill``).
    __slots__ = ("_allocated", "_buffers", "_descriptors", "_direct_ok", "_mapping", "_path", "_size", "_zeroing",
                 "_zeroing_from")

    def __init__(self, path: str, fd: int, direct_fd: int = -1, buffers: _AlignedBuffers | None = None) -> None:
        self._path = path
        self._descriptors = _Descriptors(fd, direct_fd)
        # ``_size`` is where appends go (the file's end as this handle writes it); ``_allocated``
        # is at least the end of the file's storage (zeros of ``preallocate`` past ``_size``).
        self._size = self._allocated = os.fstat(fd).st_size
        # A ``preallocate`` writing zeros from ``_zeroing_from``: set once they are written.
        self._zeroing: threading.Event | None = None
        self._zeroing_from = 0
        self._mapping: mmap.mmap | None = None  # ``read_view``'s map of the file, as long as it was then
        self._direct_ok = direct_fd >= 0
        # Aligned buffers not in use; a write takes one and gives it back when it returns (a
        # write whose caller was cancelled keeps its own). Several writes may be in flight.
        self._buffers = buffers if buffers is not None else _AlignedBuffers()

    @property
    def _fd(self) -> int:
        return self._descriptors.fd

    @property
    def write_alignment_bytes(self) -> int:
        return DISK_DIRECT_ALIGNMENT_BYTES if self._direct_ok else 1

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
        self._allocated = max(self._allocated, self._size)

    def read_at(self, offset: int, length: int) -> bytes:
        return os.pread(self._fd, length, offset)

    def read_view(self, offset: int, length: int) -> Bytes:
        """A view of the file mapped read-only (``mmap`` keeps its own descriptor, and a view keeps
        its map alive: valid after ``close`` or removal). A read past the map maps the file again
        at its current length (earlier maps live on in their views); a read past the end of the
        file is ``read_at``'s short copy."""
        end = offset + length
        mapping = self._mapping
        if mapping is None or end > len(mapping):
            size = os.fstat(self._fd).st_size
            if end > size or offset < 0 or length <= 0:
                return self.read_at(offset, length)
            mapping = self._mapping = mmap.mmap(self._fd, size, access=mmap.ACCESS_READ)
        return memoryview(mapping)[offset:end]

    def truncate(self, size: int) -> None:
        invariant(self._zeroing is None, "truncate while preallocate writes zeros")
        os.ftruncate(self._fd, size)
        self._size = self._allocated = size

    async def preallocate(self, end: int) -> None:
        """Fill the file's storage with written zeros from past every byte reserved so far (and
        past its storage's end) up to ``end``, and make them durable, without moving ``size()``
        (where appends go): a later synced write below ``end`` then changes no file metadata.
        On ext4 a synced write that extends a file (or fills an ``fallocate``d, unwritten
        extent) commits the filesystem's journal too: 4 KiB ``RWF_DSYNC`` writes into written
        zeros took p50 0.1-1 ms against ~4 ms extending on the loaded bench VM
        (docs/performance.md, session 16). A write reserved while the zeros are written waits
        for them (``_write_job``'s ``after``) if it may reach them, so zeros never land over a
        write. Reopened, the file's ``size()`` includes the zeros (its owner finds its end by
        its records). One at a time per file."""
        invariant(self._zeroing is None, "one preallocate at a time per file")
        start = max(self._size, self._allocated)
        start += -start % DISK_DIRECT_ALIGNMENT_BYTES
        if end <= start:
            return
        done = threading.Event()
        descriptors = self._descriptors
        descriptors.acquire()
        try:
            job = asyncio.get_running_loop().run_in_executor(None, _zeros_job, descriptors, start, end, done)
        except BaseException:
            descriptors.release()
            raise
        self._zeroing, self._zeroing_from = done, start
        job.add_done_callback(partial(self._zeroed, done, end))
        # A cancelled caller does not stop the job: the writes it holds back wait for its zeros.
        await asyncio.shield(job)

    def _zeroed(self, done: threading.Event, end: int, job: asyncio.Future[None]) -> None:
        if self._zeroing is done:
            self._zeroing = None
        if not job.cancelled() and job.exception() is None:
            self._allocated = max(self._allocated, end)

    def _zeros_first(self, offset: int, total: int) -> threading.Event | None:
        """The zeros a write of ``total`` bytes at ``offset`` must wait for, if any."""
        zeroing = self._zeroing
        if zeroing is None or offset + total <= self._zeroing_from:
            return None
        return zeroing

    async def append_parts(self, parts: Sequence[Bytes]) -> int:
        return await self._write_in_worker(parts, sync=False)

    async def append_and_sync(self, parts: Sequence[Bytes]) -> int:
        return await self._write_in_worker(parts, sync=True)

    def append_and_sync_then(self, parts: Sequence[Bytes], done: Callable[[BaseException | None], None], *,
                             torn_point: str = "", unsynced_point: str = "") -> int:
        # The worker thread hands its result to the loop with one ``call_soon_threadsafe``:
        # ``run_in_executor`` + an awaiting task took four more loop passes (future chaining,
        # the task's step, its done callbacks), each behind whatever else the loop runs.
        offset = self._size
        total = sum(map(len, parts))  # no Python step per part
        buffer, aligned, fill = self._aligned_copy(parts, offset, total)
        loop = asyncio.get_running_loop()
        descriptors = self._descriptors
        after = self._zeros_first(offset, total)
        descriptors.acquire()
        self._size += total
        pace = _PACE

        def finished(error: BaseException | None, written_direct: bool, took_ns: int, inline: bool) -> None:
            # On the loop, after the write and sync, whichever thread ran them.
            pace.finished(took_ns, inline)
            self._aligned_done(buffer, aligned, None if error is not None else written_direct)
            done(error)

        def write(caught: type[BaseException]) -> tuple[BaseException | None, bool, int]:
            # The write and sync, on whichever thread runs them: (error, written direct, took).
            error: BaseException | None = None
            written_direct = False
            started = time.monotonic_ns()
            try:
                written_direct = _write_job(descriptors, parts, offset, True, aligned, torn_point, unsynced_point,
                                            fill, after)
            except caught as exc:  # handed to ``done`` on the loop
                error = exc
            return error, written_direct, time.monotonic_ns() - started

        # Not while zeros are being written to this file (``preallocate``): a sync queued behind
        # them took 4-5x as long (p50 0.85-1.1 ms against 0.19-0.21 inline otherwise, session 17).
        if pace.inline_ok(total, after is None and fill is None and self._zeroing is None, torn_point,
                          unsynced_point):
            # The loop's own thread writes and syncs (``runtime.disk_pace``), and answers from the next
            # loop pass (``call_soon``: never from inside the caller); a BaseException that is
            # not an Exception (an interrupt) goes up the loop's own stack.
            loop.call_soon(finished, *write(Exception), True)
            return offset

        def job() -> None:  # on a worker thread
            result = write(BaseException)
            try:
                loop.call_soon_threadsafe(finished, *result, False)
            except RuntimeError:
                pass  # the loop is closed: nobody waits for the answer any more

        try:
            _sync_workers().submit(job)
        except BaseException:
            pace.pending -= 1
            descriptors.release()
            raise
        return offset

    async def _write_in_worker(self, parts: Sequence[Bytes], *, sync: bool) -> int:
        offset = self._size
        total = sum(map(len, parts))
        self._size += total
        buffer, aligned, fill = self._aligned_copy(parts, offset, total)
        after = self._zeros_first(offset, total)
        self._descriptors.acquire()
        written_direct = await asyncio.get_running_loop().run_in_executor(
            None, _write_job, self._descriptors, parts, offset, sync, aligned, "", "", fill, after
        )
        self._aligned_done(buffer, aligned, written_direct)
        return offset

    def _aligned_copy(self, parts: Sequence[Bytes], offset: int, total: int) -> tuple[
            _AlignedBuffer | None, memoryview | None, _AlignedBuffer | None]:
        """When the write can go through O_DIRECT: a pooled aligned buffer, its view of ``total``
        bytes, and (for a write of ``_WORKER_COPY_BYTES_MIN`` or more) the same buffer again as
        the one the worker thread fills first; a smaller write is copied here, on the loop (a
        worker's copy costs it one more GIL hand-off, more than copying a few KiB)."""
        if (
            self._direct_ok
            and 0 < total <= DISK_DIRECT_BUFFER_BYTES_MAX
            and not (offset | total) % DISK_DIRECT_ALIGNMENT_BYTES
        ):
            buffer = self._buffers.take(total)
            if total >= _WORKER_COPY_BYTES_MIN and buffer.fd >= 0:
                return buffer, memoryview(buffer.map)[:total], buffer
            return buffer, _copy_into(buffer.map, parts, total), None
        return None, None, None

    def _aligned_done(self, buffer: _AlignedBuffer | None, aligned: memoryview | None,
                      written_direct: bool | None) -> None:
        """Give the buffer back after the write; ``written_direct`` (None: the write failed)
        says whether the file still takes O_DIRECT writes."""
        if aligned is None:
            return
        aligned.release()
        if buffer is not None:
            self._buffers.give_back(buffer)
        if written_direct is not None:
            self._direct_ok = written_direct

    async def sync(self) -> None:
        self._descriptors.acquire()
        await asyncio.get_running_loop().run_in_executor(None, _sync_job, self._descriptors)

    def close(self) -> None:
        self._mapping = None  # unmapped once no view refers to it
        self._descriptors.close()


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
