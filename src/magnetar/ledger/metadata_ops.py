"""Ledger metadata in the metadata store: create, read, compare-and-set, delete, list, id allocation.

Every change is a compare-and-set against the version the caller read (``BadVersionError`` when
someone else changed it first); nothing here overwrites blindly. Layout under ``root``::

    {root}/idgen              decimal counter: the next ledger id (CAS-advanced)
    {root}/L{ledger id:019d}  the ledger's ``records.LedgerMetadata`` (version byte + msgpack)

The store is reached through ``VersionedStore``, the narrow slice of the metadata API the ledger
client needs; ``metadata_adapter.py`` maps the metadata package's ``MetadataStore`` onto it.
Invariant: a stored record's state only moves along ``ledger_metadata.TRANSITIONS``
(``cas`` refuses anything else before it reaches the store).
"""

from __future__ import annotations

import asyncio
import re
from dataclasses import dataclass
from typing import Protocol

from magnetar.base.errors import AlreadyExistsError, BadVersionError, LimitExceededError, NotFoundError
from magnetar.base.invariant import invariant
from magnetar.base.limits import (
    LEDGER_ID_ALLOC_BATCH_COUNT_MAX,
    LEDGER_ID_ALLOC_RETRY_COUNT_MAX,
    LEDGER_LIST_COUNT_MAX,
)
from magnetar.ledger.ledger_metadata import LedgerMetadata, transition_allowed

DEFAULT_ROOT = "/ledgers"
_PREFIX = "L"
#: A ledger's node name in ``"\n".join(names)`` (ASCII digits only, as ``path`` writes them).
_LEDGER_NAME = re.compile(rf"^{_PREFIX}(\d+)$", re.MULTILINE | re.ASCII)


@dataclass(frozen=True, slots=True)
class Versioned:
    value: bytes
    version: int


class VersionedStore(Protocol):
    async def get(self, path: str) -> Versioned | None: ...

    async def create(self, path: str, value: bytes) -> int:
        """Create ``path``; returns its version; ``AlreadyExistsError`` if present."""

    async def put(self, path: str, value: bytes, expected_version: int) -> int:
        """Replace ``path`` if its version is ``expected_version``; ``BadVersionError`` otherwise."""

    async def delete(self, path: str, expected_version: int) -> None: ...

    async def children(self, path: str) -> list[str]: ...


@dataclass(frozen=True, slots=True)
class VersionedMetadata:
    metadata: LedgerMetadata
    version: int


