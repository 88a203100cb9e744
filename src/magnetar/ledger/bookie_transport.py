"""``BookieClientTransport``: the production ``BookieTransport`` over pooled ``BookieClient``s.

One pipelined ``BookieClient`` per bookie, opened lazily over the injected ``Network`` on first
use and kept in a bounded pool (``LEDGER_BOOKIE_CONNECTIONS_COUNT_MAX``; the least recently used
idle connection is closed to make room). A pooled connection found closed is dropped and a new
one opened; a request that fails with ``ClosedError`` is retried once on a fresh connection
(a bookie restart must not cost an ensemble change), since every bookie request is idempotent (an add of the same entry stores the same
bytes; reads and fences change nothing on a repeat).

Translation at the boundary (the ledger code sees only its own errors):

* ``Status.FENCED``                          -> ``FencedError``
* ``Status.NO_SUCH_ENTRY``/``NO_SUCH_LEDGER`` -> ``NoSuchEntryError`` (a valid negative; for
  ``read_last_entry`` it is the answer "no entry", with the bookie's known LAC)
* every other status, ``ClosedError``, ``OperationTimeoutError``, ``ChecksumMismatchError``, refused
  connections                                -> ``BookieUnavailableError``

Invariant: at most one connect is in progress per bookie (a per-bookie lock), so concurrent
requests share one connection instead of racing to open several.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict, deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

from magnetar.base.clock import Clock
from magnetar.base.errors import (
    ChecksumMismatchError,
    ClosedError,
    FencedError,
    LimitExceededError,
    MagnetarError,
    OperationTimeoutError,
)
from magnetar.base.io import Network
from magnetar.base.limits import LEDGER_BOOKIE_CONNECTIONS_COUNT_MAX, LEDGER_PIPELINED_ADD_BYTES_MAX
from magnetar.base.types import NO_ENTRY, BookieId
from magnetar.ledger._deadline import keep_in_background
from magnetar.ledger.bookie_client import BookieClient
from magnetar.ledger.config import LedgerClientConfig
from magnetar.ledger.errors import BookieUnavailableError, NoSuchEntryError
from magnetar.ledger.transport import AddReplyCallback, LastEntryReply
from magnetar.protocol.bookie.codec import EncodedEntry, ReadResponse, Response, Status

_NEGATIVE = (Status.NO_SUCH_ENTRY, Status.NO_SUCH_LEDGER)


def status_error(bookie: BookieId, status: Status, what: str) -> MagnetarError:
    """The ledger-layer error for a non-OK bookie status."""
    if status is Status.FENCED:
        return FencedError(f"{what}: ledger fenced on bookie {bookie}")
    if status in _NEGATIVE:
        return NoSuchEntryError(f"{what}: bookie {bookie} answered {status.name}")
    return BookieUnavailableError(f"{what}: bookie {bookie} answered {status.name}")


def entry_of(bookie: BookieId, what: str, response: ReadResponse) -> EncodedEntry:
    """The entry of a (checked) READ answer, or the error its status means."""
    if response.status is not Status.OK:
        raise status_error(bookie, response.status, what)
    if response.entry is None:
        raise BookieUnavailableError(f"{what}: bookie {bookie} answered OK without an entry")
    return response.entry


def last_entry_of(bookie: BookieId, what: str, response: ReadResponse) -> LastEntryReply:
    """A (checked) READ_LAST_ENTRY answer as a ``LastEntryReply`` (no entry: -1), or its error."""
    if response.status in _NEGATIVE:
        return LastEntryReply(NO_ENTRY, max(response.known_lac, NO_ENTRY))
    entry = entry_of(bookie, what, response)
    return LastEntryReply(entry.entry_id, max(response.known_lac, entry.lac))


@dataclass(eq=False, slots=True)
class _Add:
    on_done: Callable[[BaseException | None], None]  # told once: None (stored) or the error
    bookie: BookieId
    entry: EncodedEntry
    recovery: bool
    master_key: bytes
    retried: bool = False
    told: bool = False


def _settle(op: _Add, error: BaseException | None) -> None:
    if not op.told:
        op.told = True
        op.on_done(error)


def settle_future(future: asyncio.Future[None], error: BaseException | None) -> None:
    """An add's outcome into the future ``add`` returns (unless its caller gave up)."""
    if future.done():
        return
    if error is None:
        future.set_result(None)
    else:
        future.set_exception(error)
        future.exception()  # retrieved here: the caller may have stopped listening


def reply_of_run(on_reply: AddReplyCallback, index: int, error: BaseException | None) -> None:
    on_reply(index, error)


