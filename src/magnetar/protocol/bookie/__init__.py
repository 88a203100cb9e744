"""Sans-IO codec for the ledger client <-> bookie protocol (layout in ``codec``'s docstring).

Public surface: the message dataclasses, ``EncodedEntry`` (an entry encoded for the wire and
the bookie's storage, with its CRC32C digest), ``Status`` codes, ``encode(message) -> bytes``, ``encode_parts(message)`` (the
same bytes as buffers to write back to back: a READ answer's entry is not copied) and
``FrameDecoder.feed(bytes) -> list[message]``.
"""

from magnetar.protocol.bookie.codec import (
    ENTRY_HEADER_BYTES,
    PROTOCOL_VERSION,
    AddRequest,
    AddResponse,
    EncodedEntry,
    FrameDecoder,
    GetInfoRequest,
    GetInfoResponse,
    Message,
    Op,
    ReadLacRequest,
    ReadLacResponse,
    ReadLastEntryRequest,
    ReadRequest,
    ReadResponse,
    Request,
    Response,
    Status,
    WriteLacRequest,
    WriteLacResponse,
    decode_frame,
    encode,
    encode_parts,
    entry_digest,
)

__all__ = [
    "ENTRY_HEADER_BYTES",
    "PROTOCOL_VERSION",
    "AddRequest",
    "AddResponse",
    "EncodedEntry",
    "FrameDecoder",
    "GetInfoRequest",
    "GetInfoResponse",
    "Message",
    "Op",
    "ReadLacRequest",
    "ReadLacResponse",
    "ReadLastEntryRequest",
    "ReadRequest",
    "ReadResponse",
    "Request",
    "Response",
    "Status",
    "WriteLacRequest",
    "WriteLacResponse",
    "decode_frame",
    "encode",
    "encode_parts",
    "entry_digest",
]
