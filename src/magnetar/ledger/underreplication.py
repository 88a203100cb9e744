"""Under-replication markers and the registered-bookie view AutoRecovery works from.

Layout in the metadata store (BookKeeper's, adapted)::

    /ledgers/underreplicated/<ledger id>        persistent marker: JSON {"lost": [...], "marked_ms": T}
    /ledgers/autorecovery/locks/<ledger id>     ephemeral: the replication worker working on it
    /ledgers/autorecovery/auditor               ephemeral: the elected auditor (``MetadataLock``)

A marker names the bookies the auditor found lost for that ledger and when it first marked it
(wall-clock ms of the auditor's ``Clock``: the open-ledger grace period counts from there).
Invariants: a marker is only created, extended (CAS adding lost bookies) or deleted at the
version the deleter read; its lost set never shrinks while it exists.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from magnetar.base.errors import CorruptDataError, InvalidArgumentError, LimitExceededError
from magnetar.base.limits import AUTORECOVERY_MARKERS_SCAN_COUNT_MAX, LEDGER_METADATA_CAS_RETRY_COUNT_MAX
from magnetar.base.types import BookieId
from magnetar.ledger.directory import MetadataBookieDirectory
from magnetar.metadata.api import MetadataStore
from magnetar.metadata.errors import BadVersionError, NodeExistsError, NoNodeError
from magnetar.metadata.lock import MetadataLock

UNDERREPLICATED_PATH = "/ledgers/underreplicated"
AUTORECOVERY_PATH = "/ledgers/autorecovery"
AUDITOR_PATH = f"{AUTORECOVERY_PATH}/auditor"
LOCKS_PATH = f"{AUTORECOVERY_PATH}/locks"


@dataclass(frozen=True, slots=True)
class Marker:
    lost: frozenset[BookieId]
    marked_ms: int

    def encode(self) -> bytes:
        return json.dumps({"lost": sorted(str(b) for b in self.lost), "marked_ms": self.marked_ms}).encode()

    @classmethod
    def decode(cls, data: bytes) -> Marker:
        try:
            raw = json.loads(data)
            return cls(frozenset(BookieId.parse(b) for b in raw["lost"]), int(raw["marked_ms"]))
        except (ValueError, KeyError, TypeError, InvalidArgumentError) as exc:
            raise CorruptDataError(f"bad under-replication marker: {exc}") from exc


@dataclass(frozen=True, slots=True)
class VersionedMarker:
    marker: Marker
    version: int


class UnderReplicationMarkers:
    """The markers under ``/ledgers/underreplicated`` and their worker locks."""

    def __init__(self, store: MetadataStore) -> None:
        self._store = store

    @staticmethod
    def path(ledger_id: int) -> str:
        return f"{UNDERREPLICATED_PATH}/{ledger_id}"

    async def mark(self, ledger_id: int, lost: frozenset[BookieId], now_ms: int) -> bool:
        """Create the marker, or add ``lost`` to an existing one; True if anything changed."""
        for _ in range(LEDGER_METADATA_CAS_RETRY_COUNT_MAX):
            found = await self.get(ledger_id)
            try:
                if found is None:
                    await self._store.put(self.path(ledger_id), Marker(lost, now_ms).encode(), -1)
                    return True
                if lost <= found.marker.lost:
                    return False
                merged = Marker(found.marker.lost | lost, found.marker.marked_ms)
                await self._store.put(self.path(ledger_id), merged.encode(), found.version)
                return True
            except (NodeExistsError, BadVersionError, NoNodeError):
                continue  # a worker deleted it or another auditor changed it: read again
        raise LimitExceededError("LEDGER_METADATA_CAS_RETRY_COUNT_MAX", LEDGER_METADATA_CAS_RETRY_COUNT_MAX + 1,
                            LEDGER_METADATA_CAS_RETRY_COUNT_MAX)

    async def get(self, ledger_id: int) -> VersionedMarker | None:
        found = await self._store.get(self.path(ledger_id))
        return None if found is None else VersionedMarker(Marker.decode(found.value), found.version)

    async def remove(self, ledger_id: int, version: int) -> bool:
        """Delete the marker if still at ``version``; False if it changed or is gone."""
        try:
            await self._store.delete(self.path(ledger_id), version)
        except (BadVersionError, NoNodeError):
            return False
        return True

    async def ledger_ids(self) -> list[int]:
        names = await self._store.children(UNDERREPLICATED_PATH)
        ids = sorted(int(n) for n in names if n.isdigit())
        if len(ids) > AUTORECOVERY_MARKERS_SCAN_COUNT_MAX:
            # Oldest-numbered first; the rest wait for the next round rather than growing a table.
            ids = ids[:AUTORECOVERY_MARKERS_SCAN_COUNT_MAX]
        return ids

    def lock(self, ledger_id: int, owner: str) -> MetadataLock:
        return MetadataLock(self._store, f"{LOCKS_PATH}/{ledger_id}", owner.encode())


async def registered_bookies(store: MetadataStore) -> frozenset[BookieId]:
    """Bookies registered writable or read-only: the ones whose copies still count."""
    directory = MetadataBookieDirectory(store)
    writable = await directory.available_bookies()
    read_only = await directory.read_only_bookies()
    return frozenset(writable) | frozenset(read_only)
