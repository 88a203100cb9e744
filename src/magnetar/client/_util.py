"""Small helpers shared by the client modules: deadlines over the injected ``Clock`` and backoff."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable
from typing import TypeVar

from magnetar.base.clock import Clock
from magnetar.base.errors import OperationTimeoutError
from magnetar.base.limits import CLIENT_BACKOFF_INITIAL_MS, CLIENT_BACKOFF_MAX_MS
from magnetar.base.rng import Rng

R = TypeVar("R")


async def within(clock: Clock, timeout_s: float, awaitable: Awaitable[R], what: str) -> R:
    """Await ``awaitable`` for at most ``timeout_s`` of ``clock`` time, else raise ``OperationTimeoutError``.

    The deadline runs on the injected clock (virtual time in the simulator), never on the loop's
    own timer, so production and simulation time out the same way.
    """
    task = asyncio.ensure_future(awaitable)
    timer = asyncio.ensure_future(clock.sleep(max(0.0, timeout_s)))
    try:
        await asyncio.wait({task, timer}, return_when=asyncio.FIRST_COMPLETED)
    except BaseException:
        task.cancel()
        timer.cancel()
        raise
    timer.cancel()
    if task.done():
        return task.result()
    task.cancel()
    with contextlib.suppress(BaseException):
        await task
    raise OperationTimeoutError(f"{what} did not complete within {timeout_s:.3f} s")


class Backoff:
    """Exponential backoff with +-10 % jitter: 100 ms, 200 ms, ... capped at 60 s (the official client's)."""

    def __init__(self, rng: Rng, initial_ms: int = CLIENT_BACKOFF_INITIAL_MS,
                 max_ms: int = CLIENT_BACKOFF_MAX_MS) -> None:
        self._rng = rng
        self._initial_ms = initial_ms
        self._max_ms = max_ms
        self._next_ms = initial_ms

    def next_s(self) -> float:
        base = self._next_ms
        self._next_ms = min(self._max_ms, self._next_ms * 2)
        jitter = 1.0 + (self._rng.random() * 0.2 - 0.1)
        return base * jitter / 1000.0

    def reset(self) -> None:
        self._next_ms = self._initial_ms
