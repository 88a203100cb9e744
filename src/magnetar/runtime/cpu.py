"""This process's CPU use, for the broker's load report (``control.load``): the runtime measures,
the core only receives a number.

``CpuMeter.percent()`` is the CPU time (user + system) this process used since the previous call,
as a percent of the wall time between the calls (100 = one core busy), the way Pulsar reports a
broker's ``cpu.usage``.
"""

from __future__ import annotations

import os
import time


class CpuMeter:
    def __init__(self) -> None:
        self._last_cpu_s = self._cpu_s()
        self._last_wall_s = time.monotonic()

    @staticmethod
    def _cpu_s() -> float:
        times = os.times()
        return times.user + times.system

    def percent(self) -> float:
        cpu_s, wall_s = self._cpu_s(), time.monotonic()
        elapsed = wall_s - self._last_wall_s
        used = cpu_s - self._last_cpu_s
        self._last_cpu_s, self._last_wall_s = cpu_s, wall_s
        return 0.0 if elapsed <= 0 else max(0.0, 100.0 * used / elapsed)
