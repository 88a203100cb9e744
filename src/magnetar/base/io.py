"""The I/O capabilities cores are given: ``Disk``, ``KeyValueStore`` and ``Network``.

``runtime`` implements them with real files, RocksDB and asyncio sockets; ``sim`` with a
simulated disk (which loses or tears unsynced writes on a crash), an in-memory key/value store
with the same durability rules, and a simulated network with delays, drops and partitions.
Cores receive these objects from a composition root and never open files or sockets.

Durability contract shared by every implementation:

* ``DiskFile.append``/``write_at``/``append_parts`` reach the OS page cache only; they survive a
  process crash in the real world but *not* a machine crash, and the simulator treats every crash
  as the worse case: bytes not covered by a completed ``sync()`` may be lost or torn (a prefix
  kept).
* ``await DiskFile.sync()`` returns only once every byte written before the call is durable.
* ``await DiskFile.append_parts(parts)`` writes off the event loop (a worker thread in
  production) and ``await DiskFile.append_and_sync(parts)`` also makes the file durable in the
  same step; both reserve the bytes at once (``size()`` counts them before the write finished),
  so several may be in progress on one file, each at its own offset. If one fails, the file's
  bytes from its offset on are undefined and the owner treats the disk as failed.
* Creating, renaming and removing files is durable once ``await Disk.sync_dir()`` of the parent
  returned.
* ``KeyValueStore.write(..., sync=True)`` is durable when it returns; ``sync=False`` writes may
  be lost by a crash, but never partially: a batch survives whole or not at all.
* ``await KeyValueStore.write_durable(batch)`` is durable when it returns, and the event loop is
  not blocked while it waits for the sync (a worker thread in production). The batch takes its
  place in the write order when ``write_durable`` is *called*; batches of concurrent calls are
  written in that order and synced together (group commit). When one returns, its batch and
  every batch of an earlier call are durable. After a failed durable write the store refuses
  every later ``write_durable`` (reopen it): a later batch may depend on the lost one.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Iterator, Sequence
from typing import Protocol

#: What the write calls accept: anything exposing contiguous bytes.
Bytes = bytes | bytearray | memoryview


def split_parts(parts: Sequence[Bytes], at: int) -> tuple[list[Bytes], list[Bytes]]:
    """``parts`` as two lists holding their first ``at`` bytes and the rest (views, no copy): where a
    torn write splits its parts, on a real disk (``runtime.disk_io``) and a simulated one (``sim.disk``)."""
    first: list[Bytes] = []
    for index, part in enumerate(parts):
        if at < len(part):
            view = memoryview(part)
            return [*first, view[:at]], [view[at:], *parts[index + 1 :]]
        first.append(part)
        at -= len(part)
    return first, []


class DiskFile(Protocol):
    """An open file: appends and positional reads, explicit durability."""

    @property
    def path(self) -> str: ...

    @property
    def write_alignment_bytes(self) -> int:
        """``append_parts``/``append_and_sync`` take their fastest path (production: past the
        page cache) when the file size and the bytes written are multiples of this; 1 when any
        size is as good. Only a hint: every write is correct whatever its alignment."""

    def size(self) -> int:
        """Bytes in the file as the process sees them (durable or not)."""

    def append(self, data: bytes | bytearray | memoryview) -> int:
        """Write ``data`` at the end; returns the offset it was written at."""

    def write_at(self, offset: int, data: bytes | bytearray | memoryview) -> None: ...

    def read_at(self, offset: int, length: int) -> bytes:
        """Up to ``length`` bytes from ``offset`` (fewer at the end of the file)."""

    def read_view(self, offset: int, length: int) -> Bytes:
        """``read_at``, but possibly a read-only view of the file mapped into memory instead of a
        copy (production: no copy, no syscall once mapped). Only for files that are never
        truncated below what was read (entry logs): the view stays valid while referenced, also
        after ``close`` or the file's removal."""

    def truncate(self, size: int) -> None: ...

    async def append_parts(self, parts: Sequence[Bytes]) -> int:
        """Write ``parts`` back to back at the end, off the event loop (no joined copy is
        built); returns the offset of the first byte. Not durable until ``sync()``."""

    async def append_and_sync(self, parts: Sequence[Bytes]) -> int:
        """``append_parts`` then ``sync`` as one step (one worker-thread call in production):
        returns, with the offset, only once every byte of the file, ``parts`` included, is durable."""

    def append_and_sync_then(self, parts: Sequence[Bytes], done: Callable[[BaseException | None], None], *,
                             torn_point: str = "", unsynced_point: str = "") -> int:
        """``append_and_sync`` without a coroutine: reserves the bytes at the end and returns
        their offset at once; ``done(None)`` (or ``done(error)``) runs on the event loop's thread
        once every byte of the file, ``parts`` included, is durable. Production calls ``done``
        straight from the worker thread's completion (one loop pass, no task or future chain).

        ``torn_point`` and ``unsynced_point`` name fault points (``magnetar.faults``) the write
        passes on its way, every time: the first when part of ``parts`` is written and the rest
        not yet (a crash there leaves a torn write), the second once all of it is written and
        not yet synced. An armed point acts there (its ``error`` becomes ``done(error)``). The
        real disk writes the bytes in two pieces only while ``torn_point`` is armed: unarmed, a
        point half-way through a write does nothing, and one write costs less than two."""

    async def sync(self) -> None:
        """Make every byte written so far durable (fdatasync)."""

    def close(self) -> None: ...


