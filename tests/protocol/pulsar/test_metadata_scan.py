"""``scan_metadata`` refuses exactly what protobuf's parser refuses, and reads the chunk fields as
it does (issue 22: the broker checks a SEND's ``MessageMetadata`` without a protobuf object).

The reference is ``pb.MessageMetadata().ParseFromString`` (upb): for every input both either
refuse it, or accept it and agree on "last chunk" (``not HasField("num_chunks_from_msg") or
chunk_id == num_chunks_from_msg - 1``). Inputs, property-based (hypothesis):

* real ``MessageMetadata``s with arbitrary field values (the official client's shapes);
* wire streams from a grammar that reaches every refusal: field numbers 0, known, large and
  beyond 29 bits, all eight wire types, over-long varints and tags (padded with 0x80 bytes),
  lengths too long or too short, groups closed, closed by another field or never, sub-messages
  (``properties``, ``encryption_keys`` and its ``metadata``) with their own fields;
* valid messages cut short, with a byte changed, or with bytes inserted.

And the exact edges upb has (nesting depth 100, a 10-byte varint, a 5-byte tag and length).
Negative control: a scanner that accepts a group closed by another field's end tag (one line of
``_Scan.fields``) fails ``test_a_grammar_of_wire_streams`` within its first examples; one that
reads the ``int32`` fields unsigned fails ``test_the_edges_agree`` and
``test_valid_metadata_cut_changed_or_extended``
(num_chunks 0 and chunk_id -1 are a last chunk); one that allows 101 levels fails the depth edge.
"""

from __future__ import annotations

import pytest
from google.protobuf.message import DecodeError
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from magnetar.protocol.pulsar import pb
from magnetar.protocol.pulsar.metadata_scan import DEPTH_MAX, MalformedMetadataError, scan_metadata

_SETTINGS = settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _reference(data: bytes) -> bool | None:
    metadata = pb.MessageMetadata()
    try:
        metadata.ParseFromString(data)
    except DecodeError:
        return None
    return not metadata.HasField("num_chunks_from_msg") or metadata.chunk_id == metadata.num_chunks_from_msg - 1


def _scanned(data: bytes) -> bool | None:
    try:
        return scan_metadata(data)
    except MalformedMetadataError:
        return None


def _agree(data: bytes) -> None:
    assert _scanned(data) == _reference(data), data.hex()


# --- the wire grammar ------------------------------------------------------------------------


def _varint(value: int, padding: int = 0) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            break
    if padding:
        out[-1] |= 0x80
        out.extend(b"\x80" * (padding - 1))
        out.append(0)
    return bytes(out)


_FIELDS = st.one_of(
    st.sampled_from([1, 2, 3, 4, 5, 7, 8, 11, 13, 16, 24, 27, 28, 29, 30]),
    st.integers(0, 40),
    st.integers(1, (1 << 29) - 1),
    st.integers(1 << 29, 1 << 33),  # tags beyond 32 bits
)
_PADDING = st.one_of(st.just(0), st.just(0), st.integers(1, 10))


@st.composite
def _tag(draw: st.DrawFn, field: int, wire_type: int) -> bytes:
    return _varint((field << 3) | wire_type, draw(_PADDING))


#: Field numbers inside a group's body. A field-0 tag there (``0b 03 04 0c``: a group of field 0;
#: ``0b 00 00 0c``: a varint of field 0) is where the references part: Python's protobuf (upb)
#: skips a group's contents without checking their field numbers, Java's protobuf rejects the tag
#: (field number 0), and the scanner rejects it as Java does. Field 0 stays everywhere else a tag
#: appears: the top level and length-delimited bodies (both reject it there).
_FIELDS_IN_GROUPS = _FIELDS.filter(lambda field: field != 0)


@st.composite
def _field(
    draw: st.DrawFn,
    inner: st.SearchStrategy[bytes],
    fields: st.SearchStrategy[int] = _FIELDS,
    group_bodies: st.SearchStrategy[bytes] | None = None,
) -> bytes:
    """One field of a stream: its tag's field number from ``fields``, a group's body from
    ``group_bodies`` (``inner`` when None), every other body from ``inner``."""
    field = draw(fields)
    wire_type = draw(st.integers(0, 7))
    tag = draw(_tag(field, wire_type))
    if wire_type == 0:
        value = draw(st.one_of(st.integers(0, 300), st.integers(0, (1 << 64) - 1), st.integers(-(1 << 31), -1)))
        return tag + _varint(value & ((1 << 70) - 1), draw(_PADDING))
    if wire_type == 1:
        return tag + draw(st.binary(min_size=7, max_size=9))
    if wire_type == 5:
        return tag + draw(st.binary(min_size=3, max_size=5))
    if wire_type == 2:
        body = draw(st.one_of(st.binary(max_size=12), inner))
        size = len(body) + draw(st.sampled_from([0, 0, 0, 0, -1, 1]))
        return tag + _varint(max(0, size), draw(st.one_of(st.just(0), st.integers(1, 6)))) + body
    if wire_type == 3:
        # Groups get a field >= 1 and a body without field 0 (``_FIELDS_IN_GROUPS``).
        field = field or 1
        tag = draw(_tag(field, wire_type))
        body = draw(inner if group_bodies is None else group_bodies)
        closing = draw(st.sampled_from(["same", "same", "same", "other", "none"]))
        if closing == "none":
            return tag + body
        end_field = field if closing == "same" else draw(fields)
        return tag + body + draw(_tag(end_field, 4))
    return tag + draw(st.binary(max_size=3))  # 4 (a stray end), 6 and 7


