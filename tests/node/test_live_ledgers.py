"""The bookie GC's source of truth (``node/bookie.py``'s ``metadata_live_ledgers``): one ledger
view per store across rounds, and a new one when a renewed session hands out another store."""

from __future__ import annotations

import asyncio

from magnetar.ledger.metadata_adapter import MetadataStoreAdapter
from magnetar.ledger.metadata_ops import LedgerMetadataStore
from magnetar.metadata.api import MetadataStore
from magnetar.metadata.memory import MemoryMetadataServer
from magnetar.node.bookie import metadata_live_ledgers
from magnetar.runtime.clock import SystemClock


def test_each_round_lists_the_current_stores_ledgers() -> None:
    """Rounds on one store follow its creates and deletes; after the session's store changes,
    the rounds list the new store's ledgers. Negative control (shown): a view built once and
    kept whatever the store lists the first store's ledgers after the switch ([1, 2] for [7])."""
    async def body() -> None:
        first = await MemoryMetadataServer(SystemClock()).connect()
        second = await MemoryMetadataServer(SystemClock()).connect()
        current: list[MetadataStore] = [first]
        live = metadata_live_ledgers(lambda: current[0])
        paths = LedgerMetadataStore(MetadataStoreAdapter(first))
        for ledger_id in (1, 2):
            await first.create(paths.path(ledger_id), b"")
        assert await live() == [1, 2]
        await first.create(paths.path(3), b"")
        await first.delete(paths.path(1))
        assert await live() == [2, 3]
        await second.create(paths.path(7), b"")
        current[0] = second  # a renewed session
        assert await live() == [7]
        current[0] = first
        assert await live() == [2, 3]

    asyncio.run(body())
