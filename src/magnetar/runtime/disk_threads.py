"""The writer threads of ``runtime.disk`` (split from it, and kept interpreted: a thread's loop
in compiled code never offers the GIL back at the interpreter's switch points, session 15): the
pool ``append_and_sync_then`` hands its jobs to, the process's switch interval once it exists, and
the jobs of ``LocalFile.preallocate`` (zeros) and ``LocalFile.sync``. ``runtime.disk_file`` looks
``_sync_workers`` and ``_zeros_job`` up here at each call (tests replace them).
"""

from __future__ import annotations

import asyncio
import errno
import logging
import mmap
import os
import queue
import sys
import threading
from collections.abc import Callable

from magnetar.base.limits import DISK_DIRECT_ALIGNMENT_BYTES, DISK_SYNC_THREADS_COUNT_MAX, MIB
from magnetar.runtime.disk_io import _Descriptors, _pwrite_all

log = logging.getLogger(__name__)


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


os.register_at_fork(after_in_child=_forget_workers_in_child)


#: Bytes of zeros ``LocalFile.preallocate`` writes per system call.
_ZEROS_CHUNK_BYTES = 1 * MIB
_ZEROS: list[mmap.mmap] = []  # one page-aligned chunk of zeros (anonymous memory), made on first use


class ZerosWritten(threading.Event):
    """The ``done`` of ``_zeros_job``: set once its zeros are written (before their sync); the
    first ``set`` also calls ``then(self)`` on ``loop`` (``LocalFile`` hands the native writer the
    groups that waited for these zeros then, as a writer thread's ``after.wait()`` returns then)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, then: Callable[[threading.Event], None]) -> None:
        super().__init__()
        self._loop = loop
        self._then = then
        self._told = False

    def set(self) -> None:
        super().set()
        if self._told:
            return
        self._told = True
        try:
            self._loop.call_soon_threadsafe(self._then, self)
        except RuntimeError:
            pass  # the loop is closed: nobody waits any more


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


