"""``LedgerList``: the ordered ledgers of one managed ledger and position arithmetic over them.

Each listed ledger holds entries ``0..entries_count-1``; the last one may be the *live* (current)
ledger, whose count is the number of appends acknowledged so far rather than the stored count.
Positions between ledgers are ordered by ledger id, so "the entry after p" skips empty ledgers
and crosses to entry 0 of the next ledger that has entries.

Invariants: ledger ids strictly grow; at most ``MANAGED_LEDGER_LEDGERS_COUNT_MAX`` ledgers; the
live ledger, if any, is the last one.
"""

from __future__ import annotations

import bisect

from magnetar.base.errors import InvalidArgumentError, LimitExceededError
from magnetar.base.invariant import InvariantViolationError, invariant
from magnetar.base.limits import MANAGED_LEDGER_LEDGERS_COUNT_MAX
from magnetar.base.types import Position
from magnetar.metadata.records import LedgerInfo


class LedgerList:
    def __init__(self) -> None:
        self.infos: list[LedgerInfo] = []
        self.ids: list[int] = []
        self.live_ledger_id = -1
        self.live_count = 0
        self.live_bytes = 0

    def set(self, infos: list[LedgerInfo]) -> None:
        ids = [info.ledger_id for info in infos]
        invariant(ids == sorted(set(ids)), f"ledger ids must strictly grow: {ids}")
        if len(ids) > MANAGED_LEDGER_LEDGERS_COUNT_MAX:
            raise LimitExceededError("MANAGED_LEDGER_LEDGERS_COUNT_MAX", len(ids), MANAGED_LEDGER_LEDGERS_COUNT_MAX)
        self.infos = infos
        self.ids = ids

    def set_live(self, ledger_id: int) -> None:
        """Appends now go to ``ledger_id`` (the last listed ledger), none acknowledged yet."""
        self.live_ledger_id = ledger_id
        self.live_count = 0
        self.live_bytes = 0

    def find(self, ledger_id: int) -> LedgerInfo | None:
        index = bisect.bisect_left(self.ids, ledger_id)
        if index < len(self.ids) and self.ids[index] == ledger_id:
            return self.infos[index]
        return None

    def info_of(self, ledger_id: int) -> LedgerInfo:
        found = self.find(ledger_id)
        if found is None:  # the message is built only when it fails (per read)
            raise InvariantViolationError(f"ledger {ledger_id} is not listed")
        return found

    def entries_in(self, index: int) -> int:
        if index == len(self.ids) - 1 and self.ids[index] == self.live_ledger_id:
            return self.live_count
        return self.infos[index].entries_count

    def with_live_stats(self) -> list[LedgerInfo]:
        """The list with the live ledger's count and size filled in."""
        result = list(self.infos)
        if result and result[-1].ledger_id == self.live_ledger_id:
            last = result[-1]
            result[-1] = LedgerInfo(last.ledger_id, self.live_count, self.live_bytes, last.timestamp_ms)
        return result

    def any_offloaded(self) -> bool:
        """Whether a listed ledger's offload is complete, as ``with_live_stats`` would say (the
        live ledger never is): no copy of the list (the broker's policy pass asks every topic)."""
        infos = self.infos
        last = len(infos) - 1
        for index, info in enumerate(infos):
            offload = info.offload
            if offload is not None and offload.complete and (
                    index != last or info.ledger_id != self.live_ledger_id):
                return True
        return False

    @property
    def last_ledger_id(self) -> int:
        return self.ids[-1] if self.ids else -1

    def last_stored_position(self) -> Position | None:
        """The last entry of the last listed ledger that has entries (by stored counts)."""
        for info in reversed(self.infos):
            if info.entries_count > 0:
                return Position(info.ledger_id, info.entries_count - 1)
        return None

    def number_of_entries(self) -> int:
        return sum(self.entries_in(i) for i in range(len(self.ids)))

    def first_at_or_after(self, position: Position) -> Position | None:
        """The first listed entry at or after ``position``; None past the end."""
        start = bisect.bisect_left(self.ids, position.ledger_id)
        for index in range(start, len(self.ids)):
            ledger_id = self.ids[index]
            entry_id = max(position.entry_id, 0) if ledger_id == position.ledger_id else 0
            if entry_id < self.entries_in(index):
                return Position(ledger_id, entry_id)
        return None

    def next_position(self, position: Position) -> Position:
        """The entry after ``position`` in the log, or where the next append would land."""
        found = self.first_at_or_after(Position(position.ledger_id, position.entry_id + 1))
        if found is not None:
            return found
        if not self.ids or position.ledger_id >= self.ids[-1]:
            return position.next() if position.ledger_id >= 0 else Position(max(self.last_ledger_id, 0), 0)
        return Position(self.ids[-1], self.entries_in(len(self.ids) - 1))

    def count_entries(self, after: Position, upto: Position) -> int:
        """Listed entries ``p`` with ``after < p <= upto``."""
        if upto <= after:
            return 0
        total = 0
        start = bisect.bisect_left(self.ids, after.ledger_id)
        for index in range(start, len(self.ids)):
            ledger_id = self.ids[index]
            if ledger_id > upto.ledger_id:
                break
            low = after.entry_id + 1 if ledger_id == after.ledger_id else 0
            high = self.entries_in(index) - 1
            if ledger_id == upto.ledger_id:
                high = min(high, upto.entry_id)
            total += max(0, high - low + 1)
        return total

    def last_in_ledger(self, ledger_id: int) -> int:
        index = bisect.bisect_left(self.ids, ledger_id)
        if index >= len(self.ids) or self.ids[index] != ledger_id:
            raise InvariantViolationError(f"ledger {ledger_id} is not listed")
        return self.entries_in(index) - 1

    def position_after_n(self, start: Position, n: int, end: Position) -> Position:
        """The entry ``n`` entries after ``start`` (start excluded), clamped to ``end``."""
        if n < 0:
            raise InvalidArgumentError(f"n must be >= 0, got {n}")
        position = start
        remaining = n
        while remaining > 0:
            found = self.first_at_or_after(Position(position.ledger_id, position.entry_id + 1))
            if found is None or found > end:
                break
            last = self.last_in_ledger(found.ledger_id)
            if found.ledger_id == end.ledger_id:
                last = min(last, end.entry_id)
            step = min(remaining, last - found.entry_id + 1)
            position = Position(found.ledger_id, found.entry_id + step - 1)
            remaining -= step
        return position
