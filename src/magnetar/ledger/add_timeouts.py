"""``AddTimeouts``: the add timeout of every writer of one ledger client, on one ``Clock`` timer.

BookKeeper's client has one timeout monitor per client, not a timer per add or per ledger. A
writer that gets adds while it had none in flight asks to be watched (``watch``, once per busy
spell); one timer of the client's ``Clock`` checks the watched writers when the earliest of
their deadlines is due (``LedgerHandle.check_add_deadlines``: what is overdue, and when it wants
to be checked next), and a writer with nothing in flight leaves the watch until its next add.

Why (issue 22, docs/performance.md "Session 14: one receive, many topics"): with a task per writer
started on the first add after an idle spell, 100,000 topics round-robin paid a task, a coroutine
and a sleep timer per message (each topic's one add in flight, then idle); with thousands of
topics that was the largest single per-message cost of the unbatched path.
"""

from __future__ import annotations

from typing import Protocol

from magnetar.base.clock import Clock, Timer


class Watched(Protocol):
    def check_add_deadlines(self, now_ns: int) -> int | None:
        """Fail what is overdue; when to be checked next (monotonic ns), or None once nothing is
        in flight (the writer then leaves the watch; its next add asks again)."""


class AddTimeouts:
    """One timer for many writers: fires at the earliest deadline any watched writer asked for."""

    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self._watched: list[Watched] = []
        self._timer: Timer | None = None
        self._due_ns = 0  # when the armed timer fires
        self.ticks_count = 0  # checks run (tests, stats)

    @property
    def watched_count(self) -> int:
        return len(self._watched)

    def watch(self, writer: Watched, deadline_ns: int) -> None:
        """Check ``writer`` at ``deadline_ns`` at the latest (its first add's deadline). The
        writer asks once per busy spell (it keeps its own flag)."""
        self._watched.append(writer)
        if self._timer is None or deadline_ns < self._due_ns:
            self._arm(deadline_ns)

    def close(self) -> None:
        """No more checks (the client closed; its writers are closed or failed)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._watched = []

    def _arm(self, due_ns: int) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._due_ns = due_ns
        delay_ns = due_ns - self._clock.monotonic_ns()
        self._timer = self._clock.call_later(delay_ns / 1e9 if delay_ns > 0 else 0.0, self._tick)

    def _tick(self) -> None:
        self._timer = None
        self.ticks_count += 1
        now_ns = self._clock.monotonic_ns()
        keep: list[Watched] = []
        next_ns = -1
        # A check may fail a writer and so call back into ``watch`` (a replaced bookie's adds
        # resent): the list is swapped first, and those land in the new one.
        watched, self._watched = self._watched, keep
        for writer in watched:
            due = writer.check_add_deadlines(now_ns)
            if due is None:
                continue
            keep.append(writer)
            if next_ns < 0 or due < next_ns:
                next_ns = due
        if next_ns >= 0 and (self._timer is None or next_ns < self._due_ns):
            self._arm(next_ns)
