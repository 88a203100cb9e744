"""The storage core on the simulated disk and store: adds, reads, fencing, restart, GC, cookie."""

from __future__ import annotations

import struct
from collections.abc import Awaitable, Callable

import pytest

from magnetar.base.errors import CorruptDataError
from magnetar.base.rng import SeededRng
from magnetar.protocol.bookie import Entry, Status
from magnetar.sim import SimClock, SimDisk, SimDiskConfig, SimKeyValueStore, run
from magnetar.storage import (
    Bookie,
    BookieConfig,
    BookieStatus,
    CookieMismatchError,
    LedgerStatus,
    verify_or_create_cookie,
)
from magnetar.storage.garbage import LiveLedgers
from magnetar.storage.journal import JOURNAL_DIR, journal_file_ids, journal_path

KEY = b"secret"
SMALL = BookieConfig(
    write_cache_bytes_max=16 * 1024 * 1024,
    entry_bytes_max=1024 * 1024,
    journal_queue_bytes_max=4 * 1024 * 1024,
    journal_file_bytes_max=1024 * 1024,
    entry_log_bytes_max=256 * 1024,
    checkpoint_interval_ms=1_000_000,
    disk_free_bytes_min=0,
)


class Node:
    """A disk and a store that outlive bookie incarnations."""

    def __init__(self, config: BookieConfig = SMALL, capacity_bytes: int = 1 << 30) -> None:
        self.disk = SimDisk(SimDiskConfig(capacity_bytes=capacity_bytes))
        self.kv = SimKeyValueStore()
        self.clock = SimClock()
        self.config = config

    async def boot(self) -> Bookie:
        bookie = Bookie(self.disk, self.kv.reopen(), self.clock, self.config)
        await bookie.start()
        return bookie

    async def boot_with(self, live_ledgers: LiveLedgers) -> Bookie:
        bookie = Bookie(self.disk, self.kv.reopen(), self.clock, self.config, live_ledgers=live_ledgers)
        await bookie.start()
        return bookie

    def power_cut(self) -> None:
        self.disk.crash()
        self.kv.crash()


def entry(ledger: int, entry_id: int, payload: bytes | None = None, lac: int = -1) -> Entry:
    return Entry.build(ledger, entry_id, lac, payload if payload is not None else f"{ledger}:{entry_id}".encode() * 20)


def sim(test: Callable[[], Awaitable[None]]) -> None:
    run(test())


def test_add_then_read_from_cache_and_after_checkpoint() -> None:
    async def scenario() -> None:
        node = Node()
        bookie = await node.boot()
        for i in range(50):
            assert await bookie.add(entry(1, i, lac=i - 1), KEY) is Status.OK
        result = bookie.read_entry(1, 7)
        assert result.status is Status.OK and result.raw == entry(1, 7, lac=6).raw
        await bookie.checkpoint()
        for i in range(50):
            assert bookie.read_entry(1, i).raw == entry(1, i, lac=i - 1).raw
        assert bookie.read_entry(1, 50).status is Status.NO_SUCH_ENTRY
        assert bookie.read_entry(2, 0).status is Status.NO_SUCH_LEDGER
        assert bookie.read_lac(1) == (Status.OK, 48)
        last = bookie.read_last_entry(1)
        assert last.status is Status.OK and last.entry_id == 49
        await bookie.stop()

    sim(scenario)


def test_group_commit_covers_many_adds_with_one_sync() -> None:
    async def scenario() -> None:
        node = Node()
        bookie = await node.boot()
        acks: list[Status] = []
        for i in range(200):
            bookie.add_entry(entry(3, i), KEY, False, acks.append)
        journal = bookie._journal
        assert journal is not None
        before = journal.syncs_count
        await bookie.add(entry(3, 200), KEY)
        assert acks == [Status.OK] * 200
        assert journal.syncs_count - before <= 3
        await bookie.stop()

    sim(scenario)


