"""Bounding an awaitable by the injected ``Clock`` (virtual in simulation, real in production)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import Any, TypeVar

from magnetar.base.clock import Clock
from magnetar.base.errors import TimeoutError_

T = TypeVar("T")


async def with_deadline(clock: Clock, timeout_ms: int, awaitable: Awaitable[T], what: str) -> T:
    """Await ``awaitable``; cancel it and raise ``TimeoutError_`` after ``timeout_ms`` (0: no bound)."""
    task = asyncio.ensure_future(awaitable)
    if timeout_ms <= 0:
        return await task
    timer = asyncio.ensure_future(clock.sleep(timeout_ms / 1000))
    try:
        await asyncio.wait({task, timer}, return_when=asyncio.FIRST_COMPLETED)
    except asyncio.CancelledError:
        task.cancel()
        timer.cancel()
        raise
    if task.done():
        timer.cancel()
        return task.result()
    task.cancel()
    raise TimeoutError_(f"{what} took longer than {timeout_ms} ms")


def keep_in_background(task: asyncio.Task[Any], background: set[asyncio.Task[Any]]) -> None:
    """Keep ``task`` referenced until it ends; its outcome no longer matters, so it is consumed."""
    background.add(task)

    def finished(done: asyncio.Task[Any]) -> None:
        background.discard(done)
        if not done.cancelled():
            done.exception()

    task.add_done_callback(finished)
