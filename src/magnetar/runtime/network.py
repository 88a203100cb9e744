"""``Network`` over asyncio TCP transports (uvloop in production).

Each connection is a small ``asyncio.Protocol`` rather than a ``StreamReader``: the bytes object
the transport delivers is handed to ``read()`` as is (no copy into a stream buffer and no copy
out of it), and is only sliced when it is larger than the caller asked for. Received bytes
waiting for ``read()`` are bounded by ``NETWORK_READ_BUFFER_BYTES_MAX`` (the transport stops
reading beyond it and resumes below half); outgoing bytes by ``NETWORK_WRITE_BUFFER_BYTES_MAX``
(``drain()`` waits above it).

``TcpNetwork(ssl_context=...)`` listens with TLS: the event loop runs the handshake, aborting one
that does not finish within ``TLS_HANDSHAKE_TIMEOUT_S``, so the handler only ever sees connections
whose handshake completed; ``TcpConnection.tls_peer_cn`` is then the verified client
certificate's CN (None without one, or on plain TCP).
"""

from __future__ import annotations

import asyncio
import collections
import socket
import ssl
from collections.abc import Callable, Sequence
from typing import Any, cast

from magnetar.base.errors import ClosedError
from magnetar.base.io import ConnectionHandler
from magnetar.base.limits import (
    NETWORK_READ_BUFFER_BYTES_MAX,
    NETWORK_WRITE_BUFFER_BYTES_MAX,
    TLS_HANDSHAKE_TIMEOUT_S,
)
from magnetar.runtime.tls import peer_cn


