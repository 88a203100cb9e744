"""The per-message values that became plain ``__slots__`` classes (issue 22, session 13) keep the
value semantics the frozen dataclasses had: equal when their fields are, unequal when one field
differs, the dataclass-style repr, hashable where the fields are, and no attribute outside the
declared ones."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from magnetar.protocol.bookie.codec import AddRequest, AddResponse, EncodedEntry, Status
from magnetar.protocol.pulsar import (
    AckCommand,
    AckReceived,
    CorruptSend,
    FlowReceived,
    SendCommand,
    SendReceived,
    pb,
)
from magnetar.protocol.pulsar.frames import Frame, MessagePayload

_VIEW = memoryview(b"payload")


def _payload(checksum: int | None = 7) -> MessagePayload:
    return MessagePayload(pb.MessageMetadata(producer_name="p", sequence_id=1, publish_time=2), _VIEW, _VIEW,
                          checksum, None)


def _entry(digest_delta: int = 0) -> EncodedEntry:
    built = EncodedEntry.build(3, 4, 2, b"data")
    return EncodedEntry(built.ledger_id, built.entry_id, built.lac, built.digest ^ digest_delta, built.raw)


CASES = [
    (lambda: _payload(), lambda: _payload(8), "MessagePayload(metadata="),
    (lambda: Frame(pb.BaseCommand(type=pb.BaseCommand.PING), None, 10),
     lambda: Frame(pb.BaseCommand(type=pb.BaseCommand.PING), None, 11), "Frame(command="),
    (lambda: SendReceived(SendCommand(1, 2), _payload()), lambda: SendReceived(SendCommand(1, 3), _payload()),
     "SendReceived(command=SendCommand(producer_id=1, sequence_id=2"),
    (lambda: CorruptSend(SendCommand(1, 2)), lambda: CorruptSend(SendCommand(2, 2)), "CorruptSend(command="),
    (lambda: FlowReceived(1, 100), lambda: FlowReceived(1, 99), "FlowReceived(consumer_id=1, permits=100)"),
    (lambda: AckReceived(AckCommand(1, False, (), None), b"x"), lambda: AckReceived(AckCommand(1, True, (), None), b"x"),
     "AckReceived(ack=AckCommand("),
    (lambda: _entry(), lambda: _entry(1), "EncodedEntry(ledger_id=3, entry_id=4, lac=2, digest="),
    (lambda: AddRequest(1, _entry(), b"k"), lambda: AddRequest(1, _entry(), b"k", True),
     "AddRequest(request_id=1, entry=EncodedEntry("),
    (lambda: AddResponse(1, Status.OK, 3, 4), lambda: AddResponse(1, Status.FENCED, 3, 4),
     "AddResponse(request_id=1, status=<Status.OK: 0>, ledger_id=3, entry_id=4)"),
]


@pytest.mark.parametrize(("make", "make_other", "repr_start"), CASES)
def test_equal_by_fields_unequal_when_one_differs(make: Callable[[], object], make_other: Callable[[], object],
                                                   repr_start: str) -> None:
    one, same, other = make(), make(), make_other()
    assert one is not same and one == same
    assert one != other  # negative control: one field differs
    assert one != object()
    assert repr(one).startswith(repr_start)
    with pytest.raises((AttributeError, TypeError)):
        one.not_a_field = 1  # type: ignore[attr-defined]


def test_hashable_where_the_fields_are() -> None:
    assert len({FlowReceived(1, 2), FlowReceived(1, 2), FlowReceived(1, 3)}) == 2
    assert len({_entry(), _entry(), _entry(1)}) == 2
    assert len({AddResponse(1, Status.OK, 3, 4), AddResponse(1, Status.OK, 3, 4)}) == 1


def test_a_built_entry_is_digest_checked_and_a_parsed_one_is_checked_once() -> None:
    built = EncodedEntry.build(3, 4, 2, b"data")
    assert built.digest_ok()
    parsed = EncodedEntry.parse(built.raw)
    assert parsed == built and parsed.digest_ok()
    forged = _entry(1)
    assert not forged.digest_ok() and not forged.digest_ok()  # the outcome is remembered, still False
