"""Hot frames encoded without building protobuf objects (issue 22).

A SEND_RECEIPT goes out once per unbatched message, a MESSAGE once per dispatched entry; building
``BaseCommand`` + ``CommandSendReceipt`` / ``CommandMessage`` + ``MessageIdData`` and serializing
them cost more than the rest of their path. The bytes here are exactly what protobuf writes for
the same values (fields in field-number order, unsigned varints, ``(-1, -1)`` as all-ones u64 like
``commands.message_id``, negative ``int32``/``int64`` as ten-byte two's complement varints,
repeated scalars unpacked as proto2 writes them); ``tests/protocol/pulsar/test_fast_frames.py``
compares them with the protobuf encoding byte for byte (hypothesis over the field ranges). A value
protobuf would refuse (out of its field's range) raises ``ValueError`` here too. Field numbers are
read from the generated descriptors, not written down twice.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Final

from magnetar.base.limits import PULSAR_FRAME_BYTES_MAX
from magnetar.protocol.pulsar.errors import FrameTooLargeError
from magnetar.protocol.pulsar.generated import pulsar_api_pb2 as pb

# ``Final``: compiled (mypyc), a module constant is then a static C value instead of a lookup in
# the module's globals on every use.
_U64: Final = (1 << 64) - 1
_U32: Final = (1 << 32) - 1
_I32_MIN: Final = -(1 << 31)
_I32_MAX: Final = (1 << 31) - 1
_I64_MIN: Final = -(1 << 63)
_I64_MAX: Final = (1 << 63) - 1
_HEADER: Final = struct.Struct(">II")
#: Below this a varint's bytes, packed into one int, fit a machine word (7 bytes, 56 bits).
_PACKED_BELOW: Final = 1 << 49

_LENGTH_DELIMITED: Final = 2
_VARINT: Final = 0

_SMALL: Final = tuple(bytes((i,)) for i in range(0x80))


def _tag(message: type, field: str, wire_type: int) -> bytes:
    number = message.DESCRIPTOR.fields_by_name[field].number  # type: ignore[attr-defined]
    return _varint((number << 3) | wire_type)


def _varint(value: int) -> bytes:
    """Unsigned LEB128 of ``0 <= value < 2**64`` (protobuf's varint). Below 2**49 the bytes are
    packed into one int and converted once (compiled: ~65 ns against ~250 for a bytearray)."""
    if value < 0x80:
        return _SMALL[value]
    if value < _PACKED_BELOW:
        packed = 0
        shift = 0
        while value >= 0x80:
            packed |= ((value & 0x7F) | 0x80) << shift
            value >>= 7
            shift += 8
        packed |= value << shift
        return packed.to_bytes((shift >> 3) + 1, "little")
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


_TYPE_SEND_RECEIPT: Final = (_tag(pb.BaseCommand, "type", _VARINT) + _varint(pb.BaseCommand.SEND_RECEIPT)
                             + _tag(pb.BaseCommand, "send_receipt", _LENGTH_DELIMITED))
_R_PRODUCER: Final = _tag(pb.CommandSendReceipt, "producer_id", _VARINT)
_R_SEQUENCE: Final = _tag(pb.CommandSendReceipt, "sequence_id", _VARINT)
_R_MESSAGE_ID: Final = _tag(pb.CommandSendReceipt, "message_id", _LENGTH_DELIMITED)
_R_HIGHEST: Final = _tag(pb.CommandSendReceipt, "highest_sequence_id", _VARINT)
_ID_LEDGER: Final = _tag(pb.MessageIdData, "ledgerId", _VARINT)
_ID_ENTRY: Final = _tag(pb.MessageIdData, "entryId", _VARINT)
#: A small frame's size fields (``_HEADER.pack(4 + size, size)``) by its command's size: a receipt
#: is < 100 bytes, and ``struct``'s ``pack`` was ~40% of its encoding (a method call and the
#: format's conversions per receipt; issue 22, the broker's part of a lone SEND).
_SMALL_HEADERS: Final = tuple(_HEADER.pack(4 + size, size) for size in range(0x100))


def _v(value: int) -> bytes:
    """The varint of a u64 field's value; a negative one as its two's complement (``-1`` as all
    ones, as ``commands.message_id`` writes it)."""
    if value < 0:
        value &= _U64
    return _varint(value)


def encode_send_receipt(producer_id: int, sequence_id: int, ledger_id: int, entry_id: int,
                        highest_sequence_id: int | None = None) -> bytes:
    """The whole SEND_RECEIPT frame (size, command size, command) for these values: the bytes
    ``encode_command(commands.send_receipt(...))`` gives.

    Once per unbatched message: each value's varint made once and every part joined once (as
    ``encode_message_header`` does), not a ``bytes`` per concatenation (~15 objects)."""
    producer = _v(producer_id)
    sequence = _v(sequence_id)
    ledger = _v(ledger_id)
    entry = _v(entry_id)
    id_size = 2 + len(ledger) + len(entry)  # at most 22: its length is one byte
    body_size = 4 + len(producer) + len(sequence) + id_size
    if highest_sequence_id is None:
        highest_tag, highest = b"", b""
    else:
        highest_tag, highest = _R_HIGHEST, _v(highest_sequence_id)
        body_size += 1 + len(highest)
    body_length = _varint(body_size)
    size = len(_TYPE_SEND_RECEIPT) + len(body_length) + body_size
    if size + 8 > PULSAR_FRAME_BYTES_MAX:  # cannot happen for a receipt (< 100 bytes); kept honest
        raise ValueError(f"receipt frame of {size} bytes")
    header = _SMALL_HEADERS[size] if size < 0x100 else _HEADER.pack(4 + size, size)
    return b"".join((header, _TYPE_SEND_RECEIPT, body_length, _R_PRODUCER, producer,
                     _R_SEQUENCE, sequence, _R_MESSAGE_ID, _SMALL[id_size], _ID_LEDGER, ledger, _ID_ENTRY, entry,
                     highest_tag, highest))


_TYPE_MESSAGE: Final = (_tag(pb.BaseCommand, "type", _VARINT) + _varint(pb.BaseCommand.MESSAGE)
                        + _tag(pb.BaseCommand, "message", _LENGTH_DELIMITED))
_M_CONSUMER: Final = _tag(pb.CommandMessage, "consumer_id", _VARINT)
_M_MESSAGE_ID: Final = _tag(pb.CommandMessage, "message_id", _LENGTH_DELIMITED)
_M_REDELIVERY: Final = _tag(pb.CommandMessage, "redelivery_count", _VARINT)
_M_ACK_SET: Final = _tag(pb.CommandMessage, "ack_set", _VARINT)
_M_EPOCH: Final = _tag(pb.CommandMessage, "consumer_epoch", _VARINT)
_ID_PARTITION: Final = _tag(pb.MessageIdData, "partition", _VARINT)
_ID_BATCH_INDEX: Final = _tag(pb.MessageIdData, "batch_index", _VARINT)
#: ``partition`` -1 (not partitioned), the value on every MESSAGE of a non-partitioned topic.
_PARTITION_NONE: Final = _ID_PARTITION + _varint(_U64)


def _int32(value: int) -> bytes:
    if not _I32_MIN <= value <= _I32_MAX:
        raise ValueError(f"int32 field value {value} out of range")
    return _v(value)


def encode_message_header(consumer_id: int, ledger_id: int, entry_id: int, payload_size: int, *,
                          partition: int | None = -1, redelivery_count: int = 0, ack_set: Sequence[int] = (),
                          batch_index: int | None = None, consumer_epoch: int | None = None) -> bytes:
    """The start of a MESSAGE frame (size, command size, command) whose ``payload_size`` bytes of
    metadata and payload (a stored entry, written after it unchanged) follow: the header
    ``payload_frame_parts(commands.message(consumer_id, commands.message_id(ledger_id, entry_id,
    partition=partition, batch_index=batch_index), redelivery_count, ack_set, consumer_epoch), ...)``
    gives. ``redelivery_count`` is written only when > 0 and ``consumer_epoch`` only when > -1, as
    there. Raises ``FrameTooLargeError`` if the frame would exceed ``PULSAR_FRAME_BYTES_MAX``."""
    if not 0 <= consumer_id <= _U64:
        raise ValueError(f"consumer_id {consumer_id} out of range")
    ledger = _v(ledger_id)
    entry = _v(entry_id)
    if partition == -1:
        id_tail = _PARTITION_NONE
    else:
        id_tail = b"" if partition is None else _ID_PARTITION + _int32(partition)
    if batch_index is not None:
        id_tail += _ID_BATCH_INDEX + _int32(batch_index)
    id_size = 2 + len(ledger) + len(entry) + len(id_tail)  # at most 44: its length is one byte
    extra = b""
    if redelivery_count > 0:
        if redelivery_count > _U32:
            raise ValueError(f"redelivery_count {redelivery_count} out of range")
        extra = _M_REDELIVERY + _varint(redelivery_count)
    if ack_set:
        extra += _ack_set(ack_set)
    if consumer_epoch is not None and consumer_epoch > -1:
        if consumer_epoch > _U64:
            raise ValueError(f"consumer_epoch {consumer_epoch} out of range")
        extra += _M_EPOCH + _varint(consumer_epoch)
    consumer = _varint(consumer_id)
    body_size = 3 + len(consumer) + id_size + len(extra)
    body_length = _varint(body_size)
    command_size = len(_TYPE_MESSAGE) + len(body_length) + body_size
    frame_bytes = 8 + command_size + payload_size
    if frame_bytes > PULSAR_FRAME_BYTES_MAX:
        raise FrameTooLargeError("PULSAR_FRAME_BYTES_MAX", frame_bytes, PULSAR_FRAME_BYTES_MAX)
    return b"".join((_HEADER.pack(frame_bytes - 4, command_size), _TYPE_MESSAGE, body_length,
                     _M_CONSUMER, consumer, _M_MESSAGE_ID, _SMALL[id_size],
                     _ID_LEDGER, ledger, _ID_ENTRY, entry, id_tail, extra))


def _ack_set(words: Sequence[int]) -> bytes:
    """``ack_set`` as proto2 writes a repeated ``int64``: one tag and varint per word."""
    parts: list[bytes] = []
    for word in words:
        if not _I64_MIN <= word <= _I64_MAX:
            raise ValueError(f"int64 field value {word} out of range")
        parts.append(_M_ACK_SET)
        parts.append(_v(word))
    return b"".join(parts)