class Disk(Protocol):
    """A directory tree rooted at a node's data directory; paths are relative, '/'-separated."""

    def open(self, path: str, *, create: bool = True, direct: bool = False) -> DiskFile:
        """Open ``path`` for reading and appending; ``create=False`` raises ``NotFoundError`` if absent.
        ``direct=True`` asks for the page-cache bypass for aligned bulk writes (a log's bulk
        writer); durability rules are the same either way."""

    def exists(self, path: str) -> bool: ...

    def listdir(self, path: str) -> list[str]:
        """Names in directory ``path``, sorted; empty if it does not exist."""

    def makedirs(self, path: str) -> None: ...

    def remove(self, path: str) -> None: ...

    def rename(self, src: str, dst: str) -> None:
        """Atomically replace ``dst`` by ``src``."""

    async def sync_dir(self, path: str) -> None:
        """Make creations, renames and removals in directory ``path`` durable."""

    def free_bytes(self) -> int:
        """Bytes still free on the device (read-only mode triggers on this)."""


class KeyValueStore(Protocol):
    """An ordered byte-key store (RocksDB in production) for indexes and small state."""

    def get(self, key: bytes) -> bytes | None: ...

    def write(self, puts: Iterable[tuple[bytes, bytes | None]], *, sync: bool) -> None:
        """Apply a batch atomically: ``(key, value)`` puts, ``(key, None)`` deletes."""

    def write_durable(self, puts: Iterable[tuple[bytes, bytes | None]]) -> Awaitable[None]:
        """Queue a batch now (its place in the write order); the awaitable completes once it is
        durable, without blocking the event loop (see the module docstring: group commit)."""

    def scan(self, start: bytes, end: bytes | None = None) -> Iterator[tuple[bytes, bytes]]:
        """Items with ``start <= key < end`` in key order."""

    def close(self) -> None: ...


class Connection(Protocol):
    """One end of a byte stream between two nodes."""

    @property
    def peer(self) -> str:
        """The remote end as ``host:port``."""

    async def read(self, max_bytes: int) -> bytes:
        """Up to ``max_bytes`` bytes; ``b""`` once the peer closed or the connection broke."""

    def write(self, data: bytes | bytearray | memoryview) -> None:
        """Queue ``data`` for sending; call ``drain()`` to wait for buffer space."""

    async def drain(self) -> None:
        """Wait until the outgoing buffer is below its bound; raises ``ClosedError`` if broken."""

    def is_closing(self) -> bool: ...

    def close(self) -> None: ...


ConnectionHandler = Callable[[Connection], Awaitable[None]]


class Listener(Protocol):
    @property
    def port(self) -> int: ...

    def close(self) -> None: ...


class Network(Protocol):
    """Opens connections and listens: the node's view of the network."""

    async def connect(self, host: str, port: int) -> Connection:
        """Connect or raise ``ConnectionError``."""

    async def listen(self, host: str, port: int, handler: ConnectionHandler) -> Listener:
        """Serve ``handler`` for each incoming connection; ``port=0`` picks a free port."""
