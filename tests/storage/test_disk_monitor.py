"""``DiskMonitor``: free space against ``disk_free_bytes_min``, with hysteresis, and its loop on
the virtual clock. The bookie's side (read-only adds, reads still served) is in
``tests/storage/test_storage.py``."""

from __future__ import annotations

import asyncio
import dataclasses

from magnetar.sim import SimClock, SimDisk, SimDiskConfig, run
from magnetar.storage.disk_monitor import DiskMonitor
from tests.storage.harness import CONFIG

KIB = 1024
CAPACITY = 1024 * KIB
#: Read-only below 100 KiB free, writable again from 200 KiB free.
THRESHOLDS = dataclasses.replace(CONFIG, disk_free_bytes_min=100 * KIB, disk_check_interval_ms=1_000)


def _disk_with_free(free_bytes: int) -> SimDisk:
    disk = SimDisk(SimDiskConfig(capacity_bytes=CAPACITY))
    disk.open("filler").append(b"f" * (CAPACITY - free_bytes))
    assert disk.free_bytes() == free_bytes
    return disk


def _wanted(free_bytes: int, read_only: bool) -> bool:
    return DiskMonitor(_disk_with_free(free_bytes), SimClock(), THRESHOLDS).read_only_wanted(read_only)


def test_read_only_below_the_threshold_writable_again_only_at_twice_it() -> None:
    # writable: turns read-only below 100 KiB
    assert not _wanted(100 * KIB, read_only=False)
    assert _wanted(100 * KIB - 1, read_only=False)
    # read-only: stays so up to just below 200 KiB (no flapping around the threshold)
    assert _wanted(100 * KIB, read_only=True)
    assert _wanted(200 * KIB - 1, read_only=True)
    assert not _wanted(200 * KIB, read_only=True)


def test_low_is_the_start_threshold() -> None:
    assert DiskMonitor(_disk_with_free(99 * KIB), SimClock(), THRESHOLDS).low()
    assert not DiskMonitor(_disk_with_free(100 * KIB), SimClock(), THRESHOLDS).low()
    assert not DiskMonitor(_disk_with_free(0), SimClock(), CONFIG).low()  # threshold 0: never low


def test_loop_checks_every_interval_while_serving() -> None:
    async def scenario() -> None:
        clock = SimClock()
        monitor = DiskMonitor(_disk_with_free(CAPACITY // 2), clock, THRESHOLDS)
        checks: list[int] = []
        serving = True
        loop = asyncio.get_running_loop().create_task(
            monitor.run(lambda: serving, lambda: checks.append(clock.monotonic_ns()))
        )
        await clock.sleep(3.5)  # virtual time (simulated clock/loop): no real wait
        assert len(checks) == 3 and checks[0] >= 1_000_000_000
        serving = False
        await loop  # ends at its next wake-up, without a check
        assert len(checks) == 3

    run(scenario())
