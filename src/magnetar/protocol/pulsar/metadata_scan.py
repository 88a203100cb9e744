"""A SEND's ``MessageMetadata`` checked and read straight from its bytes (issue 22).

Per SEND the broker needs two things from the metadata: that it is well formed (what protobuf
refuses, the connection refuses: ``MalformedFrameError``) and whether the message is the last
chunk of a chunked message (``num_chunks_from_msg`` / ``chunk_id``). Parsing it into a
``pb.MessageMetadata`` for that made a protobuf object, its arena and its cache entry per SEND;
``scan_metadata`` reads the bytes once and makes nothing. The object is parsed only when asked
for (``MessagePayload.metadata``: a replicator's source, admin and the client).

It refuses exactly what ``pb.MessageMetadata().ParseFromString`` (upb) refuses, no more, no less
(``tests/protocol/pulsar/test_metadata_scan.py`` checks it against the parser, property-based):

* a tag that is not a varint of at most 5 bytes below 2**32, field number 0, wire types 6 and 7;
* a value varint longer than 10 bytes; a length varint longer than 5 bytes; anything truncated;
* an end-group tag that closes no open group, or not the one open; a group never closed;
* more than 100 levels of nested groups and sub-messages;
* the same inside the known sub-messages: ``properties`` (4, ``KeyValue``) and
  ``encryption_keys`` (13, ``EncryptionKeys``, whose ``metadata`` (3) are ``KeyValue``s).

And accepts what upb accepts: unknown fields (groups included), known fields with another wire
type (kept as unknown), unknown enum values, strings that are not UTF-8 (proto2 does not check
them) and **missing required fields**: upb's ``ParseFromString`` does not check them (the message
is then not ``IsInitialized()``), and neither did the broker, so neither does this.
"""

from __future__ import annotations

from typing import Final

#: upb's nesting bound (``ParseFromString``'s default): 100 levels of groups and sub-messages.
DEPTH_MAX: Final = 100

# What a message's fields are, for the sub-messages whose contents upb parses (others are bytes).
_METADATA: Final = 0  # MessageMetadata: 4 -> KeyValue, 13 -> EncryptionKeys
_KEY_VALUE: Final = 1  # KeyValue: strings only
_ENCRYPTION_KEYS: Final = 2  # EncryptionKeys: 3 -> KeyValue
_GROUP: Final = 3  # an unknown field's group: every field unknown

_NUM_CHUNKS_FROM_MSG: Final = 27
_CHUNK_ID: Final = 29
_INT32_SIGN: Final = 1 << 31
_UINT32: Final = 1 << 32
#: A varint is refused once its bytes reach this many bits: 5 bytes for tags and lengths, 10 for values.
_SHIFT_TAG: Final = 35
_SHIFT_VALUE: Final = 70


class MalformedMetadataError(ValueError):
    """The bytes are not a ``MessageMetadata`` protobuf would parse."""


class _Scan:
    """One scan: the chunk fields seen at the top level (the last occurrence wins, as protobuf's)."""

    __slots__ = ("chunk_id", "data", "num_chunks", "num_chunks_set")

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.num_chunks_set = False
        self.num_chunks = 0
        self.chunk_id = 0

    def fields(self, pos: int, end: int, kind: int, depth_left: int, group_field: int) -> int:
        """The fields of one message from ``pos`` to ``end`` (a group: to its end-group tag);
        returns where it ended."""
        data = self.data
        while pos < end:
            # A one-byte varint (every field below 16, most values and lengths) read in place: a
            # call of ``_varint`` per varint was 1.9% of a SEND's instructions (issue 22, session 24).
            tag = data[pos]
            if tag < 0x80:
                pos += 1
            else:
                tag, pos = _varint(data, pos, end, _SHIFT_TAG, "truncated or overlong tag")  # at most 5 bytes
            if tag >= _UINT32:
                raise MalformedMetadataError("tag beyond 32 bits")
            field = tag >> 3
            wire_type = tag & 7
            if field == 0:
                raise MalformedMetadataError("field number 0")
            if wire_type == 0:
                value = data[pos] if pos < end else 0x80
                if value < 0x80:
                    pos += 1
                else:
                    value, pos = _varint(data, pos, end, _SHIFT_VALUE, "truncated or overlong varint")
                if kind == _METADATA:
                    if field == _NUM_CHUNKS_FROM_MSG:
                        self.num_chunks_set = True
                        self.num_chunks = _int32(value)
                    elif field == _CHUNK_ID:
                        self.chunk_id = _int32(value)
            elif wire_type == 2:
                size = data[pos] if pos < end else 0x80
                if size < 0x80:
                    pos += 1
                else:
                    size, pos = _varint(data, pos, end, _SHIFT_TAG, "truncated or overlong length")
                if size > end - pos:
                    raise MalformedMetadataError("length beyond the message")
                inner = _sub_message(kind, field)
                if inner >= 0:
                    if depth_left == 0:
                        raise MalformedMetadataError("nested too deeply")
                    self.fields(pos, pos + size, inner, depth_left - 1, 0)
                pos += size
            elif wire_type == 1:
                pos += 8
                if pos > end:
                    raise MalformedMetadataError("truncated fixed64")
            elif wire_type == 5:
                pos += 4
                if pos > end:
                    raise MalformedMetadataError("truncated fixed32")
            elif wire_type == 3:
                if depth_left == 0:
                    raise MalformedMetadataError("nested too deeply")
                pos = self.fields(pos, end, _GROUP, depth_left - 1, field)
            elif wire_type == 4:
                if kind == _GROUP and field == group_field:
                    return pos
                raise MalformedMetadataError("end of a group that is not open")
            else:
                raise MalformedMetadataError(f"wire type {wire_type}")
        if kind == _GROUP:
            raise MalformedMetadataError("group not closed")
        return pos


def _varint(data: bytes, pos: int, end: int, shift_max: int, refusal: str) -> tuple[int, int]:
    """The varint at ``pos`` (before ``end``) and the position after it; refused (``refusal``)
    when truncated or when its bytes reach ``shift_max`` bits (5 bytes for tags and lengths, 10
    for values)."""
    value = 0
    shift = 0
    while True:
        if pos >= end or shift == shift_max:
            raise MalformedMetadataError(refusal)
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if byte < 0x80:
            return value, pos


def _sub_message(kind: int, field: int) -> int:
    """The kind of the sub-message a length-delimited ``field`` of a ``kind`` message holds, or
    -1 where it is a string, bytes or an unknown field (not parsed)."""
    if kind == _METADATA:
        if field == 4:
            return _KEY_VALUE
        if field == 13:
            return _ENCRYPTION_KEYS
    elif kind == _ENCRYPTION_KEYS and field == 3:
        return _KEY_VALUE
    return -1


def _int32(value: int) -> int:
    """An ``int32`` field's value from its varint, as protobuf reads it (the low 32 bits, signed)."""
    value &= _UINT32 - 1
    return value - _UINT32 if value >= _INT32_SIGN else value


def scan_metadata(data: bytes) -> bool:
    """Check ``data`` (a serialized ``MessageMetadata``) and return whether its message is the
    last (or only) chunk: no ``num_chunks_from_msg``, or ``chunk_id == num_chunks_from_msg - 1``.
    Raises ``MalformedMetadataError`` where protobuf's parser would refuse ``data``."""
    scan = _Scan(data)
    scan.fields(0, len(data), _METADATA, DEPTH_MAX, 0)
    return not scan.num_chunks_set or scan.chunk_id == scan.num_chunks - 1
