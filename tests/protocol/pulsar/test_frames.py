"""Frame codec: golden bytes, incremental decoding, checksums, limits, malformed input."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from magnetar.base.checksum import crc32c
from magnetar.base.errors import ChecksumMismatchError, CorruptDataError, LimitExceededError
from magnetar.base.limits import PULSAR_FRAME_BYTES_MAX
from magnetar.protocol.pulsar import (
    FrameChecksumMismatchError,
    FrameDecoder,
    FrameTooLargeError,
    MalformedFrameError,
    commands,
    decode_frame,
    encode_command,
    encode_payload_command,
    headers_and_payload,
    pb,
)
from magnetar.protocol.pulsar.frames import payload_frame_parts

T = pb.BaseCommand

# Captured from the real client (shared/reference/pulsar_protocol.md 1.3).
GOLDEN_CONNECT = (
    bytes.fromhex("00000029 00000025 0802 1221 0a11".replace(" ", ""))
    + b"Pulsar-CPP-v4.2.0"
    + bytes.fromhex("2014 2a04".replace(" ", ""))
    + b"none"
    + bytes.fromhex("5204 0801 1001".replace(" ", ""))
)
GOLDEN_PING = bytes.fromhex("00000009 00000005 0812920100".replace(" ", ""))


def _send_command(producer_id: int = 0, sequence_id: int = 0) -> pb.BaseCommand:
    return T(type=T.SEND, send=pb.CommandSend(producer_id=producer_id, sequence_id=sequence_id))


def _metadata(seq: int = 0) -> pb.MessageMetadata:
    return pb.MessageMetadata(producer_name="p", sequence_id=seq, publish_time=1000)


def _send_frame(seq: int = 0, payload: bytes = b"hello", checksum: bool = True) -> bytes:
    return encode_payload_command(_send_command(0, seq), _metadata(seq), payload, checksum=checksum)


def test_golden_connect_from_the_real_client_decodes() -> None:
    frame = decode_frame(memoryview(GOLDEN_CONNECT))
    assert frame.type == T.CONNECT and frame.message is None and frame.size_bytes == 45
    connect = frame.command.connect
    assert connect.client_version == "Pulsar-CPP-v4.2.0" and connect.protocol_version == 20
    assert connect.auth_method_name == "none" and not connect.HasField("auth_data")
    assert connect.feature_flags.supports_auth_refresh and connect.feature_flags.supports_broker_entry_metadata
    # and re-encodes to the very same bytes
    assert encode_command(frame.command) == GOLDEN_CONNECT


def test_golden_ping_matches_the_client() -> None:
    assert encode_command(commands.ping()) == GOLDEN_PING
    assert decode_frame(memoryview(GOLDEN_PING)).type == T.PING


def test_golden_connected() -> None:
    frame = encode_command(commands.connected("S", 20, 5 * 1024 * 1024))
    # type=3, connected{server_version="S", protocol_version=20, max_message_size=5242880, flags{watchers=false}}
    body = bytes.fromhex("0803 1a0e 0a0153 1014 188080c002 22022000".replace(" ", ""))
    assert frame == struct.pack(">II", 4 + len(body), len(body)) + body


def test_golden_payload_frame_layout_and_checksum() -> None:
    metadata = _metadata()
    md = metadata.SerializeToString()
    cmd = _send_command().SerializeToString()
    covered = struct.pack(">I", len(md)) + md + b"hello"
    expected = (
        struct.pack(">II", 4 + len(cmd) + 6 + len(covered), len(cmd)) + cmd
        + b"\x0e\x01" + struct.pack(">I", crc32c(covered)) + covered
    )
    assert _send_frame() == expected
    assert cmd == bytes.fromhex("0806 3204 08001000".replace(" ", ""))
    assert crc32c(b"123456789") == 0xE3069283


def test_payload_frame_decodes_with_zero_copy_views() -> None:
    data = _send_frame(payload=b"payload-bytes")
    decoder = FrameDecoder()
    decoder.feed(data)
    frame = decoder.next_frame()
    assert frame is not None and frame.message is not None
    assert frame.command.send.sequence_id == 0
    assert bytes(frame.message.payload) == b"payload-bytes"
    assert frame.message.metadata.producer_name == "p"
    assert frame.message.checksum is not None
    assert frame.message.payload.obj is data  # a view into the fed chunk, not a copy
    assert bytes(frame.message.headers_and_payload) == data[-len(frame.message.headers_and_payload):]
    assert bytes(frame.message.headers_and_payload[:2]) == b"\x0e\x01"
    assert decoder.next_frame() is None


def test_payload_without_checksum_is_accepted_and_can_be_checksummed() -> None:
    # protocol_version < 6: no magic, metadata_size straight after the command
    data = _send_frame(checksum=False)
    frame = decode_frame(memoryview(data))
    assert frame.message is not None and frame.message.checksum is None
    assert bytes(frame.message.payload) == b"hello"
    assert bytes(frame.message.checksummed()) == headers_and_payload(_metadata(), b"hello", checksum=True)


def test_broker_entry_metadata_is_parsed_before_the_checksum() -> None:
    command = commands.message(3, commands.message_id(1, 2))
    header, body = payload_frame_parts(
        command, headers_and_payload(_metadata(), b"m"), pb.BrokerEntryMetadata(broker_timestamp=5, index=9)
    )
    frame = decode_frame(memoryview(header + bytes(body)))
    assert frame.message is not None and frame.message.broker_entry_metadata is not None
    assert frame.message.broker_entry_metadata.index == 9
    assert bytes(frame.message.payload) == b"m" and frame.message.checksum is not None


def _stream() -> tuple[bytes, list[int]]:
    frames = [GOLDEN_CONNECT, GOLDEN_PING, _send_frame(0, b"a" * 300), _send_frame(1, b""),
              encode_command(commands.success(7)), _send_frame(2, b"z" * 70_000, checksum=False)]
    return b"".join(frames), [len(f) for f in frames]


def _drain(decoder: FrameDecoder) -> list[tuple[int, int, bytes | None]]:
    out = []
    while (frame := decoder.next_frame()) is not None:
        payload = bytes(frame.message.payload) if frame.message else None
        out.append((frame.type, frame.size_bytes, payload))
    return out


def test_decoder_fed_byte_by_byte() -> None:
    stream, sizes = _stream()
    decoder = FrameDecoder()
    got = []
    for i in range(len(stream)):
        decoder.feed(stream[i : i + 1])
        got += _drain(decoder)
    assert [size for _t, size, _p in got] == sizes
    assert got[2][2] == b"a" * 300 and got[3][2] == b"" and got[5][2] == b"z" * 70_000
    assert decoder.buffered_bytes == 0


@settings(max_examples=60, deadline=None)
@given(cuts=st.lists(st.integers(min_value=0, max_value=1), min_size=1, max_size=40), data=st.data())
def test_decoder_fed_in_random_chunks(cuts: list[int], data: st.DataObject) -> None:
    stream, sizes = _stream()
    points = sorted(set(data.draw(st.lists(st.integers(0, len(stream)), max_size=len(cuts) * 3))))
    decoder = FrameDecoder()
    got = []
    previous = 0
    for point in [*points, len(stream)]:
        chunk = stream[previous:point]
        decoder.feed(bytearray(chunk) if cuts[len(got) % len(cuts)] else chunk)
        got += _drain(decoder)
        previous = point
    assert [size for _t, size, _p in got] == sizes
    assert [t for t, _s, _p in got] == [T.CONNECT, T.PING, T.SEND, T.SEND, T.SUCCESS, T.SEND]


def test_a_frame_spanning_reads_is_joined_once_and_frames_within_a_read_are_views() -> None:
    """A 100 KiB batch arriving in 64 KiB reads: the spanning frame is one ``bytes`` of its own
    (joined once, when complete; nothing is joined while it is incomplete), and the frames that
    follow inside the last read are views of that read, not copies."""
    big = _send_frame(0, b"b" * 100_000)
    small = _send_frame(1, b"s" * 10)
    stream = big + small + small
    first, second = stream[:65_536], stream[65_536:]
    decoder = FrameDecoder()
    decoder.feed(first)
    assert decoder.next_frame_bytes() is None  # incomplete: nothing copied yet
    decoder.feed(second)
    spanning = decoder.next_frame_bytes()
    assert spanning is not None and isinstance(spanning.obj, bytes) and len(spanning.obj) == len(big)
    assert bytes(spanning) == big
    after = [decoder.next_frame_bytes(), decoder.next_frame_bytes()]
    assert all(view is not None and view.obj is second and bytes(view) == small for view in after)
    assert decoder.next_frame_bytes() is None and decoder.buffered_bytes == 0


def test_read_only_views_of_bytes_are_kept_and_mutable_buffers_are_copied() -> None:
    """A slice of a larger read handed over as a read-only view of ``bytes`` (immutable) is kept
    as it is: its frames are views of the original read. A ``bytearray`` or a writable view may
    change after ``feed`` returns, so it is copied: changing it later changes no frame."""
    frame = _send_frame(4, b"v" * 2_000)
    read = b"junk" + frame + frame
    decoder = FrameDecoder()
    decoder.feed(memoryview(read)[4 : 4 + len(frame)])
    decoder.feed(memoryview(read)[4 + len(frame) :])
    views = [decoder.next_frame_bytes(), decoder.next_frame_bytes()]
    assert all(view is not None and view.obj is read and bytes(view) == frame for view in views)
    for mutable in (bytearray(frame), memoryview(bytearray(frame))):
        decoder.feed(mutable)
        got = decoder.next_frame_bytes()
        mutable[-1:] = b"X"  # the caller reuses its buffer
        assert got is not None and bytes(got) == frame and got.obj is not mutable


def test_a_size_field_split_across_reads_is_read_without_consuming() -> None:
    frame = _send_frame(3, b"x" * 500)
    decoder = FrameDecoder()
    for part in (frame[:1], frame[1:3], frame[3:9], frame[9:]):
        assert decoder.next_frame_bytes() is None
        decoder.feed(part)
    got = decoder.next_frame()
    assert got is not None and got.message is not None and bytes(got.message.payload) == b"x" * 500
    assert decoder.buffered_bytes == 0


def test_checksum_mismatch_is_typed_and_only_drops_that_frame() -> None:
    bad = bytearray(_send_frame(5, b"hello"))
    bad[-1] ^= 0xFF
    decoder = FrameDecoder()
    decoder.feed(bytes(bad) + GOLDEN_PING)
    with pytest.raises(FrameChecksumMismatchError) as info:
        decoder.next_frame()
    assert isinstance(info.value, ChecksumMismatchError)
    assert info.value.command is not None and info.value.command.send.sequence_id == 5
    frame = decoder.next_frame()  # the stream is still in sync
    assert frame is not None and frame.type == T.PING


def test_oversized_frame_is_refused_before_buffering_and_is_sticky() -> None:
    decoder = FrameDecoder()
    decoder.feed(struct.pack(">I", PULSAR_FRAME_BYTES_MAX - 3))  # 4 + size = limit + 1
    with pytest.raises(FrameTooLargeError) as info:
        decoder.next_frame()
    assert isinstance(info.value, LimitExceededError) and info.value.limit == PULSAR_FRAME_BYTES_MAX
    with pytest.raises(MalformedFrameError):
        decoder.feed(GOLDEN_PING)


def test_frame_of_exactly_the_limit_is_accepted() -> None:
    metadata = _metadata()
    overhead = len(_send_frame(payload=b""))
    frame_bytes = _send_frame(payload=b"x" * (PULSAR_FRAME_BYTES_MAX - overhead))
    assert len(frame_bytes) == PULSAR_FRAME_BYTES_MAX
    decoder = FrameDecoder()
    decoder.feed(frame_bytes)
    frame = decoder.next_frame()
    assert frame is not None and frame.message is not None and frame.message.metadata == metadata
    with pytest.raises(FrameTooLargeError):
        _send_frame(payload=b"x" * (PULSAR_FRAME_BYTES_MAX - overhead + 1))


def test_receive_buffer_is_bounded() -> None:
    decoder = FrameDecoder()
    chunk = GOLDEN_PING * 30_000  # ~270 KB of complete frames that nobody drains
    with pytest.raises(FrameTooLargeError):
        for _ in range(40):
            decoder.feed(chunk)


@pytest.mark.parametrize(
    ("raw", "why"),
    [
        (struct.pack(">II", 4, 0), "too small"),
        (struct.pack(">II", 10, 20) + b"\x00" * 6, "command_size"),
        (struct.pack(">II", 6, 2) + b"\xff\xff", "unparsable"),
        (GOLDEN_PING[:3] + b"\x0b" + GOLDEN_PING[4:] + b"\x00\x00", "trailing"),
        (encode_payload_command(_send_command(), _metadata(), b"x")[:8 + 6], "total_size"),
    ],
)
def test_malformed_frames_are_typed_errors(raw: bytes, why: str) -> None:
    decoder = FrameDecoder()
    decoder.feed(raw)
    with pytest.raises(CorruptDataError):
        if decoder.next_frame() is None:  # a truncated frame simply waits: decode it directly
            decode_frame(memoryview(raw))


def test_send_without_message_is_malformed() -> None:
    body = _send_command().SerializeToString()
    raw = struct.pack(">II", 4 + len(body), len(body)) + body
    with pytest.raises(MalformedFrameError, match="without metadata"):
        decode_frame(memoryview(raw))


def test_metadata_size_beyond_frame_is_malformed() -> None:
    cmd = _send_command().SerializeToString()
    rest = struct.pack(">I", 1000) + b"abc"
    raw = struct.pack(">II", 4 + len(cmd) + len(rest), len(cmd)) + cmd + rest
    with pytest.raises(MalformedFrameError, match="metadata_size"):
        decode_frame(memoryview(raw))


def test_encoder_refuses_incomplete_commands() -> None:
    from magnetar.base.invariant import InvariantViolationError

    with pytest.raises(InvariantViolationError, match="incomplete"):
        encode_command(T(type=T.SUCCESS, success=pb.CommandSuccess()))  # request_id is required


def test_stored_entry_metadata_reads_with_and_without_the_checksum_block() -> None:
    from magnetar.base.errors import CorruptDataError
    from magnetar.protocol.pulsar import stored_entry_metadata
    from magnetar.protocol.pulsar.frames import headers_and_payload

    metadata = pb.MessageMetadata(producer_name="p", sequence_id=7, publish_time=1)
    for checksum in (True, False):
        stored = headers_and_payload(metadata, b"payload", checksum=checksum)
        assert stored_entry_metadata(stored) == metadata
        assert stored_entry_metadata(memoryview(stored)) == metadata
    with pytest.raises(CorruptDataError):
        stored_entry_metadata(b"\x00\x00\x00\x09abc")
