"""Ledger ids: concurrent callers share one CAS on the counter (issue 22: one CAS per ledger made
concurrent topic creations conflict and retry, ~20 topics/s), ids stay unique and only grow,
also across two allocators (two brokers) on one store."""

from __future__ import annotations

import asyncio

from magnetar.base.errors import BadVersionError
from magnetar.ledger.metadata_ops import LedgerMetadataStore
from tests.ledger.fakes import MemoryVersionedStore


class _CountingStore(MemoryVersionedStore):
    """Counts writes to the counter, and lets another writer move it before the next put."""

    def __init__(self) -> None:
        super().__init__()
        self.counter_writes = 0
        self.interfere = 0  # puts that find the counter moved by someone else first

    async def put(self, path: str, value: bytes, expected_version: int) -> int:
        await asyncio.sleep(0)  # a write takes a loop pass: callers arriving meanwhile queue
        if self.interfere and path.endswith("/idgen"):
            self.interfere -= 1
            current, version = self.nodes[path]
            self.nodes[path] = (str(int(current) + 5).encode(), version + 1)
            raise BadVersionError(path)
        self.counter_writes += 1
        return await super().put(path, value, expected_version)


def test_concurrent_callers_share_one_counter_write_per_batch() -> None:
    async def main() -> tuple[list[int], int]:
        store = _CountingStore()
        ledgers = LedgerMetadataStore(store)
        first = await ledgers.allocate_id()  # creates the counter
        ids = await asyncio.gather(*(ledgers.allocate_id() for _ in range(500)))
        return [first, *ids], store.counter_writes
    ids, writes = asyncio.run(main())
    assert ids == list(range(501))  # unique, in call order
    assert writes == 1  # the 500 waited together: one CAS, not 500 CASes and their conflicts


def test_negative_control_one_at_a_time_is_one_write_each() -> None:
    async def main() -> int:
        store = _CountingStore()
        ledgers = LedgerMetadataStore(store)
        await ledgers.allocate_id()
        for _ in range(10):
            await ledgers.allocate_id()
        return store.counter_writes
    assert asyncio.run(main()) == 10


def test_ids_grow_across_allocators_and_survive_a_conflict() -> None:
    async def main() -> tuple[list[int], list[int]]:
        store = _CountingStore()
        a, b = LedgerMetadataStore(store), LedgerMetadataStore(store)
        await a.allocate_id()
        store.interfere = 1  # another broker moves the counter by 5 before a's next CAS
        from_a = await asyncio.gather(*(a.allocate_id() for _ in range(3)))
        from_b = await asyncio.gather(*(b.allocate_id() for _ in range(3)))
        return list(from_a), list(from_b)
    from_a, from_b = asyncio.run(main())
    assert from_a == [6, 7, 8]  # retried on the moved counter: above what the other reserved
    assert from_b == [9, 10, 11]


def test_a_caller_that_goes_away_leaves_a_gap_not_a_duplicate() -> None:
    async def main() -> list[int]:
        store = _CountingStore()
        ledgers = LedgerMetadataStore(store)
        await ledgers.allocate_id()
        gone = asyncio.ensure_future(ledgers.allocate_id())
        kept = [asyncio.ensure_future(ledgers.allocate_id()) for _ in range(2)]
        await asyncio.sleep(0)  # both queued behind the allocator
        gone.cancel()
        return [*list(await asyncio.gather(*kept)), await ledgers.allocate_id()]
    assert asyncio.run(main()) == [2, 3, 4]
