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

from dataclasses import dataclass

from magnetar.base.types import Position


@dataclass(frozen=True, slots=True)
class Entry:
    position: Position
    payload: bytes

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
