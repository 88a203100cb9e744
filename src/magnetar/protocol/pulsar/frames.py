"""Pulsar frame codec: bytes in, ``Frame`` out, and back. Sans-IO, direction-agnostic.

Wire layout (all integers big-endian)::

    simple:   [total_size u32][command_size u32][BaseCommand]
    payload:  [total_size u32][command_size u32][BaseCommand]
              ( [0x0e02 u16][broker_entry_metadata_size u32][BrokerEntryMetadata] )   broker->client only
              ( [0x0e01 u16][crc32c u32] )                  absent when protocol_version < 6
              [metadata_size u32][MessageMetadata][payload ... to the end of the frame]

``total_size`` counts everything after itself. The CRC32C covers ``metadata_size`` + metadata +
payload. Only SEND and MESSAGE carry a payload; any other command with trailing bytes is malformed.

Invariants:
* A frame is at most ``PULSAR_FRAME_BYTES_MAX`` bytes including its 4-byte size field (Java's
  ``maxMessageSize`` plus its 10 KiB padding). A larger announced size raises ``FrameTooLargeError``
  before any of its bytes are buffered; the decoder then refuses further input (the caller
  closes the connection).
* The decoder buffers at most ``PULSAR_RECEIVE_BUFFER_BYTES_MAX`` (one frame plus one read).
* Checksum presence is detected, never assumed: a ``metadata_size`` can never start with the
  bytes 0x0e 0x01 because that would announce more than 235 MB, far above the frame bound.
* A checksum mismatch consumes only the bad frame: ``FrameChecksumMismatchError`` carries the parsed
  command so a broker can answer SEND_ERROR(ChecksumError) and keep the connection, as Java
  does. Every other decoding error is sticky.
* Zero copy where cheap: a frame within one fed chunk is a ``memoryview`` of that chunk; a frame
  spanning chunks is joined into a ``bytes`` of its own once, when it is complete.
"""

from __future__ import annotations

import collections
import enum
import struct
from collections.abc import Callable
from typing import Final, NoReturn, TypeVar

from google.protobuf.message import DecodeError, EncodeError

from magnetar.base.checksum import crc32c
from magnetar.base.invariant import invariant
from magnetar.base.limits import PULSAR_FRAME_BYTES_MAX, PULSAR_RECEIVE_BUFFER_BYTES_MAX
from magnetar.protocol.pulsar.errors import (
    FrameChecksumMismatchError,
    FrameTooLargeError,
    MalformedFrameError,
)
from magnetar.protocol.pulsar.generated import pulsar_api_pb2 as pb
from magnetar.protocol.pulsar.metadata_scan import MalformedMetadataError, scan_metadata

MAGIC_CRC32C: Final = 0x0E01
MAGIC_BROKER_ENTRY_METADATA: Final = 0x0E02

_U16: Final = struct.Struct(">H")
_U32: Final = struct.Struct(">I")
_HEADER: Final = struct.Struct(">II")
_MAGIC_CRC: Final = struct.Struct(">HI")
_MAGIC_CRC_BYTES: Final = 6  # ``_MAGIC_CRC.size`` as an int constant (compiled: native arithmetic per SEND)
_SIZE_FIELD_BYTES: Final = 4
_MIN_COMMAND_BYTES: Final = 2  # BaseCommand.type is required: one tag byte plus one varint byte

Buffer = bytes | bytearray | memoryview
_EMPTY_VIEW: Final = memoryview(b"")
#: ``Final`` (compiled: a C static, not a lookup of ``pb`` then of its attribute per SEND).
_MESSAGE_METADATA: Final = pb.MessageMetadata

_Decoded = TypeVar("_Decoded")

PAYLOAD_TYPES = frozenset({pb.BaseCommand.SEND, pb.BaseCommand.MESSAGE})


def _body_fields() -> dict[int, str]:
    """BaseCommand field name per command type (the field number equals the type's value)."""
    return {f.number: f.name for f in pb.BaseCommand.DESCRIPTOR.fields if f.name != "type"}


BODY_FIELD_BY_TYPE: dict[int, str] = _body_fields()


def type_name(command_type: int) -> str:
    """``"SEND"`` for 6; ``"UNKNOWN(99)"`` for a number outside the enum."""
    try:
        return str(pb.BaseCommand.Type.Name(command_type))  # type: ignore[arg-type,unused-ignore]
    except ValueError:
        return f"UNKNOWN({command_type})"


