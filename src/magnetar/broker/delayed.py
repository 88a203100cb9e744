"""Delayed delivery: the in-memory index of a Shared/Key_Shared subscription's delayed entries.

A stored entry whose metadata has ``deliver_at_time`` (ms since the epoch, any precision; the
official client's ``deliver_at``/``deliver_after``) later than the clock's ``now_ms`` is not sent
when the dispatcher reads it: it goes into this index, and once due it is put into the
dispatcher's replay set (Pulsar does the same: due entries are redelivered by position).
Exclusive and Failover subscriptions deliver at once, as Pulsar does.

What is true:
* The index holds at most ``entries_max`` entries (``BROKER_DELAYED_INDEX_ENTRIES_MAX`` by
  default), each a packed int (deliver_at << 128 | ledger << 64 | entry) in a heap: about 56
  bytes each, so one subscription's index stays under ``BROKER_DELAYED_INDEX_BYTES_MAX``.
* Overflow: a delayed entry read while the index is full is *not* indexed and stays
  unacknowledged in the log. The tracker remembers the first such position (``overflow_from``);
  every later delayed entry read is left out too, until the index has drained to half its bound.
  Then the dispatcher rebuilds: it reads the log again from ``overflow_from`` up to its read
  position (``BROKER_DELAYED_REBUILD_READ_COUNT`` entries per pass) and indexes the delayed
  entries it finds that are neither acknowledged nor in flight, until the index is full again
  (``overflow_from`` moves there) or the read position is reached (overflow over).
* Restart: nothing is persisted. A new dispatcher reads from the cursor's mark-delete position,
  so every unacknowledged delayed entry is read again and indexed (or overflows) the same way.
* Time comes from the injected ``Clock`` only; the dispatcher arms one timer (``Clock.sleep``)
  for the earliest deadline and is woken by it.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable

from magnetar.base.invariant import invariant
from magnetar.base.limits import BROKER_DELAYED_INDEX_ENTRIES_MAX
from magnetar.base.types import Position
from magnetar.broker.config import BrokerConfig

_SHIFT = 64
_MASK = (1 << _SHIFT) - 1


def delayed_delivery_switch(config: BrokerConfig) -> Callable[[], bool]:
    """The on/off switch a dispatcher asks (Pulsar's delayedDeliveryEnabled); policies may replace it."""
    return lambda: config.delayed_delivery


class DelayedDeliveryTracker:
    def __init__(self, entries_max: int = BROKER_DELAYED_INDEX_ENTRIES_MAX) -> None:
        invariant(1 <= entries_max <= BROKER_DELAYED_INDEX_ENTRIES_MAX,
                  f"delayed index bound must be 1..{BROKER_DELAYED_INDEX_ENTRIES_MAX}")
        self.entries_max = entries_max
        self._heap: list[int] = []
        #: First position of a delayed entry left out because the index was full (None: none).
        self.overflow_from: Position | None = None
        self.overflowed_count = 0  # entries left out, ever (for stats and tests)

    def __len__(self) -> int:
        return len(self._heap)

    @property
    def overflowing(self) -> bool:
        return self.overflow_from is not None

    def add(self, position: Position, deliver_at_ms: int) -> bool:
        """Index ``position``; False (and overflow noted) when it must stay in the log for now."""
        if self.overflow_from is not None or len(self._heap) >= self.entries_max:
            if self.overflow_from is None or position < self.overflow_from:
                self.overflow_from = position
            self.overflowed_count += 1
            return False
        packed = (max(0, deliver_at_ms) << (2 * _SHIFT)) | (position.ledger_id << _SHIFT) | position.entry_id
        heapq.heappush(self._heap, packed)
        return True

    def add_rebuilt(self, position: Position, deliver_at_ms: int) -> bool:
        """Index an entry found by a rebuild pass; False when the index is full again."""
        if len(self._heap) >= self.entries_max:
            return False
        packed = (max(0, deliver_at_ms) << (2 * _SHIFT)) | (position.ledger_id << _SHIFT) | position.entry_id
        heapq.heappush(self._heap, packed)
        return True

    def next_deliver_at_ms(self) -> int | None:
        return self._heap[0] >> (2 * _SHIFT) if self._heap else None

    def pop_due(self, now_ms: int, count_max: int) -> list[Position]:
        """Up to ``count_max`` positions due at ``now_ms``, earliest deadline first."""
        out: list[Position] = []
        heap = self._heap
        while heap and len(out) < count_max and heap[0] >> (2 * _SHIFT) <= now_ms:
            packed = heapq.heappop(heap)
            out.append(Position((packed >> _SHIFT) & _MASK, packed & _MASK))
        return out

    def may_rebuild(self) -> bool:
        """Overflowed, and drained to half the bound: time to read the left-out entries again."""
        return self.overflow_from is not None and len(self._heap) <= self.entries_max // 2

    def rebuild_done(self, resume_from: Position | None) -> None:
        """A rebuild pass ended; ``resume_from`` is where the next one starts (None: all indexed)."""
        self.overflow_from = resume_from

    def clear(self) -> None:
        self._heap.clear()
        self.overflow_from = None
