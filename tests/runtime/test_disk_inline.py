"""``LocalFile.append_and_sync_then`` on the event loop's own thread (issue 22, session 16): a lone
small write with nothing in flight and fast recent syncs is written and synced inline (no writer
thread hand-off), answered from the next loop pass; otherwise, and whenever a fault point of the
write is armed, a writer runs it: Python's writer threads (the same ``_write_job``) or, where it is
built, the native writer (session 22, ``runtime.disk_writer``): every test runs with each."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import pytest

from magnetar import faults
from magnetar.runtime import disk as runtime_disk
from magnetar.runtime import disk_file, disk_pace, disk_threads, disk_writer
from magnetar.runtime.disk import LocalDisk
from magnetar.runtime.disk_io import _Descriptors
from tests.managed_ledger.harness import until

TORN = "bookie.journal.mid_write"
UNSYNCED = "bookie.after_write_before_fsync"


@pytest.fixture
def pace(monkeypatch: pytest.MonkeyPatch) -> disk_pace.InlinePace:
    fresh = disk_pace.InlinePace()  # no completion lost by an earlier test's closed loop
    monkeypatch.setattr(disk_file, "_PACE", fresh)
    return fresh


NATIVE = "native writer"


@pytest.fixture(params=["threads", "native"], autouse=True)
def writer(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Which writer takes the groups that are not written inline (``disk_file._native``)."""
    if request.param == "native" and not disk_writer.available():
        pytest.skip(f"no native writer: {disk_writer.REASON}")
    monkeypatch.setattr(disk_file, "_native", request.param == "native")
    return str(request.param)


class _RecordingPort:
    """A loop's native port that notes each job submitted (as ``NATIVE``) in ``names``."""

    def __init__(self, port: object, names: list[str]) -> None:
        self._port, self._names = port, names

    def submit(self, owner: object, ops: list[object]) -> None:
        self._names.append(NATIVE)
        self._port.submit(owner, ops)  # type: ignore[attr-defined]


