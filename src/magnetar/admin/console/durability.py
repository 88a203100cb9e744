"""The durability view of a topic: each ledger of its log, where its entries live, how safe they are.

Built only from what the cluster already records: the managed ledger's list of ledgers (ids, entry
counts, sizes), each ledger's metadata record (ensembles per fragment, E/Qw/Qa, state, last
entry), the bookie registrations (``/ledgers/available``, writable or read-only) and the
AutoRecovery under-replication markers (``/ledgers/underreplicated``).

For each fragment (the entries ``first..last`` written to one ensemble) the view names the bookies
and which of them are *missing*: no longer registered, or named lost by an under-replication
marker. An entry is *not at full replication* when its write set (``ledger.quorum.write_set``)
holds a missing bookie: fewer than Qw copies of it are reachable. Counting uses the striping's
period (the write set of entry ``e`` depends only on ``e mod E``), so a fragment of any length costs
O(E * Qw).

State shown: ``open`` (being written; its LAC is the writer's), ``recovering`` (IN_RECOVERY: a new
owner is fencing it and deciding its end), ``closed``, and ``fenced`` for the open ledger of a
managed ledger that another owner fenced.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

from magnetar.base.types import BookieId
from magnetar.ledger.ledger_metadata import LedgerMetadata, LedgerState
from magnetar.ledger.quorum import write_set


@dataclass(frozen=True, slots=True)
class LedgerFacts:
    """What the managed ledger knows of one of its ledgers."""

    ledger_id: int
    entries_count: int
    size_bytes: int
    timestamp_ms: int


def short_entries(first: int, last: int, ensemble_size: int, write_quorum_size: int,
                  missing_indexes: Collection[int]) -> int:
    """How many entries of ``first..last`` have a missing bookie (by ensemble index) in their write set."""
    if last < first or not missing_indexes:
        return 0
    hit = [bool(set(write_set(first + k, ensemble_size, write_quorum_size)) & set(missing_indexes))
           for k in range(ensemble_size)]
    total = last - first + 1
    full, rest = divmod(total, ensemble_size)
    return full * sum(hit) + sum(hit[:rest])


def ledger_view(facts: LedgerFacts, metadata: LedgerMetadata | None, *, registered: frozenset[BookieId],
                read_only: frozenset[BookieId], lost: frozenset[BookieId], lac: int | None,
                fenced: bool) -> dict[str, Any]:
    """One ledger as the console shows it (JSON-ready). ``lac``: the writer's LAC for the open
    ledger of this broker, else None (the metadata's last entry for a closed ledger)."""
    out: dict[str, Any] = {"ledgerId": facts.ledger_id, "entries": facts.entries_count, "size": facts.size_bytes,
                           "createdMs": facts.timestamp_ms, "storedOn": "bookies", "offloaded": False}
    if metadata is None:
        out.update(state="unknown", fragments=[], underReplicatedEntries=0,
                   note="no metadata record (deleted, or the metadata store did not answer)")
        return out
    state = {LedgerState.OPEN: "open", LedgerState.IN_RECOVERY: "recovering", LedgerState.CLOSED: "closed"}[
        metadata.state]
    if state == "open" and fenced:
        state = "fenced"
    last = metadata.last_entry_id if metadata.state is LedgerState.CLOSED else (
        lac if lac is not None else facts.entries_count - 1)
    fragments = []
    short_total = 0
    for i, fragment in enumerate(metadata.fragments):
        end = metadata.fragments[i + 1].first_entry_id - 1 if i + 1 < len(metadata.fragments) else last
        missing = [j for j, b in enumerate(fragment.ensemble) if b not in registered or b in lost]
        short = short_entries(fragment.first_entry_id, end, metadata.ensemble_size, metadata.write_quorum_size,
                              missing)
        short_total += short
        fragments.append({
            "firstEntry": fragment.first_entry_id, "lastEntry": end,
            "bookies": [{"id": str(b), "missing": j in missing, "readOnly": b in read_only}
                        for j, b in enumerate(fragment.ensemble)],
            "underReplicatedEntries": short,
        })
    out.update(state=state, ensembleSize=metadata.ensemble_size, writeQuorum=metadata.write_quorum_size,
               ackQuorum=metadata.ack_quorum_size, lac=last, lastEntryId=metadata.last_entry_id,
               fragments=fragments, underReplicatedEntries=short_total,
               markedUnderReplicated=bool(lost))
    return out
