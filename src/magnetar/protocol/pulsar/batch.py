"""Pulsar message payloads: compression codecs and the batch format.

A batch entry's payload (after decompression) is ``num_messages_in_batch`` repetitions of::

    [single_metadata_size u32 BE][SingleMessageMetadata][payload (payload_size bytes)]

Compression applies to the whole payload of an entry (the concatenation above for a batch).
Codecs, as the official clients use them: LZ4 is the raw LZ4 *block* format without a size
prefix (the size is ``MessageMetadata.uncompressed_size``), ZLIB is zlib-wrapped deflate, ZSTD is
a zstd frame, SNAPPY is raw snappy (no framing).

Invariants:
* Decompression never produces more than ``min(uncompressed_size, PULSAR_FRAME_BYTES_MAX)``
  bytes, and a result whose length differs from ``uncompressed_size`` is a ``CompressionError``.
* An entry is a batch iff ``MessageMetadata`` has ``num_messages_in_batch`` *present*, which is
  how the official client decides it; a batch decodes to exactly that many messages and must
  consume its payload exactly.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Sequence
from dataclasses import dataclass

import cramjam
import lz4.block
import zstandard

from magnetar.base.limits import PULSAR_FRAME_BYTES_MAX
from magnetar.protocol.pulsar.errors import CompressionError, FrameTooLargeError, MalformedFrameError
from magnetar.protocol.pulsar.generated import pulsar_api_pb2 as pb

Buffer = bytes | bytearray | memoryview

_U32 = struct.Struct(">I")

NONE = pb.NONE
LZ4 = pb.LZ4
ZLIB = pb.ZLIB
ZSTD = pb.ZSTD
SNAPPY = pb.SNAPPY
COMPRESSION_TYPES = (NONE, LZ4, ZLIB, ZSTD, SNAPPY)


@dataclass(frozen=True, slots=True)
class SingleMessage:
    """One message of an entry: its per-message metadata (None for a non-batched entry) and bytes."""

    metadata: pb.SingleMessageMetadata | None
    payload: bytes


# --- compression -----------------------------------------------------------------------------


def compress(codec: int, data: Buffer) -> bytes:
    """Compress ``data`` the way the official client does for ``codec``."""
    raw = bytes(data)
    if codec == NONE:
        return raw
    if codec == LZ4:
        return bytes(lz4.block.compress(raw, store_size=False))
    if codec == ZLIB:
        return zlib.compress(raw)
    if codec == ZSTD:
        return bytes(zstandard.ZstdCompressor().compress(raw))
    if codec == SNAPPY:
        return bytes(cramjam.snappy.compress_raw(raw))
    raise MalformedFrameError(f"unknown compression type {codec}")


def decompress(codec: int, data: Buffer, uncompressed_size: int) -> bytes:
    """Decompress to exactly ``uncompressed_size`` bytes, never allocating more than the frame bound."""
    if uncompressed_size < 0 or uncompressed_size > PULSAR_FRAME_BYTES_MAX:
        raise FrameTooLargeError("PULSAR_FRAME_BYTES_MAX", uncompressed_size, PULSAR_FRAME_BYTES_MAX)
    raw = bytes(data)
    if codec == NONE:
        out = raw
    else:
        try:
            out = _decompress(codec, raw, uncompressed_size)
        except (CompressionError, MalformedFrameError):
            raise
        except Exception as error:  # each codec library raises its own error types
            raise CompressionError(f"{_codec_name(codec)} payload does not decompress: {error}") from error
    if len(out) != uncompressed_size:
        raise CompressionError(
            f"{_codec_name(codec)} payload decompressed to {len(out)} bytes, metadata says {uncompressed_size}"
        )
    return out


def _decompress(codec: int, raw: bytes, size: int) -> bytes:
    if codec == LZ4:
        if size == 0:
            return b""
        return bytes(lz4.block.decompress(raw, uncompressed_size=size))
    if codec == ZLIB:
        inflater = zlib.decompressobj()
        out = inflater.decompress(raw, size + 1)  # one byte over tells "too long" apart
        return out
    if codec == ZSTD:
        with zstandard.ZstdDecompressor().stream_reader(raw) as reader:
            return bytes(reader.read(size + 1))
    if codec == SNAPPY:
        declared = int(cramjam.snappy.decompress_raw_len(raw))
        if declared != size:
            raise CompressionError(f"snappy header says {declared} bytes, metadata says {size}")
        return bytes(cramjam.snappy.decompress_raw(raw))
    raise MalformedFrameError(f"unknown compression type {codec}")


def _codec_name(codec: int) -> str:
    try:
        return str(pb.CompressionType.Name(codec))  # type: ignore[arg-type,unused-ignore]
    except ValueError:
        return f"UNKNOWN({codec})"


# --- batches ---------------------------------------------------------------------------------


def encode_batch(messages: Sequence[tuple[pb.SingleMessageMetadata, Buffer]]) -> bytes:
    """Serialize messages into the (uncompressed) batch payload; sets each ``payload_size``."""
    parts: list[bytes] = []
    for metadata, payload in messages:
        single = pb.SingleMessageMetadata()
        single.CopyFrom(metadata)
        single.payload_size = len(payload)
        encoded = single.SerializeToString()
        parts.append(_U32.pack(len(encoded)))
        parts.append(encoded)
        parts.append(bytes(payload))
    return b"".join(parts)


def decode_batch(data: Buffer, count: int) -> list[SingleMessage]:
    """Split an uncompressed batch payload into exactly ``count`` messages."""
    view = memoryview(data)
    if count < 0 or count > len(view):  # every message takes at least its 4-byte size field
        raise MalformedFrameError(f"batch of {count} messages cannot fit in {len(view)} bytes")
    out: list[SingleMessage] = []
    offset = 0
    for index in range(count):
        if len(view) - offset < 4:
            raise MalformedFrameError(f"batch truncated before message {index}")
        (size,) = _U32.unpack_from(view, offset)
        offset += 4
        if size > len(view) - offset:
            raise MalformedFrameError(f"single metadata size {size} of message {index} exceeds the batch")
        single = pb.SingleMessageMetadata()
        try:
            single.ParseFromString(view[offset : offset + size])
        except Exception as error:  # protobuf DecodeError
            raise MalformedFrameError(f"unparsable SingleMessageMetadata of message {index}: {error}") from error
        offset += size
        payload_size = single.payload_size
        if payload_size < 0 or payload_size > len(view) - offset:
            raise MalformedFrameError(f"payload_size {payload_size} of message {index} exceeds the batch")
        out.append(SingleMessage(single, bytes(view[offset : offset + payload_size])))
        offset += payload_size
    if offset != len(view):
        raise MalformedFrameError(f"batch has {len(view) - offset} trailing bytes after {count} messages")
    return out


def is_batch(metadata: pb.MessageMetadata) -> bool:
    """The official client's rule: the *presence* of ``num_messages_in_batch`` marks a batch."""
    return bool(metadata.HasField("num_messages_in_batch"))


