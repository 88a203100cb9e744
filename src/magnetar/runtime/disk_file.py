"""``LocalFile``, a file of ``runtime.disk``'s ``LocalDisk`` (split from ``runtime.disk`` and
compiled, ``magnetar._compiled``): its appends, reads, preallocated zeros and the journal's
``append_and_sync_then``, whose per-group work runs on the event loop's thread once per journal
group (session 19: at 2,000 msg/s, one group per message, ``runtime/disk.py``'s interpreted frames
called from ``Journal._start_group`` were most of the loop's own interpreted share). The
blocking writes are ``runtime.disk_io``'s, the writer threads ``runtime.disk_threads``' (kept
interpreted); the docstring of ``runtime.disk`` describes the paths.
"""

from __future__ import annotations

import asyncio
import errno
import mmap
import os
import threading
import time
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

from magnetar import faults
from magnetar.base.invariant import invariant
from magnetar.base.io import Bytes, split_parts
from magnetar.base.limits import DISK_DIRECT_ALIGNMENT_BYTES, DISK_DIRECT_BUFFER_BYTES_MAX
from magnetar.base.loop_ref import LoopRef
from magnetar.runtime import disk_threads, disk_writer
from magnetar.runtime.disk_buffers import _AlignedBuffer, _AlignedBuffers, _copy_into
from magnetar.runtime.disk_io import _RWF_DSYNC_WORKS, _Descriptors, write_job
from magnetar.runtime.disk_pace import InlinePace

#: The pending count of the bulk writes' ``_GroupWrite``s (``LocalFile._write_native``): never
#: asked whether to write inline (the journal's pace, ``_PACE``, is the journal groups' own).
_BULK_PACE = InlinePace()

#: The write (and sync) of a group, as ``append_and_sync_then`` and the bulk writes call it: a
#: module variable looked up at each call, so a test can wrap it (record the thread that ran it,
#: fail it, slow it) in both modes; production never replaces it.
_write_job: Callable[[_Descriptors, Sequence[Bytes], int, bool, memoryview | None, str, str,
                      _AlignedBuffer | None, threading.Event | None], bool] = write_job

#: The process's inline-write pace (``runtime.disk_pace``), used on the event loop's thread only.
_PACE = InlinePace()

#: Whether a group not written inline goes to the native writer (``runtime.disk_writer``: its
#: threads never take the GIL) rather than to Python's writer threads (``runtime.disk_threads``):
#: whether the native writer is built, loaded and enabled (the default; ``MAGNETAR_NATIVE_WRITER=0``
#: keeps the threads; docs/performance.md session 22). A module variable looked up at each group, so a test
#: can run either in one process; production never changes it.
_native = disk_writer.enabled()

#: An operation of a native writer's job: (fd, buffers, offset, ``pwritev2`` flags) writes the
#: buffers at the offset; (fd, None, 0, 0) is an ``fdatasync``.
_Op = tuple[int, Sequence[Bytes] | None, int, int]


def _forget_pace_in_child() -> None:
    _PACE.pending = 0  # a forked child: the parent's writes are not the child's


os.register_at_fork(after_in_child=_forget_pace_in_child)