def command_body(command: pb.BaseCommand) -> object | None:
    """The sub-message that matches ``command.type``, or None if the schema defines no body."""
    field = BODY_FIELD_BY_TYPE.get(command.type)
    return None if field is None else getattr(command, field)


def make_command(command_type: int, body: object) -> pb.BaseCommand:
    """A BaseCommand of ``command_type`` whose matching field is set to ``body``."""
    field = BODY_FIELD_BY_TYPE.get(command_type)
    invariant(field is not None, f"no body field for command type {command_type}")
    command = pb.BaseCommand(type=command_type)  # type: ignore[arg-type]
    getattr(command, str(field)).CopyFrom(body)
    return command


# Plain classes with ``__slots__``, not frozen dataclasses: compiled (mypyc), a frozen
# dataclass's generated ``__init__`` runs interpreted (``object.__setattr__`` per field, ~2 us);
# this ``__init__`` is native. One ``MessagePayload`` is made per SEND (docs/performance.md,
# session 13). Immutable: ``Final`` fields (read-only attributes when compiled).


class MessagePayload:
    """What follows the command in a SEND or MESSAGE frame.

    ``headers_and_payload`` is the exact wire form from the 0x0e01 magic (or from
    ``metadata_size`` when the sender sent no checksum) to the end of the frame: the broker stores
    it as the ledger entry and sends it back in MESSAGE frames unchanged.
    """

    __slots__ = ("_metadata", "_metadata_bytes", "broker_entry_metadata", "checksum", "headers_and_payload",
                 "last_chunk", "payload")

    def __init__(self, metadata: pb.MessageMetadata | None, payload: memoryview, headers_and_payload: memoryview,
                 checksum: int | None, broker_entry_metadata: pb.BrokerEntryMetadata | None,
                 metadata_bytes: bytes = b"", last_chunk: bool = True) -> None:
        """``metadata`` parsed, or None and ``metadata_bytes`` (checked by ``scan_metadata``, which
        also said whether it is the ``last_chunk``): parsed when first asked for."""
        self._metadata = metadata
        self._metadata_bytes = metadata_bytes
        self.payload: Final = payload  # the (possibly compressed, possibly batched) message bytes
        self.headers_and_payload: Final = headers_and_payload
        self.checksum: Final = checksum  # the CRC32C found on the wire; None when the sender sent none
        self.broker_entry_metadata: Final = broker_entry_metadata
        #: Not a chunk of a chunked message, or its last one (what completes the message).
        self.last_chunk: Final = last_chunk if metadata is None else (
            not metadata.HasField("num_chunks_from_msg") or metadata.chunk_id == metadata.num_chunks_from_msg - 1)

    @property
    def metadata(self) -> pb.MessageMetadata:
        """The ``MessageMetadata``, parsed on first use: a SEND's broker reads ``last_chunk``
        only (``decode_message`` checked the bytes as protobuf would, without an object)."""
        metadata = self._metadata
        if metadata is None:
            metadata = _parse(_MESSAGE_METADATA(), memoryview(self._metadata_bytes), "MessageMetadata")
            self._metadata = metadata
        return metadata

    def _fields(self) -> tuple[object, ...]:
        return (self.metadata, self.payload, self.headers_and_payload, self.checksum, self.broker_entry_metadata)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, MessagePayload):
            return NotImplemented
        return self._fields() == other._fields()

    def __repr__(self) -> str:
        return ("MessagePayload(metadata={!r}, payload={!r}, headers_and_payload={!r}, checksum={!r}, "
                "broker_entry_metadata={!r})".format(*self._fields()))

    def checksummed(self) -> Buffer:
        """``headers_and_payload`` with a 0x0e01 checksum block, adding one if it was absent."""
        if self.checksum is not None:
            return self.headers_and_payload
        return _MAGIC_CRC.pack(MAGIC_CRC32C, crc32c(self.headers_and_payload)) + bytes(self.headers_and_payload)


