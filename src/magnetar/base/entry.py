"""``Entry``: one entry of a log, as every layer above the bookie wire sees it.

An entry is what one add stored: its ``position`` (ledger id, entry id) and its ``payload``, the
bytes the writer added, unchanged (for a topic: the Pulsar ``headers_and_payload``). The managed
ledger's reads, the broker's log ports, dispatchers, compaction, replication, admin and the Spark
connector all pass this one type. The bookie wire form (``protocol.bookie.codec``) carries the same
entry with its LAC and digest around the payload, and a decode view that avoids a copy; a reader
turns either into an ``Entry`` once it has checked the digest.
"""

from __future__ import annotations

from dataclasses import dataclass

from magnetar.base.types import Position


@dataclass(frozen=True, slots=True)
class Entry:
    position: Position
    payload: bytes

    @property
    def ledger_id(self) -> int:
        return self.position.ledger_id

    @property
    def entry_id(self) -> int:
        return self.position.entry_id

    @property
    def payload_bytes(self) -> int:
        return len(self.payload)
