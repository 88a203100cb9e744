"""``PositionRangeSet``: disjoint, sorted, closed ranges ``[first, last]`` of log positions.

A cursor keeps its individually deleted entries here. Two ranges merge when one ends at the entry
just before the other begins; "just before" comes from the log (``successor``), because the next
entry after the last one of a closed ledger is entry 0 of the next non-empty ledger.

Invariants: ranges are disjoint, sorted, ``first <= last``, and no two consecutive ranges are
adjacent under the ``successor`` known when they were last touched. Lookups are O(log n),
inserts O(n) in the worst case (a list insert), which is fine for the bounded range counts used.

``add_run`` takes a whole run of entries at once (the acks of one ACK command arrive as runs of
consecutive entries): one union with whatever it overlaps or touches, two ``successor`` calls per
run instead of two per entry (issue 22, the acknowledgement pass).
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterator

from magnetar.base.errors import LimitExceededError
from magnetar.base.invariant import InvariantViolationError, invariant
from magnetar.base.types import Position

Successor = Callable[[Position], Position]


class PositionRangeSet:
    def __init__(self, count_max: int) -> None:
        self._firsts: list[Position] = []
        self._lasts: list[Position] = []
        self._count_max = count_max

    def __len__(self) -> int:
        return len(self._firsts)

    def __iter__(self) -> Iterator[tuple[Position, Position]]:
        return iter(list(zip(self._firsts, self._lasts, strict=True)))

    def clear(self) -> None:
        self._firsts.clear()
        self._lasts.clear()

    def _index_at_or_before(self, position: Position) -> int:
        """Index of the last range whose first is <= position, or -1."""
        return bisect.bisect_right(self._firsts, position) - 1

    def contains(self, position: Position) -> bool:
        i = self._index_at_or_before(position)
        return i >= 0 and position <= self._lasts[i]

    def first(self) -> tuple[Position, Position] | None:
        return (self._firsts[0], self._lasts[0]) if self._firsts else None

    def add_range(self, first: Position, last: Position, successor: Successor) -> None:
        """Add ``[first, last]`` (callers pass ranges disjoint from the set, or single entries)."""
        if first > last:  # the message is built only when it fails (per individual ack)
            raise InvariantViolationError(f"range {first}..{last} is reversed")
        i = self._index_at_or_before(first)
        if i >= 0 and last <= self._lasts[i]:
            return  # already covered
        invariant(i < 0 or first > self._lasts[i], "add_range of an overlapping range")
        invariant(
            i + 1 >= len(self._firsts) or last < self._firsts[i + 1], "add_range of an overlapping range"
        )
        merge_left = i >= 0 and successor(self._lasts[i]) == first
        merge_right = i + 1 < len(self._firsts) and successor(last) == self._firsts[i + 1]
        if merge_left and merge_right:
            self._lasts[i] = self._lasts[i + 1]
            del self._firsts[i + 1]
            del self._lasts[i + 1]
        elif merge_left:
            self._lasts[i] = last
        elif merge_right:
            self._firsts[i + 1] = first
        else:
            if len(self._firsts) >= self._count_max:
                raise LimitExceededError("MANAGED_CURSOR_RANGES_COUNT_MAX", len(self._firsts) + 1, self._count_max)
            self._firsts.insert(i + 1, first)
            self._lasts.insert(i + 1, last)

    def add_run(self, first: Position, last: Position, successor: Successor) -> bool:
        """Add ``[first, last]``, which may overlap or touch ranges of the set (the union is kept,
        merged with an adjacent range on either side). False if the set already covered it all."""
        if first > last:
            raise InvariantViolationError(f"range {first}..{last} is reversed")
        firsts, lasts = self._firsts, self._lasts
        low = bisect.bisect_left(lasts, first)  # the first range that ends at or after ``first``
        high = bisect.bisect_right(firsts, last)  # ranges [low, high) overlap [first, last]
        if high - low == 1 and firsts[low] <= first and last <= lasts[low]:
            return False  # already covered
        if low < high:
            if firsts[low] < first:
                first = firsts[low]
            if lasts[high - 1] > last:
                last = lasts[high - 1]
        if low > 0 and successor(lasts[low - 1]) == first:
            low -= 1
            first = firsts[low]
        if high < len(firsts) and successor(last) == firsts[high]:
            last = lasts[high]
            high += 1
        if low == high and len(firsts) >= self._count_max:
            raise LimitExceededError("MANAGED_CURSOR_RANGES_COUNT_MAX", len(firsts) + 1, self._count_max)
        firsts[low:high] = [first]
        lasts[low:high] = [last]
        return True

    def add(self, position: Position, successor: Successor) -> bool:
        """Add one entry; False if it was already in the set."""
        if self.contains(position):
            return False
        self.add_range(position, position, successor)
        return True

    def remove_up_to(self, position: Position, successor: Successor) -> None:
        """Drop everything ``<= position`` (a range straddling it keeps its part after it)."""
        cut = bisect.bisect_right(self._lasts, position)
        del self._firsts[:cut]
        del self._lasts[:cut]
        if self._firsts and self._firsts[0] <= position:
            self._firsts[0] = successor(position)
            invariant(self._firsts[0] <= self._lasts[0], "trimmed range became empty")
