"""Preallocated journal files (issue 22, session 16): the open file holds written zeros ahead of
the journal's position (``DiskFile.preallocate``), so a group's synced write changes no file
metadata. What must hold with a zero tail: the zeros never land over a write, replay ends at the
zeros without calling them torn, nothing acknowledged is lost by a crash into the zeros, and the
next journal appends after the last record (in its own file); a non-last file never keeps zeros."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from functools import partial
from pathlib import Path

import pytest

from magnetar.base.errors import CorruptDataError
from magnetar.protocol.bookie import EncodedEntry
from magnetar.runtime import disk_threads
from magnetar.runtime.disk import LocalDisk
from magnetar.sim import SimClock, SimDisk, SimDiskConfig
from magnetar.storage import journal as journal_module
from magnetar.storage.config import BookieConfig
from magnetar.storage.journal import (
    KIND_ADD,
    Journal,
    JournalPosition,
    add_record,
    journal_file_ids,
    journal_path,
    replay,
)
from tests.managed_ledger.harness import until


def _record(i: int) -> tuple[bytes, bytes]:
    return add_record(b"k", EncodedEntry.build(3, i, i - 1, bytes([i % 256]) * 300).raw)


def _entry_ids(records: list[tuple[JournalPosition, journal_module.JournalRecord]]) -> list[int]:
    return [EncodedEntry.parse(record.entry_raw).entry_id for _, record in records if record.kind == KIND_ADD]


# --- the real disk ------------------------------------------------------------------------------


def test_preallocate_writes_zeros_past_the_end_without_moving_it(tmp_path: Path) -> None:
    async def scenario() -> None:
        file = LocalDisk(str(tmp_path)).open("f", direct=True)
        file.append(b"head")
        await file.preallocate(64 * 1024)
        assert file.size() == 4  # appends still go after the header
        assert (tmp_path / "f").stat().st_size == 64 * 1024
        answered = asyncio.Event()
        file.append_and_sync_then([b"x" * 100], lambda _error: answered.set())
        await asyncio.wait_for(answered.wait(), 10)
        assert file.size() == 104
        assert file.read_at(0, 110) == b"head" + b"x" * 100 + bytes(6)
        file.close()
        reopened = LocalDisk(str(tmp_path)).open("f")
        assert reopened.size() == 64 * 1024  # reopened: the zeros count (replay finds the end by records)
        reopened.close()

    asyncio.run(scenario())


def _held_zeros(monkeypatch: pytest.MonkeyPatch) -> threading.Event:
    """The zeros job waits for the returned event before it writes (a slow disk, made exact)."""
    release = threading.Event()
    real = disk_threads._zeros_job

    def held(descriptors: object, start: int, end: int, done: threading.Event) -> None:
        release.wait(10)
        real(descriptors, start, end, done)  # type: ignore[arg-type]

    monkeypatch.setattr(disk_threads, "_zeros_job", held)
    return release


def _write_during_zeros(tmp_path: Path, *, without_the_wait: bool = False) -> bytes:
    async def scenario(release: threading.Event) -> bytes:
        file = LocalDisk(str(tmp_path)).open("f", direct=True)
        file.append(bytes(4096))
        zeroing = asyncio.ensure_future(file.preallocate(1024 * 1024))
        await until(lambda: file._zeroing is not None)  # the zeros job is submitted (and held)
        if without_the_wait:  # the control: the zeros seem to start past the write (no wait for them)
            file._zeroing_from = 1 << 62
        answered = asyncio.Event()
        file.append_and_sync_then([b"d" * 4096], lambda _error: answered.set())  # inside the zeros
        # A bounded real wait is the point: the write's thread gets this long to write before the
        # zeros if it would (the control's does, at once, and answers); this one must wait for them.
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(answered.wait(), 0.2)
        release.set()
        await asyncio.wait_for(zeroing, 10)
        await asyncio.wait_for(answered.wait(), 10)
        data = file.read_at(4096, 4096)
        file.close()
        return data

    return asyncio.run(scenario(RELEASE[0]))


RELEASE: list[threading.Event] = []


def test_a_write_reserved_during_preallocation_lands_after_the_zeros(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    RELEASE[:] = [_held_zeros(monkeypatch)]
    assert _write_during_zeros(tmp_path) == b"d" * 4096


def test_negative_control_without_the_wait_the_zeros_overwrite_the_write(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    RELEASE[:] = [_held_zeros(monkeypatch)]
    assert _write_during_zeros(tmp_path, without_the_wait=True) == bytes(4096)  # the bug the test above catches


def test_the_journal_keeps_zeros_ahead_and_replays_to_its_last_record(tmp_path: Path) -> None:
    async def scenario() -> None:
        disk = LocalDisk(str(tmp_path))
        journal = Journal(disk, SimClock(), BookieConfig(), first_file_id=1)
        await journal.start()
        for i in range(20):
            await journal.append(_record(i))
        end = journal.position().offset
        await journal._zeros_settled()
        size = (tmp_path / journal_path(1)).stat().st_size
        assert size >= journal_module.JOURNAL_PREALLOC_CHUNK_BYTES > end  # zeros past the records
        await journal.stop()
        result = await replay(disk, JournalPosition(0, 0))
        assert _entry_ids(result.records) == list(range(20))
        assert result.torn_at is None  # the zeros are the end, not a tear
        assert (tmp_path / journal_path(1)).stat().st_size == end  # cut after the last record
        again = Journal(disk, SimClock(), BookieConfig(), first_file_id=2)  # a restart's next file
        await again.start()
        await again.append(_record(20))
        await again.stop()
        result = await replay(disk, JournalPosition(0, 0))  # file 1 is not the last one now
        assert _entry_ids(result.records) == list(range(21))

    asyncio.run(scenario())


# --- the simulated disk: a crash into the zeros -------------------------------------------------


def _crash_run(alignment: int, file_bytes_max: int, count: int) -> tuple[list[int], list[int], SimDisk]:
    """Adds acknowledged on a journal over a simulated disk, a power cut (every unsynced byte
    lost), replay, a restart's journal adding more, replay again: (acknowledged, replayed ids)."""
    disk = SimDisk(SimDiskConfig(sync_latency_us_min=100, sync_latency_us_max=100, direct_alignment_bytes=alignment))
    config = BookieConfig(journal_file_bytes_max=file_bytes_max, journal_group_bytes_max=64 * 1024)
    acked: list[int] = []

    async def scenario() -> list[int]:
        journal = Journal(disk, SimClock(), config, first_file_id=1)
        await journal.start()
        most = asyncio.Event()  # all but the last 3 adds acknowledged

        def answered(i: int, error: BaseException | None) -> None:
            if error is None:
                acked.append(i)
                if len(acked) >= count - 3:
                    most.set()

        for i in range(count):
            journal.submit(_record(i), partial(answered, i))
            if i % 7 == 6:  # every 7 adds, a group starts: several groups, some still in flight
                started = journal.groups_count
                await until(lambda started=started: journal.groups_count > started)
        await asyncio.wait_for(most.wait(), 10)
        disk.crash()  # the last adds may be unsynced: lost, never acknowledged
        first = await replay(disk, JournalPosition(0, 0))
        assert first.torn_at is None
        restarted = Journal(disk, SimClock(), config, first_file_id=journal_file_ids(disk)[-1] + 1)
        await restarted.start()
        await restarted.append(_record(count))
        await restarted.stop()
        return _entry_ids((await replay(disk, JournalPosition(0, 0))).records)

    return acked, asyncio.run(scenario()), disk


