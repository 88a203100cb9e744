"""The hot frames encoded without protobuf objects (``protocol/pulsar/fast.py``) are the bytes
protobuf writes for the same values."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from magnetar.base.limits import PULSAR_FRAME_BYTES_MAX
from magnetar.protocol.pulsar import commands, fast
from magnetar.protocol.pulsar.errors import FrameTooLargeError
from magnetar.protocol.pulsar.fast import encode_message_header, encode_send_receipt
from magnetar.protocol.pulsar.frames import (
    decode_frame,
    encode_command,
    headers_and_payload,
    payload_frame_parts,
)
from magnetar.protocol.pulsar.generated import pulsar_api_pb2 as pb

EDGES = [0, 1, 127, 128, 300, 16_383, 16_384, 2**31 - 1, 2**32, 2**63 - 1, 2**64 - 1]


@pytest.mark.parametrize("highest", [None, 0, 5, 2**40])
def test_send_receipt_matches_protobuf_byte_for_byte(highest: int | None) -> None:
    for producer_id, sequence_id, ledger_id, entry_id in itertools.product(
            [0, 1, 200, 2**33], EDGES, [0, 129, 2**50, -1], [0, 1, 99_999, -1]):
        expected = encode_command(commands.send_receipt(producer_id, sequence_id, ledger_id, entry_id, highest))
        assert encode_send_receipt(producer_id, sequence_id, ledger_id, entry_id, highest) == expected


def test_send_receipt_decodes_to_the_values() -> None:
    frame = encode_send_receipt(7, 2**35, 12, 34, highest_sequence_id=2**35 + 3)
    decoded = decode_frame(frame)
    receipt = decoded.command.send_receipt
    assert (receipt.producer_id, receipt.sequence_id) == (7, 2**35)
    assert (receipt.message_id.ledgerId, receipt.message_id.entryId) == (12, 34)
    assert receipt.highest_sequence_id == 2**35 + 3


def test_golden_bytes_catch_a_wrong_field() -> None:
    # Negative control: a receipt for another entry differs, so the comparison above can fail.
    assert encode_send_receipt(1, 2, 3, 4) != encode_command(commands.send_receipt(1, 2, 3, 5))


# --- MESSAGE -------------------------------------------------------------------------------------

U64 = st.integers(0, 2**64 - 1)
I32 = st.integers(-(2**31), 2**31 - 1)
I64 = st.integers(-(2**63), 2**63 - 1)
# Ledger and entry ids as the dispatcher has them: signed, -1 for "none", or any u64 on the wire.
IDS = st.one_of(st.just(-1), U64, st.sampled_from(EDGES))
STORED = headers_and_payload(pb.MessageMetadata(producer_name="p", sequence_id=1, publish_time=2), b"payload")


def _by_protobuf(consumer_id: int, ledger_id: int, entry_id: int, payload: bytes, partition: int | None,
                 redelivery_count: int, ack_set: list[int], batch_index: int | None,
                 consumer_epoch: int | None) -> bytes:
    msg_id = commands.message_id(ledger_id, entry_id, partition=partition, batch_index=batch_index)
    header, body = payload_frame_parts(commands.message(consumer_id, msg_id, redelivery_count, ack_set, consumer_epoch),
                                       payload)
    return header + bytes(body)


@settings(max_examples=600, deadline=None)
@given(consumer_id=U64, ledger_id=IDS, entry_id=IDS,
       partition=st.one_of(st.none(), st.just(-1), I32), redelivery_count=st.integers(0, 2**32 - 1),
       ack_set=st.lists(st.one_of(I64, st.sampled_from([0, -1, 1, 2**63 - 1, -(2**63)])), max_size=5),
       batch_index=st.one_of(st.none(), st.just(-1), I32),
       consumer_epoch=st.one_of(st.none(), st.just(-1), U64))
def test_message_header_matches_protobuf_byte_for_byte(
        consumer_id: int, ledger_id: int, entry_id: int, partition: int | None, redelivery_count: int,
        ack_set: list[int], batch_index: int | None, consumer_epoch: int | None) -> None:
    expected = _by_protobuf(consumer_id, ledger_id, entry_id, STORED, partition, redelivery_count, ack_set,
                            batch_index, consumer_epoch)
    header = encode_message_header(consumer_id, ledger_id, entry_id, len(STORED), partition=partition,
                                   redelivery_count=redelivery_count, ack_set=ack_set, batch_index=batch_index,
                                   consumer_epoch=consumer_epoch)
    assert header + STORED == expected


@pytest.mark.parametrize("ack_set", [[], [0], [-1, 5], [2**63 - 1, -(2**63)]])
@pytest.mark.parametrize("partition", [-1, 0, 7, 2**31 - 1, None])
def test_message_edges_match_protobuf(partition: int | None, ack_set: list[int]) -> None:
    for consumer_id, ledger_id, entry_id, redeliveries in itertools.product(
            [0, 1, 2**64 - 1], [0, 129, 2**50, -1], [0, 1, 99_999, -1], [0, 1, 300, 2**32 - 1]):
        expected = _by_protobuf(consumer_id, ledger_id, entry_id, STORED, partition, redeliveries, ack_set, None, None)
        header = encode_message_header(consumer_id, ledger_id, entry_id, len(STORED), partition=partition,
                                       redelivery_count=redeliveries, ack_set=ack_set)
        assert header + STORED == expected


def test_a_message_with_a_large_entry_gets_a_multi_byte_command_and_the_frame_size() -> None:
    # 1,000 ack-set words make the command body longer than one varint byte can say.
    words = [-(2**63)] * 1000
    payload = b"\x00" * 70_000
    expected = _by_protobuf(5, 2**40, 2**33, payload, 3, 2, words, 1, 9)
    header = encode_message_header(5, 2**40, 2**33, len(payload), partition=3, redelivery_count=2, ack_set=words,
                                   batch_index=1, consumer_epoch=9)
    assert header + payload == expected


def test_a_message_decodes_to_its_values() -> None:
    frame = encode_message_header(4, 12, 34, len(STORED), partition=-1, redelivery_count=3, ack_set=[-2]) + STORED
    message = decode_frame(frame).command.message
    assert (message.consumer_id, message.redelivery_count, list(message.ack_set)) == (4, 3, [-2])
    assert (message.message_id.ledgerId, message.message_id.entryId, message.message_id.partition) == (12, 34, -1)


def test_values_protobuf_refuses_are_refused() -> None:
    for kwargs in ({"partition": 2**31}, {"batch_index": -(2**31) - 1}, {"redelivery_count": 2**32},
                   {"ack_set": [2**63]}, {"consumer_epoch": 2**64}):
        with pytest.raises(ValueError):
            commands.message(1, commands.message_id(1, 2, partition=kwargs.get("partition", -1),  # type: ignore[arg-type]
                                                    batch_index=kwargs.get("batch_index")),  # type: ignore[arg-type]
                             kwargs.get("redelivery_count", 0), kwargs.get("ack_set", ()),  # type: ignore[arg-type]
                             kwargs.get("consumer_epoch")).SerializeToString()  # type: ignore[arg-type]
        with pytest.raises(ValueError):
            encode_message_header(1, 1, 2, 10, **kwargs)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        encode_message_header(-1, 1, 2, 10)


def test_a_message_frame_over_the_bound_is_refused_as_protobuf_path_refuses_it() -> None:
    size = PULSAR_FRAME_BYTES_MAX
    with pytest.raises(FrameTooLargeError):
        payload_frame_parts(commands.message(1, commands.message_id(1, 2, partition=-1)), b"\x00" * size)
    with pytest.raises(FrameTooLargeError):
        encode_message_header(1, 1, 2, size)


def test_message_golden_bytes_catch_a_wrong_field() -> None:
    # Negative controls: another partition, another redelivery count, a missing ack set word differ.
    base = encode_message_header(1, 2, 3, len(STORED), partition=-1, redelivery_count=1, ack_set=[7])
    assert base + STORED == _by_protobuf(1, 2, 3, STORED, -1, 1, [7], None, None)
    assert base + STORED != _by_protobuf(1, 2, 3, STORED, 0, 1, [7], None, None)
    assert base + STORED != _by_protobuf(1, 2, 3, STORED, -1, 2, [7], None, None)
    assert base + STORED != _by_protobuf(1, 2, 3, STORED, -1, 1, [], None, None)


def test_varints_match_protobuf_at_every_length_boundary() -> None:
    # Each length boundary (2**(7k)), the packed path's bound (2**49) and the u64 top, on both sides.
    values = sorted({b + d for k in range(1, 10) for b in (1 << (7 * k), 1 << 49) for d in (-1, 0, 1)} | {0, 2**64 - 1})
    for value in values:
        if value < 2**64:
            expected = pb.MessageIdData(ledgerId=value, entryId=0).SerializeToString()[1:-2]  # the ledgerId varint
            assert fast._varint(value) == expected, value
