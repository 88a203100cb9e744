"""SEND, FLOW and ACK decoded by hand (``protocol/pulsar/fast_decode.py``) give what protobuf
gives for the same bytes, and anything outside their common shape falls back to protobuf."""

from __future__ import annotations

import pytest
from google.protobuf.message import DecodeError
from hypothesis import given, settings
from hypothesis import strategies as st

from magnetar.protocol.pulsar import (
    AckCommand,
    AckReceived,
    CorruptSend,
    FlowReceived,
    MalformedFrameError,
    ProtocolViolationError,
    SendCommand,
    SendReceived,
    ServerConnection,
    encode_command,
    encode_payload_command,
    pb,
)
from magnetar.protocol.pulsar.fast_decode import decode_ack, decode_flow, decode_send

T = pb.BaseCommand
U64 = st.integers(0, 2**64 - 1)
I32 = st.integers(-(2**31), 2**31 - 1)
I64 = st.integers(-(2**63), 2**63 - 1)
EDGES_U64 = [0, 1, 127, 128, 16_383, 16_384, 2**31 - 1, 2**32, 2**63 - 1, 2**63, 2**64 - 1]


def _send_of_pb(data: bytes) -> SendCommand:
    base = T()
    base.ParseFromString(data)
    return SendCommand.of(base.send)


def _ack_of_pb(data: bytes) -> AckCommand:
    base = T()
    base.ParseFromString(data)
    return AckCommand.of(base.ack)


sends = st.builds(
    pb.CommandSend, producer_id=U64, sequence_id=U64,
    num_messages=st.one_of(st.none(), I32), highest_sequence_id=st.one_of(st.none(), U64),
    is_chunk=st.one_of(st.none(), st.booleans()),
)


@settings(max_examples=400, deadline=None)
@given(sends)
def test_send_matches_protobuf(send: pb.CommandSend) -> None:
    data = T(type=T.SEND, send=send).SerializeToString()
    assert decode_send(data) == _send_of_pb(data)


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 2**64 - 1), st.integers(0, 2**32 - 1))
def test_flow_matches_protobuf(consumer_id: int, permits: int) -> None:
    data = T(type=T.FLOW, flow=pb.CommandFlow(consumer_id=consumer_id, messagePermits=permits)).SerializeToString()
    base = T()
    base.ParseFromString(data)
    assert decode_flow(data) == (base.flow.consumer_id, base.flow.messagePermits)


message_ids = st.builds(
    pb.MessageIdData, ledgerId=U64, entryId=U64, partition=st.one_of(st.none(), I32),
    batch_index=st.one_of(st.none(), I32), ack_set=st.lists(I64, max_size=4),
    batch_size=st.one_of(st.none(), I32),
)
acks = st.builds(
    pb.CommandAck, consumer_id=U64, ack_type=st.sampled_from([pb.CommandAck.Individual, pb.CommandAck.Cumulative]),
    message_id=st.lists(message_ids, max_size=4), request_id=st.one_of(st.none(), U64),
)


@settings(max_examples=400, deadline=None)
@given(acks)
def test_ack_matches_protobuf(ack: pb.CommandAck) -> None:
    data = T(type=T.ACK, ack=ack).SerializeToString()
    assert decode_ack(data) == _ack_of_pb(data)


def test_packed_and_unpacked_ack_sets_read_alike() -> None:
    # Protobuf writes repeated int64 unpacked in proto2; a packed list is valid input too.
    unpacked = T(type=T.ACK, ack=pb.CommandAck(consumer_id=1, ack_type=pb.CommandAck.Individual, message_id=[
        pb.MessageIdData(ledgerId=2, entryId=3, ack_set=[-1, 5])])).SerializeToString()
    words = bytes([0xFF] * 9 + [0x01]) + bytes([5])
    message_id = bytes([0x08, 2, 0x10, 3, 0x2A, len(words)]) + words
    ack = bytes([0x08, 1, 0x10, 0, 0x1A, len(message_id)]) + message_id
    packed = bytes([0x08, T.ACK, 0x52, len(ack)]) + ack
    assert decode_ack(packed) == decode_ack(unpacked) == _ack_of_pb(packed)
    assert decode_ack(packed) is not None


@pytest.mark.parametrize("value", EDGES_U64)
def test_edge_values(value: int) -> None:
    send = T(type=T.SEND, send=pb.CommandSend(producer_id=value, sequence_id=value,
                                              highest_sequence_id=value)).SerializeToString()
    assert decode_send(send) == _send_of_pb(send) == SendCommand(value, value, None, value, False)
    # An int32 written as a 10-byte varint (a negative value) reads as protobuf reads it.
    negative = T(type=T.SEND, send=pb.CommandSend(producer_id=1, sequence_id=2, num_messages=-5)).SerializeToString()
    decoded = decode_send(negative)
    assert decoded is not None and decoded.num_messages == -5 == _send_of_pb(negative).num_messages