def test_rejections_digest_size_key_readonly() -> None:
    async def scenario() -> None:
        node = Node()
        bookie = await node.boot()
        good = entry(1, 0)
        bad = Entry(good.ledger_id, good.entry_id, good.lac, good.digest ^ 1, good.raw)
        assert await bookie.add(bad, KEY) is Status.BAD_DIGEST
        assert bookie.read_entry(1, 0).status is Status.NO_SUCH_LEDGER
        big = Entry.build(1, 0, -1, b"x" * (SMALL.entry_bytes_max + 1))
        assert await bookie.add(big, KEY) is Status.TOO_LARGE
        assert await bookie.add(good, KEY) is Status.OK
        assert await bookie.add(entry(1, 1), b"other") is Status.UNAUTHORIZED
        await bookie.stop()

    sim(scenario)


def test_read_only_when_disk_nearly_full_and_back() -> None:
    async def scenario() -> None:
        config = BookieConfig(**{**_fields(SMALL), "disk_free_bytes_min": 30 * 1024 * 1024})
        node = Node(config, capacity_bytes=100 * 1024 * 1024)
        bookie = await node.boot()
        assert bookie.status is BookieStatus.WRITABLE
        filler = node.disk.open("filler")
        filler.append(b"\0" * (80 * 1024 * 1024))
        bookie.check_disk()
        assert bookie.status is BookieStatus.READ_ONLY
        assert await bookie.add(entry(1, 0), KEY) is Status.READ_ONLY
        filler.truncate(0)
        bookie.check_disk()
        assert bookie.status is BookieStatus.WRITABLE
        assert await bookie.add(entry(1, 0), KEY) is Status.OK
        await bookie.stop()

    sim(scenario)


def _fields(config: BookieConfig) -> dict[str, object]:
    return {name: getattr(config, name) for name in config.__dataclass_fields__}


def test_fence_blocks_normal_adds_also_after_power_cut_but_not_recovery_adds() -> None:
    async def scenario() -> None:
        node = Node()
        bookie = await node.boot()
        assert await bookie.add(entry(5, 0), KEY) is Status.OK
        assert await bookie.fence(5, KEY) is Status.OK
        assert await bookie.add(entry(5, 1), KEY) is Status.FENCED
        assert await bookie.add(entry(5, 1), KEY, recovery=True) is Status.OK
        assert await bookie.fence(9, KEY) is Status.OK  # a ledger it never saw: fenced too
        node.power_cut()
        bookie = await node.boot()
        assert await bookie.add(entry(5, 2), KEY) is Status.FENCED
        assert await bookie.add(entry(9, 0), KEY) is Status.FENCED
        assert bookie.read_entry(5, 1).raw == entry(5, 1).raw
        # And after a checkpoint moved the mark past the fence record, and another power cut.
        await bookie.checkpoint()
        node.power_cut()
        bookie = await node.boot()
        assert await bookie.add(entry(5, 3), KEY) is Status.FENCED
        await bookie.stop()

    sim(scenario)


def test_acknowledged_adds_survive_a_power_cut_unacknowledged_may_not() -> None:
    async def scenario() -> None:
        node = Node()
        bookie = await node.boot()
        for i in range(30):
            assert await bookie.add(entry(2, i), KEY) is Status.OK
        await bookie.checkpoint()
        for i in range(30, 60):
            assert await bookie.add(entry(2, i), KEY) is Status.OK
        acks: list[Status] = []
        bookie.add_entry(entry(2, 60), KEY, False, acks.append)  # queued, never synced
        node.power_cut()
        assert acks == []
        bookie = await node.boot()
        for i in range(60):
            assert bookie.read_entry(2, i).raw == entry(2, i).raw, i
        assert bookie.read_entry(2, 60).status is Status.NO_SUCH_ENTRY
        assert bookie.read_last_entry(2).entry_id == 59
        await bookie.stop()

    sim(scenario)


