"""The ``Clock`` capability: the only way cores learn the time or wait.

``runtime`` implements it with the system clock; ``sim`` with virtual time on the
deterministic event loop. Cores never call ``time.*`` or ``asyncio.sleep`` themselves.
"""

from __future__ import annotations

from typing import Protocol


class Clock(Protocol):
    def now_ms(self) -> int:
        """Wall-clock milliseconds since the Unix epoch (publish times, TTLs, retention)."""

    def monotonic_ns(self) -> int:
        """Monotonic nanoseconds: for durations and deadlines only."""

    async def sleep(self, duration_s: float) -> None:
        """Suspend the calling task for ``duration_s`` seconds of this clock's time."""
