"""The receive loop both ends of a Pulsar connection share.

Bytes go into the ``FrameDecoder``; each complete frame marks the connection alive (keep-alive
bookkeeping) and goes to the subclass's ``_handle``. A frame whose checksum does not match is
handed to ``_checksum_failure`` (which decides whether it is a per-message error or a protocol
violation) and decoding continues, as the Java broker and the C++ client do. Any other decoding
error closes the connection and propagates: the caller then closes the socket. A subclass may
turn its hot commands into events without protobuf (``_decode_hot``); the rest goes through
``decode_frame`` and ``_handle``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Generic, TypeVar

from mypy_extensions import mypyc_attr

from magnetar.protocol.pulsar.errors import (
    ConnectionClosedError,
    FrameChecksumMismatchError,
    MalformedFrameError,
)
from magnetar.protocol.pulsar.frames import Buffer, Frame, FrameDecoder, decode_frame

E = TypeVar("E")


# Compiled (magnetar/_compiled.py); the client's ``ClientConnection`` (interpreted) subclasses it.
@mypyc_attr(allow_interpreted_subclasses=True)
class FrameReceiver(ABC, Generic[E]):
    _decoder: FrameDecoder
    _last_received_ms: int
    _ping_sent_ms: int | None
    close_reason: str | None

    @abstractmethod
    def _is_open(self) -> bool: ...

    @abstractmethod
    def close(self, reason: str) -> None: ...

    @abstractmethod
    def _handle(self, frame: Frame) -> E | None: ...

    @abstractmethod
    def _checksum_failure(self, error: FrameChecksumMismatchError) -> E: ...

    def receive_data(self, data: Buffer, now_ms: int) -> list[E]:
        """Decode ``data`` and return the events it completes.

        Raises ``FrameTooLargeError``/``MalformedFrameError``/``ProtocolViolationError`` (the connection is then
        CLOSED and the caller closes the socket) or ``ConnectionClosedError`` if already closed.
        """
        if not self._is_open():
            raise ConnectionClosedError(f"connection closed ({self.close_reason})")
        try:
            self._decoder.feed(data)
        except Exception as error:
            self.close(f"undecodable input: {error}")
            raise
        events: list[E] = []
        decoder = self._decoder
        while self._is_open():
            try:
                view = decoder.next_frame_bytes()
                if view is None:
                    break
                # Called directly, not through ``decoder.decoded`` (a bound method and a generic
                # call per frame): the same rules, a malformed frame breaks the decoder.
                try:
                    event = self._decode_hot(view)
                    frame = decode_frame(view) if event is None else None
                except MalformedFrameError as malformed:
                    decoder.broken(malformed)
            except FrameChecksumMismatchError as error:
                self._mark_received(now_ms)
                events.append(self._checksum_failure(error))
                continue
            except Exception as error:
                self.close(f"undecodable input: {error}")
                raise
            self._mark_received(now_ms)
            if frame is not None:
                event = self._handle(frame)
            if event is not None:
                events.append(event)
        return events

    def _decode_hot(self, frame: memoryview) -> E | None:
        """The event of a hot command decoded without protobuf (``fast_decode``), or None: the
        frame is then decoded with protobuf and given to ``_handle``. It may raise what
        ``decode_frame`` raises for the same bytes."""
        return None

    def _mark_received(self, now_ms: int) -> None:
        self._last_received_ms = now_ms
        self._ping_sent_ms = None
