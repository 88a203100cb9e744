"""``VersionedStore`` over the metadata package's ``MetadataStore`` (memory, embedded, ZooKeeper).

Translates the store's errors at the boundary: ``NodeExistsError`` -> ``AlreadyExistsError`` on create,
every lost compare-and-set -> ``BadVersionError``, a missing node on delete -> ``NotFoundError``.
"""

from __future__ import annotations

from magnetar.base.errors import AlreadyExistsError, BadVersionError, NotFoundError
from magnetar.ledger.metadata_ops import Versioned
from magnetar.metadata.api import MetadataStore
from magnetar.metadata.errors import NodeExistsError, NoNodeError


class MetadataStoreAdapter:
    def __init__(self, store: MetadataStore) -> None:
        self._store = store

    async def get(self, path: str) -> Versioned | None:
        found = await self._store.get(path)
        return None if found is None else Versioned(found.value, found.version)

    async def create(self, path: str, value: bytes) -> int:
        try:
            return await self._store.put(path, value, -1)
        except NodeExistsError as exc:
            raise AlreadyExistsError(str(exc)) from exc

    async def put(self, path: str, value: bytes, expected_version: int) -> int:
        try:
            return await self._store.put(path, value, expected_version)
        except NoNodeError as exc:
            raise BadVersionError(f"{path} was deleted: {exc}") from exc

    async def delete(self, path: str, expected_version: int) -> None:
        try:
            await self._store.delete(path, expected_version)
        except NoNodeError as exc:
            raise NotFoundError(f"{path} does not exist") from exc

    async def children(self, path: str) -> list[str]:
        return await self._store.children(path)
