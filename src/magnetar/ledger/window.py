"""``WindowShare``: the in-flight add windows of one ledger client's writers, shared fairly.

Issue 22, latency isolation. Every writer (``LedgerHandle``) of a ledger client may have up to
``pending_adds_count_max`` adds in flight (its *window*): one unbatched topic goes at most a window
per bookie round trip, so the window must be large for one topic's throughput. But the adds of
every ledger meet in the bookies' journals, and in a standalone in one event loop: a busy ledger
with a full window puts that many adds in each journal group and that much completion work in
each loop pass, and a synchronous producer's one add waits behind them (docs/performance.md,
"Session 12 (issue 22): latency isolation").

So the window is shared, and only while there is someone to share it with:

* a writer is **busy** while it has adds in flight (counted from its first pending add to the
  moment its table is empty again);
* a writer starts new adds only while it has fewer than ``window()`` in flight: the whole
  ``window_max`` while it is the only busy writer (a lone topic keeps its full throughput), and
  ``max(share_min, window_max // busy)`` while others are busy too: the busiest ledger stops
  refilling its window while a light ledger's add waits, so the light add's journal group and
  the loop passes before its answer hold at most a share of the busy ledger's work;
* when a writer goes idle the share grows again, and the writers waiting for room are woken at
  once (``release``), not at their next completion.

What is shared is admission only: ``append_run`` still refuses beyond ``window_max``
(``LimitExceededError``), adds already in flight are never taken back, and a writer below its
share is never held. Invariants: ``busy`` is the number of registered writers with adds in flight
(each counted once); ``window()`` is in ``[min(share_min, window_max), window_max]``.
"""

from __future__ import annotations

from typing import Protocol

from magnetar.base.invariant import invariant


class Waiting(Protocol):
    """What ``WindowShare`` wakes when the share grows (``LedgerHandle``)."""

    def wake_admission(self) -> None: ...


class WindowShare:
    """The busy writers of one ledger client and the window each may fill now."""

    __slots__ = ("_busy", "_waiting", "share_min", "window_max")

    def __init__(self, window_max: int, share_min: int) -> None:
        invariant(window_max >= 1 and share_min >= 1, "windows hold at least one add")
        self.window_max = window_max
        self.share_min = min(share_min, window_max)
        self._busy = 0
        # Writers with callers waiting for room, in the order they started waiting (a dict: no
        # duplicates, insertion order, so the wake order is the same in every run).
        self._waiting: dict[Waiting, None] = {}

    @property
    def busy(self) -> int:
        return self._busy

    def window(self) -> int:
        """How many adds a writer may have in flight now."""
        busy = self._busy
        if busy <= 1:
            return self.window_max
        share = self.window_max // busy
        return share if share > self.share_min else self.share_min

    def occupy(self) -> None:
        """A writer's table went from empty to holding adds."""
        self._busy += 1

    def release(self) -> None:
        """A writer's table went empty: the others' share grows; their waiting callers are woken."""
        invariant(self._busy > 0, "released a window share that was not held")
        self._busy -= 1
        if self._waiting:
            for writer in list(self._waiting):
                writer.wake_admission()

    def wait(self, writer: Waiting) -> None:
        """``writer`` has callers waiting for room (woken by ``release`` as well as by its own
        completions)."""
        self._waiting[writer] = None

    def done_waiting(self, writer: Waiting) -> None:
        self._waiting.pop(writer, None)
