"""Page-aligned buffers for ``O_DIRECT`` writes and the blocking ``pwritev`` loop
(``runtime.disk``'s, split from it): ``_AlignedBuffer`` (a ``memfd`` mapping a worker thread fills
with the GIL released), the pool of idle ones a ``LocalDisk``'s files share, and ``_copy_into``
(parts back to back into a buffer, small runs joined first). Compiled (``magnetar._compiled``,
session 21): ``_AlignedBuffers.take``, ``give_back`` and ``_copy_into`` run once per journal group
on the event loop, called from the compiled ``runtime.disk_file``."""

from __future__ import annotations

import errno
import mmap
import os
import weakref
from collections.abc import Sequence

from mypy_extensions import mypyc_attr

from magnetar.base.invariant import invariant
from magnetar.base.io import Bytes
from magnetar.base.limits import DISK_DIRECT_BUFFERS_COUNT_MAX, MIB

__all__ = ["_PART_COPY_BYTES_MIN", "_AlignedBuffer", "_AlignedBuffers", "_copy_into", "pwritev_all"]

#: Buffers one ``pwritev`` call takes (the kernel's IOV_MAX); longer part lists take several.
_IOV_COUNT_MAX = min(os.sysconf("SC_IOV_MAX"), 1024) if hasattr(os, "sysconf") else 1024


def pwritev_all(fd: int, parts: Sequence[Bytes], offset: int) -> None:
    """Write ``parts`` back to back at ``offset``, retrying short writes (blocking; any thread).

    One ``pwritev`` per ``_IOV_COUNT_MAX`` parts and no Python step per part unless a write comes
    back short (session 18: an entry-log chunk is two parts per entry, and the two loops over
    every part here ran interpreted, on a writer thread holding the GIL, once per bookie)."""
    start = 0
    count = len(parts)
    while start < count:
        batch = parts[start : start + _IOV_COUNT_MAX] if start or count > _IOV_COUNT_MAX else parts
        written = os.pwritev(fd, batch, offset)
        size = sum(map(len, batch))
        if written != size:
            _pwritev_rest(fd, batch, offset, written, size)
        offset += size
        start += len(batch)


def _pwritev_rest(fd: int, batch: Sequence[Bytes], offset: int, written: int, size: int) -> None:
    """The rest of a short ``pwritev`` of ``batch`` (``written`` of its ``size`` bytes at ``offset``):
    a signal, a full disk; rare on files, so part by part."""
    pending: list[Bytes] = [part for part in batch if len(part)]
    while True:
        if written <= 0:
            raise OSError(errno.EIO, f"pwritev wrote nothing at offset {offset}")
        offset += written
        size -= written
        if size == 0:
            return
        while written >= len(pending[0]):
            written -= len(pending.pop(0))
        if written:
            pending[0] = memoryview(pending[0])[written:]
        written = os.pwritev(fd, pending[:_IOV_COUNT_MAX], offset)


#: ``_copy_into`` copies a part of at least this many bytes straight into the aligned buffer;
#: smaller neighbours are joined first and copied as one.
_PART_COPY_BYTES_MIN = 2048


def _copy_into(buffer: mmap.mmap, parts: Sequence[Bytes], total: int) -> memoryview:
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


@mypyc_attr(native_class=False)  # a ``weakref.finalize`` closes its memfd: compiled, a Python class
class _AlignedBuffer:
    """A page-aligned buffer for ``O_DIRECT`` writes: a mapping of a ``memfd`` (where the system
    has them, else of anonymous memory, ``fd`` -1). ``fill`` copies a write's parts into it with
    one ``pwritev`` on the memfd: the kernel copies into the same pages the mapping shows, with
    the GIL released, so a worker thread can make a large write's copy (a batched journal group
    of MiBs, an entry-log chunk) without holding up the event loop; in a thread, a slice
    assignment per part would hold the GIL for the whole copy. The copy was two passes per byte
    per write (journal and entry log) of the broker's loop thread, which bounds a standalone's
    batched ingest (docs/performance.md, session 12)."""

    __slots__ = ("__weakref__", "fd", "map", "size")

    def __init__(self, size: int) -> None:
        self.size = size
        self.fd = -1
        if hasattr(os, "memfd_create"):
            try:
                self.fd = os.memfd_create("magnetar-direct", os.MFD_CLOEXEC)
                os.ftruncate(self.fd, size)
                self.map = mmap.mmap(self.fd, size)
            except OSError:
                if self.fd >= 0:
                    os.close(self.fd)
                self.fd = -1
            else:
                weakref.finalize(self, os.close, self.fd)
                return
        self.map = mmap.mmap(-1, size)

    def fill(self, parts: Sequence[Bytes], aligned: memoryview) -> None:
        """Copy ``parts`` to the start of the buffer (``aligned`` is its view of their length);
        blocking, any thread. Without a memfd, or if writing to it fails (no memory for its
        pages), the copy is made in this thread (``_copy_into``)."""
        if self.fd >= 0:
            try:
                pwritev_all(self.fd, parts, 0)
                return
            except OSError:
                pass  # the mapping is untouched where the write did not reach: copy it all
        _copy_into(self.map, parts, len(aligned))


class _AlignedBuffers:
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
        return _AlignedBuffer(-(-total // MIB) * MIB)

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
