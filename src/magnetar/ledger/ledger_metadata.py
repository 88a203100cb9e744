"""A ledger's metadata record: quorum sizes, state, last entry, fragments.

Invariants (checked on construction and on every change):

* ``E >= Qw >= Qa >= 1``; every fragment's ensemble has exactly E distinct bookies.
* Fragments are sorted by strictly increasing first entry id; the first starts at 0.
* ``last_entry_id`` is ``NO_ENTRY`` unless the state is CLOSED.
* The state only moves forward along ``TRANSITIONS`` (OPEN -> IN_RECOVERY -> CLOSED, or
  OPEN -> CLOSED); same-state updates (ensemble changes, re-replication) are allowed.

The record is stored as JSON under the ledger's path and changed only by compare-and-set.
"""

from __future__ import annotations

import enum
import json
from dataclasses import dataclass, replace

from magnetar.base.errors import CorruptData
from magnetar.base.invariant import InvariantViolation, invariant
from magnetar.base.types import NO_ENTRY, BookieId
from magnetar.ledger.quorum import validate_quorum

FORMAT_VERSION = 1


class LedgerState(enum.Enum):
    OPEN = "OPEN"
    IN_RECOVERY = "IN_RECOVERY"
    CLOSED = "CLOSED"


#: The one transition table of ledger metadata: state -> states it may move to (itself included,
#: for fragment updates within a state).
TRANSITIONS: dict[LedgerState, frozenset[LedgerState]] = {
    LedgerState.OPEN: frozenset({LedgerState.OPEN, LedgerState.IN_RECOVERY, LedgerState.CLOSED}),
    LedgerState.IN_RECOVERY: frozenset({LedgerState.IN_RECOVERY, LedgerState.CLOSED}),
    LedgerState.CLOSED: frozenset({LedgerState.CLOSED}),
}


def transition_allowed(old: LedgerState, new: LedgerState) -> bool:
    return new in TRANSITIONS[old]


@dataclass(frozen=True, slots=True)
class Fragment:
    """Entries from ``first_entry_id`` up to the next fragment's first live on ``ensemble``."""

    first_entry_id: int
    ensemble: tuple[BookieId, ...]


