"""Typed metadata records and their one encoding: a version byte, then msgpack (msgspec).

``encode(record) -> bytes`` and ``decode(Type, data) -> record`` are the only way records are
turned into metadata values. Byte 0 is ``RECORD_VERSION`` (1); a value with another version
raises ``UnknownRecordVersionError``, undecodable or invalid content ``CorruptDataError``. Fields are
encoded by name, so a later version can add fields with defaults and still read version-1 data.

Records check their own invariants on construction and on decode (quorum sizes, fragment order,
positions), so a corrupt or hand-edited value is caught at the boundary, not deep in a ledger.
"""

from __future__ import annotations

import enum
from typing import Any, TypeVar

import msgspec

from magnetar.base.errors import CorruptDataError, InvalidArgumentError, LimitExceededError
from magnetar.base.limits import METADATA_RECORD_BYTES_MAX
from magnetar.metadata.errors import UnknownRecordVersionError

__all__ = [
    "RECORD_VERSION",
    "BatchIndexAck",
    "CursorInfo",
    "Fragment",
    "LedgerInfo",
    "LedgerMetadata",
    "LedgerState",
    "ManagedLedgerInfo",
    "OffloadContext",
    "PositionRange",
    "PositionRecord",
    "decode",
    "encode",
]

RECORD_VERSION = 1


class LedgerState(enum.Enum):
    OPEN = "OPEN"
    IN_RECOVERY = "IN_RECOVERY"
    CLOSED = "CLOSED"


class Fragment(msgspec.Struct, frozen=True, forbid_unknown_fields=False):
    """Entries from ``first_entry_id`` on (to the next fragment) are stored on ``ensemble``."""

    first_entry_id: int
    ensemble: list[str]  # bookie ids "host:port", ensemble_size of them, in striping order


class LedgerMetadata(msgspec.Struct, frozen=True):
    ledger_id: int
    ensemble_size: int
    write_quorum_size: int
    ack_quorum_size: int
    state: LedgerState
    fragments: list[Fragment]
    ctime_ms: int
    last_entry_id: int = -1  # -1: no entry (meaningful once CLOSED)
    length_bytes: int = 0
    properties: dict[str, str] = msgspec.field(default_factory=dict)
    digest_type: str = "CRC32C"
    password: bytes = b""

    def __post_init__(self) -> None:
        if self.ledger_id < 0:
            raise InvalidArgumentError(f"ledger_id must be >= 0, got {self.ledger_id}")
        if not 1 <= self.ack_quorum_size <= self.write_quorum_size <= self.ensemble_size:
            raise InvalidArgumentError(
                f"ledger {self.ledger_id}: need 1 <= ack quorum ({self.ack_quorum_size}) <= write quorum "
                f"({self.write_quorum_size}) <= ensemble ({self.ensemble_size})"
            )
        if not self.fragments or self.fragments[0].first_entry_id != 0:
            raise InvalidArgumentError(f"ledger {self.ledger_id}: the first fragment must start at entry 0")
        previous = -1
        for fragment in self.fragments:
            if fragment.first_entry_id <= previous:
                raise InvalidArgumentError(f"ledger {self.ledger_id}: fragments must start at increasing entry ids")
            previous = fragment.first_entry_id
            if len(fragment.ensemble) != self.ensemble_size:
                raise InvalidArgumentError(
                    f"ledger {self.ledger_id}: fragment at {fragment.first_entry_id} has "
                    f"{len(fragment.ensemble)} bookies, ensemble size is {self.ensemble_size}"
                )
        if self.last_entry_id < -1 or self.length_bytes < 0:
            raise InvalidArgumentError(f"ledger {self.ledger_id}: negative last_entry_id or length")


class PositionRecord(msgspec.Struct, frozen=True):
    ledger_id: int
    entry_id: int

    def __post_init__(self) -> None:
        if self.ledger_id < -1 or self.entry_id < -1:
            raise InvalidArgumentError(f"invalid position {self.ledger_id}:{self.entry_id}")


