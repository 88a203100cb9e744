"""What keeps add latency flat while the bookie does background work (docs/performance.md,
"Session 4: paced p99"): the checkpoint flush in short chunks, paced while nothing waits for it,
with the index synced batch by batch off the event loop; and ``LocalDisk.remove`` deleting a
large file in the background in steps instead of one unlink on the event loop.

Every checker here is also run against the behaviour it guards against (negative control)."""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import os
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import pytest

from magnetar.base.io import KeyValueStore
from magnetar.protocol.bookie import Status
from magnetar.runtime import disk as runtime_disk
from magnetar.runtime import disk_buffers
from magnetar.runtime.disk import TRASH, TRASH_DIR, LocalDisk
from magnetar.sim import SimClock
from magnetar.storage import Bookie, checkpointer
from magnetar.storage.caches import WriteCache, release_step
from tests.storage.test_storage import KEY, SMALL, Node, entry, sim

MIB = 1024 * 1024
PACED = dataclasses.replace(SMALL, flush_chunk_entries_max=16, index_batch_keys_max=32, flush_pause_ms=5)


# --- write cache chunks ----------------------------------------------------------------------


def _chunks_within(chunks: list[list[tuple[int, int, bytes]]], count_max: int) -> bool:
    return all(len(chunk) <= count_max for chunk in chunks)


def test_flush_chunks_hold_at_most_count_max_entries_in_order() -> None:
    cache = WriteCache()
    for ledger in (3, 1, 2):
        for entry_id in reversed(range(100)):
            cache.put(ledger, entry_id, b"x" * 10)
    chunks = list(cache.sorted_chunks(lambda: (1 * MIB, 16)))
    assert _chunks_within(chunks, 16)
    flat = [(ledger, entry_id) for chunk in chunks for ledger, entry_id, _ in chunk]
    assert flat == sorted(flat) and len(flat) == 300
    # Negative control: bounded by bytes only, one chunk takes every entry.
    assert not _chunks_within(list(cache.sorted_chunks(lambda: (1 * MIB, 1_000_000))), 16)


# --- the paced background checkpoint ---------------------------------------------------------


class RecordingStore:
    """A ``KeyValueStore`` that notes each write (kind, keys, sim time) before passing it on."""

    def __init__(self, inner: KeyValueStore, node: Node) -> None:
        self._inner = inner
        self._node = node
        self.calls: list[tuple[str, int, int]] = []

    def get(self, key: bytes) -> bytes | None:
        return self._inner.get(key)

    def scan(self, start: bytes, end: bytes | None = None) -> Iterable[tuple[bytes, bytes]]:
        return self._inner.scan(start, end)

    def write(self, puts: Iterable[tuple[bytes, bytes | None]], *, sync: bool) -> None:
        batch = list(puts)
        self.calls.append(("sync" if sync else "write", len(batch), self._node.clock.monotonic_ns()))
        self._inner.write(batch, sync=sync)

    def write_durable(self, puts: Iterable[tuple[bytes, bytes | None]]):  # type: ignore[no-untyped-def]
        batch = list(puts)
        self.calls.append(("durable", len(batch), self._node.clock.monotonic_ns()))
        return self._inner.write_durable(batch)

    def close(self) -> None:
        self._inner.close()


async def _checkpoint_trace(paced: bool) -> tuple[list[int], list[tuple[str, int, int]], Bookie]:
    """Entry-log write times and index writes of one checkpoint of 200 entries."""
    node = Node(PACED)
    store = RecordingStore(node.kv.reopen(), node)
    bookie = Bookie(node.disk, store, node.clock, PACED)  # type: ignore[arg-type]
    await bookie.start()
    for i in range(200):
        assert await bookie.add(entry(1, i, lac=i - 1), KEY) is Status.OK
    writes: list[int] = []
    entry_log = bookie._entry_log
    real_append_chunk = entry_log.append_chunk

    async def append_chunk(raws: Sequence[bytes], *, sync: bool = False) -> tuple[int, list[int]]:
        writes.append(node.clock.monotonic_ns())
        return await real_append_chunk(raws, sync=sync)

    entry_log.append_chunk = append_chunk  # type: ignore[method-assign]
    store.calls.clear()
    await bookie.checkpointer.checkpoint(paced=paced)
    return writes, list(store.calls), bookie


def _spread_out(times: list[int], pause_ms: int) -> bool:
    """Several writes, each at least ``pause_ms`` after the previous one."""
    return len(times) >= 3 and all(b - a >= pause_ms * 1_000_000 for a, b in itertools.pairwise(times))


