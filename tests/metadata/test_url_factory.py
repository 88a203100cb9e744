"""``open_metadata_store``: every URL scheme builds a working client; bad URLs are typed errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from magnetar.base.errors import InvalidArgumentError
from magnetar.metadata import GetResult, MemoryMetadataStore, SessionState
from magnetar.metadata.zookeeper import ZooKeeperMetadataStore, parse_zk_url
from magnetar.runtime.metadata import open_metadata_store
from tests.metadata.conftest import run


def test_memory_url() -> None:
    async def body() -> None:
        store = await open_metadata_store("memory:")
        assert isinstance(store, MemoryMetadataStore)
        await store.put("/x", b"1", -1)
        await store.close()
        assert store.session.state is SessionState.CLOSED

    run(body)


def test_embedded_url_survives_reopen(tmp_path: Path) -> None:
    async def body() -> None:
        url = f"embedded:{tmp_path / 'md'}"
        store = await open_metadata_store(url)
        await store.put("/x", b"1", -1)
        await store.close()
        again = await open_metadata_store(url)  # the first closed RocksDB, so this can open it
        assert await again.get("/x") == GetResult(b"1", 0)
        await again.close()

    run(body)


@pytest.mark.integration
def test_zk_url(zookeeper_url: str) -> None:
    async def body() -> None:
        store = await open_metadata_store(f"{zookeeper_url}/factory", session_timeout_ms=4_000)
        assert isinstance(store, ZooKeeperMetadataStore)
        await store.put("/x", b"1", -1)
        assert await store.get("/x") == GetResult(b"1", 0)
        await store.delete("/x")
        await store.close()

    run(body)


@pytest.mark.parametrize("url", ["", "mysql://x", "embedded:", "zk://", "zk://host/x", "zk://h:p/x", "zk://h:1/bad//root"])
def test_bad_urls_are_rejected(url: str) -> None:
    async def body() -> None:
        await open_metadata_store(url)

    with pytest.raises(InvalidArgumentError):
        run(body)


def test_zk_url_parsing() -> None:
    assert parse_zk_url("zk://127.0.0.1:2181/magnetar") == ("127.0.0.1:2181", "/magnetar")
    assert parse_zk_url("zk://a:1,b:2/x/y") == ("a:1,b:2", "/x/y")
    assert parse_zk_url("zk://a:1") == ("a:1", "")
