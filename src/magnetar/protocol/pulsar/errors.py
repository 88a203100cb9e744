"""Typed errors of the Pulsar protocol layer.

Every one of them means the connection that produced the bytes can no longer be trusted: the
caller (broker or client connection handler) closes the TCP connection after any of them. They
subclass the generic ``magnetar.base.errors`` classes so upper layers can catch either.
"""

from __future__ import annotations

from magnetar.base.errors import (
    ChecksumMismatchError,
    ClosedError,
    CorruptDataError,
    LimitExceededError,
    MagnetarError,
)
from magnetar.protocol.pulsar.generated import pulsar_api_pb2 as pb


class FrameTooLargeError(LimitExceededError):
    """A frame announced (or a buffer reached) more bytes than its named bound allows."""


class FrameChecksumMismatchError(ChecksumMismatchError):
    """The CRC32C after magic 0x0e01 does not match the metadata and payload."""

    def __init__(self, expected: int, actual: int) -> None:
        super().__init__(f"frame checksum mismatch: header says {expected:#010x}, computed {actual:#010x}")
        self.expected = expected
        self.actual = actual
        # The frame's command (set by the decoder) so a broker can answer SEND_ERROR(ChecksumError).
        self.command: pb.BaseCommand | None = None


class MalformedFrameError(CorruptDataError):
    """The bytes are not a valid Pulsar frame: bad sizes, unparsable protobuf, missing body."""


class ProtocolViolationError(MagnetarError):
    """A well-formed command that is not allowed in the connection's current state."""


class ConnectionClosedError(ClosedError):
    """The connection state machine is closed; nothing more may be fed or sent."""


class CompressionError(CorruptDataError):
    """A compressed payload does not decompress to exactly its declared uncompressed size."""
