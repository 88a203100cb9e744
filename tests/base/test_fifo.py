"""``base/fifo.py``: a list and a head index behave as a deque (the order of a producer's
receipts and of a topic's appends in flight depends on it), an empty queue is an empty list, and
the list does not grow past twice the queue once the compaction point is passed.

Negative controls (run by hand on this test): a ``fifo_advance`` that never clears leaves a
non-empty list for an empty queue (the emptiness asserts fail); one that compacts with
``del items[:head + 1]`` drops an item (the order against the deque fails at the first compaction).
"""

from __future__ import annotations

import random
from collections import deque

from magnetar.base.fifo import FIFO_COMPACT_COUNT, fifo_advance


def test_a_list_and_a_head_index_behave_as_a_deque() -> None:
    rng = random.Random(21)
    items: list[int] = []
    head = 0
    model: deque[int] = deque()
    taken, expected = [], []
    longest = 0
    for value in range(20_000):
        for _ in range(rng.randint(0, 3)):  # bursts of appends, then takes: the queue grows and drains
            items.append(value)
            model.append(value)
        longest = max(longest, len(model))
        for _ in range(rng.randint(0, 3)):
            if not model:
                assert not items and head == 0  # an empty queue is an empty list
                break
            taken.append(items[head])
            head = fifo_advance(items, head)
            expected.append(model.popleft())
        assert len(items) - head == len(model)
        assert len(items) <= max(2 * len(model) + 2, FIFO_COMPACT_COUNT + len(model) + 1)
    assert taken == expected
    assert longest > 2 * FIFO_COMPACT_COUNT  # the compaction ran on a long queue
    while model:
        taken.append(items[head])
        head = fifo_advance(items, head)
        model.popleft()
    assert items == [] and head == 0
