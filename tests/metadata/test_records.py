"""Typed records: round trips, golden bytes (one per record), version byte and bad input."""

from __future__ import annotations

import msgspec
import pytest

from magnetar.base.errors import CorruptDataError, InvalidArgumentError
from magnetar.metadata.errors import UnknownRecordVersionError
from magnetar.metadata.records import (
    BatchIndexAck,
    CursorInfo,
    Fragment,
    LedgerInfo,
    LedgerMetadata,
    LedgerState,
    ManagedLedgerInfo,
    PositionRange,
    PositionRecord,
    decode,
    encode,
)

LEDGER = LedgerMetadata(
    ledger_id=7,
    ensemble_size=3,
    write_quorum_size=2,
    ack_quorum_size=2,
    state=LedgerState.CLOSED,
    fragments=[Fragment(0, ["b1:3181", "b2:3181", "b3:3181"]), Fragment(10, ["b1:3181", "b4:3181", "b3:3181"])],
    ctime_ms=1_700_000_000_000,
    last_entry_id=19,
    length_bytes=2048,
    properties={"component": "managed-ledger"},
    password=b"pw",
)
ML_INFO = ManagedLedgerInfo(
    ledgers=[LedgerInfo(3, 10, 1000, 1_700_000_000_000), LedgerInfo(7, 0, 0, 1_700_000_000_500)],
    terminated_position=PositionRecord(7, 19),
    properties={"k": "v"},
)
CURSOR = CursorInfo(
    cursor_ledger_id=12,
    mark_delete=PositionRecord(3, 4),
    individually_deleted=[PositionRange(PositionRecord(3, 5), PositionRecord(3, 7))],
    batch_index_acks=[BatchIndexAck(3, 9, [0b1011])],
    properties={"seq": 42},
    last_active_ms=1_700_000_001_000,
)

# version byte 0x01, then a msgpack map by field name (0x8c: 12 fields, 'ledger_id': 7, ...)
_GOLDEN_LEDGER = (
    "018ca96c65646765725f696407ad656e73656d626c655f73697a6503b177726974655f71756f72756d5f73697a6502af"
    "61636b5f71756f72756d5f73697a6502a57374617465a6434c4f534544a9667261676d656e74739282ae66697273745f"
    "656e7472795f696400a8656e73656d626c6593a762313a33313831a762323a33313831a762333a3331383182ae666972"
    "73745f656e7472795f69640aa8656e73656d626c6593a762313a33313831a762343a33313831a762333a33313831a863"
    "74696d655f6d73cf0000018bcfe56800ad6c6173745f656e7472795f696413ac6c656e6774685f6279746573cd0800aa"
    "70726f7065727469657381a9636f6d706f6e656e74ae6d616e616765642d6c6564676572ab6469676573745f74797065"
    "a6435243333243a870617373776f7264c4027077"
)
_GOLDEN_ML = (
    "0183a76c6564676572739284a96c65646765725f696403ad656e74726965735f636f756e740aaa73697a655f62797465"
    "73cd03e8ac74696d657374616d705f6d73cf0000018bcfe5680084a96c65646765725f696407ad656e74726965735f63"
    "6f756e7400aa73697a655f627974657300ac74696d657374616d705f6d73cf0000018bcfe569f4b37465726d696e6174"
    "65645f706f736974696f6e82a96c65646765725f696407a8656e7472795f696413aa70726f7065727469657381a16ba1"
    "76"
)
_GOLDEN_CURSOR = (
    "0186b0637572736f725f6c65646765725f69640cab6d61726b5f64656c65746582a96c65646765725f696403a8656e74"
    "72795f696404b4696e646976696475616c6c795f64656c657465649182a56c6f77657282a96c65646765725f696403a8"
    "656e7472795f696405a5757070657282a96c65646765725f696403a8656e7472795f696407b062617463685f696e6465"
    "785f61636b739183a96c65646765725f696403a8656e7472795f696409a761636b5f736574910baa70726f7065727469"
    "657381a37365712aae6c6173745f6163746976655f6d73cf0000018bcfe56be8"
)


@pytest.mark.parametrize("record", [LEDGER, ML_INFO, CURSOR], ids=["ledger", "ml", "cursor"])
def test_round_trip(record: object) -> None:
    data = encode(record)  # type: ignore[arg-type]
    assert data[0] == 1
    assert decode(type(record), data) == record  # type: ignore[arg-type]


def test_golden_bytes() -> None:
    # Pinned encodings: a change here breaks every stored record, so it must be a new version.
    assert encode(LEDGER).hex() == _GOLDEN_LEDGER
    assert _GOLDEN_LEDGER.startswith("018c" + "a9" + b"ledger_id".hex() + "07")
    assert encode(ML_INFO).hex() == _GOLDEN_ML
    assert encode(CURSOR).hex() == _GOLDEN_CURSOR


def test_unknown_version_and_corrupt_bytes_are_typed_errors() -> None:
    data = encode(CURSOR)
    with pytest.raises(UnknownRecordVersionError) as unknown:
        decode(CursorInfo, bytes([2]) + data[1:])
    assert unknown.value.version == 2 and isinstance(unknown.value, CorruptDataError)
    for bad in (b"", data[:-3], b"\x01not msgpack", encode(ML_INFO)):
        with pytest.raises(CorruptDataError):
            decode(CursorInfo, bad)


def test_invalid_ledger_metadata_is_rejected_on_construction_and_decode() -> None:
    with pytest.raises(InvalidArgumentError):
        LedgerMetadata(1, 3, 2, 3, LedgerState.OPEN, [Fragment(0, ["a:1", "b:1", "c:1"])], 0)  # Qa > Qw
    with pytest.raises(InvalidArgumentError):
        LedgerMetadata(1, 3, 2, 2, LedgerState.OPEN, [Fragment(0, ["a:1", "b:1"])], 0)  # short ensemble
    with pytest.raises(InvalidArgumentError):
        LedgerMetadata(
            1, 2, 2, 1, LedgerState.OPEN, [Fragment(0, ["a:1", "b:1"]), Fragment(0, ["a:1", "c:1"])], 0
        )
    raw = msgspec.msgpack.encode(msgspec.structs.asdict(LEDGER) | {"ack_quorum_size": 9})
    with pytest.raises(CorruptDataError):
        decode(LedgerMetadata, b"\x01" + raw)
