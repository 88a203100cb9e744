"""Reading what the broker needs out of a stored entry without touching its payload.

A stored entry is the SEND's ``headers_and_payload`` with a 0x0e01 checksum block (the broker
adds one if the producer sent none, so MESSAGE frames always carry a checksum).
"""

from __future__ import annotations

import struct

from magnetar.base.errors import CorruptData
from magnetar.protocol.pulsar import MAGIC_CRC32C, message_count, pb

_U16 = struct.Struct(">H")
_U32 = struct.Struct(">I")


def entry_metadata(data: bytes | memoryview) -> pb.MessageMetadata:
    """The ``MessageMetadata`` of a stored entry; ``CorruptData`` if it cannot be parsed."""
    view = memoryview(data)
    offset = 0
    if len(view) >= 2 and _U16.unpack_from(view, 0)[0] == MAGIC_CRC32C:
        offset = 6
    if len(view) < offset + 4:
        raise CorruptData("stored entry too short for its metadata size")
    size = _U32.unpack_from(view, offset)[0]
    offset += 4
    if size > len(view) - offset:
        raise CorruptData("stored entry metadata size exceeds the entry")
    metadata = pb.MessageMetadata()
    try:
        metadata.ParseFromString(view[offset : offset + size])
    except Exception as error:  # protobuf DecodeError
        raise CorruptData(f"unparsable stored metadata: {error}") from error
    return metadata


def entry_message_count(metadata: pb.MessageMetadata) -> int:
    return max(1, message_count(metadata))


def entry_key(metadata: pb.MessageMetadata) -> bytes:
    """The key Key_Shared routes by: ordering_key, else partition_key, else empty."""
    if metadata.HasField("ordering_key"):
        return bytes(metadata.ordering_key)
    if metadata.HasField("partition_key"):
        return metadata.partition_key.encode()
    return b""
