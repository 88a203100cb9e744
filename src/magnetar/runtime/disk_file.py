"""A ``LocalFile``'s event-loop side: its writes handed to the worker threads and their answers.

Split from ``runtime/disk.py`` (issue 22, session 15) so that mypyc compiles it
(``magnetar._compiled.COMPILED_MODULES``): at 2,000 unbatched messages/s every journal group
runs ``LocalFile.append_and_sync_then`` (its aligned copy, the job handed to a writer thread) and
its completion on the loop thread, and as interpreted code that was the largest share of the
loop's interpreted frames (docs/performance.md, session 15). ``runtime/disk.py`` keeps what runs
on the worker threads and what tests replace in its namespace: ``_write_job`` (the write and
sync), ``_sync_workers`` (the writer threads), ``_sync_job``, ``_AlignedBuffer`` (the page-aligned
memory); this module looks them up there at each call (``import magnetar.runtime.disk``),
so a replaced one is the one called, compiled or not. ``runtime/disk.py``'s docstring describes
the write paths; ``LocalFile`` is used through it (``LocalDisk.open``).
"""

from __future__ import annotations

import asyncio
import logging
import mmap
import os
import queue
import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Protocol

from magnetar.base.invariant import invariant
from magnetar.base.io import Bytes
from magnetar.base.limits import (
    DISK_DIRECT_ALIGNMENT_BYTES,
    DISK_DIRECT_BUFFER_BYTES_MAX,
    DISK_DIRECT_BUFFERS_COUNT_MAX,
    MIB,
)

if TYPE_CHECKING:
    from magnetar.runtime.disk import _AlignedBuffer

log = logging.getLogger("magnetar.runtime.disk")


class JobQueue(Protocol):
    """Where a file's worker-thread job goes (``disk._sync_workers()``: the ``SyncThreads``)."""

    def submit(self, job: Callable[[], None]) -> None: ...


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


class SyncThreads:
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


#: ``_copy_into`` copies a part of at least this many bytes straight into the aligned buffer;
#: smaller neighbours are joined first and copied as one.
_PART_COPY_BYTES_MIN = 2048


def copy_into(buffer: mmap.mmap, parts: Sequence[Bytes], total: int) -> memoryview:
    """``parts`` back to back at the start of ``buffer``; the view of those ``total`` bytes.

    Small parts on average (an unbatched journal group: a 30-byte framing and a ~1 KiB entry per
    record): one join and one copy, as a slice assignment per part costs more in Python work than
    the second copy of a few KiB. Large parts (batched entries of ~100 KiB, entry-log chunks of
    MiBs) go straight into the buffer, and only runs of small parts between them are joined: the
    joined copy was a second pass over every byte and, for a chunk of MiBs, a fresh allocation
    whose pages faulted in on every write (docs/performance.md, session 12: 3-10x less time
    for 100 KiB parts)."""
    view = memoryview(buffer)
    if total < len(parts) * _PART_COPY_BYTES_MIN:
        view[:total] = parts[0] if len(parts) == 1 else b"".join(parts)
        return view[:total]
    at = run_at = 0
    small: list[Bytes] = []  # the run of small parts since ``run_at``
    for part in parts:
        size = len(part)
        if size < _PART_COPY_BYTES_MIN:
            if not small:
                run_at = at
            small.append(part)
        else:
            if small:
                view[run_at:at] = small[0] if len(small) == 1 else b"".join(small)
                small = []
            view[at : at + size] = part
        at += size
    if small:
        view[run_at:at] = small[0] if len(small) == 1 else b"".join(small)
    invariant(at == total, "the parts add up to the write's size")
    return view[:total]


#: A write of at least this many bytes has its aligned copy made by the worker thread
#: (``_AlignedBuffer.fill``) instead of on the event loop.
_WORKER_COPY_BYTES_MIN = 256 * 1024


