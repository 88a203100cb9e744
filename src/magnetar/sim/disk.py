"""``SimDisk``: the ``Disk`` capability in memory, with the crash behaviour of a real disk.

Model (what a crash keeps), following the durability contract of ``magnetar.base.io``:

* Each file has a *volatile* image (what the process reads and writes: the page cache) and a
  *durable* image (what is on the platter). ``append``/``write_at``/``truncate`` change only the
  volatile image. ``await sync()`` waits a virtual latency, then copies the volatile image to the
  durable one; bytes written during that wait become durable too (allowed: the contract only
  promises the bytes written before the call).
* The namespace (which names exist) also has a volatile and a durable version. Creating,
  renaming and removing a file change the volatile namespace; ``await sync_dir(d)`` makes the
  entries of directory ``d`` durable. ``makedirs`` is durable at once (a simplification: code
  creates its directories at startup, before any data matters).
* ``crash(rng)`` is a power cut: the namespace becomes the durable namespace and each file its
  durable image. The unsynced bytes of a file are the region from the lowest offset written since
  its last sync to its end; with probability ``torn_write_probability`` a random non-empty
  prefix of that region reaches the disk anyway (writes land in order), and with probability
  ``garble_probability`` the last sector of that prefix holds garbage (a torn sector). With no
  ``rng`` every unsynced byte is lost, which makes unit tests exact.
* Handles opened before a crash are dead: using one raises ``ClosedError`` (and, inside a
  world, the crashed node's tasks meet ``SimCrashError`` first).

Invariant: after ``sync()`` returns, a crash never loses or changes the bytes that were in the
file when ``sync()`` was called, unless later writes overwrote them before the crash.
"""

from __future__ import annotations

import asyncio
import errno
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from magnetar import faults
from magnetar.base.errors import ClosedError, InvalidArgumentError, NotFoundError
from magnetar.base.io import Bytes, split_parts
from magnetar.base.limits import MIB, SIM_DISK_SECTOR_BYTES
from magnetar.base.rng import Rng
from magnetar.sim.errors import SimCrashError
from magnetar.sim.incarnation import check_alive

_SYNCS: set[asyncio.Task[None]] = set()  # ``append_and_sync_then``'s syncs in progress


@dataclass(frozen=True, slots=True)
class SimDiskConfig:
    capacity_bytes: int = 4096 * MIB
    sync_latency_us_min: int = 200
    sync_latency_us_max: int = 2_000
    torn_write_probability: float = 0.5
    garble_probability: float = 0.3
    sector_bytes: int = SIM_DISK_SECTOR_BYTES
    # What files opened with ``direct=True`` report as ``write_alignment_bytes`` (production:
    # 4096), so tests can run the padding paths of the journal and the entry log.
    direct_alignment_bytes: int = 1


class _Inode:
    __slots__ = ("dirty_low", "durable", "volatile")

    def __init__(self) -> None:
        self.volatile = bytearray()
        self.durable = bytearray()
        # Lowest offset changed since the last sync; None when volatile == durable.
        self.dirty_low: int | None = None

    def touch(self, offset: int) -> None:
        self.dirty_low = offset if self.dirty_low is None else min(self.dirty_low, offset)

    def make_durable(self) -> None:
        if self.dirty_low is None:
            return
        del self.durable[self.dirty_low :]
        self.durable += self.volatile[self.dirty_low :]
        self.dirty_low = None


def _normalize(path: str) -> str:
    parts = [part for part in path.split("/") if part]
    if any(part in (".", "..") for part in parts):
        raise InvalidArgumentError(f"path {path!r} must not contain '.' or '..'")
    return "/".join(parts)


def _parent(path: str) -> str:
    return path.rsplit("/", 1)[0] if "/" in path else ""


def _is_under(path: str, directory: str) -> bool:
    return directory == "" or path == directory or path.startswith(directory + "/")