class _GroupWrite:
    """One ``append_and_sync_then``: the write and sync (``_write_job``) on the loop's thread
    (``inline``) or a writer thread (``on_thread``), then ``finished`` on the loop. One native
    object per group where three closures were made per group (session 19)."""

    __slots__ = ("after", "aligned", "buffer", "descriptors", "direct", "done", "file", "fill", "loop", "offset",
                 "pace", "parts", "port", "step", "steps", "sync", "took_ns", "torn_passed", "torn_point",
                 "unsynced_point")

    def __init__(self, file: LocalFile, descriptors: _Descriptors, parts: Sequence[Bytes], offset: int,
                 buffer: _AlignedBuffer | None, aligned: memoryview | None, fill: _AlignedBuffer | None,
                 after: threading.Event | None, torn_point: str, unsynced_point: str,
                 done: Callable[[BaseException | None], None], pace: InlinePace) -> None:
        self.file = file
        self.descriptors = descriptors
        self.parts = parts
        self.offset = offset
        self.buffer = buffer
        self.aligned = aligned
        self.fill = fill
        self.after = after
        self.torn_point = torn_point
        self.unsynced_point = unsynced_point
        self.done = done
        self.pace = pace
        # Whether the write is synced (the journal's groups: always); the entry log's unsynced
        # chunks (``LocalFile.append_parts``) are not, their log is synced once after the last.
        self.sync = True
        self.loop: asyncio.AbstractEventLoop | None = None  # a writer thread's: the loop to answer on
        # The native writer's (``native``): the port it answers on, the steps (jobs, and the armed
        # fault points between them), the next step, whether the direct write is still the plan,
        # whether the torn point was passed, and the writer's time so far.
        self.port: Any = None
        self.steps: list[list[_Op] | str] = []
        self.step = 0
        self.direct = aligned is not None
        self.torn_passed = False
        self.took_ns = 0

    def inline(self, loop: asyncio.AbstractEventLoop) -> None:
        """Write and sync on the loop's own thread; answered from the next loop pass. A
        BaseException that is not an Exception (an interrupt) goes up the loop's own stack."""
        error, written_direct, took_ns = self.write()
        if error is not None and not isinstance(error, Exception):
            raise error
        loop.call_soon(self.finished, error, written_direct, took_ns, True)

    def on_thread(self) -> None:
        """The writer thread's job: write and sync, then hand the outcome to the loop."""
        error, written_direct, took_ns = self.write()
        loop = self.loop
        assert loop is not None
        try:
            loop.call_soon_threadsafe(self.finished, error, written_direct, took_ns, False)
        except RuntimeError:
            pass  # the loop is closed: nobody waits for the answer any more

    def write(self) -> tuple[BaseException | None, bool, int]:
        """The write and sync, on whichever thread runs them: (error, written direct, took)."""
        error: BaseException | None = None
        written_direct = False
        started = time.monotonic_ns()
        try:
            written_direct = _write_job(self.descriptors, self.parts, self.offset, self.sync, self.aligned,
                                        self.torn_point, self.unsynced_point, self.fill, self.after)
        except BaseException as exc:  # handed to ``done`` on the loop
            error = exc
        return error, written_direct, time.monotonic_ns() - started

    def native(self, port: Any) -> None:
        """Hand the write and sync to the native writer (``runtime.disk_writer``), answered on the
        loop through ``port`` (``written``). Unarmed, one job: the write with ``RWF_DSYNC``
        (a large group's copy into its aligned buffer first), or the buffered write and an
        ``fdatasync``. With a fault point of the write armed, the same writes and syncs split
        into jobs at the points, and each point is passed on the loop between them
        (``faults.gate1``: a crash fires there, a hang holds this write, not the loop): the
        bytes before a torn point are written when it fires, the write before the unsynced
        point is not synced yet. The same points and the same splits as ``write_job``'s."""
        self.port = port
        self.steps = self._plan()
        self._advance()

    def _plan(self) -> list[list[_Op] | str]:
        """The jobs and points of this write (``direct``: through the O_DIRECT descriptor)."""
        torn_point, unsynced_point = self.torn_point, self.unsynced_point
        tear = bool(torn_point) and faults.tears(torn_point) and not self.torn_passed
        unsynced = bool(unsynced_point) and faults.tears(unsynced_point)
        descriptors, offset = self.descriptors, self.offset
        steps: list[list[_Op] | str] = []
        ops: list[_Op] = []
        aligned = self.aligned
        if self.direct and aligned is not None:
            fill = self.fill
            if fill is not None and fill.fd >= 0:
                ops.append((fill.fd, self.parts, 0, 0))  # the copy into the aligned buffer (its memfd)
            half = len(aligned) // 2 if tear else 0
            half -= half % DISK_DIRECT_ALIGNMENT_BYTES
            if tear and not half:  # one page: the point comes before its only write
                if ops:
                    steps.append(ops)
                    ops = []
                steps.append(torn_point)
            dsync = self.sync and not half and not unsynced and _RWF_DSYNC_WORKS[0]
            if half:
                ops.append((descriptors.direct_fd, [aligned[:half]], offset, 0))
                steps.append(ops)
                steps.append(torn_point)
                ops = [(descriptors.direct_fd, [aligned[half:]], offset + half, 0)]
            else:
                ops.append((descriptors.direct_fd, [aligned], offset, os.RWF_DSYNC if dsync else 0))
            if dsync:
                steps.append(ops)
                return steps
        else:
            parts = self.parts
            if tear:
                half = sum(map(len, parts)) // 2
                first, rest = split_parts(parts, half)
                steps.append([(descriptors.fd, first, offset, 0)])
                steps.append(torn_point)
                ops = [(descriptors.fd, rest, offset + half, 0)]
            else:
                ops = [(descriptors.fd, list(parts), offset, 0)]
        if unsynced:
            steps.append(ops)
            steps.append(unsynced_point)
            ops = []
        if self.sync:
            ops.append((descriptors.fd, None, 0, 0))
        if ops:
            steps.append(ops)
        return steps

    def _advance(self) -> None:
        """Submit the next job, or pass the next point, or finish."""
        steps = self.steps
        if self.step == len(steps):
            self._native_finished(None)
            return
        step = steps[self.step]
        self.step += 1
        if isinstance(step, str):
            if step == self.torn_point:
                self.torn_passed = True
            faults.gate0(step, self._passed)
            return
        self.port.submit(self, step)

    def _passed(self, error: BaseException | None) -> None:
        """After a point, on the loop (``error``: it was armed with ``error``)."""
        if error is not None:
            self._native_finished(error)
            return
        self._advance()

    def written(self, error: int, failed: int, took_ns: int) -> None:
        """The native writer's answer for the last job (``runtime.disk_writer``), on the loop."""
        self.took_ns += took_ns
        if not error:
            self._advance()
            return
        step = self.steps[self.step - 1]
        assert not isinstance(step, str)
        fd = step[failed][0]
        fill = self.fill
        if fill is not None and fd == fill.fd and self.aligned is not None:
            # The copy into the memfd failed (no memory for its pages): copied here instead, the
            # rest of the job again (``_AlignedBuffer.fill`` does the same on a thread).
            _copy_into(fill.map, self.parts, len(self.aligned))
            self.port.submit(self, step[failed + 1:])
            return
        if error == errno.EINVAL and self.direct and fd == self.descriptors.direct_fd:
            # The filesystem refuses O_DIRECT writes after all: the same bytes, buffered (the
            # torn point, if it was passed already, is not passed again).
            self.direct = False
            self.steps = self._plan()
            self.step = 0
            self._advance()
            return
        self._native_finished(OSError(error, os.strerror(error)))

    def _native_finished(self, error: BaseException | None) -> None:
        self.descriptors.release()
        self.finished(error, self.direct and error is None, self.took_ns, False)

    def finished(self, error: BaseException | None, written_direct: bool, took_ns: int, inline: bool) -> None:
        """On the loop, after the write and sync, whichever thread ran them."""
        self.pace.finished(took_ns, inline)
        self.file._aligned_done(self.buffer, self.aligned, None if error is not None else written_direct)
        self.done(error)


