"""The history checker on hand-made histories: a clean one passes, and each anomaly kind is found
(one negative control per kind)."""

from __future__ import annotations

from magnetar.sim.checker import AnomalyKind, check
from magnetar.sim.history import FaultEvent, History, Op, OpType, Outcome, parse_value, value_of

T = "persistent://public/default/t"


def _history(dedup: bool = True) -> History:
    history = History()
    history.add_producer("p", T, dedup=dedup)
    return history


def _send(h: History, seq: int, outcome: Outcome = Outcome.OK, entry: int | None = None) -> None:
    mid = (1, entry if entry is not None else seq, -1) if outcome is Outcome.OK else None
    h.record(Op("producer-p", OpType.SEND, T, value_of("p", seq), outcome, mid))


def _drain(h: History, seqs: list[int], process: str = "drain-1", entries: list[int] | None = None) -> None:
    for i, seq in enumerate(seqs):
        entry = entries[i] if entries is not None else seq
        h.record(Op(process, OpType.DRAIN, T, value_of("p", seq), message_id=(1, entry, -1)))


def _clean() -> History:
    h = _history()
    for seq in range(5):
        _send(h, seq)
    _send(h, 5, Outcome.UNKNOWN)
    _send(h, 6, Outcome.UNKNOWN)
    _drain(h, [0, 1, 2, 3, 4, 5])
    _drain(h, [0, 1, 2, 3, 4, 5], process="drain-2")
    return h


def kinds(h: History) -> set[AnomalyKind]:
    return {a.kind for a in check(h).violations}


def test_clean_history_is_valid_and_counts_unknowns() -> None:
    result = check(_clean())
    assert result.valid, result.anomalies
    assert result.counts["send_ok"] == 5
    assert result.counts["values_unknown_stored"] == 1
    assert result.counts["values_unknown_not_stored"] == 1
    assert result.counts["stored"] == 6


def test_lost_ok_send() -> None:
    h = _history()
    for seq in range(3):
        _send(h, seq)
    _drain(h, [0, 2])
    result = check(h)
    assert kinds(h) == {AnomalyKind.LOST}
    assert [a.value for a in result.violations] == ["p:1"]


def test_duplicate_is_a_violation_only_with_dedup() -> None:
    for dedup, expect in ((True, {AnomalyKind.DUPLICATED}), (False, set())):
        h = _history(dedup)
        _send(h, 0)
        _send(h, 1)
        _drain(h, [0, 1, 1], entries=[0, 1, 2])
        assert kinds(h) == expect
        assert check(h).count(AnomalyKind.DUPLICATED) == 1


def test_reordered_per_producer() -> None:
    h = _history()
    for seq in range(3):
        _send(h, seq)
    _drain(h, [0, 2, 1], entries=[0, 1, 2])
    assert AnomalyKind.REORDERED in kinds(h)


def test_resend_of_an_earlier_message_is_a_duplicate_not_a_reordering() -> None:
    h = _history(dedup=False)
    for seq in range(3):
        _send(h, seq)
    _drain(h, [0, 1, 2, 1, 2], entries=[0, 1, 2, 3, 4])
    assert kinds(h) == set()


def test_unexpected_value_and_definitely_failed_send() -> None:
    h = _history()
    _send(h, 0)
    _send(h, 1, Outcome.ERROR)
    _drain(h, [0, 1])
    h.record(Op("consumer-shared-0", OpType.RECEIVE, T, "ghost:7", message_id=(1, 9, -1), subscription="s"))
    unexpected = [a.value for a in check(h).violations if a.kind is AnomalyKind.UNEXPECTED]
    assert sorted(unexpected) == ["ghost:7", "p:1"]


def test_moved_when_stored_elsewhere_than_acknowledged() -> None:
    h = _history()
    _send(h, 0, entry=0)
    _send(h, 1, entry=1)
    _drain(h, [0, 1], entries=[0, 5])
    assert kinds(h) == {AnomalyKind.MOVED}


def test_divergent_position_between_readers() -> None:
    h = _clean()
    h.record(Op("consumer-exclusive-0", OpType.RECEIVE, T, value_of("p", 3), message_id=(1, 2, -1), subscription="s"))
    assert AnomalyKind.DIVERGENT in kinds(h)


def test_unstable_when_drains_disagree() -> None:
    h = _history()
    _send(h, 0)
    _send(h, 1, Outcome.UNKNOWN)
    _drain(h, [0, 1])
    _drain(h, [0], process="drain-2")
    assert kinds(h) == {AnomalyKind.UNSTABLE}


def test_undelivered_only_when_consumers_waited() -> None:
    h = _clean()
    h.meta["subscriptions"] = [[T, "shared"]]
    for seq in (0, 1, 2, 3):
        h.record(Op("consumer-shared-0", OpType.RECEIVE, T, value_of("p", seq), message_id=(1, seq, -1),
                    subscription="shared"))
    assert kinds(h) == set()
    h.meta["consumers_waited"] = True
    missing = sorted(a.value for a in check(h).violations if a.kind is AnomalyKind.UNDELIVERED)
    assert missing == ["p:4", "p:5"]


def test_history_round_trips_through_json() -> None:
    h = _clean()
    h.record_fault(FaultEvent(5, "arm-hang-kill", "bookie-1", "bookie.after_fsync_before_reply", "hit=3"))
    h.meta["scenario"] = "x"
    again = History.from_json(h.to_json())
    assert again.ops == h.ops
    assert again.producers == h.producers
    assert again.faults == h.faults
    assert again.meta == h.meta
    assert check(again).to_dict() == check(h).to_dict()


def test_an_op_is_written_with_every_field_of_its_dataclass_in_order() -> None:
    import dataclasses

    op = Op("c", OpType.RECEIVE, T, "p:1", Outcome.OK, (1, 2, 3), 7, subscription="s", error="e")
    assert list(op.to_dict()) == [f.name for f in dataclasses.fields(Op)]
    assert Op.from_dict(op.to_dict()) == op


def test_parse_value() -> None:
    assert parse_value("a:b:12") == ("a:b", 12)
    assert parse_value("junk") == ("", -1)
    assert parse_value(":3") == ("", -1)
