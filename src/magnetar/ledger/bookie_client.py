"""``BookieClient``: one pipelined connection to one bookie (the ledger layer's transport below).

Requests carry a client-chosen request id; responses may come back in any order and are matched
to their futures by id. Many requests may be outstanding (pipelining), at most
``inflight_count_max`` (``BOOKIE_CLIENT_INFLIGHT_COUNT_MAX``); the async calls wait for room,
``add_nowait`` raises ``LimitExceededError`` instead. Each request has a deadline
(``timeout_ms``, default ``request_timeout_ms``): a reaper task driven by the injected ``Clock``
fails overdue requests with ``OperationTimeoutError`` (a late answer is then dropped).

A reader that takes many entries in order on a thread of its own (the Spark connector) uses
``runtime.bookie_reads.BlockingBookieReads`` instead, and checks its answers with the same
``checked_entry`` (status, ids, digest).

Contracts: a non-OK ``Status`` is *returned* in the response (callers need to tell FENCED from
NO_SUCH_ENTRY from the rest); transport failures raise ``ClosedError`` (connection gone: every
outstanding request fails with it) or ``OperationTimeoutError``. Reads verify the entry's CRC32C digest
and ids and raise ``ChecksumMismatchError`` when they do not match, so a caller never sees bytes the
writer did not send.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from functools import partial

from magnetar.base.clock import Clock
from magnetar.base.errors import (
    ChecksumMismatchError,
    ClosedError,
    CorruptDataError,
    LimitExceededError,
    OperationTimeoutError,
)
from magnetar.base.io import Connection, Network
from magnetar.base.limits import BOOKIE_CLIENT_INFLIGHT_COUNT_MAX, BOOKIE_READ_CHUNK_BYTES
from magnetar.protocol.bookie import (
    AddRequest,
    AddResponse,
    EncodedEntry,
    FrameDecoder,
    GetInfoRequest,
    GetInfoResponse,
    ReadLacRequest,
    ReadLacResponse,
    ReadLastEntryRequest,
    ReadRequest,
    ReadResponse,
    Request,
    Response,
    Status,
    WriteLacRequest,
    WriteLacResponse,
    encode,
)
from magnetar.protocol.bookie.codec import EncodedEntryView, ReadViewResponse, encode_adds

log = logging.getLogger(__name__)

REQUEST_TIMEOUT_MS_DEFAULT = 5_000  # BookKeeper's add and read timeouts
DEADLINE_TICK_MS = 20
REQUEST_ID_MAX = (1 << 64) - 1

#: How a request's sender is told the answer: ``(response, None)`` or ``(None, error)``, once.
ReplyCallback = Callable[[Response | None, BaseException | None], None]


def _settle_response(future: asyncio.Future[Response], response: Response | None,
                     error: BaseException | None) -> None:
    if future.done():
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(response)  # type: ignore[arg-type]


class BookieClient:
    def __init__(
        self,
        connection: Connection,
        clock: Clock,
        *,
        request_timeout_ms: int = REQUEST_TIMEOUT_MS_DEFAULT,
        inflight_count_max: int = BOOKIE_CLIENT_INFLIGHT_COUNT_MAX,
    ) -> None:
        self._connection = connection
        self._clock = clock
        self._request_timeout_ms = request_timeout_ms
        self._inflight_count_max = inflight_count_max
        self._pending: dict[int, tuple[ReplyCallback, int]] = {}  # request id -> (reply, deadline ns)
        self._next_id = 1
        self._decoder = FrameDecoder()
        self._room = asyncio.Event()
        self._room.set()
        self._busy = asyncio.Event()  # set while requests are outstanding: the deadline loop ticks only then
        self._closed: BaseException | None = None
        loop = asyncio.get_running_loop()
        self._reader = loop.create_task(self._read_loop(), name=f"bookie-client-read-{connection.peer}")
        self._reaper = loop.create_task(self._deadline_loop(), name=f"bookie-client-deadlines-{connection.peer}")

    @classmethod
    async def connect(
        cls,
        network: Network,
        host: str,
        port: int,
        clock: Clock,
        *,
        request_timeout_ms: int = REQUEST_TIMEOUT_MS_DEFAULT,
        inflight_count_max: int = BOOKIE_CLIENT_INFLIGHT_COUNT_MAX,
    ) -> BookieClient:
        """Open a connection; raises ``ConnectionError`` (as ``Network.connect``) if refused."""
        return cls(await network.connect(host, port), clock, request_timeout_ms=request_timeout_ms,
                   inflight_count_max=inflight_count_max)

    @property
    def peer(self) -> str:
        return self._connection.peer

    @property
    def closed(self) -> bool:
        return self._closed is not None

    @property
    def inflight_count(self) -> int:
        return len(self._pending)

    @property
    def inflight_count_max(self) -> int:
        return self._inflight_count_max

    # --- requests ------------------------------------------------------------------------------

    def _next_request_id(self) -> int:
        request_id = self._next_id
        self._next_id = 1 if request_id >= REQUEST_ID_MAX else request_id + 1
        return request_id

    def _check_room(self, count: int) -> None:
        if self._closed is not None:
            raise ClosedError(f"bookie connection to {self.peer} is closed: {self._closed}")
        if len(self._pending) + count > self._inflight_count_max:
            raise LimitExceededError("BOOKIE_CLIENT_INFLIGHT_COUNT_MAX", len(self._pending) + count,
                                     self._inflight_count_max)

    def _sent(self) -> None:
        self._busy.set()
        if len(self._pending) >= self._inflight_count_max:
            self._room.clear()

    def _send(self, request: Request, timeout_ms: int | None) -> asyncio.Future[Response]:
        self._check_room(1)
        future: asyncio.Future[Response] = asyncio.get_running_loop().create_future()
        deadline_ns = self._clock.monotonic_ns() + (timeout_ms or self._request_timeout_ms) * 1_000_000
        self._pending[request.request_id] = (partial(_settle_response, future), deadline_ns)
        self._sent()
        self._connection.write(encode(request))
        return future

    def add_run_then(self, entries: Sequence[EncodedEntry], replies: Sequence[ReplyCallback], *,
                     master_key: bytes = b"", recovery: bool = False, timeout_ms: int | None = None) -> None:
        """Send one add per entry, all in one write; ``replies[i](response, None)`` with entry i's
        ``AddResponse``, or ``replies[i](None, error)`` (``ClosedError``, ``OperationTimeoutError``),
        once each and never from inside this call. Raises ``ClosedError`` or ``LimitExceededError``
        (nothing sent) when the connection is closed or has no room for all of them. Call
        ``drain()`` now and then so the socket buffer stays bounded."""
        self._check_room(len(entries))
        adds = [(self._next_request_id(), entry) for entry in entries]
        frames = encode_adds(adds, master_key, recovery)  # may refuse (a frame too large): nothing registered
        deadline_ns = self._clock.monotonic_ns() + (timeout_ms or self._request_timeout_ms) * 1_000_000
        pending = self._pending
        for (request_id, _), reply in zip(adds, replies, strict=True):
            pending[request_id] = (reply, deadline_ns)
        self._sent()
        self._connection.write(frames)

    @property
    def has_room(self) -> bool:
        """Whether a request can be sent now (fewer than ``inflight_count_max`` outstanding)."""
        return len(self._pending) < self._inflight_count_max

    async def wait_for_room(self) -> None:
        """Backpressure: return once a request can be sent, or the connection closed."""
        while len(self._pending) >= self._inflight_count_max and self._closed is None:
            await self._room.wait()

    async def _call(self, request: Request, timeout_ms: int | None) -> Response:
        await self.wait_for_room()
        future = self._send(request, timeout_ms)
        await self._connection.drain()
        return await future

    def add_nowait(
        self, entry: EncodedEntry, *, master_key: bytes = b"", recovery: bool = False, timeout_ms: int | None = None
    ) -> asyncio.Future[Response]:
        """Send an add without waiting; the future resolves to an ``AddResponse``.

        For pipelining many adds from one task; call ``drain()`` now and then so the socket
        buffer stays bounded.
        """
        return self._send(AddRequest(self._next_request_id(), entry, master_key, recovery), timeout_ms)

    async def drain(self) -> None:
        await self._connection.drain()

    async def add(
        self, entry: EncodedEntry, *, master_key: bytes = b"", recovery: bool = False, timeout_ms: int | None = None
    ) -> AddResponse:
        """Add ``entry``; OK means it is durable in the bookie's journal."""
        response = await self._call(AddRequest(self._next_request_id(), entry, master_key, recovery), timeout_ms)
        assert isinstance(response, AddResponse)
        return response

    async def read(
        self,
        ledger_id: int,
        entry_id: int,
        *,
        fence: bool = False,
        master_key: bytes = b"",
        timeout_ms: int | None = None,
    ) -> ReadResponse:
        """Read an entry; ``fence=True`` fences the ledger first (durably, before the answer)."""
        request = ReadRequest(self._next_request_id(), ledger_id, entry_id, fence, master_key)
        response = await self._call(request, timeout_ms)
        assert isinstance(response, ReadResponse)
        checked_entry(response, ledger_id, entry_id)
        return response

    async def read_last_entry(
        self, ledger_id: int, *, fence: bool = False, master_key: bytes = b"", timeout_ms: int | None = None
    ) -> ReadResponse:
        """The highest entry the bookie stores for the ledger, with the bookie's known LAC."""
        request = ReadLastEntryRequest(self._next_request_id(), ledger_id, fence, master_key)
        response = await self._call(request, timeout_ms)
        assert isinstance(response, ReadResponse)
        checked_entry(response, ledger_id, None)
        return response

    async def read_lac(self, ledger_id: int, *, timeout_ms: int | None = None) -> ReadLacResponse:
        response = await self._call(ReadLacRequest(self._next_request_id(), ledger_id), timeout_ms)
        assert isinstance(response, ReadLacResponse)
        return response

    async def write_lac(
        self, ledger_id: int, lac: int, *, master_key: bytes = b"", timeout_ms: int | None = None
    ) -> WriteLacResponse:
        response = await self._call(WriteLacRequest(self._next_request_id(), ledger_id, lac, master_key), timeout_ms)
        assert isinstance(response, WriteLacResponse)
        return response

    async def get_info(self, *, timeout_ms: int | None = None) -> GetInfoResponse:
        response = await self._call(GetInfoRequest(self._next_request_id()), timeout_ms)
        assert isinstance(response, GetInfoResponse)
        return response

    # --- plumbing ------------------------------------------------------------------------------

    async def _read_loop(self) -> None:
        error: BaseException = ClosedError(f"bookie {self.peer} closed the connection")
        try:
            while True:
                data = await self._connection.read(BOOKIE_READ_CHUNK_BYTES)
                if not data:
                    break
                for message in self._decoder.feed(data):
                    self._resolve(message)
        except (CorruptDataError, LimitExceededError) as exc:
            error = ClosedError(f"bookie {self.peer} sent a malformed frame: {exc}")
            log.warning("%s", error)
        except asyncio.CancelledError:
            error = ClosedError("bookie client closed")
            raise
        finally:
            self._fail_all(error)

    def _resolve(self, message: object) -> None:
        request_id = getattr(message, "request_id", None)
        if not isinstance(message, AddResponse | ReadResponse | ReadLacResponse | GetInfoResponse | WriteLacResponse):
            raise CorruptDataError(f"bookie sent a request, not a response: {type(message).__name__}")
        pending = self._pending.pop(request_id, None) if request_id is not None else None
        if pending is None:
            return  # timed out earlier; the answer arrives too late to matter
        if not self._room.is_set() and len(self._pending) < self._inflight_count_max:
            self._room.set()
        pending[0](message, None)

    async def _deadline_loop(self) -> None:
        while self._closed is None:
            if not self._pending:  # idle: no tick until a request goes out
                self._busy.clear()
                await self._busy.wait()
            await self._clock.sleep(DEADLINE_TICK_MS / 1000)
            if not self._pending:
                continue
            now = self._clock.monotonic_ns()
            overdue = [rid for rid, (_, deadline) in self._pending.items() if deadline <= now]
            for request_id in overdue:
                reply, _ = self._pending.pop(request_id)
                reply(None, OperationTimeoutError(f"bookie {self.peer}: request {request_id} timed out"))
            if overdue:
                self._room.set()

    def _fail_all(self, error: BaseException) -> None:
        if self._closed is None:
            self._closed = error
        pending, self._pending = self._pending, {}
        for reply, _ in pending.values():
            reply(None, error)
        self._room.set()
        self._busy.set()  # the deadline loop wakes up and ends
        self._connection.close()

    async def close(self) -> None:
        if self._closed is None:
            self._fail_all(ClosedError("bookie client closed"))
        for task in (self._reader, self._reaper):
            task.cancel()
        for task in (self._reader, self._reaper):
            try:
                await task
            except asyncio.CancelledError:
                pass


def checked_entry(response: ReadResponse | ReadViewResponse, ledger_id: int,
                  entry_id: int | None) -> EncodedEntry | EncodedEntryView | None:
    """The entry of an OK read answer, checked: it must be there, be the entry asked for
    (``entry_id`` None: any entry of the ledger) and pass its CRC32C digest, else
    ``ChecksumMismatchError``. ``None`` for a non-OK answer (its status tells why)."""
    entry = response.entry
    if response.status is not Status.OK:
        return None
    if entry is None:
        raise ChecksumMismatchError(f"bookie answered OK for {ledger_id}:{response.entry_id} without an entry")
    if entry.ledger_id != ledger_id or (entry_id is not None and entry.entry_id != entry_id):
        raise ChecksumMismatchError(f"bookie returned entry {entry.ledger_id}:{entry.entry_id} for {ledger_id}:{entry_id}")
    if not entry.digest_ok():
        raise ChecksumMismatchError(f"entry {ledger_id}:{entry.entry_id} failed its CRC32C digest")
    return entry
