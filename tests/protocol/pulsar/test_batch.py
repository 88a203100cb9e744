"""Batch payload format and compression codecs."""

from __future__ import annotations

import zlib

import lz4.block
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from magnetar.base.errors import CorruptDataError
from magnetar.base.limits import PULSAR_FRAME_BYTES_MAX
from magnetar.protocol.pulsar import (
    CompressionError,
    FrameTooLargeError,
    MalformedFrameError,
    compress,
    decode_batch,
    decode_entry,
    decompress,
    encode_batch,
    encode_entry,
    is_batch,
    message_count,
    pb,
)

CODECS = [pb.NONE, pb.LZ4, pb.ZLIB, pb.ZSTD, pb.SNAPPY]


def _outer() -> pb.MessageMetadata:
    return pb.MessageMetadata(producer_name="p", sequence_id=0, publish_time=1)


def test_golden_batch_bytes_from_the_client() -> None:
    # shared/reference/pulsar_protocol.md section 3: size 7, {partition_key:"k", payload_size:3, sequence_id:0}
    golden = bytes.fromhex("00000007 12016b 1803 4000".replace(" ", "")) + b"m-0"
    single = pb.SingleMessageMetadata(partition_key="k", sequence_id=0)
    assert encode_batch([(single, b"m-0")]) == golden
    [message] = decode_batch(golden, 1)
    assert message.payload == b"m-0" and message.metadata is not None
    assert message.metadata.partition_key == "k" and message.metadata.payload_size == 3


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: pb.CompressionType.Name(c))
def test_batch_round_trip_with_each_codec(codec: int) -> None:
    messages = [
        (pb.SingleMessageMetadata(sequence_id=i, partition_key=f"k{i}",
                                  properties=[pb.KeyValue(key="i", value=str(i))]), (f"msg-{i}-" * 20).encode())
        for i in range(5)
    ]
    metadata, payload = encode_entry(_outer(), messages=messages, codec=codec)
    assert is_batch(metadata) and message_count(metadata) == 5
    if codec != pb.NONE:
        assert metadata.compression == codec and len(payload) < metadata.uncompressed_size
    decoded = decode_entry(metadata, payload)
    assert [m.payload for m in decoded] == [p for _m, p in messages]
    assert [m.metadata.partition_key for m in decoded if m.metadata] == [f"k{i}" for i in range(5)]
    assert [m.metadata.payload_size for m in decoded if m.metadata] == [len(p) for _m, p in messages]


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: pb.CompressionType.Name(c))
def test_single_message_round_trip_with_each_codec(codec: int) -> None:
    metadata, payload = encode_entry(_outer(), payload=b"a" * 1000, codec=codec)
    assert not is_batch(metadata) and message_count(metadata) == 1
    [message] = decode_entry(metadata, payload)
    assert message.metadata is None and message.payload == b"a" * 1000


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: pb.CompressionType.Name(c))
def test_empty_payload_round_trips(codec: int) -> None:
    assert decompress(codec, compress(codec, b""), 0) == b""


@settings(max_examples=40, deadline=None)
@given(data=st.binary(max_size=4000), codec=st.sampled_from(CODECS))
def test_compress_then_decompress_is_identity(data: bytes, codec: int) -> None:
    assert decompress(codec, compress(codec, data), len(data)) == data


def test_lz4_is_the_raw_block_format_without_size_prefix() -> None:
    data = b"pulsar" * 100
    assert compress(pb.LZ4, data) == lz4.block.compress(data, store_size=False)
    assert compress(pb.ZLIB, data)[:1] == b"\x78"  # zlib header, not raw deflate


@pytest.mark.parametrize("codec", [pb.LZ4, pb.ZLIB, pb.ZSTD, pb.SNAPPY], ids=lambda c: pb.CompressionType.Name(c))
def test_wrong_uncompressed_size_is_rejected(codec: int) -> None:
    data = b"0123456789" * 50
    packed = compress(codec, data)
    for wrong in (len(data) - 1, len(data) + 1):
        with pytest.raises(CompressionError):
            decompress(codec, packed, wrong)


def test_decompression_is_bounded_by_the_frame_limit() -> None:
    bomb = zlib.compress(b"\x00" * (PULSAR_FRAME_BYTES_MAX + 1))
    with pytest.raises(FrameTooLargeError):
        decompress(pb.ZLIB, bomb, PULSAR_FRAME_BYTES_MAX + 1)
    with pytest.raises(CompressionError):  # lying about the size does not let it expand further
        decompress(pb.ZLIB, bomb, 1000)


@pytest.mark.parametrize("codec", [pb.LZ4, pb.ZLIB, pb.ZSTD, pb.SNAPPY], ids=lambda c: pb.CompressionType.Name(c))
def test_garbage_is_a_typed_error(codec: int) -> None:
    with pytest.raises(CorruptDataError):
        decompress(codec, b"\xff\xfe garbage \x00\x01" * 3, 100)


def test_unknown_codec_is_malformed() -> None:
    with pytest.raises(MalformedFrameError):
        decompress(9, b"abc", 3)


def test_truncated_and_padded_batches_are_malformed() -> None:
    raw = encode_batch([(pb.SingleMessageMetadata(), b"abc"), (pb.SingleMessageMetadata(), b"de")])
    assert [m.payload for m in decode_batch(raw, 2)] == [b"abc", b"de"]
    with pytest.raises(MalformedFrameError, match="trailing"):
        decode_batch(raw, 1)
    with pytest.raises(MalformedFrameError):
        decode_batch(raw, 3)
    with pytest.raises(MalformedFrameError):
        decode_batch(raw[:-1], 2)
    with pytest.raises(MalformedFrameError):
        decode_batch(raw, -1)


def test_batch_presence_rule_follows_the_client() -> None:
    metadata = _outer()
    assert not is_batch(metadata) and message_count(metadata) == 1
    metadata.num_messages_in_batch = 1  # present with the default value: still a batch
    assert is_batch(metadata) and message_count(metadata) == 1