class BookieClientTransport:
    """``BookieTransport`` over a pool of ``BookieClient`` connections (see the module docstring)."""

    def __init__(
        self,
        network: Network,
        clock: Clock,
        config: LedgerClientConfig | None = None,
        *,
        connections_count_max: int = LEDGER_BOOKIE_CONNECTIONS_COUNT_MAX,
    ) -> None:
        self._network = network
        self._clock = clock
        self._config = config or LedgerClientConfig()
        self._connections_count_max = connections_count_max
        self._clients: OrderedDict[BookieId, BookieClient] = OrderedDict()
        self._connecting: dict[BookieId, asyncio.Lock] = {}
        self._add_bytes: dict[BookieId, int] = {}  # bytes of adds in flight, per bookie
        self._bytes_room: dict[BookieId, asyncio.Event] = {}
        self._waiting: dict[BookieId, deque[_Add]] = {}  # adds waiting for a connection or room
        self._background: set[asyncio.Task[Any]] = set()
        self._closed = False

    @property
    def connection_count(self) -> int:
        return len(self._clients)

    # --- pool ----------------------------------------------------------------------------------

    async def _client(self, bookie: BookieId) -> BookieClient:
        if self._closed:
            raise BookieUnavailableError(f"transport closed; cannot reach {bookie}")
        client = self._clients.get(bookie)
        if client is not None and not client.closed:
            self._clients.move_to_end(bookie)
            return client
        lock = self._connecting.setdefault(bookie, asyncio.Lock())
        async with lock:
            client = self._clients.get(bookie)
            if client is not None and not client.closed:
                return client
            if client is not None:
                await self._drop(bookie, client)
            await self._make_room()
            try:
                client = await BookieClient.connect(
                    self._network, bookie.host, bookie.port, self._clock,
                    request_timeout_ms=max(self._config.add_timeout_ms, self._config.read_timeout_ms),
                )
            except (OSError, MagnetarError) as exc:
                raise BookieUnavailableError(f"cannot connect to bookie {bookie}: {exc}") from exc
            if self._closed:
                await client.close()
                raise BookieUnavailableError(f"transport closed; cannot reach {bookie}")
            self._clients[bookie] = client
            return client

    async def _make_room(self) -> None:
        while len(self._clients) >= self._connections_count_max:
            idle = next((b for b, c in self._clients.items() if c.inflight_count == 0), None)
            if idle is None:
                raise LimitExceededError("LEDGER_BOOKIE_CONNECTIONS_COUNT_MAX", len(self._clients) + 1,
                                    self._connections_count_max)
            await self._drop(idle, self._clients[idle])

    async def _drop(self, bookie: BookieId, client: BookieClient) -> None:
        if self._clients.get(bookie) is client:
            del self._clients[bookie]
        await client.close()

    async def _call(self, bookie: BookieId, what: str, request):  # type: ignore[no-untyped-def]
        """Run ``request(client)``; one retry on a fresh connection if a pooled one was dead."""
        for attempt in range(2):
            client = await self._client(bookie)
            try:
                return await request(client)
            except ClosedError as exc:
                await self._drop(bookie, client)
                if attempt == 1:
                    raise BookieUnavailableError(f"{what}: connection to {bookie} lost: {exc}") from exc
            except (OperationTimeoutError, ChecksumMismatchError, LimitExceededError) as exc:
                raise BookieUnavailableError(f"{what}: {exc}") from exc
        raise BookieUnavailableError(f"{what}: bookie {bookie} unreachable")

    async def close(self) -> None:
        """Close every connection; later calls raise ``BookieUnavailableError``. Idempotent."""
        self._closed = True
        for task in list(self._background):
            task.cancel()
        clients = list(self._clients.items())
        self._clients.clear()
        for _, client in clients:
            await client.close()

    # --- BookieTransport -----------------------------------------------------------------------

    def add(self, bookie: BookieId, entry: EncodedEntry, recovery: bool, master_key: bytes) -> asyncio.Future[None]:
        """The one add operation: sent at once on an open connection with room, else after the
        connect or the wait for room (per bookie, in call order). The future is bounded by the
        connection's request deadline (``add_timeout_ms``); a connection lost under it is
        reconnected and the add sent once more (adds are idempotent)."""
        result: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._submit(_Add(partial(settle_future, result), bookie, entry, recovery, master_key))
        return result

    def add_run(self, bookie: BookieId, entries: Sequence[EncodedEntry], recovery: bool, master_key: bytes,
                on_reply: AddReplyCallback) -> None:
        """``add`` of a run of entries told through ``on_reply(index, error)``: on an open
        connection with room for the whole run and no add waiting before it, every ADD frame of
        the run goes out in one write; otherwise each waits its turn as ``add`` does."""
        ops = [_Add(partial(reply_of_run, on_reply, index), bookie, entry, recovery, master_key)
               for index, entry in enumerate(entries)]
        if not ops:
            return
        if self._closed or bookie in self._waiting or not self._try_send_run(bookie, ops):
            for op in ops:
                self._submit(op)

    def _try_send_run(self, bookie: BookieId, ops: list[_Add]) -> bool:
        client = self._clients.get(bookie)
        if client is None or client.closed or client.inflight_count + len(ops) > client.inflight_count_max:
            return False
        size = sum(len(op.entry.raw) for op in ops)
        inflight = self._add_bytes.get(bookie, 0)
        if inflight and inflight + size > LEDGER_PIPELINED_ADD_BYTES_MAX:
            return False
        first = ops[0]
        try:
            client.add_run_then([op.entry for op in ops], [partial(self._on_add_reply, op) for op in ops],
                                master_key=first.master_key, recovery=first.recovery,
                                timeout_ms=self._config.add_timeout_ms)
        except (ClosedError, LimitExceededError):
            return False
        self._add_bytes[bookie] = inflight + size
        return True

    def _submit(self, op: _Add) -> None:
        if self._closed:
            error = BookieUnavailableError(f"transport closed; cannot reach {op.bookie}")
            asyncio.get_running_loop().call_soon(_settle, op, error)  # never from inside ``add``
            return
        waiting = self._waiting.get(op.bookie)
        if waiting is None:
            if self._try_send(op):
                return
            waiting = self._waiting[op.bookie] = deque()
            task = asyncio.get_running_loop().create_task(self._send_when_ready(op.bookie, waiting))
            keep_in_background(task, self._background)
        waiting.append(op)

    def _try_send(self, op: _Add) -> bool:
        """Send ``op`` now if its bookie's connection is open and has room (requests and bytes)."""
        client = self._clients.get(op.bookie)
        if client is None or client.closed or not client.has_room:
            return False
        size = len(op.entry.raw)
        inflight = self._add_bytes.get(op.bookie, 0)
        if inflight and inflight + size > LEDGER_PIPELINED_ADD_BYTES_MAX:
            return False
        try:
            client.add_run_then((op.entry,), (partial(self._on_add_reply, op),), master_key=op.master_key,
                                recovery=op.recovery, timeout_ms=self._config.add_timeout_ms)
        except (ClosedError, LimitExceededError):
            return False
        self._add_bytes[op.bookie] = inflight + size
        return True

    async def _send_when_ready(self, bookie: BookieId, waiting: deque[_Add]) -> None:
        """Connect, or wait for room, then send what waits for ``bookie``, in order."""
        try:
            while waiting:
                try:
                    client = await self._client(bookie)
                except MagnetarError as exc:
                    error = exc if isinstance(exc, BookieUnavailableError) else BookieUnavailableError(f"add: {exc}")
                    while waiting:
                        _settle(waiting.popleft(), error)
                    return
                if self._try_send(waiting[0]):
                    waiting.popleft()
                elif not client.has_room:
                    await client.wait_for_room()
                else:  # its bytes in flight are at the bound: wait for an answer
                    room = self._bytes_room.setdefault(bookie, asyncio.Event())
                    room.clear()
                    await room.wait()
        finally:
            if self._waiting.get(bookie) is waiting:
                del self._waiting[bookie]
            for op in waiting:  # cancelled (the transport closed)
                _settle(op, BookieUnavailableError(f"transport closed; cannot reach {bookie}"))

    def _on_add_reply(self, op: _Add, response: Response | None, error: BaseException | None) -> None:
        left = self._add_bytes.get(op.bookie, 0) - len(op.entry.raw)
        if left > 0:
            self._add_bytes[op.bookie] = left
        else:
            self._add_bytes.pop(op.bookie, None)
        room = self._bytes_room.get(op.bookie)
        if room is not None:
            room.set()
        if error is None and response is not None and response.status is Status.OK:
            _settle(op, None)
            return
        what = f"add {op.entry.ledger_id}:{op.entry.entry_id}"
        if isinstance(error, ClosedError):
            if not op.retried:  # the connection died: once more on a fresh one
                op.retried = True
                self._submit(op)
                return
            _settle(op, BookieUnavailableError(f"{what}: connection to {op.bookie} lost: {error}"))
        elif isinstance(error, OperationTimeoutError | ChecksumMismatchError | LimitExceededError):
            _settle(op, BookieUnavailableError(f"{what}: {error}"))
        elif error is not None:
            _settle(op, error)
        elif response is None:
            _settle(op, BookieUnavailableError(f"{what}: bookie {op.bookie} answered nothing"))
        else:
            _settle(op, status_error(op.bookie, response.status, what))

    async def read(
        self, bookie: BookieId, ledger_id: int, entry_id: int, *, fence: bool, master_key: bytes
    ) -> EncodedEntry:
        what = f"read {ledger_id}:{entry_id}"
        response = await self._call(
            bookie, what,
            lambda c: c.read(ledger_id, entry_id, fence=fence, master_key=master_key,
                             timeout_ms=self._config.read_timeout_ms),
        )
        return entry_of(bookie, what, response)

    async def read_last_entry(
        self, bookie: BookieId, ledger_id: int, *, fence: bool, master_key: bytes
    ) -> LastEntryReply:
        what = f"read_last_entry {ledger_id}"
        response = await self._call(
            bookie, what,
            lambda c: c.read_last_entry(ledger_id, fence=fence, master_key=master_key,
                                        timeout_ms=self._config.read_timeout_ms),
        )
        return last_entry_of(bookie, what, response)

    async def write_lac(self, bookie: BookieId, ledger_id: int, lac: int, *, master_key: bytes) -> None:
        what = f"write_lac {ledger_id}"
        response = await self._call(
            bookie, what,
            lambda c: c.write_lac(ledger_id, lac, master_key=master_key, timeout_ms=self._config.add_timeout_ms),
        )
        if response.status is not Status.OK:
            raise status_error(bookie, response.status, what)