class SimFile:
    """An open simulated file (``DiskFile``)."""

    __slots__ = ("_alignment", "_closed", "_disk", "_end", "_generation", "_inode", "_path")

    def __init__(self, disk: SimDisk, path: str, inode: _Inode, alignment: int = 1) -> None:
        self._disk = disk
        self._path = path
        self._inode = inode
        self._generation = disk.generation
        self._closed = False
        self._alignment = alignment
        # Where this handle appends once it preallocated (``preallocate``: zeros past it);
        # None: the image's end, as for any file without preallocated zeros.
        self._end: int | None = None

    @property
    def path(self) -> str:
        return self._path

    @property
    def write_alignment_bytes(self) -> int:
        return self._alignment

    def _check(self) -> _Inode:
        check_alive()
        if self._closed:
            raise ClosedError(f"file {self._path!r} is closed")
        if self._generation != self._disk.generation:
            raise ClosedError(f"file {self._path!r} was opened before a crash")
        return self._inode

    def size(self) -> int:
        inode = self._check()
        return len(inode.volatile) if self._end is None else self._end

    def append(self, data: bytes | bytearray | memoryview) -> int:
        return self._append_volatile([data])

    def write_at(self, offset: int, data: bytes | bytearray | memoryview) -> None:
        inode = self._check()
        if offset < 0:
            raise InvalidArgumentError(f"negative offset {offset}")
        end = offset + len(data)
        grow = max(0, end - len(inode.volatile))
        self._disk._reserve(grow)
        inode.touch(min(offset, len(inode.volatile)))
        if offset > len(inode.volatile):
            inode.volatile += bytes(offset - len(inode.volatile))
        inode.volatile[offset:end] = data
        if self._end is not None:
            self._end = max(self._end, end)

    def read_at(self, offset: int, length: int) -> bytes:
        inode = self._check()
        if offset < 0 or length < 0:
            raise InvalidArgumentError(f"bad read range offset={offset} length={length}")
        return bytes(inode.volatile[offset : offset + length])

    def read_view(self, offset: int, length: int) -> bytes:
        return self.read_at(offset, length)  # a copy: the simulated file may still change

    def truncate(self, size: int) -> None:
        inode = self._check()
        if size < 0:
            raise InvalidArgumentError(f"negative size {size}")
        current = len(inode.volatile)
        self._disk._reserve(max(0, size - current))
        inode.touch(min(size, current))
        if size < current:
            del inode.volatile[size:]
        else:
            inode.volatile += bytes(size - current)
        self._end = None

    async def preallocate(self, end: int) -> None:
        """As the real disk's: zeros past this handle's end (and the image's) up to ``end``,
        durable when it returns; ``size()`` stays where appends go. Reopened, ``size()``
        includes them. The zeros are made durable as they are written, past every byte of the
        file, after one yield (no sync latency drawn: the disk's random draws, and so every
        seed's schedule, stay those of a disk without preallocation)."""
        inode = self._check()
        if self._end is None:
            self._end = len(inode.volatile)
        start = max(self._end, len(inode.volatile))
        if end <= start:
            return
        self._disk._reserve(end - start)
        await asyncio.sleep(0)
        inode = self._check()
        start = max(start, len(inode.volatile))
        if end <= start:
            return
        zeros = bytes(end - start)
        inode.volatile += zeros
        if inode.dirty_low is None and len(inode.durable) == start:
            inode.durable += zeros  # nothing unsynced before them: durable at once
        else:
            inode.touch(start)  # behind unsynced bytes: durable with them, at the next sync

    def _append_volatile(self, parts: Sequence[Bytes]) -> int:
        """Write ``parts`` at this handle's end (over preallocated zeros, or growing the image)."""
        inode = self._check()
        offset = len(inode.volatile) if self._end is None else self._end
        total = sum(len(part) for part in parts)
        self._disk._reserve(max(0, offset + total - len(inode.volatile)))
        inode.touch(offset)
        if offset == len(inode.volatile):
            for part in parts:
                inode.volatile += part
        else:
            at = offset
            for part in parts:
                inode.volatile[at : at + len(part)] = part
                at += len(part)
        if self._end is not None:
            self._end = offset + total
        return offset

    async def append_parts(self, parts: Sequence[Bytes]) -> int:
        # Like the real worker-thread write: the bytes are reserved and in the volatile image at
        # once, the caller resumes only after a yield (other tasks run meanwhile), and a crash
        # before a later sync loses or tears them like any unsynced write.
        offset = self._append_volatile(parts)
        await asyncio.sleep(0)
        self._check()
        return offset

    async def append_and_sync(self, parts: Sequence[Bytes]) -> int:
        offset = await self.append_parts(parts)
        await self.sync()
        return offset

    def append_and_sync_then(self, parts: Sequence[Bytes], done: Callable[[BaseException | None], None], *,
                             torn_point: str = "", unsynced_point: str = "") -> int:
        # As ``append_and_sync``: the bytes are reserved at once; ``done`` runs from the loop once
        # the (simulated) sync returns, or with the error a crash, a close or a fault point raises.
        # With ``torn_point`` the first half of the bytes is in the volatile image at once and the
        # second half (zeros until then) only after that point: a crash there leaves a torn write.
        total = sum(len(part) for part in parts)
        half = total // 2 if torn_point else total
        first, rest = split_parts(parts, half)
        offset = self._append_volatile([*first, bytes(total - half)])

        async def sync_then() -> None:
            try:
                await asyncio.sleep(0)
                if torn_point:
                    await faults.point(torn_point)
                    self._write_parts_at(offset + half, rest)
                if unsynced_point:
                    await faults.point(unsynced_point)
                await self.sync()
            except SimCrashError:
                return  # the node crashed: nobody is left to answer
            except Exception as error:
                done(error)
                return
            done(None)

        task = asyncio.get_running_loop().create_task(sync_then())
        _SYNCS.add(task)  # a strong reference until it ends
        task.add_done_callback(_SYNCS.discard)
        return offset

    def _write_parts_at(self, offset: int, parts: Sequence[Bytes]) -> None:
        inode = self._check()
        if not parts:
            return
        inode.touch(offset)
        for part in parts:
            inode.volatile[offset : offset + len(part)] = part
            offset += len(part)

    async def sync(self) -> None:
        self._check()
        await self._disk._sync_latency()
        self._check().make_durable()

    def close(self) -> None:
        self._closed = True

    def durable_size(self) -> int:
        """Bytes that would survive a crash now (for tests and checkers)."""
        return len(self._inode.durable)