class Frame:
    """One decoded frame: the envelope command and, for SEND/MESSAGE, its message."""

    __slots__ = ("command", "message", "size_bytes")

    def __init__(self, command: pb.BaseCommand, message: MessagePayload | None, size_bytes: int) -> None:
        self.command: Final = command
        self.message: Final = message
        self.size_bytes: Final = size_bytes  # on the wire, including the 4-byte total_size field

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Frame):
            return NotImplemented
        return (self.command == other.command and self.message == other.message
                and self.size_bytes == other.size_bytes)

    def __repr__(self) -> str:
        return f"Frame(command={self.command!r}, message={self.message!r}, size_bytes={self.size_bytes!r})"

    @property
    def type(self) -> int:
        return self.command.type

    @property
    def body(self) -> object | None:
        return command_body(self.command)


class _DecoderState(enum.Enum):
    OPEN = "open"
    BROKEN = "broken"  # a sticky error happened; the connection must be closed


class FrameDecoder:
    """Incremental decoder: ``feed()`` bytes as they arrive, take frames with ``next_frame()``.

    Received chunks are kept as they came (``_buf`` from ``_pos``, then ``_more``): a frame inside
    one chunk is a view of it, and a frame spanning chunks is joined into a ``bytes`` of its own
    once it is complete, its bytes copied once. Appending every chunk to one ``bytearray`` copied
    a frame larger than a read (a batch of 100 KiB arriving in 64 KiB reads) two to three times:
    on conversion, on growth, on the copy out and on compaction (docs/performance.md, session 12).
    """

    def __init__(self, frame_bytes_max: int = PULSAR_FRAME_BYTES_MAX) -> None:
        invariant(0 < frame_bytes_max <= PULSAR_FRAME_BYTES_MAX, "frame_bytes_max out of range")
        self._frame_bytes_max = frame_bytes_max
        self._buffer_bytes_max = PULSAR_RECEIVE_BUFFER_BYTES_MAX - PULSAR_FRAME_BYTES_MAX + frame_bytes_max
        #: The first chunk with unread bytes (from ``_pos``), as a view: a frame inside it is one
        #: slice of it, not a new view of the chunk and then a slice of that (per frame).
        self._buf = _EMPTY_VIEW
        self._pos = 0
        self._more: collections.deque[bytes | memoryview] = collections.deque()  # the chunks after ``_buf``
        self._more_bytes = 0
        self._state = _DecoderState.OPEN
        self._error: Exception | None = None

    @property
    def buffered_bytes(self) -> int:
        return len(self._buf) - self._pos + self._more_bytes

    def feed(self, data: Buffer) -> None:
        """Append received bytes. Raises ``FrameTooLargeError`` if the buffer bound would be exceeded."""
        self._check_open()
        if not data:
            return
        if self.buffered_bytes + len(data) > self._buffer_bytes_max:
            self._break(FrameTooLargeError("PULSAR_RECEIVE_BUFFER_BYTES_MAX", self.buffered_bytes + len(data),
                                      self._buffer_bytes_max))
        # Zero copy: keep an immutable chunk as is (``bytes``, or a read-only view of ``bytes``,
        # as a slice of a larger read); frames within it become memoryviews into it. Anything
        # else may change after this call: copied.
        chunk: bytes | memoryview
        if isinstance(data, bytes) or (isinstance(data, memoryview) and data.readonly and isinstance(data.obj, bytes)):
            chunk = data
        else:
            chunk = bytes(data)
        if self.buffered_bytes == 0:
            self._buf = memoryview(chunk)
            self._pos = 0
        else:
            self._more.append(chunk)
            self._more_bytes += len(chunk)

    def next_frame(self) -> Frame | None:
        """The next complete frame, or None until more bytes arrive.

        Raises ``FrameTooLargeError`` / ``MalformedFrameError`` (sticky) or ``FrameChecksumMismatchError`` (the
        frame is dropped and decoding can continue).
        """
        view = self.next_frame_bytes()
        return None if view is None else self.decoded(decode_frame, view)

    def next_frame_bytes(self) -> memoryview | None:
        """The next complete frame's bytes (size field included), not decoded yet: pass them to
        ``decoded``. None until more bytes arrive; raises ``FrameTooLargeError`` /
        ``MalformedFrameError`` (sticky) for a bad size field."""
        self._check_open()
        available = self.buffered_bytes
        if available < _SIZE_FIELD_BYTES:
            return None
        buf, start = self._buf, self._pos
        # ``int``-typed: compiled, the size arithmetic and checks below are native, not generic
        # operations on the ``Any`` that ``struct`` returns (issue 22, per frame).
        total_size: int
        if len(buf) - start >= _SIZE_FIELD_BYTES:
            total_size = _U32.unpack_from(buf, start)[0]
        else:
            total_size = _U32.unpack(self._head(_SIZE_FIELD_BYTES))[0]
        frame_bytes = _SIZE_FIELD_BYTES + total_size
        if frame_bytes > self._frame_bytes_max:
            self._break(FrameTooLargeError("PULSAR_FRAME_BYTES_MAX", frame_bytes, self._frame_bytes_max))
        if total_size < _SIZE_FIELD_BYTES + _MIN_COMMAND_BYTES:
            self._break(MalformedFrameError(f"frame total_size {total_size} is too small"))
        if available < frame_bytes:
            return None
        end = start + frame_bytes
        if end <= len(buf):
            view = buf[start:end]
            self._pos = end
        else:
            view = memoryview(self._take_spanning(frame_bytes))
        if self._pos == len(self._buf):
            self._next_chunk()
        return view

    def _head(self, count: int) -> bytes:
        """The first ``count`` buffered bytes (at least that many are buffered), not consumed."""
        head = bytes(self._buf[self._pos : self._pos + count])
        for chunk in self._more:
            if len(head) >= count:
                break
            head += bytes(chunk[: count - len(head)])
        return head

    def _take_spanning(self, count: int) -> bytes:
        """Consume the next ``count`` bytes, which run past ``_buf`` into ``_more``, as one joined
        ``bytes`` (one copy); the chunk where they end becomes ``_buf``."""
        parts: list[Buffer] = [self._buf[self._pos :]]
        needed = count - len(parts[0])
        more = self._more
        while True:
            chunk = more.popleft()
            self._more_bytes -= len(chunk)
            if len(chunk) >= needed:
                parts.append(memoryview(chunk)[:needed])
                self._buf, self._pos = memoryview(chunk), needed
                return b"".join(parts)
            parts.append(chunk)
            needed -= len(chunk)

    def _next_chunk(self) -> None:
        """``_buf`` is used up: the next chunk takes its place (or nothing is buffered)."""
        if self._more:
            self._buf = memoryview(self._more.popleft())
            self._more_bytes -= len(self._buf)
        else:
            self._buf = _EMPTY_VIEW
        self._pos = 0

    def decoded(self, decode: Callable[[memoryview], _Decoded], view: memoryview) -> _Decoded:
        """``decode(view)`` with this decoder's error rules: a ``MalformedFrameError`` breaks the
        decoder (sticky), a ``FrameChecksumMismatchError`` drops only this frame."""
        try:
            return decode(view)
        except FrameChecksumMismatchError:
            raise
        except MalformedFrameError as error:
            self._break(error)

    def broken(self, error: MalformedFrameError) -> NoReturn:
        """Raise ``error`` for the frame just taken, breaking the decoder (sticky), as ``decoded``
        does for a ``MalformedFrameError``: for a caller that decodes the frame itself."""
        self._break(error)

    def _check_open(self) -> None:
        if self._state is _DecoderState.BROKEN:
            invariant(self._error is not None, "a broken decoder remembers its error")
            raise MalformedFrameError(f"decoder unusable after an earlier error: {self._error}")

    def _break(self, error: Exception) -> NoReturn:
        self._state = _DecoderState.BROKEN
        self._error = error
        self._buf = _EMPTY_VIEW
        self._pos = 0
        self._more.clear()
        self._more_bytes = 0
        raise error