@dataclass(frozen=True, slots=True)
class LedgerMetadata:
    ledger_id: int
    ensemble_size: int
    write_quorum_size: int
    ack_quorum_size: int
    state: LedgerState
    last_entry_id: int
    fragments: tuple[Fragment, ...]
    ctime_ms: int = 0
    custom: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        validate_quorum(self.ensemble_size, self.write_quorum_size, self.ack_quorum_size)
        invariant(len(self.fragments) >= 1, "a ledger has at least one fragment")
        invariant(self.fragments[0].first_entry_id == 0, "the first fragment starts at entry 0")
        for before, after in zip(self.fragments, self.fragments[1:], strict=False):
            invariant(before.first_entry_id < after.first_entry_id, "fragments must be ordered")
        for fragment in self.fragments:
            invariant(
                len(fragment.ensemble) == self.ensemble_size == len(set(fragment.ensemble)),
                f"fragment ensemble must be {self.ensemble_size} distinct bookies: {fragment}",
            )
        invariant(
            self.state is LedgerState.CLOSED or self.last_entry_id == NO_ENTRY,
            "only a CLOSED ledger has a last entry",
        )

    # --- queries ---------------------------------------------------------------------------------

    @property
    def last_fragment(self) -> Fragment:
        return self.fragments[-1]

    def fragment_for(self, entry_id: int) -> Fragment:
        """The fragment that holds ``entry_id`` (the last one whose first entry is <= it)."""
        chosen = self.fragments[0]
        for fragment in self.fragments:
            if fragment.first_entry_id <= entry_id:
                chosen = fragment
            else:
                break
        return chosen

    def ensemble_for(self, entry_id: int) -> tuple[BookieId, ...]:
        return self.fragment_for(entry_id).ensemble

    def fragment_end(self, index: int) -> int:
        """Last entry id of fragment ``index`` (-2 meaning "open-ended" for the last of an open ledger)."""
        if index + 1 < len(self.fragments):
            return self.fragments[index + 1].first_entry_id - 1
        return self.last_entry_id if self.state is LedgerState.CLOSED else -2

    def bookies(self) -> frozenset[BookieId]:
        return frozenset(b for f in self.fragments for b in f.ensemble)

    # --- changes (each returns a new record; the caller CASes it) --------------------------------

    def _moved(self, state: LedgerState) -> LedgerMetadata:
        invariant(transition_allowed(self.state, state), f"ledger state may not go {self.state} -> {state}")
        return replace(self, state=state)

    def to_recovery(self) -> LedgerMetadata:
        return self._moved(LedgerState.IN_RECOVERY)

    def to_closed(self, last_entry_id: int) -> LedgerMetadata:
        invariant(last_entry_id >= NO_ENTRY, "last entry id must be >= -1")
        return replace(self._moved(LedgerState.CLOSED), last_entry_id=last_entry_id)

    def with_ensemble(self, first_entry_id: int, ensemble: tuple[BookieId, ...]) -> LedgerMetadata:
        """Start a new last fragment at ``first_entry_id`` (replacing one that starts there)."""
        invariant(
            first_entry_id >= self.last_fragment.first_entry_id,
            "a new fragment cannot start before the current last fragment",
        )
        kept = tuple(f for f in self.fragments if f.first_entry_id < first_entry_id)
        return replace(self, fragments=(*kept, Fragment(first_entry_id, tuple(ensemble))))

    def with_replaced_bookie(self, fragment_index: int, old: BookieId, new: BookieId) -> LedgerMetadata:
        """Re-replication: ``new`` now holds fragment ``fragment_index``'s copies instead of ``old``."""
        fragment = self.fragments[fragment_index]
        ensemble = tuple(new if b == old else b for b in fragment.ensemble)
        fragments = list(self.fragments)
        fragments[fragment_index] = Fragment(fragment.first_entry_id, ensemble)
        return replace(self, fragments=tuple(fragments))

    # --- encoding --------------------------------------------------------------------------------

    def encode(self) -> bytes:
        doc = {
            "format": FORMAT_VERSION,
            "ledger_id": self.ledger_id,
            "E": self.ensemble_size,
            "Qw": self.write_quorum_size,
            "Qa": self.ack_quorum_size,
            "state": self.state.value,
            "last_entry_id": self.last_entry_id,
            "fragments": [[f.first_entry_id, [str(b) for b in f.ensemble]] for f in self.fragments],
            "ctime_ms": self.ctime_ms,
            "custom": [list(kv) for kv in self.custom],
        }
        return json.dumps(doc, separators=(",", ":"), sort_keys=True).encode()

    @classmethod
    def decode(cls, data: bytes) -> LedgerMetadata:
        try:
            doc = json.loads(data)
            if doc["format"] != FORMAT_VERSION:
                raise CorruptData(f"unknown ledger metadata format {doc['format']}")
            return cls(
                ledger_id=int(doc["ledger_id"]),
                ensemble_size=int(doc["E"]),
                write_quorum_size=int(doc["Qw"]),
                ack_quorum_size=int(doc["Qa"]),
                state=LedgerState(doc["state"]),
                last_entry_id=int(doc["last_entry_id"]),
                fragments=tuple(
                    Fragment(int(first), tuple(BookieId.parse(b) for b in ensemble))
                    for first, ensemble in doc["fragments"]
                ),
                ctime_ms=int(doc.get("ctime_ms", 0)),
                custom=tuple((str(k), str(v)) for k, v in doc.get("custom", [])),
            )
        except (KeyError, ValueError, TypeError, InvariantViolation) as exc:
            raise CorruptData(f"bad ledger metadata: {exc}") from exc
