"""``Entry``: one entry of a log, as every layer above the bookie wire sees it.

An entry is what one add stored: its ``position`` (ledger id, entry id) and its ``payload``, the
bytes the writer added, unchanged (for a topic: the Pulsar ``headers_and_payload``). The managed
ledger's reads, the broker's log ports, dispatchers, compaction, replication, admin and the Spark
connector all pass this one type; it is the only class named ``Entry`` (a tooling test checks).
Below the ledger client the same entry travels and is stored encoded: ``protocol.bookie.codec``'s
``EncodedEntry`` (its LAC and digest around the payload) and ``EncodedEntryView`` (its no-copy
decode view); a reader turns either into an ``Entry`` once it has checked the digest.
"""

from __future__ import annotations

from typing import Final

from magnetar.base.types import Position


class Entry:
    """A plain class with ``__slots__`` and a hand-written ``__init__``, not a frozen dataclass
    (compiled, a frozen dataclass's ``__init__`` runs interpreted; one entry is made per message
    read, see ``Position``). Immutable: ``Final`` fields, read-only attributes when compiled."""

    __slots__ = ("payload", "position")

    def __init__(self, position: Position, payload: bytes) -> None:
        self.position: Final = position
        self.payload: Final = payload

    def __repr__(self) -> str:
        return f"Entry(position={self.position!r}, payload={self.payload!r})"

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not Entry:
            return NotImplemented
        return self.position == other.position and self.payload == other.payload

    def __hash__(self) -> int:
        return hash((self.position, self.payload))

    def __reduce__(self) -> tuple[type[Entry], tuple[Position, bytes]]:
        return (Entry, (self.position, self.payload))  # by value, as ``Position``

    @property
    def ledger_id(self) -> int:
        return self.position.ledger_id

    @property
    def entry_id(self) -> int:
        return self.position.entry_id

    @property
    def payload_bytes(self) -> int:
        return len(self.payload)