def decode_frame(frame: memoryview) -> Frame:
    """Decode one complete frame (including its 4-byte size field)."""
    if len(frame) < _HEADER.size:
        raise MalformedFrameError("frame shorter than its header")
    total_size, command_size = _HEADER.unpack_from(frame, 0)
    if total_size != len(frame) - _SIZE_FIELD_BYTES:
        raise MalformedFrameError(f"total_size {total_size} does not match frame length {len(frame)}")
    if command_size < _MIN_COMMAND_BYTES or command_size > total_size - _SIZE_FIELD_BYTES:
        raise MalformedFrameError(f"command_size {command_size} out of range for total_size {total_size}")
    command_end = _HEADER.size + command_size
    command = pb.BaseCommand()
    try:
        command.ParseFromString(frame[_HEADER.size:command_end])
    except DecodeError as error:
        raise MalformedFrameError(f"unparsable BaseCommand: {error}") from error
    rest = frame[command_end:]
    if command.type not in PAYLOAD_TYPES:
        if len(rest):
            raise MalformedFrameError(f"{type_name(command.type)} carries {len(rest)} unexpected trailing bytes")
        return Frame(command, None, len(frame))
    if not len(rest):
        raise MalformedFrameError(f"{type_name(command.type)} without metadata and payload")
    try:
        message = decode_message(rest)
    except FrameChecksumMismatchError as error:
        error.command = command
        raise
    return Frame(command, message, len(frame))


