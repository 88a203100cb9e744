"""Conversions between wire ``MessageIdData`` and ``Position`` (earliest/latest sentinels included)."""

from __future__ import annotations

from magnetar.base.types import EARLIEST, Position
from magnetar.protocol.pulsar import pb
from magnetar.protocol.pulsar.commands import EARLIEST_ID_U64, LATEST_ID_U64


def _signed(value: int) -> int:
    return -1 if value == EARLIEST_ID_U64 else value


def is_earliest(msg_id: pb.MessageIdData) -> bool:
    return msg_id.ledgerId == EARLIEST_ID_U64 and msg_id.entryId == EARLIEST_ID_U64


def is_latest(msg_id: pb.MessageIdData) -> bool:
    return msg_id.ledgerId == LATEST_ID_U64 and msg_id.entryId == LATEST_ID_U64


def to_position(msg_id: pb.MessageIdData) -> Position:
    return position_of(msg_id.ledgerId, msg_id.entryId)


def position_of(ledger_id: int, entry_id: int) -> Position:
    """The position of a wire message id's unsigned ledger and entry ids."""
    if ledger_id == EARLIEST_ID_U64 and entry_id == EARLIEST_ID_U64:
        return EARLIEST
    return Position(_signed(ledger_id), _signed(entry_id))


def before(position: Position) -> Position:
    """The mark-delete position that makes ``position`` the next one read."""
    if position == EARLIEST or position.entry_id < 0:
        return EARLIEST if position.ledger_id < 0 else Position(position.ledger_id, -1)
    return Position(position.ledger_id, position.entry_id - 1)