#: (``_AlignedBuffer.fill``) instead of on the event loop.
_WORKER_COPY_BYTES_MIN = 256 * 1024


class LocalFile:
    # A small write's aligned copy is made on the event loop, so the worker call only runs
    # pwrite and fdatasync (the GIL released in both): fewer GIL hand-offs between the loop and
    # the worker, which on a busy machine cost more than a copy of a few KiB. A large write's
    # copy (MiBs of batched entries) is the worker's, off the loop (``_AlignedBuffer.fill``).
    __slots__ = ("_allocated", "_buffers", "_descriptors", "_direct_ok", "_loop_ref", "_mapping", "_path",
                 "_port", "_port_loop", "_size", "_waiting_zeros", "_zeroing", "_zeroing_from")

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
        # The loop a group answers on, looked up once: ``asyncio.get_running_loop`` makes a
        # ``getpid`` system call per lookup (~0.4 per message at a steady 2,000 msg/s, session 21).
        self._loop_ref = LoopRef()
        # The native writer's port of the loop last used (``runtime.disk_writer.port_for``), and
        # the groups waiting for the zeros of ``preallocate`` before they go to it.
        self._port: Any = None
        self._port_loop: asyncio.AbstractEventLoop | None = None
        self._waiting_zeros: list[_GroupWrite] = []

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
        loop = asyncio.get_running_loop()
        done = disk_threads.ZerosWritten(loop, self._zeros_written)
        descriptors = self._descriptors
        descriptors.acquire()
        try:
            job = loop.run_in_executor(None, disk_threads._zeros_job, descriptors, start, end, done)
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
        self._zeros_written(done)  # if the job failed before it wrote them

    def _zeros_written(self, done: threading.Event) -> None:
        """The zeros ``done`` stands for are written (not yet synced: a group's own sync covers
        them): the native writer's groups that waited for them go (``_native_write``)."""
        waiting = [group for group in self._waiting_zeros if group.after is done]
        if waiting:
            self._waiting_zeros = [group for group in self._waiting_zeros if group.after is not done]
            for group in waiting:
                group.native(group.port)

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
        total = 0
        for part in parts:  # compiled: no Python step per part
            total += len(part)
        buffer, aligned, fill = self._aligned_copy(parts, offset, total)
        descriptors = self._descriptors
        after = self._zeros_first(offset, total)
        descriptors.acquire()
        self._size += total
        pace = _PACE
        group = _GroupWrite(self, descriptors, parts, offset, buffer, aligned, fill, after, torn_point,
                            unsynced_point, done, pace)
        # Not while zeros are being written to this file (``preallocate``): a sync queued behind
        # them took 4-5x as long (p50 0.85-1.1 ms against 0.19-0.21 inline otherwise, session 17).
        if pace.inline_ok(total, after is None and fill is None and self._zeroing is None, torn_point,
                          unsynced_point):
            # The loop's own thread writes and syncs (``runtime.disk_pace``), and answers from the next
            # loop pass (``call_soon``: never from inside the caller); a BaseException that is
            # not an Exception (an interrupt) goes up the loop's own stack.
            group.inline(self._loop_ref.get())
            return offset
        group.loop = loop = self._loop_ref.get()
        try:
            if _native:
                self._native_write(group, loop)
            else:
                disk_threads._sync_workers().submit(group.on_thread)
        except BaseException:
            pace.pending -= 1
            descriptors.release()
            raise
        return offset

    def _port_of(self, loop: asyncio.AbstractEventLoop) -> Any:
        """The native writer's port of ``loop`` (``runtime.disk_writer.port_for``, remembered)."""
        port = self._port
        if self._port_loop is not loop:
            port = self._port = disk_writer.port_for(loop)
            self._port_loop = loop
        return port

    def _native_write(self, group: _GroupWrite, loop: asyncio.AbstractEventLoop) -> None:
        """Hand ``group`` to the native writer, answered on ``loop``; after the zeros of a
        ``preallocate`` it may reach, if they are still being written (``_zeroed`` hands it over)."""
        port = self._port_of(loop)
        after = group.after
        if after is not None and not after.is_set():
            group.port = port
            self._waiting_zeros.append(group)
            return
        group.native(port)

    async def _write_in_worker(self, parts: Sequence[Bytes], *, sync: bool) -> int:
        offset = self._size
        total = sum(map(len, parts))
        if _native:
            return await self._write_native(parts, offset, total, sync)
        self._size += total
        buffer, aligned, fill = self._aligned_copy(parts, offset, total)
        after = self._zeros_first(offset, total)
        self._descriptors.acquire()
        written_direct = await asyncio.get_running_loop().run_in_executor(
            None, _write_job, self._descriptors, parts, offset, sync, aligned, "", "", fill, after
        )
        self._aligned_done(buffer, aligned, written_direct)
        return offset

    async def _write_native(self, parts: Sequence[Bytes], offset: int, total: int, sync: bool) -> int:
        """``append_parts`` (``sync``: ``append_and_sync``) through the native writer: the entry
        log's chunks, written by threads that never take the GIL and answered through the loop's
        eventfd, where the default executor's thread took the GIL to start each job and again to
        answer (session 24: the chunk writes were most of the bookie's Python thread hand-offs
        per batched entry). The same plan as a journal group's (``_GroupWrite``: a large chunk's
        copy into its aligned buffer by the writer, ``O_DIRECT`` refused: buffered), no fault
        point inside (the entry log's points are its callers'); a cancelled caller does not stop
        the write, which gives its buffer back when it ends."""
        loop = self._loop_ref.get()
        future: asyncio.Future[None] = loop.create_future()
        buffer, aligned, fill = self._aligned_copy(parts, offset, total)
        descriptors = self._descriptors
        group = _GroupWrite(self, descriptors, parts, offset, buffer, aligned, fill, self._zeros_first(offset, total),
                            "", "", partial(_settle, future), _BULK_PACE)
        group.sync = sync
        group.loop = loop
        descriptors.acquire()
        self._size += total
        _BULK_PACE.pending += 1
        try:
            self._native_write(group, loop)
        except BaseException:
            _BULK_PACE.pending -= 1
            descriptors.release()
            raise
        await future
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
        descriptors = self._descriptors
        descriptors.acquire()
        if not _native:
            await asyncio.get_running_loop().run_in_executor(None, disk_threads._sync_job, descriptors)
            return
        # The native writer's ``fdatasync`` (``_write_native``: no GIL on its thread).
        loop = self._loop_ref.get()
        synced = _Synced(descriptors, loop.create_future())
        try:
            self._port_of(loop).submit(synced, [(descriptors.fd, None, 0, 0)])
        except BaseException:
            descriptors.release()
            raise
        await synced.future

    def close(self) -> None:
        self._mapping = None  # unmapped once no view refers to it
        self._descriptors.close()


def _settle(future: asyncio.Future[None], error: BaseException | None) -> None:
    """A native bulk write's outcome to its caller's future (gone if the caller was cancelled)."""
    if future.done():
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(None)


class _Synced:
    """A ``LocalFile.sync`` on the native writer: its answer (``written``) on the loop."""

    __slots__ = ("descriptors", "future")

    def __init__(self, descriptors: _Descriptors, future: asyncio.Future[None]) -> None:
        self.descriptors = descriptors
        self.future = future

    def written(self, error: int, failed: int, took_ns: int) -> None:
        self.descriptors.release()
        _settle(self.future, OSError(error, os.strerror(error)) if error else None)
