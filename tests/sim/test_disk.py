"""SimDisk and SimKeyValueStore: what a crash keeps, what it loses, what it tears."""

from __future__ import annotations

import errno

import pytest

from magnetar.base.errors import ClosedError, NotFoundError
from magnetar.base.rng import SeededRng
from magnetar.sim import SimDisk, SimDiskConfig, SimKeyValueStore, run
from magnetar.sim.scenarios.frames import encode, scan


def _disk(**config: object) -> SimDisk:
    return SimDisk(SimDiskConfig(**config))  # type: ignore[arg-type]


def test_unsynced_writes_are_gone_after_a_crash_and_synced_ones_survive() -> None:
    disk = _disk()

    async def main() -> None:
        file = disk.open("journal")
        await disk.sync_dir("")
        file.append(b"durable")
        await file.sync()
        file.append(b"-volatile")
        assert file.read_at(0, 100) == b"durable-volatile"

    run(main())
    disk.crash()
    assert disk.open("journal").read_at(0, 100) == b"durable"


def test_overwrite_in_place_without_sync_is_undone_by_a_crash() -> None:
    disk = _disk()

    async def main() -> None:
        file = disk.open("f")
        await disk.sync_dir("")
        file.append(b"aaaaaaaa")
        await file.sync()
        file.write_at(2, b"BB")
        file.truncate(6)

    run(main())
    disk.crash()
    assert disk.open("f").read_at(0, 100) == b"aaaaaaaa"


def test_a_file_whose_creation_was_not_synced_disappears() -> None:
    disk = _disk()

    async def main() -> None:
        disk.makedirs("d")
        file = disk.open("d/new")
        file.append(b"x")
        await file.sync()  # the bytes are durable, the name is not

    run(main())
    assert "creation not durable" in disk.crash()[0]
    assert not disk.exists("d/new")
    assert disk.exists("d")


def test_rename_and_remove_become_durable_with_sync_dir() -> None:
    disk = _disk()

    async def main() -> None:
        for name in ("a", "b"):
            file = disk.open(name)
            file.append(name.encode())
            await file.sync()
        await disk.sync_dir("")
        disk.rename("a", "c")
        disk.remove("b")

    run(main())
    disk.crash()
    assert disk.listdir("") == ["a", "b"]

    async def again() -> None:
        disk.rename("a", "c")
        await disk.sync_dir("")

    run(again())
    disk.crash()
    assert disk.listdir("") == ["b", "c"]
    assert disk.open("c").read_at(0, 10) == b"a"


def test_a_torn_tail_is_detected_by_the_record_checksum() -> None:
    records = [encode(bytes([i]) * 100) for i in range(20)]
    outcomes: set[str] = set()
    for seed in range(30):
        disk = _disk(torn_write_probability=1.0, garble_probability=0.5)

        async def main() -> None:
            file = disk.open("log")  # noqa: B023
            await disk.sync_dir("")  # noqa: B023
            for frame in records[:5]:
                file.append(frame)
            await file.sync()
            for frame in records[5:]:
                file.append(frame)

        run(main())
        report = disk.crash(SeededRng(seed))
        data = disk.open("log").read_at(0, 1 << 20)
        found, good_end, reason = scan(data)
        assert [payload for _offset, payload in found] == [r[8:] for r in records[: len(found)]]
        assert len(found) >= 5, "synced records always survive"
        outcomes.add(reason)
        assert report and "unsynced bytes" in report[0]
        if reason != "end":
            assert good_end < len(data)
    assert "checksum" in outcomes and "short" in outcomes


def test_old_handles_die_with_the_crash() -> None:
    disk = _disk()
    file = disk.open("f")
    disk.crash()
    with pytest.raises(ClosedError):
        file.append(b"x")
    with pytest.raises(NotFoundError):
        disk.open("f", create=False)


def test_free_bytes_and_disk_full() -> None:
    disk = _disk(capacity_bytes=100)
    file = disk.open("f")
    file.append(b"x" * 60)
    assert disk.free_bytes() == 40
    with pytest.raises(OSError) as info:
        file.append(b"y" * 41)
    assert info.value.errno == errno.ENOSPC
    disk.capacity_bytes = 1_000
    file.append(b"y" * 41)


def test_kv_synced_batches_survive_and_unsynced_ones_are_dropped_whole() -> None:
    store = SimKeyValueStore()
    store.write([(b"a", b"1"), (b"b", b"2")], sync=True)
    store.write([(b"c", b"3"), (b"a", None)], sync=False)
    assert store.get(b"a") is None
    assert list(store.scan(b"")) == [(b"b", b"2"), (b"c", b"3")]
    store.crash()
    assert list(store.scan(b"")) == [(b"a", b"1"), (b"b", b"2")]


def test_kv_crash_keeps_a_prefix_of_whole_batches_never_part_of_one() -> None:
    kept_counts: set[int] = set()
    for seed in range(40):
        store = SimKeyValueStore()
        for i in range(4):
            store.write([(f"k{i}a".encode(), b"v"), (f"k{i}b".encode(), b"v")], sync=False)
        store.crash(SeededRng(seed))
        keys = [key for key, _ in store.scan(b"")]
        assert len(keys) % 2 == 0, "a batch survives whole or not at all"
        count = len(keys) // 2
        assert keys == sorted(f"k{i}{x}".encode() for i in range(count) for x in "ab"), "a prefix, in order"
        kept_counts.add(count)
    assert kept_counts == {0, 1, 2, 3, 4}


def test_kv_flush_makes_buffered_batches_durable_and_scan_respects_bounds() -> None:
    store = SimKeyValueStore()
    store.write([(b"x1", b"1"), (b"x2", b"2"), (b"y", b"3")], sync=False)
    store.flush()
    store.crash()
    assert list(store.scan(b"x", b"y")) == [(b"x1", b"1"), (b"x2", b"2")]
    store.close()
    with pytest.raises(ClosedError):
        store.get(b"x1")
    assert store.reopen().get(b"y") == b"3"