class _ConnectionProtocol(asyncio.Protocol):
    """Buffers received chunks for ``TcpConnection.read`` and tracks write flow control."""

    def __init__(self, on_made: Callable[[_ConnectionProtocol], None] | None = None) -> None:
        self._on_made = on_made
        self.transport: asyncio.Transport | None = None
        #: The oldest received chunk not yet taken (None: nothing buffered), in a field of its own:
        #: a connection at a modest rate holds one chunk at a time, and a ``deque`` cost four
        #: method calls per receive (append, index, popleft, a truth test; issue 22, the broker's
        #: part of a lone SEND). ``chunks``: the ones after it, only while the reader is behind.
        self.first: bytes | None = None
        self.chunks: collections.deque[bytes] = collections.deque()
        self.first_offset = 0  # bytes of ``first`` already taken (``take``)
        self.buffered_bytes = 0
        self.eof = False
        self.lost: BaseException | None = None
        self.reading_paused = False
        self._reader: asyncio.Future[None] | None = None
        #: Called (a plain call) where a waiting reader would be woken: received bytes, EOF or a
        #: lost connection (``TcpConnection.set_receiver``).
        self.receiver: Callable[[], None] | None = None
        self._drainers: list[asyncio.Future[None]] = []
        self.writing_paused = False

    # --- asyncio.Protocol ----------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports implement asyncio.Transport without subclassing it.
        self.transport = cast(asyncio.Transport, transport)
        self.transport.set_write_buffer_limits(high=NETWORK_WRITE_BUFFER_BYTES_MAX)
        if self._on_made is not None:
            self._on_made(self)

    def data_received(self, data: bytes) -> None:
        if self.first is None:
            self.first = data
        else:
            self.chunks.append(data)
        self.buffered_bytes += len(data)
        if self.buffered_bytes > NETWORK_READ_BUFFER_BYTES_MAX and not self.reading_paused:
            assert self.transport is not None
            self.reading_paused = True
            self.transport.pause_reading()
        self._wake_reader()

    def eof_received(self) -> bool:
        self.eof = True
        self._wake_reader()
        return False  # let the transport close itself

    def connection_lost(self, exc: Exception | None) -> None:
        self.eof = True
        self.lost = exc or ClosedError("connection closed")
        self._wake_reader()
        for waiter in self._drainers:
            if not waiter.done():
                waiter.set_result(None)
        self._drainers.clear()

    def pause_writing(self) -> None:
        self.writing_paused = True

    def resume_writing(self) -> None:
        self.writing_paused = False
        for waiter in self._drainers:
            if not waiter.done():
                waiter.set_result(None)
        self._drainers.clear()

    # --- used by TcpConnection -----------------------------------------------------------------

    def _wake_reader(self) -> None:
        receiver = self.receiver
        if receiver is not None:
            receiver()
            return
        reader = self._reader
        if reader is not None and not reader.done():
            reader.set_result(None)

    async def wait_readable(self) -> None:
        self._reader = asyncio.get_running_loop().create_future()
        try:
            await self._reader
        finally:
            self._reader = None

    async def wait_writable(self) -> None:
        waiter = asyncio.get_running_loop().create_future()
        self._drainers.append(waiter)
        await waiter

    def take(self, max_bytes: int) -> bytes:
        """Up to ``max_bytes`` buffered bytes: the first chunk as is when it fits (no copy).

        A chunk larger than ``max_bytes`` (a 256 KiB read taken in the broker's 64 KiB slices) is
        handed out slice by slice from ``first_offset``: each byte is copied once, into its slice.
        Cutting the rest off as a new ``bytes`` per slice copied a 256 KiB read 2.5 times (the
        slices plus 192 + 128 + 64 KiB of rests: 6.8% of the ``--blast`` batched profile,
        docs/performance.md, session 12). ``bytes`` slices, not ``memoryview``s: the read contract
        (``base.io.Connection.read``) is ``bytes``, and compiled callers check it (a view there
        is a ``TypeError`` that ends the connection's reader)."""
        first = self.first
        assert first is not None, "take() with nothing buffered"
        offset = self.first_offset
        left = len(first) - offset
        if left > max_bytes:
            end = offset + max_bytes
            data = first[offset:end]
            self.first_offset = end
        else:
            self.first_offset = 0
            data = first[offset:] if offset else first
            chunks = self.chunks
            following = chunks.popleft() if chunks else None
            if following is not None and left + len(following) <= max_bytes:
                # The reader fell behind by several small chunks: one join instead of many reads.
                parts = [data]
                size = left
                while following is not None and size + len(following) <= max_bytes:
                    parts.append(following)
                    size += len(following)
                    following = chunks.popleft() if chunks else None
                data = b"".join(parts)
            self.first = following
        self.buffered_bytes -= len(data)
        if self.reading_paused and self.buffered_bytes <= NETWORK_READ_BUFFER_BYTES_MAX // 2:
            self.reading_paused = False
            if self.transport is not None and not self.transport.is_closing():
                self.transport.resume_reading()
        return data