def message_count(metadata: pb.MessageMetadata) -> int:
    """How many messages (and therefore flow permits) an entry holds."""
    return metadata.num_messages_in_batch if is_batch(metadata) else 1


def decode_entry(metadata: pb.MessageMetadata, payload: Buffer) -> list[SingleMessage]:
    """Decompress an entry's payload and split it into its messages (one for a non-batch)."""
    codec = metadata.compression
    size = metadata.uncompressed_size if codec != NONE else len(payload)
    raw = decompress(codec, payload, size)
    if not is_batch(metadata):
        return [SingleMessage(None, raw)]
    return decode_batch(raw, metadata.num_messages_in_batch)


def encode_entry(
    metadata: pb.MessageMetadata,
    messages: Sequence[tuple[pb.SingleMessageMetadata, Buffer]] | None = None,
    payload: Buffer | None = None,
    codec: int = NONE,
) -> tuple[pb.MessageMetadata, bytes]:
    """Build (metadata, payload) for one entry, as a producer would.

    Pass ``messages`` for a batch (``num_messages_in_batch`` is set) or ``payload`` for a single
    message. With a codec other than NONE, ``compression`` and ``uncompressed_size`` are set.
    """
    if (messages is None) == (payload is None):
        raise MalformedFrameError("pass exactly one of messages (a batch) or payload (a single message)")
    out = pb.MessageMetadata()
    out.CopyFrom(metadata)
    if messages is not None:
        raw = encode_batch(messages)
        out.num_messages_in_batch = len(messages)
    else:
        raw = bytes(payload) if payload is not None else b""
    if codec != NONE:
        out.compression = codec  # type: ignore[assignment]
        out.uncompressed_size = len(raw)
    return out, compress(codec, raw)
