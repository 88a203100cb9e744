"""``SimKeyValueStore``: the ``KeyValueStore`` capability in memory, with RocksDB's crash rules.

Model: a durable map and a volatile map (what reads see). ``write(..., sync=True)`` applies the
batch and makes it and every earlier batch durable at once (a synced WAL write flushes the WAL
before it). ``write(..., sync=False)`` applies the batch to the volatile map and queues it;
``flush()`` makes queued batches durable. ``crash(rng)`` keeps the durable map plus, in order, a
random prefix of the queued batches (none without ``rng``): a batch survives whole or not at all,
never partially, and never out of order. ``write_durable`` is the group commit: it applies and
queues the batch at once (as ``sync=False``), and one callback on the next loop turn makes every
queued batch durable and completes all the waiting callers together (``durable_groups`` counts
those syncs); a crash before that callback loses them as it loses any unsynced batch.
"""

from __future__ import annotations

import asyncio
import bisect
from collections.abc import Awaitable, Iterable, Iterator

from magnetar.base.errors import ClosedError
from magnetar.base.limits import SIM_KV_PENDING_BATCHES_MAX
from magnetar.base.rng import Rng
from magnetar.sim.incarnation import check_alive

_Batch = list[tuple[bytes, bytes | None]]


class SimKeyValueStore:
    """One store; it outlives crashes of its node (``reopen()`` after ``close()``)."""

    def __init__(self) -> None:
        self._durable: dict[bytes, bytes] = {}
        self._volatile: dict[bytes, bytes] = {}
        self._keys: list[bytes] = []  # sorted keys of the volatile map
        self._pending: list[_Batch] = []
        self._waiting: list[asyncio.Future[None]] = []
        self._closed = False
        self.durable_groups = 0

    def get(self, key: bytes) -> bytes | None:
        self._check()
        return self._volatile.get(bytes(key))

    def write(self, puts: Iterable[tuple[bytes, bytes | None]], *, sync: bool) -> None:
        self._check()
        batch: _Batch = [(bytes(key), None if value is None else bytes(value)) for key, value in puts]
        self._apply(self._volatile, batch, track_keys=True)
        self._pending.append(batch)
        # Past the bound the store flushes instead of buffering more (as a full memtable would).
        if sync or len(self._pending) >= SIM_KV_PENDING_BATCHES_MAX:
            self.flush()

    def write_durable(self, puts: Iterable[tuple[bytes, bytes | None]]) -> Awaitable[None]:
        self.write(puts, sync=False)
        loop = asyncio.get_running_loop()
        future: asyncio.Future[None] = loop.create_future()
        self._waiting.append(future)
        if len(self._waiting) == 1:
            loop.call_soon(self._sync_waiting)
        return future

    def _sync_waiting(self) -> None:
        waiting, self._waiting = self._waiting, []
        if not waiting:  # a crash came first and dropped them
            return
        if self._closed:
            failure = ClosedError("key/value store is closed")
            for future in waiting:
                if not future.done():
                    future.set_exception(failure)
            return
        self.flush()
        self.durable_groups += 1
        for future in waiting:
            if not future.done():
                future.set_result(None)

    def scan(self, start: bytes, end: bytes | None = None) -> Iterator[tuple[bytes, bytes]]:
        self._check()
        low = bisect.bisect_left(self._keys, start)
        high = len(self._keys) if end is None else bisect.bisect_left(self._keys, end)
        # A snapshot: writes during the iteration do not disturb it.
        snapshot = [(key, self._volatile[key]) for key in self._keys[low:high]]
        return iter(snapshot)

    def close(self) -> None:
        self._closed = True

    # --- simulation controls ------------------------------------------------------------------
    def flush(self) -> None:
        """Make every queued ``sync=False`` batch durable."""
        for batch in self._pending:
            self._apply(self._durable, batch, track_keys=False)
        self._pending.clear()

    def pending_batch_count(self) -> int:
        return len(self._pending)

    def crash(self, rng: Rng | None = None) -> str:
        """Lose unsynced batches (a random whole-batch prefix survives with ``rng``); reports what."""
        kept = 0 if rng is None or not self._pending else rng.randint(0, len(self._pending))
        for batch in self._pending[:kept]:
            self._apply(self._durable, batch, track_keys=False)
        lost = len(self._pending) - kept
        self._pending.clear()
        for future in self._waiting:  # their callers crashed with the node: never told "durable"
            future.cancel()
        self._waiting = []
        self._volatile = dict(self._durable)
        self._keys = sorted(self._volatile)
        return f"kept {kept} and lost {lost} unsynced batches"

    def reopen(self) -> SimKeyValueStore:
        """Open the store again (after ``close`` or a crash): same durable state."""
        self._closed = False
        return self

    def _check(self) -> None:
        check_alive()
        if self._closed:
            raise ClosedError("key/value store is closed")

    def _apply(self, target: dict[bytes, bytes], batch: _Batch, *, track_keys: bool) -> None:
        for key, value in batch:
            if value is None:
                if target.pop(key, None) is not None and track_keys:
                    del self._keys[bisect.bisect_left(self._keys, key)]
            else:
                if track_keys and key not in target:
                    bisect.insort(self._keys, key)
                target[key] = value
