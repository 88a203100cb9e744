"""A ``Clock`` for unit tests whose time moves only when the test calls ``advance``.

Sleepers due at or before the new time are woken in order; ready tasks get to run before time
moves (so they reach their sleep) and after (so woken tasks reach their next await).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

SETTLE_ROUNDS = 200


async def settle(rounds: int = SETTLE_ROUNDS) -> None:
    """Let every runnable task run (fakes never block on time)."""
    for _ in range(rounds):
        await asyncio.sleep(0)


class _ManualTimer:
    def __init__(self, future: asyncio.Future[None]) -> None:
        self._future = future

    def cancel(self) -> None:
        self._future.cancel()


class ManualClock:
    def __init__(self) -> None:
        self._now_ns = 0
        self._sleepers: list[tuple[int, asyncio.Future[None]]] = []

    def now_ms(self) -> int:
        return 1_700_000_000_000 + self._now_ns // 1_000_000

    def monotonic_ns(self) -> int:
        return self._now_ns

    async def sleep(self, duration_s: float) -> None:
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._sleepers.append((self._now_ns + int(duration_s * 1e9), future))
        await future

    def call_later(self, delay_s: float, callback: Callable[[], None]) -> _ManualTimer:
        """``callback`` runs when ``advance`` reaches ``delay_s`` from now (with the sleepers)."""
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._sleepers.append((self._now_ns + int(delay_s * 1e9), future))
        future.add_done_callback(lambda done: None if done.cancelled() else callback())
        return _ManualTimer(future)

    async def advance(self, duration_s: float) -> None:
        await settle()
        self._now_ns += int(duration_s * 1e9)
        due = sorted((t, i) for i, (t, _) in enumerate(self._sleepers) if t <= self._now_ns)
        woken = [self._sleepers[i][1] for _, i in due]
        self._sleepers = [(t, f) for t, f in self._sleepers if t > self._now_ns]
        for future in woken:
            if not future.done():
                future.set_result(None)
        await settle()
