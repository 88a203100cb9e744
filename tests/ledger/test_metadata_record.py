"""One encoding of ledger metadata: the ledger layer stores the shared ``records.LedgerMetadata``."""

from __future__ import annotations

import pytest

from magnetar.base.errors import CorruptDataError
from magnetar.base.invariant import InvariantViolationError
from magnetar.base.types import BookieId
from magnetar.ledger.ledger_metadata import Fragment, LedgerMetadata, LedgerState
from magnetar.metadata import records

B = tuple(BookieId("b", 3181 + i) for i in range(4))
META = LedgerMetadata(7, 3, 2, 2, LedgerState.OPEN, -1, (Fragment(0, B[:3]),), 5, (("z", "1"), ("a", "2")))


def test_view_round_trips_through_the_shared_record() -> None:
    data = META.encode()
    assert data[0] == records.RECORD_VERSION
    record = records.decode(records.LedgerMetadata, data)
    assert record.properties == {"a": "2", "z": "1"}
    assert record.fragments[0].ensemble == [str(b) for b in B[:3]]
    assert LedgerMetadata.decode(data) == META
    closed = META.with_ensemble(4, (B[0], B[3], B[2])).to_closed(9)
    assert LedgerMetadata.decode(closed.encode()) == closed
    assert LedgerMetadata.from_record(records.decode(records.LedgerMetadata, records.encode(closed.to_record()))) == closed


def test_state_only_moves_forward() -> None:
    closed = META.to_recovery().to_closed(3)
    with pytest.raises(InvariantViolationError):
        closed.to_recovery()
    with pytest.raises(InvariantViolationError):
        META.to_recovery().to_recovery().with_ensemble(0, B[:3]).to_closed(1).to_closed(2)._moved(LedgerState.OPEN)


def test_record_breaking_ledger_invariants_is_corrupt() -> None:
    bad = records.LedgerMetadata(1, 3, 2, 2, LedgerState.OPEN, [records.Fragment(0, ["a:1", "a:1", "b:1"])], 0)
    with pytest.raises(CorruptDataError):
        LedgerMetadata.decode(records.encode(bad))
    with pytest.raises(CorruptDataError):
        LedgerMetadata.decode(b"\x01garbage")