class SimDisk:
    """A simulated data directory. One per node; it outlives the node's crashes."""

    def __init__(self, config: SimDiskConfig | None = None, rng: Rng | None = None) -> None:
        self.config = config or SimDiskConfig()
        self._rng = rng
        self._files: dict[str, _Inode] = {}
        self._durable_files: dict[str, _Inode] = {}
        # Dicts used as ordered sets: iteration order must not depend on string hashing.
        self._dirs: dict[str, None] = {"": None}
        self._durable_dirs: dict[str, None] = {"": None}
        self.generation = 0
        self.capacity_bytes = self.config.capacity_bytes

    # --- Disk ---------------------------------------------------------------------------------
    def open(self, path: str, *, create: bool = True, direct: bool = False) -> SimFile:
        check_alive()
        path = _normalize(path)
        if path in self._dirs or path == "":
            raise InvalidArgumentError(f"{path!r} is a directory")
        inode = self._files.get(path)
        if inode is None:
            if not create:
                raise NotFoundError(f"no file {path!r}")
            if _parent(path) not in self._dirs:
                raise NotFoundError(f"no directory {_parent(path)!r} for file {path!r}")
            inode = _Inode()
            self._files[path] = inode
        return SimFile(self, path, inode, self.config.direct_alignment_bytes if direct else 1)

    def exists(self, path: str) -> bool:
        check_alive()
        path = _normalize(path)
        return path in self._files or path in self._dirs

    def listdir(self, path: str) -> list[str]:
        check_alive()
        path = _normalize(path)
        names = [name for name in [*self._files, *self._dirs] if name and _parent(name) == path]
        return sorted(name.rsplit("/", 1)[-1] for name in names)

    def makedirs(self, path: str) -> None:
        check_alive()
        path = _normalize(path)
        if path in self._files:
            raise InvalidArgumentError(f"{path!r} is a file")
        while path not in self._dirs:
            self._dirs[path] = None
            self._durable_dirs[path] = None
            path = _parent(path)

    def remove(self, path: str) -> None:
        check_alive()
        path = _normalize(path)
        if path == "":
            raise InvalidArgumentError("cannot remove the data directory itself")
        if path in self._dirs:
            for name in [n for n in self._files if _is_under(n, path)]:
                del self._files[name]
            for name in [n for n in self._dirs if _is_under(n, path)]:
                del self._dirs[name]
        else:
            self._files.pop(path, None)

    def rename(self, src: str, dst: str) -> None:
        check_alive()
        src, dst = _normalize(src), _normalize(dst)
        if src in self._dirs:
            raise InvalidArgumentError(f"renaming directories is not supported ({src!r})")
        if src not in self._files:
            raise NotFoundError(f"no file {src!r}")
        if _parent(dst) not in self._dirs:
            raise NotFoundError(f"no directory {_parent(dst)!r} for {dst!r}")
        if dst in self._dirs:
            raise InvalidArgumentError(f"{dst!r} is a directory")
        self._files[dst] = self._files.pop(src)

    async def sync_dir(self, path: str) -> None:
        check_alive()
        path = _normalize(path)
        generation = self.generation
        await self._sync_latency()
        check_alive()
        if generation != self.generation:
            raise ClosedError("the disk crashed during sync_dir")
        self._sync_namespace(path)

    def free_bytes(self) -> int:
        return max(0, self.capacity_bytes - self.used_bytes())

    # --- simulation controls ------------------------------------------------------------------
    def used_bytes(self) -> int:
        return sum(len(inode.volatile) for inode in self._files.values())

    def crash(self, rng: Rng | None = None) -> list[str]:
        """Power-cut the disk (see the module docstring); returns one line per file that lost bytes."""
        self.generation += 1
        report: list[str] = []
        done: list[_Inode] = []
        for path, inode in self._durable_files.items():
            if any(inode is seen for seen in done):
                continue
            done.append(inode)
            line = self._crash_inode(inode, rng)
            if line:
                report.append(f"{path}: {line}")
        lost = [path for path in self._files if path not in self._durable_files]
        report += [f"{path}: creation not durable, file gone" for path in lost]
        self._files = dict(self._durable_files)
        self._dirs = dict(self._durable_dirs)
        return report

    def _crash_inode(self, inode: _Inode, rng: Rng | None) -> str:
        if inode.dirty_low is None:
            inode.volatile = bytearray(inode.durable)
            return ""
        low = inode.dirty_low
        unsynced = inode.volatile[low:]
        image = bytearray(inode.durable)
        kept = 0
        garbled = False
        if rng is not None and unsynced and rng.random() < self.config.torn_write_probability:
            kept = rng.randint(1, len(unsynced))
            if len(image) < low:
                image += bytes(low - len(image))
            image[low : low + kept] = unsynced[:kept]
            if rng.random() < self.config.garble_probability:
                end = low + kept
                start = max(low, ((end - 1) // self.config.sector_bytes) * self.config.sector_bytes)
                image[start:end] = rng.randbytes(end - start)
                garbled = True
        inode.durable = image
        inode.volatile = bytearray(image)
        inode.dirty_low = None
        detail = f"lost {len(unsynced) - kept} of {len(unsynced)} unsynced bytes at {low}"
        return detail + (", last sector garbled" if garbled else "")

    def _sync_namespace(self, directory: str) -> None:
        for name in [n for n in self._durable_files if _parent(n) == directory and n not in self._files]:
            del self._durable_files[name]
        for name in [n for n in self._durable_dirs if n and _parent(n) == directory and n not in self._dirs]:
            for gone in [f for f in self._durable_files if _is_under(f, name)]:
                del self._durable_files[gone]
            for gone in [d for d in self._durable_dirs if _is_under(d, name)]:
                del self._durable_dirs[gone]
        for name, inode in self._files.items():
            if _parent(name) == directory:
                self._durable_files[name] = inode

    def _reserve(self, grow_bytes: int) -> None:
        if grow_bytes > 0 and grow_bytes > self.free_bytes():
            raise OSError(errno.ENOSPC, f"simulated disk full ({self.capacity_bytes} bytes)")

    async def _sync_latency(self) -> None:
        low, high = self.config.sync_latency_us_min, self.config.sync_latency_us_max
        latency_us = low if self._rng is None or high <= low else self._rng.randint(low, high)
        # Always yield: a sync is a point where other tasks run, as with a real fdatasync.
        await asyncio.sleep(latency_us / 1_000_000)