class OffloadContext(msgspec.Struct, frozen=True):
    """Where a sealed ledger lives in the object store (Pulsar's ``OffloadContext``, PIP-17).

    ``uid`` names the attempt whose files hold it; it is recorded only once those files and the
    table manifest are written (``complete``), so a context in metadata is always readable.
    ``bookie_deleted``: the bookies' copy is gone, reads go to the object store only.
    """

    uid: str
    driver: str
    complete: bool = True
    bookie_deleted: bool = False
    timestamp_ms: int = 0  # when the offload completed (the deletion lag counts from here)
    schema_version: int = -1  # the topic's schema version whose fields became columns; -1: none
    size_bytes: int = 0  # bytes in the object store


class LedgerInfo(msgspec.Struct, frozen=True, omit_defaults=True):
    """One ledger of a managed ledger. Defaults are omitted when encoded, so a ledger never
    offloaded is stored byte for byte as before ``offload`` existed (golden bytes)."""

    ledger_id: int
    entries_count: int
    size_bytes: int
    timestamp_ms: int
    offload: OffloadContext | None = None


class ManagedLedgerInfo(msgspec.Struct, frozen=True):
    ledgers: list[LedgerInfo]
    terminated_position: PositionRecord | None = None
    properties: dict[str, str] = msgspec.field(default_factory=dict)

    def __post_init__(self) -> None:
        ids = [ledger.ledger_id for ledger in self.ledgers]
        if ids != sorted(set(ids)):
            raise InvalidArgumentError(f"managed ledger: ledger ids must be strictly increasing, got {ids}")


class PositionRange(msgspec.Struct, frozen=True):
    """Individually deleted entries ``(lower, upper]``: lower exclusive, upper inclusive (as Pulsar)."""

    lower: PositionRecord
    upper: PositionRecord


class BatchIndexAck(msgspec.Struct, frozen=True):
    """Acknowledged indexes of one batch entry, as a bit set in 64-bit words (Pulsar's ack set)."""

    ledger_id: int
    entry_id: int
    ack_set: list[int]


class CursorInfo(msgspec.Struct, frozen=True):
    cursor_ledger_id: int  # -1: no cursor ledger yet (state only in this record)
    mark_delete: PositionRecord
    individually_deleted: list[PositionRange] = msgspec.field(default_factory=list)
    batch_index_acks: list[BatchIndexAck] | None = None
    properties: dict[str, int] = msgspec.field(default_factory=dict)
    last_active_ms: int = 0


Record = LedgerMetadata | ManagedLedgerInfo | CursorInfo
R = TypeVar("R", LedgerMetadata, ManagedLedgerInfo, CursorInfo)

_encoder = msgspec.msgpack.Encoder()
_decoders: dict[type, msgspec.msgpack.Decoder[Any]] = {
    kind: msgspec.msgpack.Decoder(kind) for kind in (LedgerMetadata, ManagedLedgerInfo, CursorInfo)
}


def encode(record: Record) -> bytes:
    """``RECORD_VERSION`` byte + msgpack of ``record``."""
    data = bytes([RECORD_VERSION]) + _encoder.encode(record)
    if len(data) > METADATA_RECORD_BYTES_MAX:
        raise LimitExceededError("METADATA_RECORD_BYTES_MAX", len(data), METADATA_RECORD_BYTES_MAX)
    return data


def decode(kind: type[R], data: bytes) -> R:
    """Decode a value written by ``encode``; typed errors for anything else."""
    name = kind.__name__
    if not data:
        raise CorruptDataError(f"{name}: empty value")
    if data[0] != RECORD_VERSION:
        raise UnknownRecordVersionError(name, data[0])
    try:
        record: R = _decoders[kind].decode(data[1:])
    except (msgspec.DecodeError, InvalidArgumentError) as exc:
        raise CorruptDataError(f"{name}: cannot decode: {exc}") from exc
    return record