def decode_message(rest: memoryview) -> MessagePayload:
    """What follows the command of a SEND/MESSAGE frame (``rest`` non-empty). Raises
    ``MalformedFrameError`` or ``FrameChecksumMismatchError`` (``command`` not set).

    Once per SEND: each magic is read once, the metadata is checked here by ``scan_metadata``
    (parsed only when ``MessagePayload.metadata`` is asked for; session 17) and a message without
    broker entry metadata keeps ``rest`` itself as its ``headers_and_payload`` (one view fewer;
    docs/performance.md, session 13)."""
    size = len(rest)
    offset = 0
    broker_entry_metadata = None
    magic: int = _U16.unpack_from(rest, 0)[0] if size >= 2 else 0  # ints: native compares, compiled
    if magic == MAGIC_BROKER_ENTRY_METADATA:
        if size < 6:
            raise MalformedFrameError("truncated broker entry metadata header")
        entry_metadata_size: int = _U32.unpack_from(rest, 2)[0]
        if 6 + entry_metadata_size > size:
            raise MalformedFrameError(f"broker entry metadata size {entry_metadata_size} exceeds the frame")
        broker_entry_metadata = _parse(pb.BrokerEntryMetadata(), rest[6 : 6 + entry_metadata_size],
                                       "BrokerEntryMetadata")
        offset = 6 + entry_metadata_size
        magic = _U16.unpack_from(rest, offset)[0] if size - offset >= 2 else 0
    headers_start = offset
    checksum = None
    if magic == MAGIC_CRC32C:
        if size - offset < _MAGIC_CRC_BYTES:
            raise MalformedFrameError("truncated checksum block")
        expected: int = _U32.unpack_from(rest, offset + 2)[0]
        checksum = expected
        offset += _MAGIC_CRC_BYTES
        computed = crc32c(rest[offset:])
        if computed != expected:
            raise FrameChecksumMismatchError(expected, computed)
    if size - offset < 4:
        raise MalformedFrameError("truncated metadata_size")
    metadata_size: int = _U32.unpack_from(rest, offset)[0]
    offset += 4
    payload_start = offset + metadata_size
    if payload_start > size:
        raise MalformedFrameError(f"metadata_size {metadata_size} exceeds the frame")
    metadata = bytes(rest[offset:payload_start])
    try:
        last_chunk = scan_metadata(metadata)  # what protobuf refuses, without its object (parsed if asked)
    except MalformedMetadataError as error:
        raise MalformedFrameError(f"unparsable MessageMetadata: {error}") from error
    return MessagePayload(None, rest[payload_start:], rest[headers_start:] if headers_start else rest,
                          checksum, broker_entry_metadata, metadata, last_chunk)


def _metadata_at(data: memoryview, offset: int) -> tuple[pb.MessageMetadata, int]:
    """The ``[metadata_size][MessageMetadata]`` at ``offset``, and where the payload starts."""
    if len(data) - offset < 4:
        raise MalformedFrameError("truncated metadata_size")
    (metadata_size,) = _U32.unpack_from(data, offset)
    offset += 4
    if metadata_size > len(data) - offset:
        raise MalformedFrameError(f"metadata_size {metadata_size} exceeds the frame")
    return _parse(pb.MessageMetadata(), data[offset : offset + metadata_size], "MessageMetadata"), offset + metadata_size


def stored_entry_metadata(entry: Buffer) -> pb.MessageMetadata:
    """The ``MessageMetadata`` of a stored ``headers_and_payload`` (checksum block optional).

    The checksum is not verified here: it was checked when the SEND arrived, and the consumer
    checks it again on the MESSAGE. Raises ``MalformedFrameError`` (a ``CorruptDataError``).
    """
    view = memoryview(entry)
    offset = _MAGIC_CRC.size if len(view) >= 2 and _U16.unpack_from(view, 0)[0] == MAGIC_CRC32C else 0
    return _metadata_at(view, offset)[0]


