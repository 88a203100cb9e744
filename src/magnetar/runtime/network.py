"""``Network`` over asyncio TCP streams (uvloop in production)."""

from __future__ import annotations

import asyncio

from magnetar.base.errors import ClosedError
from magnetar.base.io import ConnectionHandler

#: Outgoing bytes a connection may buffer before ``drain()`` waits (asyncio's high-water mark).
WRITE_BUFFER_BYTES_MAX = 4 * 1024 * 1024


class TcpConnection:
    __slots__ = ("_peer", "_reader", "_writer")

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._reader = reader
        self._writer = writer
        writer.transport.set_write_buffer_limits(high=WRITE_BUFFER_BYTES_MAX)
        peer = writer.get_extra_info("peername")
        self._peer = f"{peer[0]}:{peer[1]}" if peer else "?"

    @property
    def peer(self) -> str:
        return self._peer

    async def read(self, max_bytes: int) -> bytes:
        try:
            return await self._reader.read(max_bytes)
        except (ConnectionError, OSError):
            return b""

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if self._writer.is_closing():
            raise ClosedError(f"connection to {self._peer} is closed")
        self._writer.write(data)

    async def drain(self) -> None:
        try:
            await self._writer.drain()
        except (ConnectionError, OSError) as exc:
            raise ClosedError(f"connection to {self._peer} broke: {exc}") from exc

    def is_closing(self) -> bool:
        return self._writer.is_closing()

    def close(self) -> None:
        self._writer.close()


class TcpListener:
    def __init__(self, server: asyncio.Server) -> None:
        self._server = server

    @property
    def port(self) -> int:
        return int(self._server.sockets[0].getsockname()[1])

    def close(self) -> None:
        self._server.close()


class TcpNetwork:
    async def connect(self, host: str, port: int) -> TcpConnection:
        reader, writer = await asyncio.open_connection(host, port)
        return TcpConnection(reader, writer)

    async def listen(self, host: str, port: int, handler: ConnectionHandler) -> TcpListener:
        async def _on_client(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            connection = TcpConnection(reader, writer)
            try:
                await handler(connection)
            finally:
                connection.close()

        server = await asyncio.start_server(_on_client, host, port)
        return TcpListener(server)