@pytest.mark.parametrize("alignment", [1, 4096])
def test_a_crash_into_a_preallocated_file_loses_nothing_acknowledged(alignment: int) -> None:
    acked, replayed, disk = _crash_run(alignment, 64 * 1024 * 1024, 60)
    assert set(acked) <= set(replayed)
    assert replayed[-1] == 60 and replayed == sorted(replayed)  # the restart appended after them
    assert len(journal_file_ids(disk)) == 2


@pytest.mark.parametrize("alignment", [1, 4096])
def test_rotated_files_keep_no_zeros_and_replay_across_them(alignment: int) -> None:
    acked, replayed, disk = _crash_run(alignment, 64 * 1024, 400)  # ~190 KiB: several files
    assert len(journal_file_ids(disk)) > 3
    assert set(acked) <= set(replayed) and replayed == sorted(replayed)


def test_negative_control_a_non_last_file_with_zeros_is_refused() -> None:
    """Why the zeros stop at ``journal_file_bytes_max``: zeros after a file's records are its end
    only in the last file (replay cuts them there); in an earlier one they are refused."""

    async def scenario() -> None:
        disk = SimDisk(SimDiskConfig(sync_latency_us_min=10, sync_latency_us_max=10))
        journal = Journal(disk, SimClock(), BookieConfig(), first_file_id=1)
        await journal.start()
        await journal.append(_record(1))
        await journal.stop()
        second = Journal(disk, SimClock(), BookieConfig(), first_file_id=2)
        await second.start()  # file 1 keeps its zeros: no replay cut them
        await second.append(_record(2))
        await second.stop()
        with pytest.raises(CorruptDataError):
            await replay(disk, JournalPosition(0, 0))

    asyncio.run(scenario())
