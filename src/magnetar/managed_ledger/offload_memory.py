"""``MemoryOffloader``: the in-memory reference ``LedgerOffloader`` (simulator and unit tests).

It keeps what the lakehouse driver keeps, in dictionaries: the files of every attempt
(``files[(managed ledger, ledger id, uid)]`` = the stored entries) and each table's manifest
(``manifest[managed ledger][ledger id]`` = the uid it lists), with the same idempotence and the
same orphan rules, so the offload protocol can be checked without a disk or a network.
"""

from __future__ import annotations

from collections.abc import Mapping

from magnetar.managed_ledger.offload import (
    EntryChunks,
    LedgerLocation,
    OffloadError,
    OffloadSchema,
    WrittenLedger,
)


class MemoryOffloader:
    driver_name = "memory"

    def __init__(self) -> None:
        self.files: dict[tuple[str, int, str], dict[int, bytes]] = {}
        self.manifest: dict[str, dict[int, str]] = {}
        self.schemas: dict[tuple[str, int, str], int] = {}
        self.reads_count = 0
        #: Failure drill: the next ``write_ledger`` raises ``OffloadError``.
        self.fail_next_write = False
        self._attempts = 0

    def new_attempt_id(self) -> str:
        self._attempts += 1
        return f"{self._attempts:032x}"

    async def write_ledger(self, location: LedgerLocation, chunks: EntryChunks,
                           schema: OffloadSchema | None) -> WrittenLedger:
        if self.fail_next_write:
            self.fail_next_write = False
            raise OffloadError("injected: the object store refused the write")
        stored: dict[int, bytes] = {}
        key = (location.managed_ledger, location.ledger_id, location.uid)
        self.files[key] = stored  # visible while being written, as a real file is
        async for chunk in chunks:
            for entry_id, data in chunk:
                stored[entry_id] = bytes(data)
        self.schemas[key] = schema.version if schema is not None else -1
        size = sum(len(d) for d in stored.values())
        return WrittenLedger(location, (location.uid,), size, len(stored), len(stored))

    async def commit_manifest(self, written: WrittenLedger, schema: OffloadSchema | None) -> None:
        location = written.location
        self.manifest.setdefault(location.managed_ledger, {})[location.ledger_id] = location.uid

    async def read_entries(self, location: LedgerLocation, first: int, last: int) -> list[bytes]:
        stored = self.files.get((location.managed_ledger, location.ledger_id, location.uid))
        if stored is None:
            raise OffloadError(f"no offloaded ledger {location}")
        self.reads_count += 1
        try:
            return [stored[e] for e in range(first, last + 1)]
        except KeyError as error:
            raise OffloadError(f"offloaded ledger {location.ledger_id} lacks entry {error}") from None

    async def delete_ledger(self, managed_ledger: str, ledger_id: int) -> None:
        for key in [k for k in self.files if k[0] == managed_ledger and k[1] == ledger_id]:
            del self.files[key]
        self.manifest.get(managed_ledger, {}).pop(ledger_id, None)

    async def collect_orphans(self, managed_ledger: str, keep: Mapping[int, str]) -> list[str]:
        doomed = [k for k in self.files if k[0] == managed_ledger and keep.get(k[1]) != k[2]]
        for key in doomed:
            del self.files[key]
            listed = self.manifest.get(managed_ledger, {})
            if listed.get(key[1]) == key[2]:
                del listed[key[1]]
        return [f"{k[1]}-{k[2]}" for k in doomed]

    def attempts_of(self, managed_ledger: str) -> dict[int, list[str]]:
        """Ledger id -> uids with files (a test's view of the store)."""
        out: dict[int, list[str]] = {}
        for name, ledger_id, uid in sorted(self.files):
            if name == managed_ledger:
                out.setdefault(ledger_id, []).append(uid)
        return out


__all__ = ["MemoryOffloader"]
