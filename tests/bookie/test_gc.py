"""Garbage collection wiring: ledgers whose metadata is gone are deleted, their entry logs removed.

Simulated (virtual clock, SimDisk): one round by hand, the periodic loop driven by the clock, a
failing metadata listing (nothing deleted), and the snapshot order that keeps a ledger created
during the listing (with a negative control: a listing older than the snapshot deletes it).
Real: ``start_bookie`` with a memory metadata store and the ledger layer's metadata layout.
"""

from __future__ import annotations

import asyncio
from collections.abc import Collection
from pathlib import Path

import pytest

from magnetar.base.errors import OperationTimeoutError
from magnetar.ledger.bookie_client import BookieClient
from magnetar.ledger.metadata_adapter import MetadataStoreAdapter
from magnetar.ledger.metadata_ops import LedgerMetadataStore
from magnetar.metadata.memory import MemoryMetadataServer
from magnetar.protocol.bookie import Status
from magnetar.runtime import SystemClock, TcpNetwork
from magnetar.runtime.bookie import start_bookie
from magnetar.storage import BookieConfig, LedgerStatus
from magnetar.storage.entry_log import log_ids
from tests.bookie.test_storage import KEY, SMALL, Node, entry, sim

BIG = b"g" * 50_000  # a few of these fill a 256 KiB entry log


class Metadata:
    """The live-ledger listing the bookie's GC asks for, under the test's control."""

    def __init__(self, live: set[int]) -> None:
        self.live = live
        self.calls = 0
        self.fail = False

    async def __call__(self) -> Collection[int]:
        self.calls += 1
        if self.fail:
            raise OperationTimeoutError("metadata store unreachable")
        return set(self.live)


async def _fill(bookie: object, ledger: int, count: int) -> None:
    for i in range(count):
        assert await bookie.add(entry(ledger, i, BIG), KEY) is Status.OK  # type: ignore[attr-defined]


def test_round_deletes_ledgers_without_metadata_and_their_logs() -> None:
    async def scenario() -> None:
        metadata = Metadata({11})
        node = Node()
        bookie = await node.boot_with(metadata)
        await _fill(bookie, 10, 12)
        await bookie.checkpoint()
        assert await bookie.add(entry(11, 0), KEY) is Status.OK
        await bookie.checkpoint()
        logs_before = log_ids(node.disk)
        assert await bookie.collect_deleted_ledgers() == [10]
        assert len(log_ids(node.disk)) < len(logs_before), "logs holding only ledger 10 must go"
        assert bookie.read_entry(10, 0).status is Status.NO_SUCH_LEDGER
        assert await bookie.add(entry(10, 12), KEY) is Status.NO_SUCH_LEDGER
        assert bookie.read_entry(11, 0).raw == entry(11, 0).raw
        assert bookie.stats.ledgers_collected_count == 1
        node.power_cut()
        bookie = await node.boot_with(metadata)
        state = bookie.bookie_ledger(10)
        assert state is not None and state.status is LedgerStatus.DELETED
        assert bookie.read_entry(11, 0).raw == entry(11, 0).raw
        assert await bookie.collect_deleted_ledgers() == []  # nothing left to delete
        await bookie.stop()

    sim(scenario)


def test_periodic_loop_runs_on_the_clock() -> None:
    async def scenario() -> None:
        metadata = Metadata({1})
        node = Node(BookieConfig(**{**_fields(SMALL), "gc_interval_ms": 1_000}))
        bookie = await node.boot_with(metadata)
        assert await bookie.add(entry(1, 0), KEY) is Status.OK
        assert await bookie.add(entry(2, 0), KEY) is Status.OK
        await node.clock.sleep(0.5)
        assert metadata.calls == 0 and bookie.read_entry(2, 0).status is Status.OK
        await node.clock.sleep(2.0)
        assert metadata.calls == 2
        assert bookie.read_entry(2, 0).status is Status.NO_SUCH_LEDGER
        assert bookie.read_entry(1, 0).status is Status.OK
        await bookie.stop()

    sim(scenario)


def test_gc_disabled_with_zero_interval() -> None:
    async def scenario() -> None:
        metadata = Metadata(set())
        node = Node(BookieConfig(**{**_fields(SMALL), "gc_interval_ms": 0}))
        bookie = await node.boot_with(metadata)
        assert await bookie.add(entry(2, 0), KEY) is Status.OK
        await node.clock.sleep(600)
        assert metadata.calls == 0 and bookie.read_entry(2, 0).status is Status.OK
        await bookie.stop()

    sim(scenario)