def test_negative_control_without_journal_fsync_acks_are_lost() -> None:
    """A bookie that acknowledged before the fsync would lose acked adds: the check sees it."""

    async def scenario() -> None:
        node = Node()
        bookie = await node.boot()
        journal = bookie._journal
        assert journal is not None
        acked: list[int] = []
        # Break the mechanism: acknowledge when queued instead of after the group's fsync.
        for i in range(10):
            bookie.add_entry(entry(4, i), KEY, False, lambda status: None)
            acked.append(i)
        node.power_cut()
        bookie = await node.boot()
        lost = [i for i in acked if bookie.read_entry(4, i).status is not Status.OK]
        assert lost, "the checker must notice acknowledged adds that were never synced"

    sim(scenario)


def test_torn_journal_tail_ends_replay_cleanly() -> None:
    async def scenario() -> None:
        node = Node()
        bookie = await node.boot()
        for i in range(5):
            assert await bookie.add(entry(6, i), KEY) is Status.OK
        await bookie.stop()
        (file_id,) = [i for i in journal_file_ids(node.disk)][-1:]
        journal = node.disk.open(journal_path(file_id))
        journal.append(b"\x00\x00\x00\x40" + b"\xde\xad\xbe\xef" + b"torn")  # short record
        await journal.sync()
        journal.close()
        bookie = await node.boot()
        assert bookie.stats.replayed_records_count == 5
        for i in range(5):
            assert bookie.read_entry(6, i).raw == entry(6, i).raw
        await bookie.stop()

    sim(scenario)


def test_corruption_in_an_older_journal_file_refuses_to_start() -> None:
    async def scenario() -> None:
        node = Node()
        bookie = await node.boot()
        assert await bookie.add(entry(6, 0), KEY) is Status.OK
        await bookie.stop()
        ids = journal_file_ids(node.disk)
        bad = node.disk.open(journal_path(ids[-1]))
        bad.append(b"\x00\x00\x00\x40junk")
        await bad.sync()
        bad.close()
        newer = node.disk.open(journal_path(ids[-1] + 1))
        newer.append(b"MGJ1" + (ids[-1] + 1).to_bytes(8, "big"))
        await newer.sync()
        newer.close()
        await node.disk.sync_dir(JOURNAL_DIR)
        with pytest.raises(CorruptDataError):
            await node.boot()

    sim(scenario)


def test_journal_files_rotate_and_are_removed_after_checkpoint() -> None:
    async def scenario() -> None:
        node = Node()
        bookie = await node.boot()
        payload = b"p" * 60_000
        for i in range(60):
            assert await bookie.add(entry(7, i, payload), KEY) is Status.OK
        assert len(journal_file_ids(node.disk)) >= 3
        await bookie.checkpoint()
        assert len(journal_file_ids(node.disk)) == 1
        node.power_cut()
        bookie = await node.boot()
        for i in range(60):
            assert bookie.read_entry(7, i).raw == entry(7, i, payload).raw
        await bookie.stop()

    sim(scenario)


def test_read_ahead_fills_the_read_cache() -> None:
    async def scenario() -> None:
        node = Node()
        bookie = await node.boot()
        for i in range(20):
            assert await bookie.add(entry(8, i), KEY) is Status.OK
        await bookie.checkpoint()
        assert bookie.read_entry(8, 0).status is Status.OK
        misses = bookie._read_cache.misses
        for i in range(1, 20):
            assert bookie.read_entry(8, i).raw == entry(8, i).raw
        assert bookie._read_cache.misses == misses
        assert bookie._read_cache.hits >= 19
        await bookie.stop()

    sim(scenario)