_GROUP_BODIES = st.recursive(
    st.just(b""),
    lambda inner: st.lists(_field(inner, _FIELDS_IN_GROUPS), max_size=4).map(b"".join),
    max_leaves=12,
)
_STREAMS = st.recursive(
    st.just(b""),
    lambda inner: st.lists(_field(inner, _FIELDS, _GROUP_BODIES), max_size=4).map(b"".join),
    max_leaves=12,
)


# --- real metadata ---------------------------------------------------------------------------

_U64 = st.integers(0, (1 << 64) - 1)
_I32 = st.integers(-(1 << 31), (1 << 31) - 1)
_TEXT = st.text(max_size=8)
_KEY_VALUES = st.lists(st.builds(pb.KeyValue, key=_TEXT, value=_TEXT), max_size=3)


@st.composite
def _metadata(draw: st.DrawFn) -> pb.MessageMetadata:
    metadata = pb.MessageMetadata(producer_name=draw(_TEXT), sequence_id=draw(_U64), publish_time=draw(_U64))
    metadata.properties.extend(draw(_KEY_VALUES))
    if draw(st.booleans()):
        metadata.replicated_from = draw(_TEXT)
    if draw(st.booleans()):
        metadata.num_messages_in_batch = draw(_I32)
    if draw(st.booleans()):
        metadata.num_chunks_from_msg = draw(st.one_of(st.sampled_from([0, 1, 3, -1, (1 << 31) - 1, -(1 << 31)]), _I32))
    if draw(st.booleans()):
        chunks = metadata.num_chunks_from_msg
        metadata.chunk_id = draw(st.one_of(st.sampled_from([0, 2, chunks - 1 if chunks > -(1 << 31) else 0]), _I32))
    if draw(st.booleans()):
        metadata.total_chunk_msg_size = draw(_I32)
    if draw(st.booleans()):
        metadata.uuid = draw(_TEXT)
    for _ in range(draw(st.integers(0, 2))):
        keys = metadata.encryption_keys.add(key=draw(_TEXT), value=draw(st.binary(max_size=8)))
        keys.metadata.extend(draw(_KEY_VALUES))
    if draw(st.booleans()):
        metadata.compression = draw(st.sampled_from([0, 1, 2, 3, 4]))
    return metadata


@_SETTINGS
@given(_metadata())
def test_real_metadata(metadata: pb.MessageMetadata) -> None:
    data = metadata.SerializeToString()
    assert _scanned(data) is not None
    _agree(data)


@_SETTINGS
@given(_STREAMS)
def test_a_grammar_of_wire_streams(data: bytes) -> None:
    _agree(data)


@_SETTINGS
@given(_metadata(), st.data())
def test_valid_metadata_cut_changed_or_extended(metadata: pb.MessageMetadata, draw: st.DataObject) -> None:
    data = metadata.SerializeToString()
    at = draw.draw(st.integers(0, len(data)))
    _agree(data[:at])
    if data:
        index = draw.draw(st.integers(0, len(data) - 1))
        _agree(data[:index] + bytes([draw.draw(st.integers(0, 255))]) + data[index + 1:])
    _agree(data[:at] + draw.draw(st.binary(min_size=1, max_size=6)) + data[at:])
    _agree(data + draw.draw(_STREAMS))


@_SETTINGS
@given(st.binary(max_size=40))
def test_random_bytes(data: bytes) -> None:
    _agree(data)


_GOOD = pb.MessageMetadata(producer_name="p", sequence_id=1, publish_time=2).SerializeToString()


@pytest.mark.parametrize("tail", [
    b"\x93\x03" * DEPTH_MAX + b"\x94\x03" * DEPTH_MAX,  # 100 nested groups: accepted
    b"\x93\x03" * (DEPTH_MAX + 1) + b"\x94\x03" * (DEPTH_MAX + 1),  # 101: refused
    b"\x22\x0e\x0a\x01k\x12\x01v" + b"\x1b" * 2 + b"\x1c" * 2 + b"\x0b\x0c",  # groups in a KeyValue
    b"\x48" + b"\xff" * 9 + b"\x7f",  # a 10-byte varint: accepted, whatever its last byte
    b"\x48" + b"\xff" * 10 + b"\x01",  # 11 bytes: refused
    b"\xf8\xff\xff\xff\x0f\x00",  # the largest field number in a 5-byte tag
    b"\xf8\xff\xff\xff\x1f\x00",  # a tag beyond 32 bits
    b"\x2a\x81\x80\x80\x80\x00x",  # a length in 5 bytes
    b"\x2a\x81\x80\x80\x80\x80\x00x",  # in 6: refused
    b"\xd8\x01\x83\x80\x80\x80\x10\xe8\x01\x02",  # num_chunks 2**32 + 3 is 3; chunk 2 is the last
    b"\xd8\x01" + b"\xff" * 9 + b"\x01",  # num_chunks -1
    b"\xda\x01\x00",  # num_chunks as a length-delimited field: unknown, not set
    b"\xd8\x01\x00\xe8\x01" + b"\xff" * 9 + b"\x01",  # num_chunks 0, chunk_id -1: the last (signed)
])
def test_the_edges_agree(tail: bytes) -> None:
    _agree(_GOOD + tail)


def test_a_first_chunk_is_not_the_last_and_missing_required_fields_are_accepted() -> None:
    chunked = pb.MessageMetadata(producer_name="p", sequence_id=1, publish_time=2, num_chunks_from_msg=3, chunk_id=0)
    assert scan_metadata(chunked.SerializeToString()) is False
    chunked.chunk_id = 2
    assert scan_metadata(chunked.SerializeToString()) is True
    assert scan_metadata(b"") is True and _reference(b"") is True  # upb does not check required fields
