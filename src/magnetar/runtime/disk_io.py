"""A local file's blocking writes (split from ``runtime.disk``, compiled: ``magnetar._compiled``):
the descriptors a write holds, the ``pwrite`` loops, the ``RWF_DSYNC`` write and ``write_job``,
the write (and sync) of one ``append_and_sync_then`` or bulk write, which runs on the event loop's
own thread for a lone small journal group (``runtime.disk_pace``) and on a writer thread
otherwise (``runtime.disk_threads``), passing the same fault points either way. Compiled because
the inline journal group runs it on the loop thread once per group (session 19: the interpreted
per-group frames of ``runtime/disk.py`` were the loop's largest interpreted share at 2,000 msg/s).
"""

from __future__ import annotations

import errno
import os
import threading
from collections.abc import Sequence

from magnetar import faults
from magnetar.base.invariant import invariant
from magnetar.base.io import Bytes, split_parts
from magnetar.base.limits import DISK_DIRECT_ALIGNMENT_BYTES
from magnetar.runtime.disk_buffers import _AlignedBuffer, pwritev_all


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

    # ``acquire``/``release`` of the lock, not ``with``: compiled, a ``with`` on a lock looks up
    # and calls ``__enter__`` and ``__exit__`` generically (twice per journal group; session 23).
    # Nothing between them raises but the invariant, which releases first.

    def acquire(self) -> None:
        lock = self._lock
        lock.acquire()
        if self._closed:
            lock.release()
            invariant(False, "a worker call on a closed file")
        self._users += 1
        lock.release()

    def release(self) -> None:
        lock = self._lock
        lock.acquire()
        self._users -= 1
        last = self._closed and self._users == 0
        lock.release()
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


def write_job(
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

