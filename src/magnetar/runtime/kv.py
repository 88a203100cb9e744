"""``KeyValueStore`` over RocksDB (``rocksdict``): the bookie index and small durable state.

``write_durable`` is a group commit off the event loop: the batches of concurrent calls queue on
the loop, one writer task hands all queued batches (at most ``KV_GROUP_COMMIT_BATCHES_MAX``) to a
single worker thread, which writes them, in call order, as ONE RocksDB write batch and then
syncs the WAL once (``flush_wal(sync=True)``, which releases the GIL; ``Rdict.write`` holds it,
so the synced write itself must not be a ``sync=True`` write). One worker thread and one writer
task keep the groups in call order. Every caller's future completes after its group's sync.
Write-then-SyncWAL is durable exactly as a ``sync=True`` write; the difference is that a reader
of this RocksDB (a secondary handle) could see a group before its sync finished.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor

from rocksdict import Options, Rdict, WriteBatch, WriteOptions

from magnetar.base.errors import ClosedError, MagnetarError
from magnetar.base.limits import KV_GROUP_COMMIT_BATCHES_MAX

__all__ = ["DurableWriteFailedError", "RocksKeyValueStore"]

_Puts = list[tuple[bytes, bytes | None]]


class DurableWriteFailedError(MagnetarError):
    """A group write or its sync failed: the store refuses further durable writes (reopen it)."""


class RocksKeyValueStore:
    # Created on the first write_durable (a read-only subclass never starts a thread).
    _committer: _GroupCommitter | None = None

    def __init__(self, path: str) -> None:
        options = Options(raw_mode=True)
        options.create_if_missing(True)
        self._db = Rdict(path, options)
        self._sync = WriteOptions()
        self._sync.sync = True
        self._nosync = WriteOptions()
        self._nosync.sync = False

    def get(self, key: bytes) -> bytes | None:
        value = self._db.get(key)
        return None if value is None else bytes(value)

    def write(self, puts: Iterable[tuple[bytes, bytes | None]], *, sync: bool) -> None:
        # Item assignment, not ``put``/``delete``: no method looked up by name per row (a
        # checkpoint writes one row per entry, once per bookie: 8-12% of this loop, session 19).
        batch = WriteBatch(raw_mode=True)
        for key, value in puts:
            if value is None:
                del batch[key]
            else:
                batch[key] = value
        self._db.write(batch, self._sync if sync else self._nosync)

    def write_durable(self, puts: Iterable[tuple[bytes, bytes | None]]) -> Awaitable[None]:
        if self._committer is None:
            self._committer = _GroupCommitter(self)
        return self._committer.submit(list(puts))

    def sync_wal(self) -> None:
        """Make every write so far durable (fsync of the WAL); runs in the worker thread."""
        self._db.flush_wal(True)

    @property
    def durable_groups(self) -> int:
        """Group writes synced so far by ``write_durable`` (each is one WAL sync)."""
        return 0 if self._committer is None else self._committer.groups

    def scan(self, start: bytes, end: bytes | None = None) -> Iterator[tuple[bytes, bytes]]:
        iterator = self._db.iter()
        iterator.seek(start)
        while iterator.valid():
            key = bytes(iterator.key())
            if end is not None and key >= end:
                break
            yield key, bytes(iterator.value())
            iterator.next()

    def close(self) -> None:
        """Fail queued durable writes, wait for the one in the worker thread, close RocksDB."""
        if self._committer is not None:
            self._committer.close()
        self._db.close()


class _GroupCommitter:
    """The queue, writer task and worker thread behind one store's ``write_durable``."""

    def __init__(self, store: RocksKeyValueStore) -> None:
        self._store = store
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="magnetar-kv-sync")
        self._queue: list[tuple[_Puts, asyncio.Future[None]]] = []
        self._writing: list[asyncio.Future[None]] = []
        self._writer: asyncio.Task[None] | None = None
        self._failure: MagnetarError | None = None
        self.groups = 0

    def submit(self, puts: _Puts) -> asyncio.Future[None]:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[None] = loop.create_future()
        if self._failure is not None:
            future.set_exception(self._failure)
            return future
        self._queue.append((puts, future))
        if self._writer is None:
            self._writer = loop.create_task(self._run())
        return future

    def _write_group(self, puts: _Puts) -> None:
        self._store.write(puts, sync=False)
        self._store.sync_wal()

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            while self._queue and self._failure is None:
                group = self._queue[:KV_GROUP_COMMIT_BATCHES_MAX]
                del self._queue[:KV_GROUP_COMMIT_BATCHES_MAX]
                self._writing = [future for _, future in group]
                puts = [put for batch, _ in group for put in batch]
                try:
                    await loop.run_in_executor(self._executor, self._write_group, puts)
                except Exception as exc:
                    self._fail(DurableWriteFailedError(f"durable key/value write failed: {exc!r}"))
                    return
                self.groups += 1
                for future in self._writing:
                    if not future.done():
                        future.set_result(None)
                self._writing = []
        except asyncio.CancelledError:
            self._fail(ClosedError("key/value store closed during a durable write"))
            raise
        finally:
            self._writer = None

    def _fail(self, failure: MagnetarError) -> None:
        self._failure = failure
        for future in self._writing + [future for _, future in self._queue]:
            if not future.done():
                future.set_exception(failure)
        self._writing = []
        self._queue.clear()

    def close(self) -> None:
        if self._failure is None:
            self._fail(ClosedError("key/value store is closed"))
        if self._writer is not None:
            self._writer.cancel()
        self._executor.shutdown(wait=True)