@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=40))
def test_arbitrary_bytes_decode_to_protobufs_reading_or_fall_back(tail: bytes) -> None:
    # Whatever the hand decoders accept, protobuf parses to the same values.
    for kind, body_tag, decode in ((T.SEND, 0x32, decode_send), (T.ACK, 0x52, decode_ack)):
        data = bytes([0x08, kind, body_tag, len(tail)]) + tail
        result = decode(data)
        if result is not None:
            expected = _send_of_pb(data) if kind == T.SEND else _ack_of_pb(data)
            assert result == expected


@pytest.mark.parametrize("send", [
    pb.CommandSend(producer_id=1, sequence_id=2, txnid_least_bits=3),
    pb.CommandSend(producer_id=1, sequence_id=2, marker=True),
    pb.CommandSend(producer_id=1, sequence_id=2, message_id=pb.MessageIdData(ledgerId=1, entryId=2)),
])
def test_unusual_sends_fall_back_to_protobuf(send: pb.CommandSend) -> None:
    data = T(type=T.SEND, send=send).SerializeToString()
    assert decode_send(data) is None
    assert decode_ack(T(type=T.ACK, ack=pb.CommandAck(consumer_id=1, ack_type=pb.CommandAck.Individual, validation_error=pb.CommandAck.DecompressionError))
                      .SerializeToString()) is None


def test_the_comparison_can_fail() -> None:
    # Negative control: a different value in the bytes gives a different decoding.
    one = T(type=T.SEND, send=pb.CommandSend(producer_id=1, sequence_id=2)).SerializeToString()
    other = T(type=T.SEND, send=pb.CommandSend(producer_id=1, sequence_id=3)).SerializeToString()
    assert decode_send(one) != _send_of_pb(other)
    assert decode_ack(T(type=T.ACK, ack=pb.CommandAck(consumer_id=1, ack_type=pb.CommandAck.Cumulative)).SerializeToString()) != \
        _ack_of_pb(T(type=T.ACK, ack=pb.CommandAck(consumer_id=1, ack_type=pb.CommandAck.Individual)).SerializeToString())


# --- through the connection: the hot path and the fallback give the same events ----------------


def _connected() -> ServerConnection:
    conn = ServerConnection(now_ms=0)
    connect = pb.CommandConnect(client_version="test", protocol_version=20)
    conn.receive_data(encode_command(T(type=T.CONNECT, connect=connect)), 0)
    conn.data_to_send()
    return conn


def _send_frame(send: pb.CommandSend, payload: bytes = b"x") -> bytes:
    metadata = pb.MessageMetadata(producer_name="p", sequence_id=send.sequence_id, publish_time=1)
    return encode_payload_command(T(type=T.SEND, send=send), metadata, payload)


def test_hot_and_fallback_sends_are_the_same_event() -> None:
    conn = _connected()
    hot, fallback = conn.receive_data(
        _send_frame(pb.CommandSend(producer_id=4, sequence_id=9, num_messages=3))
        + _send_frame(pb.CommandSend(producer_id=4, sequence_id=9, num_messages=3, txnid_least_bits=0)), 1)
    assert isinstance(hot, SendReceived) and isinstance(fallback, SendReceived)
    assert hot.command == fallback.command == SendCommand(4, 9, 3, None, False)
    assert bytes(hot.message.headers_and_payload) == bytes(fallback.message.headers_and_payload)
    assert hot.message.metadata == fallback.message.metadata


def test_hot_corrupt_send_and_flow_and_ack() -> None:
    conn = _connected()
    bad = bytearray(_send_frame(pb.CommandSend(producer_id=1, sequence_id=5)))
    bad[-1] ^= 1
    flow = encode_command(T(type=T.FLOW, flow=pb.CommandFlow(consumer_id=2, messagePermits=100)))
    ack_pb = pb.CommandAck(consumer_id=2, ack_type=pb.CommandAck.Cumulative, request_id=8,
                           message_id=[pb.MessageIdData(ledgerId=3, entryId=4)])
    ack = encode_command(T(type=T.ACK, ack=ack_pb))
    ack_fallback = encode_command(T(type=T.ACK, ack=pb.CommandAck(consumer_id=2, ack_type=pb.CommandAck.Cumulative, request_id=8,
                                                                  message_id=[pb.MessageIdData(ledgerId=3, entryId=4)],
                                                                  txnid_least_bits=0)))
    corrupt, flowed, acked, acked_fallback = conn.receive_data(bytes(bad) + flow + ack + ack_fallback, 1)
    assert corrupt == CorruptSend(SendCommand(1, 5))
    assert flowed == FlowReceived(2, 100)
    assert isinstance(acked, AckReceived) and isinstance(acked_fallback, AckReceived)
    assert acked.ack == acked_fallback.ack
    assert acked.ack.cumulative and acked.ack.request_id == 8 and acked.ack.message_ids[0].entry_id == 4
    assert acked.decoded() == ack_pb


