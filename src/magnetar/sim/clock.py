"""``SimClock``: the ``Clock`` capability over the simulated loop's virtual time.

``now_ms`` is a fixed epoch base plus virtual time plus this clock's skew (each node may be
skewed, and the skew may jump, as NTP makes real clocks do); ``monotonic_ns`` is virtual time
and never goes back. ``sleep`` sleeps in virtual time.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from magnetar.sim.incarnation import check_alive, current_incarnation
from magnetar.sim.loop import SimLoop

#: 2023-11-14T22:13:20Z: every simulated run starts its wall clock here.
EPOCH_BASE_MS = 1_700_000_000_000


class SimClock:
    """A node's clock. Must be used from tasks running on a ``SimLoop`` (or any asyncio loop)."""

    def __init__(self, *, skew_ms: int = 0, epoch_base_ms: int = EPOCH_BASE_MS) -> None:
        self.skew_ms = skew_ms
        self._epoch_base_ms = epoch_base_ms

    def now_ms(self) -> int:
        return self._epoch_base_ms + self.monotonic_ns() // 1_000_000 + self.skew_ms

    def monotonic_ns(self) -> int:
        check_alive()
        loop = asyncio.get_running_loop()
        if isinstance(loop, SimLoop):
            return loop.now_ns
        return round(loop.time() * 1_000_000_000)

    async def sleep(self, duration_s: float) -> None:
        check_alive()
        await asyncio.sleep(max(0.0, duration_s))
        check_alive()

    def call_later(self, delay_s: float, callback: Callable[[], None]) -> asyncio.TimerHandle:
        """A timer in virtual time; it runs only while this node's incarnation is alive (a
        crashed node's timers do nothing, as its sleeping tasks never wake)."""
        check_alive()
        incarnation = current_incarnation.get()

        def fire() -> None:
            if incarnation is None or incarnation.alive:
                callback()

        return asyncio.get_running_loop().call_later(max(0.0, delay_s), fire)

    def jump(self, delta_ms: int) -> None:
        """Step the wall clock (``now_ms``) by ``delta_ms``; ``monotonic_ns`` is unaffected."""
        self.skew_ms += delta_ms