def stored_entry_parts(entry: Buffer) -> tuple[pb.MessageMetadata, memoryview]:
    """A stored ``headers_and_payload`` split into its ``MessageMetadata`` and its payload (as
    the producer sent it: compressed and batched if it was). Raises ``MalformedFrameError``."""
    view = memoryview(entry)
    offset = _MAGIC_CRC.size if len(view) >= 2 and _U16.unpack_from(view, 0)[0] == MAGIC_CRC32C else 0
    metadata, payload_at = _metadata_at(view, offset)
    return metadata, view[payload_at:]


_Meta = TypeVar("_Meta", pb.MessageMetadata, pb.BrokerEntryMetadata)


def _parse(message: _Meta, data: memoryview, what: str) -> _Meta:
    try:
        message.ParseFromString(data)
    except DecodeError as error:
        raise MalformedFrameError(f"unparsable {what}: {error}") from error
    return message


# --- encoding --------------------------------------------------------------------------------


def _serialize(command: pb.BaseCommand) -> bytes:
    try:
        return bytes(command.SerializeToString())
    except EncodeError as error:  # a required field is unset: never put that on the wire
        invariant(False, f"incomplete {type_name(command.type)} command: {error}")
        raise


def encode_command(command: pb.BaseCommand) -> bytes:
    """A simple frame. Raises ``FrameTooLargeError`` if it exceeds ``PULSAR_FRAME_BYTES_MAX``."""
    invariant(command.type not in PAYLOAD_TYPES, "SEND/MESSAGE need encode_payload_command")
    body = _serialize(command)
    _check_frame_size(_HEADER.size + len(body))
    return _HEADER.pack(_SIZE_FIELD_BYTES + len(body), len(body)) + body


def headers_and_payload(metadata: pb.MessageMetadata, payload: Buffer, *, checksum: bool = True) -> bytes:
    """The wire form of a message after its command: ``[0x0e01][crc32c]`` (optional) + metadata + payload."""
    metadata_bytes = bytes(metadata.SerializeToString())
    body = _U32.pack(len(metadata_bytes)) + metadata_bytes + bytes(payload)
    if not checksum:
        return body
    return _MAGIC_CRC.pack(MAGIC_CRC32C, crc32c(body)) + body


def payload_frame_parts(
    command: pb.BaseCommand,
    headers_and_payload_bytes: Buffer,
    broker_entry_metadata: pb.BrokerEntryMetadata | None = None,
) -> tuple[bytes, Buffer]:
    """A SEND/MESSAGE frame as (header, body) so a transport can write both without joining them.

    ``headers_and_payload_bytes`` is passed through untouched (a stored entry, say).
    """
    invariant(command.type in PAYLOAD_TYPES, "only SEND and MESSAGE carry a payload")
    body = _serialize(command)
    prefix = b""
    if broker_entry_metadata is not None:
        entry_metadata = bytes(broker_entry_metadata.SerializeToString())
        prefix = _MAGIC_CRC.pack(MAGIC_BROKER_ENTRY_METADATA, len(entry_metadata)) + entry_metadata
    frame_bytes = _HEADER.size + len(body) + len(prefix) + len(headers_and_payload_bytes)
    _check_frame_size(frame_bytes)
    header = _HEADER.pack(frame_bytes - _SIZE_FIELD_BYTES, len(body)) + body + prefix
    return header, headers_and_payload_bytes


def encode_payload_command(
    command: pb.BaseCommand,
    metadata: pb.MessageMetadata,
    payload: Buffer,
    *,
    checksum: bool = True,
    broker_entry_metadata: pb.BrokerEntryMetadata | None = None,
) -> bytes:
    """A complete SEND or MESSAGE frame built from metadata and payload."""
    header, body = payload_frame_parts(
        command, headers_and_payload(metadata, payload, checksum=checksum), broker_entry_metadata
    )
    return header + bytes(body)


def _check_frame_size(frame_bytes: int) -> None:
    if frame_bytes > PULSAR_FRAME_BYTES_MAX:
        raise FrameTooLargeError("PULSAR_FRAME_BYTES_MAX", frame_bytes, PULSAR_FRAME_BYTES_MAX)
