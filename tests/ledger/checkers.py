"""Invariant checkers of docs/faults.md for one ledger, separate from any workload.

``check_ledger`` returns a list of violations (empty = all held):
I1 acknowledged => durable (readable at the same id with the same bytes),
I2 the closed last entry covers every acknowledged id,
I3 no divergence (no id maps to two payloads on any bookie or reader),
I5 metadata is CLOSED (only forward moves are enforced by the store itself),
I6 no bookie accepted a normal add after it was fenced,
I4 stable outcome: two independent readings of the closed ledger agree.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping

from magnetar.ledger.ledger_metadata import LedgerMetadata, LedgerState
from magnetar.protocol.bookie.codec import Entry
from tests.ledger.fakes import FakeBookie


def check_ledger(
    ledger_id: int,
    acked: Mapping[int, bytes],
    closed: LedgerMetadata,
    readings: Iterable[Mapping[int, bytes]],
    bookies: Iterable[FakeBookie],
) -> list[str]:
    problems: list[str] = []
    if closed.state is not LedgerState.CLOSED:
        problems.append(f"I5: ledger {ledger_id} is {closed.state.value}, not CLOSED")
    if acked and closed.last_entry_id < max(acked):
        problems.append(f"I2: closed at {closed.last_entry_id} but entry {max(acked)} was acknowledged")
    readings = list(readings)
    for reading in readings:
        for entry_id, payload in acked.items():
            got = reading.get(entry_id)
            if got is None:
                problems.append(f"I1: acknowledged entry {entry_id} is not readable")
            elif got != payload:
                problems.append(f"I1/I3: entry {entry_id} reads {got!r}, acknowledged {payload!r}")
        if sorted(reading) != list(range(closed.last_entry_id + 1)):
            problems.append(f"I4: reading has ids {sorted(reading)[:5]}... not 0..{closed.last_entry_id}")
    for first, second in itertools.pairwise(readings):
        if first != second:
            problems.append("I4: two readings of the closed ledger differ")
    copies: dict[int, set[bytes]] = {}
    for bookie in bookies:
        for (lid, eid), entry in (*bookie.durable.items(), *bookie.unsynced.items()):
            if lid == ledger_id:
                copies.setdefault(eid, set()).add(entry.payload)
        problems += [f"I6: {bookie.bookie_id} accepted normal add {k} after fencing"
                     for k in bookie.normal_adds_after_fence if k[0] == ledger_id]
    for eid, payloads in copies.items():
        if len(payloads) > 1 and eid <= closed.last_entry_id:
            problems.append(f"I3: entry {eid} has {len(payloads)} different payloads on bookies")
    return problems


def payloads(entries: Iterable[Entry]) -> dict[int, bytes]:
    return {e.entry_id: e.payload for e in entries}
