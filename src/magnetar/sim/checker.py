"""A Jepsen-queue-style checker for a ``History`` (pure: no I/O, no clock).

Shared by the real-process runs (``magnetar chaos``) and the whole-stack simulation
(``magnetar sim --scenario cluster``).

What it reports (``AnomalyKind``), and which invariant of ``docs/faults.md`` it checks:

* ``lost``        a value with an ``ok`` send is not stored (not in the first drain) — invariant 1
* ``moved``       a value is stored, but not at the position its SEND_RECEIPT named — invariant 1
* ``duplicated``  a value is stored more than once — invariant 8; a violation only for a producer
                  with deduplication on (without it the client's resend after a reconnect may
                  legitimately store a message twice)
* ``reordered``   the ok sends of one producer are stored in another order than sent — invariant 8
* ``unexpected``  a value was stored or received that was never sent, or whose only sends
                  failed definitely (``error``)
* ``divergent``   one position maps to two values for some reader — invariant 3
* ``unstable``    two drains of one topic disagree (an undecided message must be decided the same
                  way for every reader) — invariant 4
* ``undelivered`` a subscription never received a value that is stored — invariant 9 (at least
                  once delivery); checked only when the history's meta says the consumers were given
                  their catch-up time (``meta["consumers_waited"] is True``)

A send ``unknown`` (timeout, broken connection) may or may not be stored; either is fine. Only
the first drain defines "stored"; the others are compared to it.
"""

from __future__ import annotations

import enum
from collections import Counter, defaultdict
from dataclasses import dataclass, field

from magnetar.sim.history import History, MessageId, Op, OpType, Outcome, parse_value

PRIMARY_DRAIN = "drain-1"


class AnomalyKind(enum.Enum):
    LOST = "lost"
    MOVED = "moved"
    DUPLICATED = "duplicated"
    REORDERED = "reordered"
    UNEXPECTED = "unexpected"
    DIVERGENT = "divergent"
    UNSTABLE = "unstable"
    UNDELIVERED = "undelivered"


@dataclass(frozen=True, slots=True)
class Anomaly:
    kind: AnomalyKind
    topic: str
    value: str
    detail: str
    violation: bool = True


@dataclass
class CheckResult:
    anomalies: list[Anomaly] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)

    @property
    def violations(self) -> list[Anomaly]:
        return [a for a in self.anomalies if a.violation]

    @property
    def valid(self) -> bool:
        return not self.violations

    def count(self, kind: AnomalyKind, *, violations_only: bool = False) -> int:
        return sum(1 for a in self.anomalies if a.kind is kind and (a.violation or not violations_only))

    def to_dict(self) -> dict[str, object]:
        return {
            "valid": self.valid,
            "counts": dict(self.counts),
            "anomalies": {
                kind.value: {"total": self.count(kind), "violations": self.count(kind, violations_only=True)}
                for kind in AnomalyKind
            },
            "examples": [
                {"kind": a.kind.value, "topic": a.topic, "value": a.value, "detail": a.detail, "violation": a.violation}
                for a in self.anomalies[:50]
            ],
        }


def check(history: History) -> CheckResult:
    result = CheckResult()
    ops = history.ops
    sends = [op for op in ops if op.type is OpType.SEND]
    drains: dict[str, dict[str, list[Op]]] = defaultdict(lambda: defaultdict(list))  # topic -> process -> ops
    for op in ops:
        if op.type is OpType.DRAIN:
            drains[op.topic][op.process].append(op)
    stored = {topic: passes.get(PRIMARY_DRAIN, []) for topic, passes in drains.items()}

    _count_outcomes(result, history, sends, stored)
    _check_lost_and_moved(result, history, sends, stored)
    _check_duplicated(result, history, stored)
    _check_reordered(result, history, sends, stored)
    _check_unexpected(result, sends, ops)
    _check_divergent(result, ops)
    _check_unstable(result, drains)
    if history.meta.get("consumers_waited") is True:
        subscriptions = {(str(t), str(s)) for t, s in history.meta.get("subscriptions", [])}
        _check_undelivered(result, ops, stored, subscriptions)
    return result


def _count_outcomes(result: CheckResult, history: History, sends: list[Op], stored: dict[str, list[Op]]) -> None:
    outcomes = Counter(op.outcome for op in sends)
    final: dict[str, Outcome] = {}
    for op in sends:
        if final.get(op.value) is not Outcome.OK:
            final[op.value] = op.outcome
    stored_values = {op.value for ops in stored.values() for op in ops}
    result.counts.update({
        "send_attempts": len(sends),
        "send_ok": outcomes[Outcome.OK],
        "send_unknown": outcomes[Outcome.UNKNOWN],
        "send_error": outcomes[Outcome.ERROR],
        "values_sent": len(final),
        "values_ok": sum(1 for o in final.values() if o is Outcome.OK),
        "values_unknown_stored": sum(1 for v, o in final.items() if o is Outcome.UNKNOWN and v in stored_values),
        "values_unknown_not_stored": sum(
            1 for v, o in final.items() if o is Outcome.UNKNOWN and v not in stored_values
        ),
        "stored": sum(len(ops) for ops in stored.values()),
        "received": sum(1 for op in history.ops if op.type is OpType.RECEIVE),
        "acked": sum(1 for op in history.ops if op.type is OpType.ACK),
        "faults": len(history.faults),
    })


