"""Waiting on an event with a deadline measured by the injected ``Clock`` (virtual in the simulator)."""

from __future__ import annotations

import asyncio

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