def test_failed_listing_deletes_nothing() -> None:
    async def scenario() -> None:
        metadata = Metadata(set())
        metadata.fail = True
        node = Node()
        bookie = await node.boot_with(metadata)
        assert await bookie.add(entry(5, 0), KEY) is Status.OK
        assert await bookie.collect_deleted_ledgers() == []
        assert bookie.stats.gc_rounds_skipped_count == 1
        assert bookie.read_entry(5, 0).status is Status.OK
        await bookie.stop()

    sim(scenario)


class SlowListing(Metadata):
    """A listing taken at call time; the answer arrives only after a new ledger got its first add."""

    def __init__(self, live: set[int], during: object) -> None:
        super().__init__(live)
        self.during = during

    async def __call__(self) -> Collection[int]:
        answer = set(self.live)  # the metadata store answers as of now...
        await self.during()  # type: ignore[operator]
        return answer  # ...and the answer arrives later


def test_ledger_created_during_the_listing_survives() -> None:
    async def scenario() -> None:
        node = Node()
        holder: dict[str, object] = {}

        async def create_ledger_12() -> None:
            # The ledger layer creates metadata first, then writes: 12 is live but not in the answer.
            assert await holder["bookie"].add(entry(12, 0), KEY) is Status.OK  # type: ignore[attr-defined]

        metadata = SlowListing({1}, create_ledger_12)
        bookie = await node.boot_with(metadata)
        holder["bookie"] = bookie
        assert await bookie.add(entry(1, 0), KEY) is Status.OK
        assert await bookie.collect_deleted_ledgers() == []
        assert bookie.read_entry(12, 0).status is Status.OK
        await bookie.stop()

    sim(scenario)


def test_negative_control_a_listing_older_than_the_snapshot_deletes_a_live_ledger() -> None:
    # The order matters: snapshot of held ledgers first, listing second. With the listing taken
    # before ledger 12 existed and the snapshot after, the same check catches a wrongful delete.
    async def scenario() -> None:
        node = Node()
        stale = Metadata({1})
        bookie = await node.boot_with(stale)
        assert await bookie.add(entry(1, 0), KEY) is Status.OK
        stale_answer = await stale()  # listing taken now...
        assert await bookie.add(entry(12, 0), KEY) is Status.OK  # ...ledger 12 created after it
        bookie.collector.live_ledgers = lambda: _const(stale_answer)  # snapshot taken after the listing
        assert await bookie.collect_deleted_ledgers() == [12]
        assert bookie.read_entry(12, 0).status is Status.NO_SUCH_LEDGER  # the survival check fails
        await bookie.stop()

    sim(scenario)


async def _const(value: Collection[int]) -> Collection[int]:
    return value


def _fields(config: BookieConfig) -> dict[str, object]:
    return {name: getattr(config, name) for name in config.__dataclass_fields__}


@pytest.mark.integration
@pytest.mark.timeout(60)
def test_real_bookie_collects_ledgers_deleted_from_metadata(tmp_path: Path) -> None:
    asyncio.run(asyncio.wait_for(_real_gc(tmp_path), timeout=50))


async def _real_gc(tmp_path: Path) -> None:
    clock = SystemClock()
    meta = await MemoryMetadataServer(clock).connect()
    ledgers = LedgerMetadataStore(MetadataStoreAdapter(meta))
    config = BookieConfig(host="127.0.0.1", port=0, data_dir=str(tmp_path / "b"), gc_interval_ms=50,
                          disk_free_bytes_min=0)
    running = await start_bookie(config, store=meta, clock=clock, network=TcpNetwork())
    client = await BookieClient.connect(TcpNetwork(), "127.0.0.1", running.port, clock)
    try:
        # Only the ledger layer's node name matters to the GC (ids are listed, not decoded).
        await meta.put(ledgers.path(1), b"x", -1)
        await meta.put(ledgers.path(2), b"x", -1)
        for ledger in (1, 2):
            assert (await client.add(entry(ledger, 0), master_key=KEY)).status is Status.OK
        await meta.delete(ledgers.path(2))
        for _ in range(200):
            if (await client.read(2, 0)).status is Status.NO_SUCH_LEDGER:
                break
            await asyncio.sleep(0.05)
        assert (await client.read(2, 0)).status is Status.NO_SUCH_LEDGER
        assert (await client.read(1, 0)).status is Status.OK
        assert running.bookie.stats.gc_rounds_count >= 1
    finally:
        await client.close()
        await running.stop()
        await meta.close()


