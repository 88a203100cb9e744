"""``DiskMonitor``: the bookie's free disk space against its thresholds.

Below ``disk_free_bytes_min`` free bytes a writable bookie turns read-only (adds answer
READ_ONLY, reads go on); it turns writable again only at twice that (hysteresis, so a bookie
near the threshold does not flap). ``run`` checks every ``disk_check_interval_ms``.
"""

from __future__ import annotations

from collections.abc import Callable

from magnetar.base.clock import Clock
from magnetar.base.io import Disk
from magnetar.storage.config import BookieConfig


class DiskMonitor:
    def __init__(self, disk: Disk, clock: Clock, config: BookieConfig) -> None:
        self._disk = disk
        self._clock = clock
        self._config = config

    def free_bytes(self) -> int:
        return self._disk.free_bytes()

    def low(self) -> bool:
        """Whether the disk is below the threshold (a bookie starts read-only then)."""
        return self._disk.free_bytes() < self._config.disk_free_bytes_min

    def read_only_wanted(self, read_only: bool) -> bool:
        """Whether a bookie that is ``read_only`` now should be read-only: a writable one turns
        read-only below the threshold, a read-only one stays so below twice the threshold."""
        free = self._disk.free_bytes()
        threshold = self._config.disk_free_bytes_min
        return free < 2 * threshold if read_only else free < threshold

    async def run(self, serving: Callable[[], bool], check: Callable[[], None]) -> None:
        """Call ``check`` every ``disk_check_interval_ms`` while ``serving()``."""
        while serving():
            await self._clock.sleep(self._config.disk_check_interval_ms / 1000)
            if serving():
                check()