def _index_synced_in_batches(calls: list[tuple[str, int, int]], batch_max: int) -> bool:
    """No synced write on the event loop, no large unsynced backlog: every batch durable."""
    return (
        all(kind == "durable" for kind, _, _ in calls)
        and sum(1 for kind, _, _ in calls if kind == "durable") >= 200 // batch_max
        and all(count <= batch_max + 8 for _, count, _ in calls)
    )


def test_background_checkpoint_spreads_entry_log_writes_and_syncs_index_batches() -> None:
    async def scenario() -> None:
        writes, calls, bookie = await _checkpoint_trace(paced=True)
        assert len(writes) >= 200 // 16
        assert _spread_out(writes, PACED.flush_pause_ms)
        assert _index_synced_in_batches(calls, PACED.index_batch_keys_max)
        for i in range(200):
            assert bookie.read_entry(1, i).raw == entry(1, i, lac=i - 1).raw
        await bookie.stop()
        # Negative control: the unpaced checkpoint (start-up, tests) writes back to back and
        # leaves the index unsynced until one final batch.
        writes, calls, bookie = await _checkpoint_trace(paced=False)
        assert not _spread_out(writes, PACED.flush_pause_ms)
        assert not _index_synced_in_batches(calls, PACED.index_batch_keys_max)
        assert calls[-1][0] == "durable"  # the mark, synced off the event loop
        assert not any(kind == "sync" for kind, _, _ in calls)
        await bookie.stop()

    sim(scenario)


def _entry_log_write_times(bookie: Bookie, clock: SimClock) -> list[int]:
    """The (virtual) times of the bookie's entry-log writes from now on, filled as they happen."""
    writes: list[int] = []
    real_append_chunk = bookie._entry_log.append_chunk

    async def append_chunk(raws: Sequence[bytes], *, sync: bool = False) -> tuple[int, list[int]]:
        writes.append(clock.monotonic_ns())
        return await real_append_chunk(raws, sync=sync)

    bookie._entry_log.append_chunk = append_chunk  # type: ignore[method-assign]
    return writes


async def _checkpoint_with_adds_meanwhile(add_gap_s: float) -> tuple[list[int], int]:
    """A background checkpoint of 200 entries while 32 KiB adds arrive ``add_gap_s`` apart
    (enough of them to fill half the write cache): entry-log write times, adds made."""
    node = Node(dataclasses.replace(PACED, write_cache_bytes_max=2 * MIB, entry_bytes_max=64 * 1024))
    bookie = await node.boot()
    for i in range(200):
        assert await bookie.add(entry(1, i, lac=i - 1), KEY) is Status.OK
    writes = _entry_log_write_times(bookie, node.clock)
    checkpoint = asyncio.get_running_loop().create_task(bookie.checkpointer.checkpoint(paced=True))
    added = 0
    while not checkpoint.done() and added < 30:
        assert await bookie.add(entry(2, added, payload=b"p" * 32 * 1024, lac=added - 1), KEY) is Status.OK
        added += 1
        await node.clock.sleep(add_gap_s)
    await checkpoint
    await bookie.stop()
    return writes, added


def _pauses(times: list[int], pause_ms: int) -> int:
    return sum(1 for a, b in itertools.pairwise(times) if b - a >= pause_ms * 1_000_000)


def test_background_checkpoint_runs_at_full_speed_while_adds_come_in_fast() -> None:
    async def scenario() -> None:
        # Adds back to back, or every 2 ms (16 MB/s, far above what a paced flush writes): at
        # most the pause before the first add reached the new active half, none near the end
        # either (pausing there only made the next checkpoint, and then the adds, wait), and
        # large chunks (one small paced chunk, then the rest in one or two).
        for gap_s in (0.0, 0.002):
            writes, added = await _checkpoint_with_adds_meanwhile(add_gap_s=gap_s)
            assert added >= 2 and 2 <= len(writes) <= 4
            assert _pauses(writes, PACED.flush_pause_ms) <= 1
        # Negative control: adds trickling in (one per second) leave the flush paced.
        writes, added = await _checkpoint_with_adds_meanwhile(add_gap_s=1.0)
        assert _spread_out(writes, PACED.flush_pause_ms) and len(writes) > 4
        assert _pauses(writes, PACED.flush_pause_ms) > 1

    sim(scenario)


# --- LocalDisk.remove: background, in steps ----------------------------------------------------


def _wait_for_trash(timeout_s: float = 10.0) -> None:
    assert TRASH.wait_idle(timeout_s)