def test_deleted_ledgers_are_collected_and_never_resurrected() -> None:
    async def scenario() -> None:
        node = Node()
        bookie = await node.boot()
        payload = b"g" * 50_000
        for i in range(12):
            assert await bookie.add(entry(10, i, payload), KEY) is Status.OK
        await bookie.checkpoint()
        assert await bookie.add(entry(11, 0), KEY) is Status.OK
        await bookie.checkpoint()
        await bookie.delete_ledger(10)
        removed = await bookie.collect_garbage()
        assert removed, "logs holding only the deleted ledger must go"
        assert bookie.read_entry(10, 0).status is Status.NO_SUCH_LEDGER
        assert await bookie.add(entry(10, 12), KEY) is Status.NO_SUCH_LEDGER
        assert bookie.read_entry(11, 0).status is Status.OK
        node.power_cut()
        bookie = await node.boot()
        assert bookie.bookie_ledger(10) is not None
        assert bookie.bookie_ledger(10).status is LedgerStatus.DELETED  # type: ignore[union-attr]
        assert bookie.read_entry(10, 0).status is Status.NO_SUCH_LEDGER
        assert bookie.read_entry(11, 0).raw == entry(11, 0).raw
        await bookie.stop()

    sim(scenario)


class MemoryRegistry:
    def __init__(self) -> None:
        self.cookies: dict[str, bytes] = {}

    async def get_cookie(self, bookie_id: str) -> bytes | None:
        return self.cookies.get(bookie_id)

    async def put_cookie(self, bookie_id: str, cookie: bytes) -> None:
        self.cookies[bookie_id] = cookie


def test_cookie_refuses_wiped_and_foreign_directories() -> None:
    async def scenario() -> None:
        registry = MemoryRegistry()
        rng = SeededRng(1)
        disk = SimDisk()
        first = await verify_or_create_cookie(disk, registry, "b1:3181", rng, has_data=False)
        assert await verify_or_create_cookie(disk, registry, "b1:3181", rng, has_data=True) == first
        with pytest.raises(CookieMismatchError):  # wiped disk at the same address
            await verify_or_create_cookie(SimDisk(), registry, "b1:3181", rng, has_data=False)
        with pytest.raises(CookieMismatchError):  # another bookie's directory
            await verify_or_create_cookie(disk, registry, "b2:3181", rng, has_data=True)
        with pytest.raises(CookieMismatchError):  # data but no cookie
            await verify_or_create_cookie(SimDisk(), MemoryRegistry(), "b3:3181", rng, has_data=True)
        registry.cookies["b1:3181"] = b'{"bookie_id": "b1:3181", "format_version": 1, "instance_id": "other"}'
        with pytest.raises(CookieMismatchError):  # registered instance differs
            await verify_or_create_cookie(disk, registry, "b1:3181", rng, has_data=True)

    sim(scenario)


def test_add_record_checksums_its_payload_once_and_replay_still_catches_damage() -> None:
    from magnetar.base.checksum import crc32c
    from magnetar.protocol.bookie import ENTRY_HEADER_BYTES
    from magnetar.storage.journal import (
        KIND_ADD,
        KIND_ADD_DIGESTED,
        _body_intact,
        _frame,
        add_record,
        parse_body,
    )

    raw = entry(7, 3, b"p" * 70_000).raw
    head, body = add_record(KEY, raw)
    assert body is raw  # the entry is not copied until the group is written
    prefix = bytes((KIND_ADD_DIGESTED, len(KEY))) + KEY
    # The record CRC covers the body up to the end of the entry header; the digest the rest.
    assert head == struct.pack(">II", len(prefix) + len(raw), crc32c(prefix + raw[:ENTRY_HEADER_BYTES])) + prefix
    whole = head + body
    record = parse_body(whole[8:])
    assert record.kind == KIND_ADD and record.master_key == KEY and record.entry_raw == raw
    crc = struct.unpack(">I", whole[4:8])[0]
    assert _body_intact(whole[8:], crc)
    damaged = bytearray(whole[8:])
    damaged[-1] ^= 1  # a payload byte: only the entry's digest can notice
    assert not _body_intact(bytes(damaged), crc)
    assert not _body_intact(whole[8:-100], crc)  # a short (torn) payload
    legacy = _frame(bytes((KIND_ADD, len(KEY))) + KEY + raw)  # kind 1, whole-body CRC
    assert _body_intact(legacy[8:], struct.unpack(">I", legacy[4:8])[0])
    assert parse_body(legacy[8:]).entry_raw == raw