class AlignedBuffers:
    """Idle page-aligned buffers for ``O_DIRECT`` writes, shared by the files of one
    ``LocalDisk`` (used on the event loop only). A fresh buffer's pages fault in on first use,
    on the event loop: ~10 ms for 4 MiB in the bench VM. Per-file pools were lost at every
    journal and entry-log rotation (every second at 500 MB/s), and taking any idle buffer,
    replacing it when too small, made mixed sizes (small journal groups, large flush chunks)
    allocate again and again."""

    __slots__ = ("_idle",)

    def __init__(self) -> None:
        self._idle: list[_AlignedBuffer] = []

    def take(self, total: int) -> _AlignedBuffer:
        """The smallest idle buffer of at least ``total`` bytes, or a new one (whole MiBs)."""
        best: _AlignedBuffer | None = None
        for buffer in self._idle:
            if buffer.size >= total and (best is None or buffer.size < best.size):
                best = buffer
        if best is not None:
            self._idle.remove(best)
            return best
        import magnetar.runtime.disk as disk  # the buffer's memory mapping is the disk module's

        return disk._AlignedBuffer(-(-total // MIB) * MIB)

    def give_back(self, buffer: _AlignedBuffer) -> None:
        """Keep ``buffer`` idle; beyond DISK_DIRECT_BUFFERS_COUNT_MAX the smallest is dropped."""
        idle = self._idle
        if len(idle) < DISK_DIRECT_BUFFERS_COUNT_MAX:
            idle.append(buffer)
            return
        smallest = min(idle, key=lambda kept: kept.size)
        if smallest.size < buffer.size:
            idle.remove(smallest)
            idle.append(buffer)


class LocalFile:
    # A small write's aligned copy is made on the event loop, so the worker call only runs
    # pwrite and fdatasync (the GIL released in both): fewer GIL hand-offs between the loop and
    # the worker, which on a busy machine cost more than a copy of a few KiB. A large write's
    # copy (MiBs of batched entries) is the worker's, off the loop (``_AlignedBuffer.fill``).
    __slots__ = ("_buffers", "_descriptors", "_direct_ok", "_mapping", "_path", "_size")

    def __init__(self, path: str, fd: int, direct_fd: int = -1, buffers: AlignedBuffers | None = None) -> None:
        self._path = path
        self._descriptors = _Descriptors(fd, direct_fd)
        self._size = os.fstat(fd).st_size
        self._mapping: mmap.mmap | None = None  # ``read_view``'s map of the file, as long as it was then
        self._direct_ok = direct_fd >= 0
        # Aligned buffers not in use; a write takes one and gives it back when it returns (a
        # write whose caller was cancelled keeps its own). Several writes may be in flight.
        self._buffers = buffers if buffers is not None else AlignedBuffers()

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
        os.ftruncate(self._fd, size)
        self._size = size

    async def append_parts(self, parts: Sequence[Bytes]) -> int:
        return await self._write_in_worker(parts, sync=False)

    async def append_and_sync(self, parts: Sequence[Bytes]) -> int:
        return await self._write_in_worker(parts, sync=True)

    def append_and_sync_then(self, parts: Sequence[Bytes], done: Callable[[BaseException | None], None], *,
                             torn_point: str = "", unsynced_point: str = "") -> int:
        # The worker thread hands its result to the loop with one ``call_soon_threadsafe``:
        # ``run_in_executor`` + an awaiting task took four more loop passes (future chaining,
        # the task's step, its done callbacks), each behind whatever else the loop runs.
        # Its worker-thread side, as it is now (the module docstring). A plain ``import``, not
        # ``from ... import``: compiled, it is one check of a cached module (``from`` called
        # importlib's ``_handle_fromlist`` in Python once per journal group).
        import magnetar.runtime.disk as disk

        offset = self._size
        total = 0
        for part in parts:
            total += len(part)
        buffer, aligned, fill = self._aligned_copy(parts, offset, total)
        loop = asyncio.get_running_loop()
        descriptors = self._descriptors
        descriptors.acquire()
        self._size += total
        write_job = disk._write_job
        workers: JobQueue = disk._sync_workers()

        def finished(error: BaseException | None, written_direct: bool) -> None:  # on the loop
            self._aligned_done(buffer, aligned, None if error is not None else written_direct)
            done(error)

        def job() -> None:  # on a worker thread
            error: BaseException | None = None
            written_direct = False
            try:
                written_direct = write_job(descriptors, parts, offset, True, aligned, torn_point, unsynced_point,
                                           fill)
            except BaseException as exc:  # handed to ``done`` on the loop
                error = exc
            try:
                loop.call_soon_threadsafe(finished, error, written_direct)
            except RuntimeError:
                pass  # the loop is closed: nobody waits for the answer any more

        try:
            workers.submit(job)
        except BaseException:
            descriptors.release()
            raise
        return offset

    async def _write_in_worker(self, parts: Sequence[Bytes], *, sync: bool) -> int:
        import magnetar.runtime.disk as disk

        offset = self._size
        total = sum(len(part) for part in parts)
        self._size += total
        buffer, aligned, fill = self._aligned_copy(parts, offset, total)
        self._descriptors.acquire()
        written_direct = await asyncio.get_running_loop().run_in_executor(
            None, disk._write_job, self._descriptors, parts, offset, sync, aligned, "", "", fill
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
            return buffer, copy_into(buffer.map, parts, total), None
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
        import magnetar.runtime.disk as disk

        self._descriptors.acquire()
        await asyncio.get_running_loop().run_in_executor(None, disk._sync_job, self._descriptors)

    def close(self) -> None:
        self._mapping = None  # unmapped once no view refers to it
        self._descriptors.close()
