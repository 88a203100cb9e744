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

**Large adds, a window counted in bytes too.** A writer alone (no other busy writer) whose adds
in flight average at least ``LARGE_ADD_BYTES_MIN`` (a batched producer's entries) may have up to
``LARGE_WINDOW_FACTOR`` times the window in flight, as long as those adds hold less than
``WINDOW_BYTES_MAX``: with 100 KiB entries a window of 32 is 3.2 MiB per round, less than the
two 4 MiB journal groups a bookie keeps in flight, so the round trip, not the disk, set the
ingest (``--blast`` batched, docs/performance.md "Session 13 (issue 22): isolation and ingest").
Small adds (an unbatched producer's) keep the count window: their cost is per add, in the loop
passes and groups a light ledger's add would wait behind. The extension ends as soon as another
writer is busy (its share is then the count share; what is in flight drains), so a light ledger
waits behind at most ``WINDOW_BYTES_MAX`` of a batched ledger's adds, once.

What is shared is admission only: ``append_run`` still refuses beyond ``window_max``
(``LimitExceededError``), adds already in flight are never taken back, and a writer below its
share is never held. Invariants: ``busy`` is the number of registered writers with adds in flight
(each counted once); ``window()`` is in ``[min(share_min, window_max), window_max]``.
"""

from __future__ import annotations

from typing import Protocol

from magnetar.base.invariant import invariant
from magnetar.base.limits import KIB, MIB

#: The average size of the adds in flight from which a lone writer's window may grow (a batched
#: entry; an unbatched 1 KiB message is far below it).
LARGE_ADD_BYTES_MIN = 16 * KIB
#: How far a lone writer's window may grow for large adds (in adds: window_max times this).
LARGE_WINDOW_FACTOR = 4
#: The bytes a lone writer's large adds may hold in flight beyond its count window: two journal
#: groups of ``journal_group_bytes_max`` (4 MiB), the groups a bookie keeps in flight.
WINDOW_BYTES_MAX = 8 * MIB


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

    @property
    def count_max(self) -> int:
        """The most adds a writer may ever have in flight (the large-add window)."""
        return self.window_max * LARGE_WINDOW_FACTOR

    def window_for(self, pending_count: int, pending_bytes: int) -> int:
        """How many adds a writer with ``pending_count`` adds of ``pending_bytes`` in flight may
        have in flight now: ``window()``, grown for large adds while the writer is alone (above):
        as many more adds of the average size in flight as fit below ``WINDOW_BYTES_MAX``, up to
        ``count_max``, never below ``window_max``."""
        if self._busy > 1 or pending_count == 0 or pending_bytes < LARGE_ADD_BYTES_MIN * pending_count:
            return self.window()
        grown = pending_count + (WINDOW_BYTES_MAX - pending_bytes) // (pending_bytes // pending_count)
        limit = grown if grown < self.count_max else self.count_max
        return limit if limit > self.window_max else self.window_max

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