# --- compaction of partially live entry logs ------------------------------------------------------

SMALL_LIVE = b"s" * 2_000  # ledger 21's entries: a little live data in logs full of ledger 20's


async def _interleaved(bookie: object, checkpoint_every: int = 3) -> None:
    """Ledgers 20 (big entries, to be deleted) and 21 (small, live) share every entry log."""
    for i in range(24):
        assert await bookie.add(entry(20, i, BIG), KEY) is Status.OK  # type: ignore[attr-defined]
        assert await bookie.add(entry(21, i, SMALL_LIVE), KEY) is Status.OK  # type: ignore[attr-defined]
        if i % checkpoint_every == checkpoint_every - 1:
            await bookie.checkpoint()  # type: ignore[attr-defined]
    await bookie.checkpoint()  # type: ignore[attr-defined]


def _live_reads_ok(bookie: object) -> None:
    for i in range(24):
        assert bookie.read_entry(21, i).raw == entry(21, i, SMALL_LIVE).raw, i  # type: ignore[attr-defined]


@pytest.mark.parametrize("percent", [50, 0])
def test_round_compacts_logs_whose_live_part_is_small(percent: int) -> None:
    """Deleting ledger 20 leaves every old log mostly dead but not empty: compaction copies
    ledger 21 out and removes them. Negative control: with compaction off (0) they all stay."""

    async def scenario() -> None:
        metadata = Metadata({21})
        node = Node(BookieConfig(**{**_fields(SMALL), "compaction_live_percent_max": percent}))
        bookie = await node.boot_with(metadata)
        await _interleaved(bookie)
        logs_before = log_ids(node.disk)
        assert len(logs_before) >= 4
        assert await bookie.collect_deleted_ledgers() == [20]
        logs_after = log_ids(node.disk)
        if percent:
            assert len(logs_after) <= 2, (logs_before, logs_after)
            assert bookie.stats.logs_compacted_count >= len(logs_before) - 2
            assert 0 < bookie.stats.compacted_bytes_count <= 24 * (len(SMALL_LIVE) + 100)
        else:
            assert logs_after == logs_before and bookie.stats.logs_compacted_count == 0
        _live_reads_ok(bookie)
        node.power_cut()
        bookie = await node.boot_with(metadata)
        _live_reads_ok(bookie)
        await bookie.stop()

    sim(scenario)


@pytest.mark.parametrize("step", range(8))
def test_power_cut_during_compaction_keeps_every_live_entry(step: int) -> None:
    """A power cut at moments spread over a compaction: after restart every live entry reads
    back, and a later round finishes the job (no log is left half compacted for ever)."""

    async def scenario() -> None:
        metadata = Metadata({21})
        node = Node()
        bookie = await node.boot_with(metadata)
        await _interleaved(bookie)
        for ledger in (20,):
            await bookie.delete_ledger(ledger)
        await bookie.collect_garbage()
        task = asyncio.ensure_future(bookie.compact_logs())
        await node.clock.sleep(step * 0.0003)  # the whole compaction takes about 2 ms of virtual time
        task.cancel()
        node.power_cut()
        bookie = await node.boot_with(metadata)
        _live_reads_ok(bookie)
        await bookie.collect_deleted_ledgers()
        _live_reads_ok(bookie)
        assert len(log_ids(node.disk)) <= 2
        await bookie.stop()

    sim(scenario)


def test_compaction_skips_entries_moved_or_deleted_meanwhile() -> None:
    """Locations are re-checked under the lock: a ledger deleted after the live entries were
    listed is not copied back into the index."""

    async def scenario() -> None:
        node = Node()
        bookie = await node.boot_with(Metadata({21}))
        await _interleaved(bookie)
        await bookie.delete_ledger(20)
        await bookie.collect_garbage()
        deleting = asyncio.ensure_future(bookie.delete_ledger(21))
        await bookie.compact_logs()
        await deleting
        assert bookie.read_entry(21, 0).status is Status.NO_SUCH_LEDGER
        assert not bookie._index.entry_keys_of(21)  # no location came back for the deleted ledger
        await bookie.stop()

    sim(scenario)
