"""Hot frames encoded without building protobuf objects (issue 22).

A SEND_RECEIPT goes out once per unbatched message; building ``BaseCommand`` +
``CommandSendReceipt`` + ``MessageIdData`` and serializing them cost more than the rest of the
receipt path. The bytes here are exactly what protobuf writes for the same values (fields in
field-number order, unsigned varints, ``(-1, -1)`` as all-ones u64 like ``commands.message_id``);
``tests/protocol/pulsar/test_fast_frames.py`` compares them with the protobuf encoding byte for byte.
Field numbers are read from the generated descriptors, not written down twice.
"""

from __future__ import annotations

import struct

from magnetar.base.limits import PULSAR_FRAME_BYTES_MAX
from magnetar.protocol.pulsar.generated import pulsar_api_pb2 as pb

_U64 = (1 << 64) - 1
_HEADER = struct.Struct(">II")

_LENGTH_DELIMITED = 2
_VARINT = 0


def _tag(message: type, field: str, wire_type: int) -> bytes:
    number = message.DESCRIPTOR.fields_by_name[field].number  # type: ignore[attr-defined]
    return _varint((number << 3) | wire_type)


def _varint(value: int) -> bytes:
    """Unsigned LEB128 of ``0 <= value < 2**64`` (protobuf's varint)."""
    if value < 0x80:
        return bytes((value,))
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


_SMALL = tuple(bytes((i,)) for i in range(0x80))

_TYPE_SEND_RECEIPT = (_tag(pb.BaseCommand, "type", _VARINT) + _varint(pb.BaseCommand.SEND_RECEIPT)
                      + _tag(pb.BaseCommand, "send_receipt", _LENGTH_DELIMITED))
_R_PRODUCER = _tag(pb.CommandSendReceipt, "producer_id", _VARINT)
_R_SEQUENCE = _tag(pb.CommandSendReceipt, "sequence_id", _VARINT)
_R_MESSAGE_ID = _tag(pb.CommandSendReceipt, "message_id", _LENGTH_DELIMITED)
_R_HIGHEST = _tag(pb.CommandSendReceipt, "highest_sequence_id", _VARINT)
_ID_LEDGER = _tag(pb.MessageIdData, "ledgerId", _VARINT)
_ID_ENTRY = _tag(pb.MessageIdData, "entryId", _VARINT)


def _v(value: int) -> bytes:
    return _SMALL[value] if 0 <= value < 0x80 else _varint(value & _U64)


def encode_send_receipt(producer_id: int, sequence_id: int, ledger_id: int, entry_id: int,
                        highest_sequence_id: int | None = None) -> bytes:
    """The whole SEND_RECEIPT frame (size, command size, command) for these values: the bytes
    ``encode_command(commands.send_receipt(...))`` gives."""
    message_id = _ID_LEDGER + _v(ledger_id) + _ID_ENTRY + _v(entry_id)
    body = (_R_PRODUCER + _v(producer_id) + _R_SEQUENCE + _v(sequence_id)
            + _R_MESSAGE_ID + _SMALL[len(message_id)] + message_id)
    if highest_sequence_id is not None:
        body += _R_HIGHEST + _v(highest_sequence_id)
    command = _TYPE_SEND_RECEIPT + _v(len(body)) + body
    size = len(command)
    if size + 8 > PULSAR_FRAME_BYTES_MAX:  # cannot happen for a receipt (< 100 bytes); kept honest
        raise ValueError(f"receipt frame of {size} bytes")
    return _HEADER.pack(4 + size, size) + command
