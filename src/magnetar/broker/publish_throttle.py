"""A topic's publish-rate throttle (Pulsar's publish rate policy): one-second windows, waiters
in arrival (SEND) order; a publish waits for room in the window, it is never dropped.

Split out of ``broker/topic.py`` (issue 22): most topics never have a publish rate, and the
throttle's state (a lock and the window's counts) is made only for those that do.
"""

from __future__ import annotations

import asyncio

from magnetar.base.clock import Clock
from magnetar.catalog.policies import EffectivePolicies


class PublishThrottle:
    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self._lock = asyncio.Lock()
        self._window_end_ns = 0
        self._window_msgs = 0
        self._window_bytes = 0

    async def wait(self, policies: EffectivePolicies, messages: int, size: int) -> None:
        """Wait for room in the current one-second window; waiters go in arrival (SEND) order."""
        clock = self._clock
        async with self._lock:
            rate_msgs, rate_bytes = policies.publish_rate_msgs_per_s, policies.publish_rate_bytes_per_s
            now = clock.monotonic_ns()
            if now >= self._window_end_ns:
                self._window_end_ns, self._window_msgs, self._window_bytes = now + 1_000_000_000, 0, 0
            full = (rate_msgs and self._window_msgs >= rate_msgs) or (rate_bytes and self._window_bytes >= rate_bytes)
            if full:
                await clock.sleep((self._window_end_ns - now) / 1e9)
                self._window_end_ns = max(clock.monotonic_ns(), self._window_end_ns) + 1_000_000_000
                self._window_msgs = self._window_bytes = 0
            self._window_msgs += messages
            self._window_bytes += size
