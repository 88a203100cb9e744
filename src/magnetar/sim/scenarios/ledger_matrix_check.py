"""Checker of the ``ledger-matrix`` scenario: docs/faults.md invariants 1-7 over the collected evidence.

Kept apart from the workload: it sees only what clients observed (acks, metadata states) and
what bookies hold after a final power cut (copies, negatives, fence probes), never the
scenario's internals. ``check`` returns a ``Verdict``; each violation names its invariant:

1. every acknowledged entry reads back (each reading, same id, same bytes)
2. the closed ledger's last entry covers every acknowledged id
3. no id maps to two payloads, on any bookie or in any reading (up to the closed end)
4. the ledger is CLOSED and two independent readings of it agree and cover ``0..last``
5. metadata states were only seen moving forward (OPEN -> IN_RECOVERY -> CLOSED)
6. fencing is durable: after the power cut, every write set of the last ensemble still has
   ``Qw - Qa + 1`` bookies that refuse a normal add (so no writer could complete one)
7. no false "no such entry": no acknowledged entry has ``Qw - Qa + 1`` negatives in its write set
"""

from __future__ import annotations

from dataclasses import dataclass, field

from magnetar.base.types import BookieId
from magnetar.ledger.ledger_metadata import TRANSITIONS, LedgerMetadata, LedgerState
from magnetar.ledger.quorum import entry_missing, fencing_covered, write_set
from magnetar.sim.scenarios.base import Verdict

VIOLATIONS_SHOWN_MAX = 20


@dataclass
class Evidence:
    ensemble_size: int
    write_quorum_size: int
    ack_quorum_size: int
    ledger_id: int | None = None
    first_ensemble: tuple[BookieId, ...] = ()
    acked: dict[int, bytes] = field(default_factory=dict)
    ack_times_ns: dict[int, int] = field(default_factory=dict)
    states: list[str] = field(default_factory=list)
    closed: LedgerMetadata | None = None
    readings: list[dict[int, bytes]] = field(default_factory=list)
    copies: dict[int, dict[BookieId, bytes]] = field(default_factory=dict)
    negatives: dict[int, set[BookieId]] = field(default_factory=dict)
    probe_fenced: set[int] = field(default_factory=set)
    probe_accepted: set[int] = field(default_factory=set)
    writer_outcome: str = ""
    sim_failures: list[str] = field(default_factory=list)
    collected: bool = False

    def record_ack(self, entry_id: int, payload: bytes, at_ns: int) -> None:
        self.acked[entry_id] = payload
        self.ack_times_ns[entry_id] = at_ns

    def record_state(self, state: str) -> None:
        if not self.states or self.states[-1] != state:
            self.states.append(state)


def check(evidence: Evidence) -> Verdict:
    problems: list[str] = [f"run: {line}" for line in evidence.sim_failures]
    closed = evidence.closed
    if not evidence.collected or closed is None:
        problems.append("run: evidence was not collected (the run did not finish)")
        return _verdict(evidence, problems)
    acked = evidence.acked
    e, w, a = evidence.ensemble_size, evidence.write_quorum_size, evidence.ack_quorum_size
    # 1 and 3 (readings)
    for number, reading in enumerate(evidence.readings):
        for entry_id, payload in sorted(acked.items()):
            got = reading.get(entry_id)
            if got is None:
                problems.append(f"I1: acknowledged entry {entry_id} not readable (reading {number})")
            elif got != payload:
                problems.append(f"I3: entry {entry_id} reads other bytes than acknowledged (reading {number})")
    # 2
    if acked and closed.last_entry_id < max(acked):
        problems.append(f"I2: closed at {closed.last_entry_id}, entry {max(acked)} was acknowledged")
    # 3 (bookies)
    for entry_id, by_bookie in sorted(evidence.copies.items()):
        if entry_id > closed.last_entry_id:
            continue
        if len(set(by_bookie.values())) > 1:
            problems.append(f"I3: entry {entry_id} has {len(set(by_bookie.values()))} different payloads on bookies")
        if entry_id in acked and any(p != acked[entry_id] for p in by_bookie.values()):
            problems.append(f"I3: a bookie holds other bytes for acknowledged entry {entry_id}")
    # 4
    if closed.state is not LedgerState.CLOSED:
        problems.append(f"I4: ledger is {closed.state.value} after recovery")
    for number, reading in enumerate(evidence.readings):
        if sorted(reading) != list(range(closed.last_entry_id + 1)):
            problems.append(f"I4: reading {number} has {len(reading)} entries, the ledger ends at {closed.last_entry_id}")
    for first, second in zip(evidence.readings, evidence.readings[1:], strict=False):
        if first != second:
            problems.append("I4: two readings of the closed ledger differ")
    # 5
    for before, after in zip(evidence.states, evidence.states[1:], strict=False):
        if LedgerState(after) not in TRANSITIONS[LedgerState(before)]:
            problems.append(f"I5: metadata went {before} -> {after}")
    # 6 (only a ledger that recovery closed was fenced; a writer's own close fences nothing)
    if evidence.writer_outcome != "closed" and not fencing_covered(evidence.probe_fenced, e, w, a):
        problems.append(
            f"I6: after the power cut only bookies {sorted(evidence.probe_fenced)} of the last ensemble refuse "
            "normal adds; some write set could still complete one"
        )
    # 7
    for entry_id in sorted(acked):
        if entry_id > closed.last_entry_id:
            continue
        fragment = closed.fragment_for(entry_id)
        members = write_set(entry_id, e, w)
        negative = {i for i in members if fragment.ensemble[i] in evidence.negatives.get(entry_id, set())}
        if entry_missing(negative, entry_id, e, w, a):
            problems.append(f"I7: acknowledged entry {entry_id} has {len(negative)} 'no such entry' answers")
    return _verdict(evidence, problems)


def _verdict(evidence: Evidence, problems: list[str]) -> Verdict:
    closed = evidence.closed
    end = closed.last_entry_id if closed is not None else "?"
    summary = (
        f"ledger {evidence.ledger_id} ({evidence.ensemble_size},{evidence.write_quorum_size},"
        f"{evidence.ack_quorum_size}): {len(evidence.acked)} acked, closed at {end}, writer {evidence.writer_outcome}"
    )
    return Verdict(not problems, summary, tuple(problems[:VIOLATIONS_SHOWN_MAX]))
