"""``PositionRangeSet`` against a plain-set model, over logs with several ledgers."""

from __future__ import annotations

import itertools
from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from magnetar.base.errors import LimitExceededError
from magnetar.base.invariant import InvariantViolationError
from magnetar.base.types import Position
from magnetar.managed_ledger import PositionRangeSet


def log_of(sizes: list[int]) -> list[Position]:
    return [Position(lid * 3 + 1, e) for lid, size in enumerate(sizes) for e in range(size)]


def successor_in(log: list[Position]) -> Callable[[Position], Position]:
    """The next entry of ``log`` after a position of it (past its end: the next entry id)."""
    index = {p: i for i, p in enumerate(log)}

    def successor(p: Position) -> Position:
        i = index[p] + 1
        return log[i] if i < len(log) else Position(p.ledger_id, p.entry_id + 1)

    return successor


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
    successor = successor_in(log)

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


def _check_against_model(ranges: PositionRangeSet, model: set[Position], log: list[Position],
                         successor: Callable[[Position], Position]) -> None:
    """The set covers exactly ``model``'s entries of ``log``, in disjoint, sorted, merged ranges."""
    covered = {p for p in log if ranges.contains(p)}
    assert covered == model
    spans = list(ranges)
    for (_, last), (first, _) in itertools.pairwise(spans):
        assert last < first
        assert successor(last) != first, "adjacent ranges must be merged"
    for first, last in spans:
        assert first <= last
        assert {p for p in log if first <= p <= last} <= model


@settings(max_examples=200, deadline=None)
@given(
    sizes=st.lists(st.integers(0, 6), min_size=1, max_size=5),
    runs=st.lists(st.tuples(st.integers(0, 1000), st.integers(0, 8)), max_size=25),
    singles=st.lists(st.integers(0, 1000), max_size=10),
)
def test_add_run_matches_a_set_model(sizes: list[int], runs: list[tuple[int, int]], singles: list[int]) -> None:
    """``add_run`` (a run of consecutive entries of one ledger, over ranges it may overlap or
    touch) keeps the same set as adding its entries one at a time."""
    log = log_of(sizes)
    if not log:
        return
    successor = successor_in(log)

    ranges = PositionRangeSet(10_000)
    model: set[Position] = set()
    for pick in singles:  # some ranges to overlap first
        p = log[pick % len(log)]
        ranges.add(p, successor)
        model.add(p)
    for start, length in runs:
        first = log[start % len(log)]
        run = [p for p in log if p.ledger_id == first.ledger_id and first.entry_id <= p.entry_id <= first.entry_id + length]
        new = not set(run) <= model
        assert ranges.add_run(run[0], run[-1], successor) == new
        model.update(run)
        _check_against_model(ranges, model, log, successor)


def test_the_model_check_catches_a_lost_entry_and_an_unmerged_range() -> None:
    """Negative control for the check above: a set missing an added entry, or two adjacent ranges
    left unmerged, fail it."""
    log = log_of([5])
    successor = successor_in(log)

    ranges = PositionRangeSet(100)
    ranges.add_run(log[0], log[2], successor)
    with pytest.raises(AssertionError):
        _check_against_model(ranges, set(log[:4]), log, successor)  # log[3] was "acked" but is not in the set
    unmerged = PositionRangeSet(100)
    unmerged.add_range(log[0], log[1], lambda p: Position(p.ledger_id, p.entry_id + 5))  # a successor that
    unmerged.add_range(log[2], log[3], lambda p: Position(p.ledger_id, p.entry_id + 5))  # never merges
    with pytest.raises(AssertionError, match="merged"):
        _check_against_model(unmerged, set(log[:4]), log, successor)


def test_add_run_refuses_a_reversed_run_and_a_range_beyond_the_count() -> None:
    log = log_of([10])

    def successor(p: Position) -> Position:
        return Position(p.ledger_id, p.entry_id + 1)

    ranges = PositionRangeSet(2)
    with pytest.raises(InvariantViolationError):
        ranges.add_run(log[3], log[1], successor)
    assert ranges.add_run(log[0], log[1], successor)
    assert ranges.add_run(log[3], log[4], successor)
    with pytest.raises(LimitExceededError):
        ranges.add_run(log[6], log[7], successor)
    assert ranges.add_run(log[2], log[2], successor)  # fills the gap: one range, no new one
    assert list(ranges) == [(log[0], log[4])]
    assert ranges.add_run(log[6], log[7], successor)
    assert not ranges.add_run(log[6], log[6], successor)
