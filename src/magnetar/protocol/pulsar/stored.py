"""A stored entry's two parts: its ``MessageMetadata`` and its payload.

The broker stores a SEND's ``headers_and_payload`` unchanged as one ledger entry (checksum block
optional). Readers that bypass the broker (the Spark connector reading bookies) split it here,
with the same metadata parsing as ``frames.stored_entry_metadata``, then decode the payload with
``batch.decode_entry``. Raises ``MalformedFrameError`` for bytes that are not a stored entry.
"""

from __future__ import annotations

from magnetar.protocol.pulsar.frames import _MAGIC_CRC, _U16, MAGIC_CRC32C, Buffer, _metadata_at
from magnetar.protocol.pulsar.generated import pulsar_api_pb2 as pb

__all__ = ["split_stored_entry"]


def split_stored_entry(entry: Buffer) -> tuple[pb.MessageMetadata, memoryview]:
    """``(metadata, payload)`` of a stored entry; the payload is a view of ``entry``."""
    view = memoryview(entry)
    offset = _MAGIC_CRC.size if len(view) >= 2 and _U16.unpack_from(view, 0)[0] == MAGIC_CRC32C else 0
    metadata, end = _metadata_at(view, offset)
    return metadata, view[end:]
