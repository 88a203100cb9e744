"""The ledger layer's typed view of a ledger's metadata record: quorum sizes, state, last entry,
fragments — and the one transition table of its state.

The stored form is the shared ``magnetar.metadata.records.LedgerMetadata`` (a version byte, then
msgpack); this class is a thin typed view over it (``BookieId`` ensembles, queries, changes) and
converts with ``to_record``/``from_record``; ``encode``/``decode`` go through ``records`` only,
so there is one encoding of ledger metadata in the system.

Invariants (checked on construction and on every change):

* ``E >= Qw >= Qa >= 1``; every fragment's ensemble has exactly E distinct bookies.
* Fragments are sorted by strictly increasing first entry id; the first starts at 0.
* ``last_entry_id`` is ``NO_ENTRY`` unless the state is CLOSED.
* The state only moves forward along ``TRANSITIONS`` (OPEN -> IN_RECOVERY -> CLOSED, or
  OPEN -> CLOSED); same-state updates (ensemble changes, re-replication) are allowed.
  ``metadata_ops.LedgerMetadataStore.cas`` enforces it for every stored change.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from magnetar.base.errors import CorruptDataError, InvalidArgumentError
from magnetar.base.invariant import InvariantViolationError, invariant
from magnetar.base.types import NO_ENTRY, BookieId
from magnetar.ledger.quorum import validate_quorum
from magnetar.metadata import records
from magnetar.metadata.records import LedgerState

__all__ = ["TRANSITIONS", "Fragment", "LedgerMetadata", "LedgerState", "transition_allowed"]


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
    custom: tuple[tuple[str, str], ...] = ()  # the record's ``properties``, sorted by key
    length_bytes: int = 0
    digest_type: str = "CRC32C"
    password: bytes = b""

    def __post_init__(self) -> None:
        object.__setattr__(self, "custom", tuple(sorted(self.custom)))
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

    def to_record(self) -> records.LedgerMetadata:
        return records.LedgerMetadata(
            ledger_id=self.ledger_id,
            ensemble_size=self.ensemble_size,
            write_quorum_size=self.write_quorum_size,
            ack_quorum_size=self.ack_quorum_size,
            state=self.state,
            fragments=[records.Fragment(f.first_entry_id, [str(b) for b in f.ensemble]) for f in self.fragments],
            ctime_ms=self.ctime_ms,
            last_entry_id=self.last_entry_id,
            length_bytes=self.length_bytes,
            properties=dict(self.custom),
            digest_type=self.digest_type,
            password=self.password,
        )

    @classmethod
    def from_record(cls, record: records.LedgerMetadata) -> LedgerMetadata:
        """The view of a stored record; ``CorruptDataError`` if it breaks the ledger's invariants."""
        try:
            return cls(
                ledger_id=record.ledger_id,
                ensemble_size=record.ensemble_size,
                write_quorum_size=record.write_quorum_size,
                ack_quorum_size=record.ack_quorum_size,
                state=record.state,
                last_entry_id=record.last_entry_id,
                fragments=tuple(
                    Fragment(f.first_entry_id, tuple(BookieId.parse(b) for b in f.ensemble)) for f in record.fragments
                ),
                ctime_ms=record.ctime_ms,
                custom=tuple(record.properties.items()),
                length_bytes=record.length_bytes,
                digest_type=record.digest_type,
                password=record.password,
            )
        except (InvalidArgumentError, InvariantViolationError) as exc:
            raise CorruptDataError(f"bad ledger metadata for ledger {record.ledger_id}: {exc}") from exc

    def encode(self) -> bytes:
        return records.encode(self.to_record())

    @classmethod
    def decode(cls, data: bytes) -> LedgerMetadata:
        return cls.from_record(records.decode(records.LedgerMetadata, data))