class TcpConnection:
    __slots__ = ("_peer", "_protocol", "_transport")

    def __init__(self, protocol: _ConnectionProtocol) -> None:
        assert protocol.transport is not None
        self._protocol = protocol
        self._transport = protocol.transport
        peer = self._transport.get_extra_info("peername")
        self._peer = f"{peer[0]}:{peer[1]}" if peer else "?"

    @property
    def peer(self) -> str:
        return self._peer

    @property
    def tls_peer_cn(self) -> str | None:
        return peer_cn(self._transport.get_extra_info("ssl_object"))

    async def read(self, max_bytes: int) -> bytes:
        protocol = self._protocol
        while protocol.first is None:
            if protocol.eof:
                return b""
            await protocol.wait_readable()
        return protocol.take(max_bytes)

    def read_now(self, max_bytes: int) -> bytes | None:
        """``read`` without waiting: up to ``max_bytes`` buffered bytes, ``b""`` once the peer
        closed or the connection broke (nothing buffered), None while nothing is buffered."""
        protocol = self._protocol
        if protocol.first is not None:
            return protocol.take(max_bytes)
        return b"" if protocol.eof else None

    def set_receiver(self, receiver: Callable[[], None] | None) -> None:
        """``receiver`` is called (a plain call, from the transport's callback) whenever bytes
        arrive, the peer closes or the connection breaks, instead of a waiting ``read`` being
        woken (a future, a task step and its coroutine frames per receive: what a connection
        costs per message at a modest rate, docs/performance.md, session 17); it takes them with
        ``read_now``. None: ``read`` again. A ``read`` must not wait while one is set."""
        self._protocol.receiver = receiver

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if self._transport.is_closing():
            raise ClosedError(f"connection to {self._peer} is closed")
        self._transport.write(data)

    def writelines(self, parts: Sequence[bytes | bytearray | memoryview]) -> None:
        """``write`` of ``parts`` back to back without joining them first: uvloop sends them with
        one ``writev`` at the end of the loop's pass (asyncio's own loop joins them)."""
        if self._transport.is_closing():
            raise ClosedError(f"connection to {self._peer} is closed")
        self._transport.writelines(parts)

    @property
    def writing_paused(self) -> bool:
        """The transport's buffer is above its high-water mark: ``drain()`` would wait."""
        return self._protocol.writing_paused

    async def drain(self) -> None:
        protocol = self._protocol
        if protocol.lost is not None:
            raise ClosedError(f"connection to {self._peer} broke: {protocol.lost}")
        if protocol.writing_paused:
            await protocol.wait_writable()
            if protocol.lost is not None:
                raise ClosedError(f"connection to {self._peer} broke: {protocol.lost}")

    def is_closing(self) -> bool:
        return self._transport.is_closing()

    def close(self) -> None:
        self._transport.close()


class TcpListener:
    def __init__(self, server: asyncio.Server) -> None:
        self._server = server

    @property
    def port(self) -> int:
        # uvloop's ``Server.sockets`` is a list where typeshed declares a tuple: compiled, reading
        # it as declared would check for a tuple, so it is read untyped.
        sockets: Sequence[socket.socket] = cast(Any, self._server).sockets
        return int(sockets[0].getsockname()[1])

    def close(self) -> None:
        self._server.close()


class TcpNetwork:
    def __init__(self, ssl_context: ssl.SSLContext | None = None,
                 handshake_timeout_s: float = TLS_HANDSHAKE_TIMEOUT_S,
                 client_ssl_context: ssl.SSLContext | None = None) -> None:
        self._ssl = ssl_context
        self._handshake_timeout_s = handshake_timeout_s
        self._client_ssl = client_ssl_context

    async def connect(self, host: str, port: int) -> TcpConnection:
        """A connection to ``host:port``; TLS (verifying ``host``) with a client SSL context."""
        loop = asyncio.get_running_loop()
        if self._client_ssl is None:
            _, protocol = await loop.create_connection(_ConnectionProtocol, host, port)
        else:
            _, protocol = await loop.create_connection(_ConnectionProtocol, host, port, ssl=self._client_ssl,
                                                       server_hostname=host,
                                                       ssl_handshake_timeout=self._handshake_timeout_s)
        return TcpConnection(protocol)

    async def listen(self, host: str, port: int, handler: ConnectionHandler) -> TcpListener:
        loop = asyncio.get_running_loop()
        serving: set[asyncio.Task[None]] = set()

        async def _serve(connection: TcpConnection) -> None:
            try:
                await handler(connection)
            finally:
                connection.close()

        def _on_made(protocol: _ConnectionProtocol) -> None:
            task = loop.create_task(_serve(TcpConnection(protocol)))
            serving.add(task)
            task.add_done_callback(serving.discard)

        if self._ssl is None:
            server = await loop.create_server(lambda: _ConnectionProtocol(_on_made), host, port)
        else:
            server = await loop.create_server(lambda: _ConnectionProtocol(_on_made), host, port, ssl=self._ssl,
                                              ssl_handshake_timeout=self._handshake_timeout_s)
        return TcpListener(server)
