"""One timer for the age-based rollover of every managed ledger of a factory (issue 22).

A managed ledger rolls its ledger over once it holds entries and is ``rollover_time_s_max`` old,
even when no append comes to check it (``AppendPipeline.check_age``). Each managed ledger used to
sleep in a task of its own until that age: at 100,000 topics, 100,000 tasks (a task, a coroutine
and its frame, a timer handle, a context: ~1.5 KiB each) for a check due every four hours.

Here one task per factory sleeps until the earliest due time in a heap of
``(due_ns, sequence, weak reference)``, runs the checks that are due, and re-arms each at the time
its check returns (``None``: no longer writable, dropped). A managed ledger is held weakly: one
closed and dropped leaves a dead entry that its wake-up discards. Scheduling a time earlier than
the one the task sleeps to restarts the sleep. Nothing here runs per message.
"""

from __future__ import annotations

import asyncio
import heapq
import weakref
from typing import Protocol

from magnetar.base.clock import Clock


class AgeChecked(Protocol):
    def check_age(self, now_ns: int) -> int | None:
        """Roll over if due; the next time (monotonic ns) to be called, None for never again."""


class RolloverTimer:
    """The shared timer: ``schedule(due_ns, target)``; ``close()`` stops it."""

    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self._heap: list[tuple[int, int, weakref.ref[AgeChecked]]] = []
        self._sequence = 0  # ties broken in scheduling order (weak references do not compare)
        self._task: asyncio.Task[None] | None = None
        self._armed_ns: int | None = None  # when the running task wakes next
        self._closed = False

    def __len__(self) -> int:
        return len(self._heap)

    def schedule(self, due_ns: int, target: AgeChecked) -> None:
        """Call ``target.check_age`` at ``due_ns`` (monotonic), then at the times it returns."""
        if self._closed:
            return
        self._push(due_ns, weakref.ref(target))
        task = self._task
        if task is None or task.done():
            self._task = asyncio.ensure_future(self._run())
        elif self._armed_ns is not None and due_ns < self._armed_ns:
            task.cancel()  # it sleeps past the new time: sleep again, to the earliest
            self._task = asyncio.ensure_future(self._run())

    def _push(self, due_ns: int, ref: weakref.ref[AgeChecked]) -> None:
        heapq.heappush(self._heap, (due_ns, self._sequence, ref))
        self._sequence += 1

    async def _run(self) -> None:
        heap = self._heap
        while heap:
            wait_ns = heap[0][0] - self._clock.monotonic_ns()
            if wait_ns > 0:
                self._armed_ns = heap[0][0]
                await self._clock.sleep(wait_ns / 1e9)
                continue
            self._armed_ns = None
            now_ns = self._clock.monotonic_ns()
            while heap and heap[0][0] <= now_ns:
                _, _, ref = heapq.heappop(heap)
                target = ref()
                if target is None:
                    continue
                next_ns = target.check_age(now_ns)
                if next_ns is not None:
                    self._push(next_ns, ref)
        self._armed_ns = None

    def close(self) -> None:
        self._closed = True
        self._heap.clear()
        task, self._task = self._task, None
        if task is not None and not task.done():
            task.cancel()
