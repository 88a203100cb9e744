"""The record frame the durable-log scenario uses on disk and on the wire.

A frame is ``length:u32le crc32c(payload):u32le payload``. A reader of a file stops at the first
frame that is short (a torn tail) or whose checksum does not match (a garbled sector); a reader
of a stream waits for the rest of a short frame and treats a bad checksum as corruption.
"""

from __future__ import annotations

import struct

from magnetar.base.checksum import crc32c
from magnetar.base.errors import ChecksumMismatchError, CorruptDataError, LimitExceededError
from magnetar.base.io import Connection

HEADER = struct.Struct("<II")
RECORD_BYTES_MAX = 64 * 1024
READ_CHUNK_BYTES = 4096


def encode(payload: bytes) -> bytes:
    if len(payload) > RECORD_BYTES_MAX:
        raise LimitExceededError("RECORD_BYTES_MAX", len(payload), RECORD_BYTES_MAX)
    return HEADER.pack(len(payload), crc32c(payload)) + payload


def scan(data: bytes) -> tuple[list[tuple[int, bytes]], int, str]:
    """Frames ``(offset, payload)`` from the start of ``data``, the end of the last good one, and
    why the scan stopped (``"end"``, ``"short"``, ``"checksum"`` or ``"length"``)."""
    records: list[tuple[int, bytes]] = []
    offset = 0
    while offset < len(data):
        if len(data) - offset < HEADER.size:
            return records, offset, "short"
        length, crc = HEADER.unpack_from(data, offset)
        if length > RECORD_BYTES_MAX:
            return records, offset, "length"
        end = offset + HEADER.size + length
        if end > len(data):
            return records, offset, "short"
        payload = data[offset + HEADER.size : end]
        if crc32c(payload) != crc:
            return records, offset, "checksum"
        records.append((offset, payload))
        offset = end
    return records, offset, "end"


class FrameReader:
    """Reads whole frames from a ``Connection``; ``None`` at EOF."""

    def __init__(self, connection: Connection) -> None:
        self._connection = connection
        self._buffer = bytearray()

    async def read_frame(self) -> bytes | None:
        while True:
            if len(self._buffer) >= HEADER.size:
                length, crc = HEADER.unpack_from(self._buffer, 0)
                if length > RECORD_BYTES_MAX:
                    raise CorruptDataError(f"frame of {length} bytes exceeds RECORD_BYTES_MAX")
                end = HEADER.size + length
                if len(self._buffer) >= end:
                    payload = bytes(self._buffer[HEADER.size : end])
                    del self._buffer[:end]
                    if crc32c(payload) != crc:
                        raise ChecksumMismatchError("frame checksum mismatch")
                    return payload
            chunk = await self._connection.read(READ_CHUNK_BYTES)
            if not chunk:
                return None
            self._buffer += chunk
