"""A bookie whose metadata session ends registers again on a new session (no restart).

Without it, a bookie paused past its ZooKeeper session (or cut off from ZooKeeper) stays out of
``/ledgers/available`` for good, and writers never pick it again.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from magnetar.metadata.api import MetadataStore
from magnetar.metadata.memory import MemoryMetadataServer
from magnetar.runtime.bookie import AVAILABLE_PATH, start_bookie
from magnetar.runtime.clock import SystemClock
from magnetar.runtime.network import TcpNetwork
from magnetar.storage import BookieConfig


async def _registered_after_expiry(tmp_path: Path, *, renew: bool) -> tuple[list[str], list[str]]:
    clock = SystemClock()
    server = MemoryMetadataServer(clock)
    first = await server.connect()
    opened: list[MetadataStore] = []

    async def reopen() -> MetadataStore:
        store = await server.connect()
        opened.append(store)
        return store

    observer = await server.connect()
    config = BookieConfig(host="127.0.0.1", port=0, data_dir=str(tmp_path / "b"), gc_interval_ms=0,
                          disk_free_bytes_min=0)
    running = await start_bookie(config, store=first, clock=clock, network=TcpNetwork(),
                                 reopen_store=reopen if renew else None)
    try:
        before = await observer.children(AVAILABLE_PATH)
        await first.expire()  # type: ignore[attr-defined]
        after: list[str] = []
        for _ in range(60):  # the registration loop checks once a second
            await asyncio.sleep(0.05)
            after = await observer.children(AVAILABLE_PATH)
            if after:
                break
        if renew:
            for _ in range(60):
                if after:
                    break
                await asyncio.sleep(0.05)
                after = await observer.children(AVAILABLE_PATH)
            assert running.metadata_store is opened[-1] and running.metadata_store.session.alive
        return before, after
    finally:
        await running.stop()
        for store in (*opened, observer):
            await store.close()


@pytest.mark.timeout(30)
def test_bookie_registers_again_on_a_new_session_after_its_session_expired(tmp_path: Path) -> None:
    before, after = asyncio.run(_registered_after_expiry(tmp_path, renew=True))
    assert len(before) == 1 and after == before


@pytest.mark.timeout(30)
def test_negative_control_without_renewal_the_bookie_stays_unregistered(tmp_path: Path) -> None:
    before, after = asyncio.run(_registered_after_expiry(tmp_path, renew=False))
    assert len(before) == 1 and after == []
