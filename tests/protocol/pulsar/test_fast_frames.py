"""The hot frames encoded without protobuf objects (``protocol/pulsar/fast.py``) are the bytes
protobuf writes for the same values."""

from __future__ import annotations

import itertools

import pytest

from magnetar.protocol.pulsar import commands
from magnetar.protocol.pulsar.fast import encode_send_receipt
from magnetar.protocol.pulsar.frames import decode_frame, encode_command

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