def _trimmed_in_steps(sizes: list[int], file_bytes: int, step: int) -> bool:
    return len(sizes) >= file_bytes // step - 1 and sizes == sorted(sizes, reverse=True)


def test_remove_moves_a_file_aside_at_once_and_deletes_it_in_steps(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(runtime_disk, "_TRIM_STEP_BYTES", 1 * MIB)
    monkeypatch.setattr(runtime_disk, "_TRIM_PAUSE_S", 0.0)
    sizes: list[int] = []
    real_truncate = os.truncate

    def truncate(path: str, size: int) -> None:
        if TRASH_DIR in str(path):
            sizes.append(size)
        real_truncate(path, size)

    monkeypatch.setattr(runtime_disk.os, "truncate", truncate)
    disk = LocalDisk(str(tmp_path))
    disk.makedirs("journal")
    (tmp_path / "journal" / "1.jnl").write_bytes(os.urandom(5 * MIB))
    (tmp_path / "journal" / "2.jnl").write_bytes(b"kept")
    disk.remove("journal/1.jnl")
    assert not disk.exists("journal/1.jnl")
    assert disk.listdir("journal") == ["2.jnl"]
    _wait_for_trash()
    assert os.listdir(tmp_path / TRASH_DIR) == []
    assert _trimmed_in_steps(sizes, 5 * MIB, 1 * MIB)
    # Negative control: a plain unlink frees the whole file in one step.
    sizes.clear()
    monkeypatch.setattr(runtime_disk, "delete_gently", os.remove)
    (tmp_path / "journal" / "3.jnl").write_bytes(os.urandom(5 * MIB))
    disk.remove("journal/3.jnl")
    _wait_for_trash()
    assert not _trimmed_in_steps(sizes, 5 * MIB, 1 * MIB)
    disk.remove("journal/missing.jnl")  # already gone: nothing to do
    disk.remove("journal")  # a directory goes at once
    assert not disk.exists("journal")


def test_files_a_crash_left_in_the_trash_are_deleted_when_the_disk_is_opened(tmp_path: Path) -> None:
    (tmp_path / TRASH_DIR).mkdir()
    (tmp_path / TRASH_DIR / "left-behind.log").write_bytes(os.urandom(64 * 1024))
    LocalDisk(str(tmp_path))
    _wait_for_trash()
    assert os.listdir(tmp_path / TRASH_DIR) == []


def test_checkpoint_loop_runs_paced_checkpoints() -> None:
    config = dataclasses.replace(PACED, checkpoint_interval_ms=1_000)

    async def scenario() -> None:
        node = Node(config)
        bookie = await node.boot()
        writes = _entry_log_write_times(bookie, node.clock)
        for i in range(200):
            assert await bookie.add(entry(1, i, lac=i - 1), KEY) is Status.OK
        await node.clock.sleep(1.5)
        assert bookie.stats.checkpoints_count == 2  # start-up and the interval's
        assert _spread_out(writes, config.flush_pause_ms)
        await bookie.stop()

    sim(scenario)


# --- O_DIRECT buffers: allocated once, reused across sizes and files ---------------------------


def test_aligned_buffers_are_reused_across_write_sizes_and_file_rotations(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    allocated: list[int] = []
    real_mmap = disk_buffers.mmap.mmap

    def counting_mmap(fileno: int, length: int, *args: Any, **kwargs: Any) -> object:
        allocated.append(length)
        return real_mmap(fileno, length, *args, **kwargs)

    # Where the aligned buffers are made: the ``mmap`` module's own attribute, which the compiled
    # ``runtime.disk_buffers`` looks up at each call too (its reference to the module is a C
    # static: replacing the module in its namespace reaches only the interpreted build).
    monkeypatch.setattr(disk_buffers.mmap, "mmap", counting_mmap)
    big, small = os.urandom(4 * MIB), os.urandom(4096)

    async def rotate_and_write(open_file: Callable[[str], runtime_disk.LocalFile]) -> bool:
        allocated.clear()
        for name in ("1.jnl", "2.jnl", "3.jnl"):  # a journal rotating to new files
            file = open_file(name)
            if file.write_alignment_bytes == 1:
                file.close()
                return False  # no O_DIRECT on this filesystem
            for _ in range(3):
                await file.append_parts([small])
                await file.append_parts([big])
            file.close()
        return True

    async def scenario() -> None:
        disk = LocalDisk(str(tmp_path))
        if not await rotate_and_write(lambda name: disk.open(name, direct=True)):
            pytest.skip("no O_DIRECT on this filesystem")
        assert len(allocated) <= 2, allocated  # one 1 MiB and one 4 MiB buffer, then reuse

        # Negative control: each file with a pool of its own allocates again after a rotation.
        def own_pool(name: str) -> runtime_disk.LocalFile:
            shared = disk.open(f"own-{name}", direct=True)
            fd, direct_fd = os.dup(shared._descriptors.fd), os.dup(shared._descriptors.direct_fd)
            shared.close()
            return runtime_disk.LocalFile(f"own-{name}", fd, direct_fd)

        await rotate_and_write(own_pool)
        assert len(allocated) > 2

    asyncio.run(scenario())


# --- the flushed half is freed a slice at a time -------------------------------------------------


def _freed_in_slices(sizes: list[int], total: int) -> bool:
    """Sizes of the flushed half seen between loop steps: some strictly between full and empty."""
    return sizes[-1] == 0 and any(0 < size < total for size in sizes)


async def _sizes_while_freeing(total: int) -> list[int]:
    node = Node(PACED)
    bookie = await node.boot()
    for i in range(total):
        assert await bookie.add(entry(1, i, payload=b"x" * 16, lac=i - 1), KEY) is Status.OK
    half = bookie.checkpointer._active  # swapped out by the checkpoint, flushed, then freed
    checkpoint = asyncio.get_running_loop().create_task(bookie.checkpointer.checkpoint(paced=True))
    sizes: list[int] = []
    while not checkpoint.done():
        sizes.append(len(half.ledgers.get(1, {})))
        await node.clock.sleep(0.001)
    await checkpoint
    sizes.append(len(half.ledgers.get(1, {})))
    assert bookie.read_entry(1, total - 1).status is Status.OK  # from the index now
    await bookie.stop()
    return sizes


def test_flushed_half_is_freed_a_slice_at_a_time(monkeypatch: pytest.MonkeyPatch) -> None:
    async def scenario() -> None:
        assert _freed_in_slices(await _sizes_while_freeing(5000), 5000)
        # Negative control: one step for everything frees the half at once.
        monkeypatch.setattr(checkpointer, "_RELEASE_STEP_ENTRIES", 1_000_000)
        assert not _freed_in_slices(await _sizes_while_freeing(5000), 5000)

    sim(scenario)


# --- a flushed half of many ledgers: freed a step of entries at a time, not a step per ledger ---


async def _release_sleeps(ledgers_count: int) -> int:
    """The loop passes (``Clock.sleep`` calls) ``Checkpointer._release`` takes to free a half of
    ``ledgers_count`` one-entry ledgers and one ledger of 3,000 entries (unpaced)."""
    node = Node(SMALL)
    bookie = await node.boot()
    half = WriteCache()
    for ledger_id in range(ledgers_count):
        half.put(ledger_id, 0, b"x")
    for entry_id in range(3000):
        half.put(ledgers_count, entry_id, b"y")
    sleeps: list[float] = []
    real = bookie.checkpointer._clock

    class Counting:
        def __getattr__(self, name: str) -> object:
            return getattr(real, name)

        async def sleep(self, duration_s: float) -> None:  # the node's virtual clock, counted
            sleeps.append(duration_s)
            await real.sleep(duration_s)

    bookie.checkpointer._clock = Counting()  # type: ignore[assignment]
    try:
        await bookie.checkpointer._release(half, paced=False)
    finally:
        bookie.checkpointer._clock = real
    assert half.ledgers == {}
    await bookie.stop()
    return sleeps.count(0)  # unpaced: its steps sleep 0 (the background loop's waits are longer)


def test_a_flushed_half_of_many_ledgers_is_freed_a_step_of_entries_at_a_time() -> None:
    async def scenario() -> None:
        # 5,000 + 3,000 entries in steps of 2,048: 4 passes. Freeing a ledger per step (the
        # loop this replaced) took 5,000 + 2 passes: one per entry at 100,000 topics.
        assert await _release_sleeps(5000) == 4
        assert await _release_sleeps(0) == 2  # one large ledger: still a step at a time

    sim(scenario)


def test_release_step_drops_whole_ledgers_then_part_of_the_next() -> None:
    ledgers = {1: {0: b"a", 1: b"b", 2: b"c"}, 2: {0: b"d"}, 3: {0: b"e"}}
    assert release_step(ledgers, 3) == 3  # ledgers 3 and 2 whole, then one entry of ledger 1
    assert ledgers == {1: {0: b"a", 1: b"b"}}
    assert release_step(ledgers, 5) == 2
    assert ledgers == {}
    assert release_step(ledgers, 5) == 0
