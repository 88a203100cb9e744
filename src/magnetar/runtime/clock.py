"""System clock and an OS-seeded ``Rng``."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable
from typing import Final

from mypy_extensions import mypyc_attr

from magnetar.base.loop_ref import LoopRef
from magnetar.base.rng import SeededRng

# Bound once: compiled, a ``Final`` module global is a C static, so ``monotonic_ns`` (several
# readings per message: the publish run's start and latency, the add timeouts) is one vectorcall,
# not a lookup of ``monotonic_ns`` in the ``time`` module's dict first.
_MONOTONIC_NS: Final = time.monotonic_ns
_TIME_NS: Final = time.time_ns


@mypyc_attr(native_class=False)
class _WeaklyReferenced:
    """A Python base class, so that ``SystemClock`` has a ``__weakref__`` when compiled (the
    ledger client's deadline reapers are kept per clock in a ``WeakKeyDictionary``,
    ``ledger/_deadline.py``; mypyc's native classes have no weak references unless they derive
    from a Python class)."""


class SystemClock(_WeaklyReferenced):
    """``Clock`` over ``time`` and the running event loop."""

    def __init__(self) -> None:
        # ``call_later`` runs per journal group (the group wait's timer) and per add deadline:
        # the loop from a ``LoopRef``, not ``asyncio.get_running_loop()`` and its ``getpid``.
        self._loop = LoopRef()

    def now_ms(self) -> int:
        return _TIME_NS() // 1_000_000

    def monotonic_ns(self) -> int:
        return _MONOTONIC_NS()

    async def sleep(self, duration_s: float) -> None:
        await asyncio.sleep(duration_s)

    def call_later(self, delay_s: float, callback: Callable[[], None]) -> asyncio.TimerHandle:
        return self._loop.get().call_later(delay_s, callback)


def system_rng() -> SeededRng:
    """A ``SeededRng`` seeded from the OS; its seed is logged so a run can be reasoned about."""
    return SeededRng(int.from_bytes(os.urandom(8), "little") >> 1)