@pytest.fixture
def job_threads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The thread each ``_write_job`` ran on, in order (``NATIVE`` for a native writer's job)."""
    names: list[str] = []
    real = disk_file._write_job
    real_port_for = disk_writer.port_for

    def recorded(*args: object) -> bool:
        names.append(threading.current_thread().name)
        return real(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(disk_file, "_write_job", recorded)
    monkeypatch.setattr(disk_writer, "port_for", lambda loop: _RecordingPort(real_port_for(loop), names))
    return names


async def _append_and_wait(file: runtime_disk.LocalFile, data: bytes) -> None:
    """``data`` appended and synced; returns once it is answered (bounded)."""
    answered = asyncio.Event()
    file.append_and_sync_then([data], lambda _error: answered.set())
    await asyncio.wait_for(answered.wait(), 10)


def test_a_lone_write_is_synced_inline_and_answered_from_the_next_loop_pass(
        tmp_path: Path, pace: disk_pace.InlinePace, job_threads: list[str]) -> None:
    async def scenario() -> None:
        file = LocalDisk(str(tmp_path)).open("f", direct=True)
        answers: list[BaseException | None] = []
        file.append_and_sync_then([b"a" * 4096], answers.append, torn_point=TORN, unsynced_point=UNSYNCED)
        assert answers == []  # never answered from inside the call
        assert job_threads == [threading.main_thread().name] and pace.inline_count == 1
        assert (tmp_path / "f").read_bytes() == b"a" * 4096  # written (and synced) before it returned
        loop = asyncio.get_running_loop()
        next_pass: asyncio.Future[None] = loop.create_future()
        loop.call_soon(next_pass.set_result, None)  # queued after the answer (the ready queue is FIFO)
        await next_pass
        assert answers == [None] and pace.pending == 0
        file.close()

    asyncio.run(scenario())


def test_a_write_while_another_is_in_flight_goes_to_a_writer_thread(
        tmp_path: Path, pace: disk_pace.InlinePace, job_threads: list[str]) -> None:
    async def scenario() -> None:
        file = LocalDisk(str(tmp_path)).open("f", direct=True)
        answers: list[BaseException | None] = []
        both = asyncio.Event()

        def done(error: BaseException | None) -> None:
            answers.append(error)
            if len(answers) == 2:
                both.set()

        file.append_and_sync_then([b"a" * 4096], done)
        file.append_and_sync_then([b"b" * 4096], done)  # the first's completion has not run yet
        await asyncio.wait_for(both.wait(), 10)
        assert answers == [None, None]
        assert job_threads[0] == threading.main_thread().name
        assert job_threads[1] != threading.main_thread().name
        assert file.read_at(0, 8192) == b"a" * 4096 + b"b" * 4096
        file.close()

    asyncio.run(scenario())


def test_slow_recent_syncs_and_large_writes_go_to_writer_threads(
        tmp_path: Path, pace: disk_pace.InlinePace, job_threads: list[str]) -> None:
    async def scenario() -> None:
        file = LocalDisk(str(tmp_path)).open("f", direct=True)
        pace.sync_ns = disk_pace.INLINE_SYNC_NS_MAX + 1_000_000  # the disk was slow lately
        pace.probe_in = 1  # and the next probe is one write away
        await _append_and_wait(file, b"s" * 4096)
        pace.sync_ns = 0
        await _append_and_wait(file, b"L" * (disk_pace.INLINE_WRITE_BYTES_MAX + 4096))
        pace.sync_ns = 0  # whatever the large write's sync took
        await _append_and_wait(file, b"i" * 4096)
        file.close()

    asyncio.run(scenario())
    main = threading.main_thread().name
    assert [name == main for name in job_threads] == [False, False, True]


def test_a_write_while_zeros_are_written_to_the_file_goes_to_a_writer_thread(
        tmp_path: Path, pace: disk_pace.InlinePace, job_threads: list[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """While ``preallocate`` writes zeros to the file (held here until released), a lone write
    below them (so it need not wait for them) goes to a writer thread: its sync would queue behind
    the zeros on the device (session 17: p50 0.85-1.1 ms against ~0.2 ms). Once the zeros are
    written, the next lone write is inline again. Negative control: without the file's zeros in
    the rule (``self._zeroing is None`` dropped from ``append_and_sync_then``) the first write
    runs inline and the last assertion fails (``[True, True]``)."""
    release = threading.Event()
    real_zeros = disk_threads._zeros_job

    def held_zeros(descriptors: _Descriptors, start: int, end: int, done: threading.Event) -> None:
        release.wait(10)
        real_zeros(descriptors, start, end, done)

    async def scenario() -> None:
        file = LocalDisk(str(tmp_path)).open("f", direct=True)
        file.append(b"h" * 4096)
        await file.preallocate(64 * 1024)  # zeros up to 64 KiB, written
        monkeypatch.setattr(disk_threads, "_zeros_job", held_zeros)
        zeros = asyncio.ensure_future(file.preallocate(128 * 1024))  # more from 64 KiB, held
        await until(lambda: file._zeroing is not None)  # the zeros job is submitted (and held)
        await _append_and_wait(file, b"z" * 4096)  # at 4 KiB, below the zeros being written: no wait for them
        release.set()
        await asyncio.wait_for(zeros, 10)
        await _append_and_wait(file, b"i" * 4096)
        assert file.read_at(4096, 8192) == b"z" * 4096 + b"i" * 4096
        file.close()

    asyncio.run(scenario())
    main = threading.main_thread().name
    assert [name == main for name in job_threads] == [False, True]


def test_a_writer_threads_timing_does_not_feed_the_average(
        tmp_path: Path, pace: disk_pace.InlinePace, job_threads: list[str]) -> None:
    """A writer thread's own timing of a write includes its wait for the GIL after the system call
    (session 17): fed into the average, it kept every later group on the threads. A write that
    goes to a thread (the disk was slow lately) and takes long leaves the average where it was.
    Negative control: with the thread's timing fed in (``pace.finished(took, True)`` for every
    write, the session-16 rule) the 20 ms write below leaves the average above the bound and the
    next lone write goes to a thread: the assertions below fail."""

    async def scenario() -> None:
        file = LocalDisk(str(tmp_path)).open("f", direct=True)
        answered = asyncio.Event()
        pace.pending = 1  # a write in flight: the next one goes to a thread
        real_write_job = disk_file._write_job

        def slow_job(*args: object) -> bool:
            result = real_write_job(*args)  # type: ignore[arg-type]
            # A thread that waited 20 ms for the GIL after its sync: a real wait is the point, the
            # thread's own timing of the write must hold it.
            threading.Event().wait(0.02)
            return result

        disk_file._write_job = slow_job  # type: ignore[assignment]
        try:
            file.append_and_sync_then([b"t" * 4096], lambda _error: answered.set())
            await asyncio.wait_for(answered.wait(), 10)
        finally:
            disk_file._write_job = real_write_job
        pace.pending -= 1  # the write "in flight" above never was
        assert pace.sync_ns == 0
        assert pace.inline_ok(4096, True, "", "")  # the next lone write is inline
        pace.finished(0, True)
        file.close()

    asyncio.run(scenario())


def test_a_slow_spell_probes_the_disk_inline_at_a_doubling_gap_until_a_probe_is_fast() -> None:
    """While the inline writes' average is above the bound, one eligible write in ``probe_gap``
    still runs inline (a probe); a slow probe doubles the gap (up to ``INLINE_PROBE_GAP_MAX``), a
    fast one ends the spell at once. Negative control: without probes (the session-16 rule, the
    average only fed by inline writes) no write would ever run inline again after a slow spell:
    ``decisions`` would be all False."""
    pace = disk_pace.InlinePace()
    # Slow, but less than twice the bound: the first gap is 1 (a slower write's is longer: below).
    slow, fast = 3 * disk_pace.INLINE_SYNC_NS_MAX // 2, disk_pace.INLINE_SYNC_NS_MAX // 4

    def write(took_ns: int) -> bool:
        inline = pace.inline_ok(4096, True, "", "")
        pace.finished(took_ns, inline)
        return inline

    while pace.sync_ns <= disk_pace.INLINE_SYNC_NS_MAX:  # inline writes get slow
        assert write(slow)
    assert pace.probe_gap == 1 and pace.probe_in == 1
    decisions = [write(slow) for _ in range(1 + 2 + 4 + 8 + 5)]
    inline_at = [index for index, inline in enumerate(decisions) if inline]
    # Probes after gaps of 1, 2, 4 and 8 writes (each probe slow); the fifth is 16 away.
    assert inline_at == [1, 4, 9, 18] and pace.probe_gap == 16 and pace.probes_count == 4
    for _ in range(disk_pace.INLINE_PROBE_GAP_MAX * 3):  # the gap stops doubling at its bound
        write(slow)
    assert pace.probe_gap == disk_pace.INLINE_PROBE_GAP_MAX
    while not write(fast):  # until the next probe, which is fast
        pass
    assert pace.sync_ns == fast and pace.probe_gap == 1
    assert all(write(fast) for _ in range(10))  # inline again, every write


@pytest.mark.parametrize("point", [TORN, UNSYNCED])
def test_an_armed_hang_holds_the_write_on_a_writer_thread_not_the_loop(
        tmp_path: Path, pace: disk_pace.InlinePace, job_threads: list[str], point: str) -> None:
    """Control: with the point unarmed the same write runs inline (first test); armed inline, a
    hang would block the loop and this test could not release it."""

    async def scenario() -> None:
        file = LocalDisk(str(tmp_path)).open("f", direct=True)
        faults.arm(point, "hang")
        answered = asyncio.Event()
        try:
            file.append_and_sync_then([b"h" * 8192], lambda _error: answered.set(), torn_point=TORN,
                                      unsynced_point=UNSYNCED)
            # A real wait is the point here: the loop's own timers keep firing while a writer thread
            # is held at the point (inline, the hang would stop this loop and nothing could
            # release it). Bounded: 200 timer rounds of 5 ms at most.
            for _ in range(200):
                if faults.holding(point):
                    break
                await asyncio.sleep(0.005)
            assert faults.holding(point) and point in faults.reached() and not answered.is_set()
        finally:
            faults.release(point)
        await asyncio.wait_for(answered.wait(), 10)
        assert job_threads and job_threads[0] != threading.main_thread().name
        file.close()

    try:
        asyncio.run(scenario())
    finally:
        faults.disarm_all()


def test_a_very_slow_inline_sync_keeps_the_next_writes_off_the_loop_for_as_long_as_it_took() -> None:
    """An inline sync that took 20 ms stalled the loop for 20 ms; in a slow spell the next sync is
    likely as slow, so the next probe comes one write per bound later (80 writes, ~40 ms at
    2,000 groups/s), not after one write, and a slow probe after it waits at least as long as it
    took. Negative control shown: with the session-17 rule (the gap 1, doubling after slow probes)
    the gap after the slow sync is 1 (the second write after it a probe inline) and the first
    assertion on the gap fails, ``assert (1 == 80)``."""
    pace = disk_pace.InlinePace()
    bound = disk_pace.INLINE_SYNC_NS_MAX

    def write(took_ns: int) -> bool:
        inline = pace.inline_ok(4096, True, "", "")
        pace.finished(took_ns, inline)
        return inline

    assert all(write(bound // 2) for _ in range(8))  # a fast disk: every lone write inline
    assert write(20_000_000)  # a 20 ms sync, inline: the loop stood still for it
    assert pace.probe_gap == 80 and pace.probe_in == 80
    decisions = [write(bound // 2) for _ in range(81)]
    assert decisions.index(True) == 80 and pace.probe_gap == 1  # the probe, fast: the spell is over
    assert write(40_000_000) and pace.probe_gap == 160  # at the next slow sync, as long again
    assert [write(50_000_000) for _ in range(161)].index(True) == 160  # a slow probe ...
    assert pace.probe_gap == disk_pace.INLINE_PROBE_GAP_MAX  # ... doubles the gap, capped at the bound
