"""The read-only metadata view the connector plans with: a standalone's embedded store read from
another handle while its owner keeps it open (RocksDB secondary), and ZooKeeper-style answers."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from magnetar.base.errors import InvalidArgumentError
from magnetar.metadata.embedded import EmbeddedMetadataServer
from magnetar.runtime.clock import SystemClock
from magnetar.runtime.kv import RocksKeyValueStore
from magnetar.runtime.metadata_view import open_metadata_view


def test_view_reads_an_open_embedded_store_and_never_writes(tmp_path: Path) -> None:
    async def scenario() -> None:
        directory = str(tmp_path / "metadata")
        owner = await (await EmbeddedMetadataServer.open(RocksKeyValueStore(directory), SystemClock())).connect(
            owns_server=True
        )
        try:
            await owner.put("/managed-ledgers/a/b/persistent/t", b"info", -1)
            await owner.put("/managed-ledgers/a/b/persistent/t/cursor", b"c", -1)
            await owner.put("/managed-ledgers/a/b/persistent/u", b"info2", -1)
            view = await open_metadata_view(f"embedded:{directory}")
            try:
                found = await view.get("/managed-ledgers/a/b/persistent/t")
                assert found is not None and found.value == b"info" and found.version == 0
                assert await view.get("/missing") is None
                assert await view.children("/managed-ledgers/a/b/persistent") == ["t", "u"]
                assert await view.children("/") == ["managed-ledgers"]
            finally:
                await view.close()
            await owner.put("/managed-ledgers/a/b/persistent/t", b"info-v1", 0)  # the owner still writes
            later = await open_metadata_view(f"embedded:{directory}")
            try:
                found = await later.get("/managed-ledgers/a/b/persistent/t")
                assert found is not None and (found.value, found.version) == (b"info-v1", 1)
            finally:
                await later.close()
        finally:
            await owner.close()

    asyncio.run(scenario())


def test_view_refuses_memory_and_missing_stores(tmp_path: Path) -> None:
    with pytest.raises(InvalidArgumentError):
        asyncio.run(open_metadata_view("memory:"))
    with pytest.raises(InvalidArgumentError):
        asyncio.run(open_metadata_view(f"embedded:{tmp_path / 'nothing-here'}"))
