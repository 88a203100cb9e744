"""Waiting on an event with a deadline measured by the injected ``Clock`` (virtual in the simulator)."""

from __future__ import annotations

import asyncio
import logging

from magnetar.base.clock import Clock


async def wait_event_or_timeout(clock: Clock, event: asyncio.Event, timeout_s: float) -> bool:
    """Wait until ``event`` is set or ``timeout_s`` of clock time passed; True if the event fired."""
    if event.is_set():
        return True
    waiter = asyncio.ensure_future(event.wait())
    sleeper = asyncio.ensure_future(clock.sleep(timeout_s))
    try:
        await asyncio.wait({waiter, sleeper}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        waiter.cancel()
        sleeper.cancel()
    return event.is_set()


def watch_task(task: asyncio.Task[None], log: logging.Logger) -> asyncio.Task[None]:
    """Retrieve and log how a background task ended, so no failure goes unnoticed."""

    def _done(finished: asyncio.Task[None]) -> None:
        if finished.cancelled():
            return
        error = finished.exception()
        if error is not None:
            log.error("background task %s ended: %r", finished.get_name(), error)

    task.add_done_callback(_done)
    return task