def _check_lost_and_moved(
    result: CheckResult, history: History, sends: list[Op], stored: dict[str, list[Op]]
) -> None:
    positions: dict[tuple[str, str], set[tuple[int, int]]] = defaultdict(set)
    for topic, ops in stored.items():
        for op in ops:
            if op.message_id is not None:
                positions[(topic, op.value)].add(op.message_id[:2])
    stored_values = {(topic, op.value) for topic, ops in stored.items() for op in ops}
    reported: set[str] = set()
    for op in sends:
        if op.outcome is not Outcome.OK or op.value in reported:
            continue
        key = (op.topic, op.value)
        if key not in stored_values:
            reported.add(op.value)
            result.anomalies.append(Anomaly(
                AnomalyKind.LOST, op.topic, op.value, f"acknowledged as {op.message_id}, not stored"))
            continue
        receipt = op.message_id
        if receipt is None or receipt[0] < 0 or receipt[1] < 0 or not positions.get(key):
            continue  # no position to compare (a deduplicated send is receipted with -1:-1)
        if receipt[:2] not in positions[key]:
            reported.add(op.value)
            result.anomalies.append(Anomaly(
                AnomalyKind.MOVED, op.topic, op.value,
                f"acknowledged at {receipt[:2]}, stored at {sorted(positions[key])}"))


def _check_duplicated(result: CheckResult, history: History, stored: dict[str, list[Op]]) -> None:
    for topic, ops in stored.items():
        counts = Counter(op.value for op in ops)
        for value, count in counts.items():
            if count < 2:
                continue
            info = history.producers.get(parse_value(value)[0])
            dedup = info is not None and info.dedup
            result.anomalies.append(Anomaly(
                AnomalyKind.DUPLICATED, topic, value,
                f"stored {count} times (deduplication {'on' if dedup else 'off'})", violation=dedup))


def _check_reordered(result: CheckResult, history: History, sends: list[Op], stored: dict[str, list[Op]]) -> None:
    ok_values = {op.value for op in sends if op.outcome is Outcome.OK}
    for topic, ops in stored.items():
        highest: dict[str, int] = {}
        seen: set[str] = set()
        for op in ops:
            if op.value in seen or op.value not in ok_values:
                continue  # a later copy of a duplicate is a duplicate, not a reordering
            seen.add(op.value)
            producer, seq = parse_value(op.value)
            previous = highest.get(producer, -1)
            if seq < previous:
                result.anomalies.append(Anomaly(
                    AnomalyKind.REORDERED, topic, op.value,
                    f"stored after {producer}:{previous} although sent before it"))
            else:
                highest[producer] = seq


def _check_unexpected(result: CheckResult, sends: list[Op], ops: list[Op]) -> None:
    best: dict[str, Outcome] = {}
    for op in sends:
        if best.get(op.value) in (Outcome.OK, Outcome.UNKNOWN):
            continue
        best[op.value] = op.outcome
    reported: set[tuple[str, str]] = set()
    for op in ops:
        if op.type not in (OpType.DRAIN, OpType.RECEIVE) or (op.topic, op.value) in reported:
            continue
        outcome = best.get(op.value)
        if outcome is None or outcome is Outcome.ERROR:
            reported.add((op.topic, op.value))
            why = "never sent" if outcome is None else "its send failed definitely"
            result.anomalies.append(Anomaly(
                AnomalyKind.UNEXPECTED, op.topic, op.value, f"{op.type.value} by {op.process}: {why}"))


def _check_divergent(result: CheckResult, ops: list[Op]) -> None:
    seen: dict[tuple[str, MessageId], Op] = {}
    reported: set[tuple[str, MessageId]] = set()
    for op in ops:
        if op.type not in (OpType.DRAIN, OpType.RECEIVE) or op.message_id is None:
            continue
        key = (op.topic, op.message_id)
        first = seen.setdefault(key, op)
        if first.value != op.value and key not in reported:
            reported.add(key)
            result.anomalies.append(Anomaly(
                AnomalyKind.DIVERGENT, op.topic, op.value,
                f"position {op.message_id}: {first.process} read {first.value!r}, {op.process} read {op.value!r}"))


def _check_unstable(result: CheckResult, drains: dict[str, dict[str, list[Op]]]) -> None:
    for topic, passes in drains.items():
        primary = passes.get(PRIMARY_DRAIN)
        if primary is None:
            continue
        expected = [(op.message_id, op.value) for op in primary]
        for process, ops in passes.items():
            if process == PRIMARY_DRAIN:
                continue
            got = [(op.message_id, op.value) for op in ops]
            if got != expected:
                at = next((i for i, (a, b) in enumerate(zip(got, expected, strict=False)) if a != b),
                          min(len(got), len(expected)))
                value = got[at][1] if at < len(got) else expected[at][1]
                result.anomalies.append(Anomaly(
                    AnomalyKind.UNSTABLE, topic, value,
                    f"{process} read {len(got)} messages, {PRIMARY_DRAIN} {len(expected)}; first difference at {at}"))


def _check_undelivered(
    result: CheckResult, ops: list[Op], stored: dict[str, list[Op]], subscriptions: set[tuple[str, str]]
) -> None:
    received: dict[tuple[str, str], set[str]] = {key: set() for key in subscriptions}
    for op in ops:
        if op.type is OpType.RECEIVE:
            received.setdefault((op.topic, op.subscription), set()).add(op.value)
    for (topic, subscription), values in sorted(received.items()):
        missing = [op.value for op in stored.get(topic, []) if op.value not in values]
        for value in dict.fromkeys(missing):
            result.anomalies.append(Anomaly(
                AnomalyKind.UNDELIVERED, topic, value, f"stored but never delivered to subscription {subscription}"))
