"""The ``Clock`` capability: the only way cores learn the time or wait.

``runtime`` implements it with the system clock; ``sim`` with virtual time on the
deterministic event loop. Cores never call ``time.*``, ``asyncio.sleep`` or the loop's
timers themselves.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol


class Timer(Protocol):
    """A callback scheduled with ``Clock.call_later``."""

    def cancel(self) -> None:
        """Do not run the callback (no effect once it ran)."""


class Clock(Protocol):
    def now_ms(self) -> int:
        """Wall-clock milliseconds since the Unix epoch (publish times, TTLs, retention)."""

    def monotonic_ns(self) -> int:
        """Monotonic nanoseconds: for durations and deadlines only."""

    async def sleep(self, duration_s: float) -> None:
        """Suspend the calling task for ``duration_s`` seconds of this clock's time."""

    def call_later(self, delay_s: float, callback: Callable[[], None]) -> Timer:
        """Run ``callback`` on the running event loop once ``delay_s`` seconds of this clock's
        time have passed (a timer without a task: cheaper than a task that sleeps)."""
