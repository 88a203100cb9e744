"""``PositionRangeSet`` against a plain-set model, over logs with several ledgers."""

from __future__ import annotations

import itertools

from hypothesis import given, settings
from hypothesis import strategies as st

from magnetar.base.types import Position
from magnetar.managed_ledger import PositionRangeSet


def log_of(sizes: list[int]) -> list[Position]:
    return [Position(lid * 3 + 1, e) for lid, size in enumerate(sizes) for e in range(size)]


@settings(max_examples=200, deadline=None)
@given(
    sizes=st.lists(st.integers(0, 5), min_size=1, max_size=5),
    picks=st.lists(st.integers(0, 1000), max_size=40),
    cut=st.integers(0, 1000),
)
def test_range_set_matches_a_set_model(sizes: list[int], picks: list[int], cut: int) -> None:
    log = log_of(sizes)
    if not log:
        return
    index = {p: i for i, p in enumerate(log)}

    def successor(p: Position) -> Position:
        i = index[p] + 1
        return log[i] if i < len(log) else Position(p.ledger_id, p.entry_id + 1)

    ranges = PositionRangeSet(10_000)
    model: set[Position] = set()
    for pick in picks:
        p = log[pick % len(log)]
        assert ranges.add(p, successor) == (p not in model)
        model.add(p)
    bound = log[cut % len(log)]
    if cut % 2:
        ranges.remove_up_to(bound, successor)
        model = {p for p in model if p > bound}
    covered = {p for p in log if ranges.contains(p)}
    assert covered == model
    spans = list(ranges)
    for (_, last), (first, _) in itertools.pairwise(spans):
        assert successor(last) != first, "adjacent ranges must be merged"
        assert last < first
    for first, last in spans:
        assert {p for p in log if first <= p <= last} <= model