def test_malformed_hot_frames_keep_their_errors() -> None:
    flow = encode_command(T(type=T.FLOW, flow=pb.CommandFlow(consumer_id=1, messagePermits=1)))
    with pytest.raises(MalformedFrameError, match="trailing"):
        _connected().receive_data(_with_trailing(flow), 1)
    with pytest.raises(ProtocolViolationError, match="without its body"):
        _connected().receive_data(encode_command(T(type=T.FLOW)), 1)
    metadata = pb.MessageMetadata(producer_name="p", sequence_id=5, publish_time=1)
    frame = bytearray(encode_payload_command(T(type=T.SEND, send=pb.CommandSend(producer_id=1, sequence_id=5)),
                                             metadata, b"x", checksum=False))
    metadata_size_at = 8 + int.from_bytes(frame[4:8], "big")
    frame[metadata_size_at:metadata_size_at + 4] = (1 << 20).to_bytes(4, "big")  # runs past the frame
    with pytest.raises(MalformedFrameError, match="metadata_size"):
        _connected().receive_data(bytes(frame), 1)


def _with_trailing(frame: bytes) -> bytes:
    """The frame with one byte after its command (its sizes adjusted): malformed for FLOW."""
    total = int.from_bytes(frame[:4], "big") + 1
    return total.to_bytes(4, "big") + frame[4:] + b"\x00"


def test_transaction_and_property_acks_fall_back_and_read_as_protobuf_reads_them() -> None:
    # Fields the hand decoder does not act on (transaction ids, properties) send the ACK through
    # protobuf; the event is what protobuf reads.
    for ack in (pb.CommandAck(consumer_id=3, ack_type=pb.CommandAck.Individual, txnid_least_bits=7, txnid_most_bits=9,
                              message_id=[pb.MessageIdData(ledgerId=1, entryId=2)]),
                pb.CommandAck(consumer_id=3, ack_type=pb.CommandAck.Cumulative, message_id=[
                    pb.MessageIdData(ledgerId=1, entryId=2)], properties=[pb.KeyLongValue(key="k", value=1)])):
        data = T(type=T.ACK, ack=ack).SerializeToString()
        assert decode_ack(data) is None
        (event,) = _connected().receive_data(encode_command(T(type=T.ACK, ack=ack)), 1)
        assert isinstance(event, AckReceived) and event.ack == _ack_of_pb(data)
        assert event.ack.message_ids[0].ledger_id == 1 and event.ack.message_ids[0].entry_id == 2


def test_a_corrupt_ack_is_refused_with_protobufs_error() -> None:
    # A message id whose length runs past the ACK's body: the hand decoder declines it, and the
    # frame is refused by the protobuf path as before (a sticky MalformedFrameError).
    good = T(type=T.ACK, ack=pb.CommandAck(consumer_id=1, ack_type=pb.CommandAck.Individual, message_id=[
        pb.MessageIdData(ledgerId=2, entryId=3)])).SerializeToString()
    assert decode_ack(good) is not None
    corrupt = bytearray(good)
    corrupt[good.index(bytes([0x1A])) + 1] = 0x7F  # message_id's length: far past the end
    assert decode_ack(bytes(corrupt)) is None
    with pytest.raises(DecodeError):
        T().ParseFromString(bytes(corrupt))
    frame = len(corrupt).to_bytes(4, "big")
    frame = (len(corrupt) + 4).to_bytes(4, "big") + frame + bytes(corrupt)
    with pytest.raises(MalformedFrameError, match="unparsable BaseCommand"):
        _connected().receive_data(frame, 1)
    # Control: the intact frame is accepted.
    (event,) = _connected().receive_data(encode_command(T(type=T.ACK, ack=pb.CommandAck(
        consumer_id=1, ack_type=pb.CommandAck.Individual, message_id=[pb.MessageIdData(ledgerId=2, entryId=3)]))), 1)
    assert isinstance(event, AckReceived) and event.ack.message_ids[0].entry_id == 3
