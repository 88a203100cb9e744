"""System clock and an OS-seeded ``Rng``."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable

from mypy_extensions import mypyc_attr

from magnetar.base.rng import SeededRng


@mypyc_attr(native_class=False)
class _WeaklyReferenced:
    """A Python base class, so that ``SystemClock`` has a ``__weakref__`` when compiled (the
    ledger client's deadline reapers are kept per clock in a ``WeakKeyDictionary``,
    ``ledger/_deadline.py``; mypyc's native classes have no weak references unless they derive
    from a Python class)."""


class SystemClock(_WeaklyReferenced):
    """``Clock`` over ``time`` and the running event loop."""

    def now_ms(self) -> int:
        return time.time_ns() // 1_000_000

    def monotonic_ns(self) -> int:
        return time.monotonic_ns()

    async def sleep(self, duration_s: float) -> None:
        await asyncio.sleep(duration_s)

    def call_later(self, delay_s: float, callback: Callable[[], None]) -> asyncio.TimerHandle:
        return asyncio.get_running_loop().call_later(delay_s, callback)


def system_rng() -> SeededRng:
    """A ``SeededRng`` seeded from the OS; its seed is logged so a run can be reasoned about."""
    return SeededRng(int.from_bytes(os.urandom(8), "little") >> 1)
