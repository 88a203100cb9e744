"""Reading what the broker needs out of a stored entry's metadata (``stored_entry_metadata``).

A stored entry is the SEND's ``headers_and_payload`` with a 0x0e01 checksum block (the broker
adds one if the producer sent none, so MESSAGE frames always carry a checksum).
"""

from __future__ import annotations

from magnetar.protocol.pulsar import message_count, pb


def entry_message_count(metadata: pb.MessageMetadata) -> int:
    return max(1, message_count(metadata))


def entry_key(metadata: pb.MessageMetadata) -> bytes:
    """The key Key_Shared routes by: ordering_key, else partition_key, else empty."""
    if metadata.HasField("ordering_key"):
        return bytes(metadata.ordering_key)
    if metadata.HasField("partition_key"):
        return metadata.partition_key.encode()
    return b""