class LedgerMetadataStore:
    """Ledger metadata records over a ``VersionedStore``, changed only by CAS."""

    def __init__(self, store: VersionedStore, root: str = DEFAULT_ROOT) -> None:
        self._store = store
        self._root = root.rstrip("/")
        self._id_waiters: list[asyncio.Future[int]] = []  # callers of allocate_id, in order
        self._id_allocator: asyncio.Task[None] | None = None  # reserving ids for them, while any wait
        #: The last listing's names and their ids (``list_ids``: only the names new since are parsed).
        self._listed_names: list[str] = []
        self._listed_ids: list[int] = []

    def path(self, ledger_id: int) -> str:
        return f"{self._root}/{_PREFIX}{ledger_id:019d}"

    async def allocate_id(self) -> int:
        """A ledger id never handed out before (CAS on a counter, so ids only grow).

        Concurrent callers share one CAS: it moves the counter past as many ids as callers wait
        and each gets one of them, so creating many ledgers at once (topics created
        concurrently) costs one metadata write per group, not one write and a CAS conflict per
        ledger. No id is kept for later: every id handed out is above every id reserved before it
        (in any process), as with one CAS per id."""
        waiter: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self._id_waiters.append(waiter)
        if self._id_allocator is None:
            self._id_allocator = asyncio.get_running_loop().create_task(self._allocate_waiting())
        return await waiter

    async def _allocate_waiting(self) -> None:
        try:
            while self._id_waiters:
                waiters = self._id_waiters[:LEDGER_ID_ALLOC_BATCH_COUNT_MAX]
                del self._id_waiters[:LEDGER_ID_ALLOC_BATCH_COUNT_MAX]
                try:
                    first = await self._reserve_ids(len(waiters))
                except Exception as error:
                    for waiter in waiters:
                        if not waiter.done():
                            waiter.set_exception(error)
                    continue
                for offset, waiter in enumerate(waiters):
                    if not waiter.done():  # a caller that went away leaves a gap: ids need not be dense
                        waiter.set_result(first + offset)
        finally:
            self._id_allocator = None

    async def _reserve_ids(self, count: int) -> int:
        """Moves the counter past ``count`` ids; returns the first of them."""
        counter = f"{self._root}/idgen"
        for _ in range(LEDGER_ID_ALLOC_RETRY_COUNT_MAX):
            current = await self._store.get(counter)
            try:
                if current is None:
                    await self._store.create(counter, str(count).encode())
                    return 0
                next_id = int(current.value)
                await self._store.put(counter, str(next_id + count).encode(), current.version)
                return next_id
            except (AlreadyExistsError, BadVersionError):
                continue
        raise LimitExceededError("LEDGER_ID_ALLOC_RETRY_COUNT_MAX", LEDGER_ID_ALLOC_RETRY_COUNT_MAX + 1,
                            LEDGER_ID_ALLOC_RETRY_COUNT_MAX)

    async def create(self, metadata: LedgerMetadata) -> VersionedMetadata:
        version = await self._store.create(self.path(metadata.ledger_id), metadata.encode())
        return VersionedMetadata(metadata, version)

    async def read(self, ledger_id: int) -> VersionedMetadata:
        found = await self._store.get(self.path(ledger_id))
        if found is None:
            raise NotFoundError(f"ledger {ledger_id} does not exist")
        metadata = LedgerMetadata.decode(found.value)
        invariant(metadata.ledger_id == ledger_id, f"metadata at {self.path(ledger_id)} names another ledger")
        return VersionedMetadata(metadata, found.version)

    async def cas(self, current: VersionedMetadata, new: LedgerMetadata) -> VersionedMetadata:
        """Replace ``current`` by ``new``; ``BadVersionError`` if the stored record moved on."""
        invariant(new.ledger_id == current.metadata.ledger_id, "CAS must keep the ledger id")
        invariant(
            transition_allowed(current.metadata.state, new.state),
            f"ledger metadata may not go {current.metadata.state} -> {new.state}",
        )
        version = await self._store.put(self.path(new.ledger_id), new.encode(), current.version)
        return VersionedMetadata(new, version)

    async def delete(self, ledger_id: int) -> None:
        current = await self.read(ledger_id)
        await self._store.delete(self.path(ledger_id), current.version)

    async def list_ids(self) -> list[int]:
        """Every ledger id, ascending. One pass over the children's names (a bookie's GC round
        at 100,000 ledgers): one regular-expression scan of the names joined, not a slice, a
        check and a parse per name in Python. The names of the last listing are not parsed
        again: when this one starts with them (no ledger deleted since, new ones after: ids
        grow), only the names after them are; a store's names come sorted, so the comparison
        is one pass in C that stops at the first difference."""
        names = await self._store.children(self._root)
        known = self._listed_names
        if len(names) >= len(known) and names[:len(known)] == known:
            ids = self._listed_ids + _ledger_ids(names[len(known):])
        else:
            ids = _ledger_ids(names)
        ids.sort()  # the names' order is the ids' for the fixed-width names ``path`` makes: one pass
        if len(ids) > LEDGER_LIST_COUNT_MAX:
            raise LimitExceededError("LEDGER_LIST_COUNT_MAX", len(ids), LEDGER_LIST_COUNT_MAX)
        self._listed_names, self._listed_ids = list(names), ids.copy()  # copies: the store's list is not ours
        return ids


def _ledger_ids(names: list[str]) -> list[int]:
    """The ledger ids among ``names`` (other children, ``idgen``, skipped), in their order."""
    return list(map(int, _LEDGER_NAME.findall("\n".join(names))))
