"""``BlockingBookieReads``: pipelined READs to one bookie over a blocking socket, for a reader that
takes entries in order on a thread of its own (a Spark task), with no event loop in between.

Reads go out a run at a time in one ``sendall``; answers are taken in the order the reader wants
them (``answer``). Each answer's fixed head is received first (``READ_RESPONSE_HEAD_BYTES``), then
its entry straight into the connection's own buffer — one kernel copy, no reassembly of frames
split across socket reads — and the entry's CRC32C is computed at once, while those bytes are in
the CPU's caches; the caller builds its rows from them right away. The price: an entry handed out
is a view into that buffer, **valid until the next ``answer`` call** on the connection (the next
entry is received over it). The bookie answers a connection's plain reads in order; an answer
that comes before its turn anyway is kept as a copy until asked for.

Errors close the connection (the stream cannot be resynchronised): no bytes for ``timeout_s``
raises ``OperationTimeoutError``; a refused, reset or closed connection ``ClosedError``; a malformed frame
``CorruptDataError`` (or ``LimitExceededError``). A non-OK status or a damaged entry is an answer, not an
error: the caller checks it (``ledger.bookie_client.checked_entry``) and the connection stays
usable.
"""

from __future__ import annotations

import socket
from collections.abc import Sequence

from magnetar.base.errors import (
    ClosedError,
    CorruptDataError,
    InvalidArgumentError,
    MagnetarError,
    OperationTimeoutError,
)
from magnetar.base.limits import BOOKIE_FRAME_BYTES_MAX, SPARK_BOOKIE_READ_BUFFER_BYTES
from magnetar.protocol.bookie import ReadRequest, ReadResponse, encode
from magnetar.protocol.bookie.codec import (
    READ_RESPONSE_HEAD_BYTES,
    ReadViewResponse,
    decode_read_response_head,
    entry_view,
)


class BlockingBookieReads:
    """One blocking connection to a bookie for pipelined plain READs (module docstring)."""

    def __init__(self, sock: socket.socket, peer: str, *, max_frame_bytes: int = BOOKIE_FRAME_BYTES_MAX) -> None:
        self._sock = sock
        self.peer = peer
        self._max_frame_bytes = max_frame_bytes
        self._head = bytearray(READ_RESPONSE_HEAD_BYTES)
        self._buffer = bytearray(SPARK_BOOKIE_READ_BUFFER_BYTES)
        self._request_id = 0
        self._outstanding: set[int] = set()  # request ids sent and not yet answered
        self._early: dict[int, ReadResponse] = {}  # answers received before their turn (copies)
        self.closed: str | None = None

    @classmethod
    def connect(cls, host: str, port: int, *, timeout_s: float,
                max_frame_bytes: int = BOOKIE_FRAME_BYTES_MAX) -> BlockingBookieReads:
        """Connect (``ClosedError`` if refused or not answering within ``timeout_s``); every later
        receive waits at most ``timeout_s`` for bytes."""
        try:
            sock = socket.create_connection((host, port), timeout=timeout_s)
        except OSError as exc:
            raise ClosedError(f"bookie {host}:{port}: {exc}") from exc
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return cls(sock, f"{host}:{port}", max_frame_bytes=max_frame_bytes)

    def send_reads(self, ledger_id: int, entry_ids: Sequence[int]) -> list[int]:
        """Send a plain READ (no fence, no master key) of each of ``entry_ids`` in one write;
        returns their request ids, in the same order. Raises ``ClosedError``."""
        self._check_open()
        first = self._request_id + 1
        self._request_id += len(entry_ids)
        request_ids = range(first, first + len(entry_ids))
        frames = b"".join([encode(ReadRequest(request_id, ledger_id, entry_id))
                           for request_id, entry_id in zip(request_ids, entry_ids, strict=True)])
        try:
            self._sock.sendall(frames)
        except OSError as exc:
            raise self._fail(ClosedError(f"bookie {self.peer}: {exc}")) from exc
        self._outstanding.update(request_ids)
        return list(request_ids)

    def answer(self, request_id: int) -> ReadViewResponse | ReadResponse:
        """The bookie's answer to ``request_id`` (sent by ``send_reads``); its entry, if any, a
        view valid until the next call. Answers to other requests that arrive first are kept (as
        copies) for their turn. Raises as in the module docstring."""
        early = self._early.pop(request_id, None)
        if early is not None:
            return early
        self._check_open()
        if request_id not in self._outstanding:
            raise InvalidArgumentError(f"bookie {self.peer}: request {request_id} was not sent, or was answered already")
        try:
            while True:
                answer = self._receive()
                if answer.request_id not in self._outstanding:
                    raise CorruptDataError(f"answer to request {answer.request_id}, which is not outstanding")
                self._outstanding.discard(answer.request_id)
                if answer.request_id == request_id:
                    return answer
                self._early[answer.request_id] = answer.copied()
        except (MagnetarError, OSError) as exc:
            error = exc if isinstance(exc, MagnetarError) else ClosedError(f"bookie {self.peer}: {exc}")
            raise self._fail(error) from exc

    def _receive(self) -> ReadViewResponse:
        head = memoryview(self._head)
        self._receive_into(head)
        answer, entry_bytes = decode_read_response_head(head, self._max_frame_bytes)
        if not entry_bytes:
            return answer
        if entry_bytes > len(self._buffer):  # a new buffer: views of the old one stay valid
            self._buffer = bytearray(entry_bytes)
        raw = memoryview(self._buffer)[:entry_bytes]
        self._receive_into(raw)
        return ReadViewResponse(answer.request_id, answer.status, answer.ledger_id, answer.entry_id, answer.known_lac,
                                entry_view(raw.toreadonly()), answer.op)

    def _receive_into(self, view: memoryview) -> None:
        sock, got, size = self._sock, 0, len(view)
        while got < size:
            try:
                count = sock.recv_into(view[got:], size - got)
            except TimeoutError as exc:  # socket.timeout
                raise OperationTimeoutError(f"bookie {self.peer} sent nothing for {sock.gettimeout()} s") from exc
            if not count:
                raise ClosedError(f"bookie {self.peer} closed the connection")
            got += count

    def _check_open(self) -> None:
        if self.closed is not None:
            raise ClosedError(f"bookie connection to {self.peer} is closed: {self.closed}")

    def _fail(self, error: MagnetarError) -> MagnetarError:
        self.close(str(error))
        return error

    def close(self, reason: str = "closed by the reader") -> None:
        if self.closed is None:
            self.closed = reason
            self._early.clear()
            self._outstanding.clear()
            self._sock.close()
