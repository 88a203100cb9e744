"""Exhaustive tests of ``magnetar.ledger.quorum`` for every E <= 5, against brute-force definitions.

The reference definitions here are written from the protocol's meaning, not from the code:
a bookie stores entry e when its distance after ``e mod E`` (going round the ring) is below Qw;
fencing is covered when no write set still has Qa unfenced bookies (the old writer's only way to
complete an add); an entry is provably missing when the bookies that may hold it are fewer than Qa.
"""

from __future__ import annotations

import itertools

import pytest

from magnetar.base.errors import InvalidArgumentError
from magnetar.ledger import quorum

SIZES = [(e, w, a) for e in range(1, 6) for w in range(1, e + 1) for a in range(1, w + 1)]


def _ref_stores(bookie: int, entry: int, e: int, w: int) -> bool:
    return (bookie - entry) % e < w


def _ref_write_set(entry: int, e: int, w: int) -> set[int]:
    return {b for b in range(e) if _ref_stores(b, entry, e, w)}


def _subsets(e: int):
    for mask in range(1 << e):
        yield {b for b in range(e) if mask >> b & 1}


def _ref_old_writer_can_complete(fenced: set[int], e: int, w: int, a: int) -> bool:
    # Any entry id at all: the old writer may be at any entry.
    return any(len(_ref_write_set(entry, e, w) - fenced) >= a for entry in range(3 * e))


def test_size_table_is_complete() -> None:
    assert len(SIZES) == 35


@pytest.mark.parametrize(("e", "w", "a"), SIZES)
def test_write_set_matches_reference(e: int, w: int, a: int) -> None:
    for entry in range(4 * e + 3):
        members = quorum.write_set(entry, e, w)
        assert len(members) == w == len(set(members))
        assert set(members) == _ref_write_set(entry, e, w)
        assert members[0] == entry % e
        for bookie in range(e):
            assert quorum.stores_entry(bookie, entry, e, w) == _ref_stores(bookie, entry, e, w)
        assert quorum.read_order(entry, e, w) == members


@pytest.mark.parametrize(("e", "w", "a"), SIZES)
def test_distinct_write_sets(e: int, w: int, a: int) -> None:
    expected = {frozenset(_ref_write_set(entry, e, w)) for entry in range(e)}
    got = quorum.distinct_write_sets(e, w)
    assert set(got) == expected and len(got) == len(expected)
    assert len(expected) == (1 if w == e else e)


@pytest.mark.parametrize(("e", "w", "a"), SIZES)
def test_ack_quorum_against_reference(e: int, w: int, a: int) -> None:
    for entry in range(2 * e):
        ws = _ref_write_set(entry, e, w)
        for acked in _subsets(e):
            assert quorum.ack_quorum_reached(acked, entry, e, w, a) == (len(acked & ws) >= a)
    for failed in range(w + 1):
        # Lost when the bookies left in the write set are fewer than Qa.
        assert quorum.ack_quorum_lost(failed, w, a) == (w - failed < a)


@pytest.mark.parametrize(("e", "w", "a"), SIZES)
def test_fencing_condition_against_reference(e: int, w: int, a: int) -> None:
    for answered in _subsets(e):
        covered = quorum.fencing_covered(answered, e, w, a)
        assert covered == (not _ref_old_writer_can_complete(answered, e, w, a)), answered
    assert quorum.fencing_covered(set(range(e)), e, w, a)
    if e == w:
        # No striping: coverage is the whole-ensemble threshold E - Qa + 1 (BP-46's EC).
        for answered in _subsets(e):
            expected = len(answered) >= quorum.ensemble_coverage(e, a)
            assert quorum.fencing_covered(answered, e, w, a) == expected


@pytest.mark.parametrize(("e", "w", "a"), SIZES)
def test_entry_missing_against_reference(e: int, w: int, a: int) -> None:
    for entry in range(2 * e):
        ws = _ref_write_set(entry, e, w)
        for negatives in _subsets(e):
            may_hold = ws - negatives
            # Missing exactly when the bookies that may hold it cannot make an ack quorum.
            assert quorum.entry_missing(negatives, entry, e, w, a) == (len(may_hold) < a)


@pytest.mark.parametrize(("e", "w", "a"), SIZES)
def test_valid_sizes_are_accepted(e: int, w: int, a: int) -> None:
    quorum.validate_quorum(e, w, a)
    assert quorum.quorum_coverage(w, a) == w - a + 1


def test_invalid_sizes_are_refused() -> None:
    for e, w, a in itertools.product(range(0, 7), repeat=3):
        valid = e >= w >= a >= 1
        if valid:
            quorum.validate_quorum(e, w, a)
        else:
            with pytest.raises(InvalidArgumentError):
                quorum.validate_quorum(e, w, a)
    with pytest.raises(InvalidArgumentError):
        quorum.write_set(-1, 3, 2)
    with pytest.raises(InvalidArgumentError):
        quorum.write_set(0, 2, 3)


def test_reference_checker_can_fail() -> None:
    """Negative control: a wrong fencing rule (any Qa answers) disagrees with the reference."""

    def wrong(answered: set[int], e: int, w: int, a: int) -> bool:
        return len(answered) >= a

    disagreements = [
        (e, w, a, frozenset(s))
        for e, w, a in SIZES
        for s in _subsets(e)
        if wrong(s, e, w, a) != (not _ref_old_writer_can_complete(s, e, w, a))
    ]
    assert disagreements
    # The BookKeeper 2614 shape: E=3 Qw=3 Qa=2 with one fence answered is not covered.
    assert not quorum.fencing_covered({0}, 3, 3, 2)
    assert quorum.fencing_covered({0, 1}, 3, 3, 2)
