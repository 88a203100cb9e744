"""A first-in first-out queue kept as a list and the index of its head (issue 22: 100,000 topics).

A producer's SENDs awaiting their receipt, a topic's appends in flight (``broker``), the append
pipeline's queue and a ledger's adds in flight (``managed_ledger/append.py``) are queues that an
idle topic keeps empty for its whole life, taken from once per message (compiled code calls a
deque's methods by name). An empty ``collections.deque`` allocates its first block at
once (~760 bytes on 3.11); an empty list is 56 bytes. The owner keeps ``items`` and ``head``: the
queue is ``items[head:]``, appended to with ``items.append``, its first item ``items[head]``, taken
with ``head = fifo_advance(items, head)``. The list is cleared when its last item is taken (so an
empty queue is an empty list: ``not items`` tests emptiness) and compacted once the taken prefix
is at least ``FIFO_COMPACT_COUNT`` items and half the list (each item is moved at most once per
compaction of a prefix as long as itself: amortized O(1) per item).
"""

from __future__ import annotations

from typing import Any, Final

FIFO_COMPACT_COUNT: Final = 64


def fifo_advance(items: list[Any], head: int) -> int:
    """The head once ``items[head]`` is taken."""
    head += 1
    if head == len(items):
        items.clear()
        return 0
    if head >= FIFO_COMPACT_COUNT and 2 * head >= len(items):
        del items[:head]
        return 0
    return head
