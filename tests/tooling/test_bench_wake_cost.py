"""``bench/wake_cost.py`` (issue 22): the floor it derives, and one short real phase."""

from __future__ import annotations

import sys

import pytest

from tests.conftest import REPO

sys.path.insert(0, str(REPO / "bench"))

import wake_cost


def test_the_floor_is_one_wake_per_message_and_a_synced_write_per_group() -> None:
    # 2,000 msg/s at 20 us per wake-up and 110 us per synced write (90 beyond its wake-up),
    # 3 messages per group: 2,000 * (20 + 30) us = 10% of a core.
    assert wake_cost.floor_pct(2000, 20.0, 110.0, 3) == pytest.approx(10.0)
    # Negative control: a group of one pays the whole sync per message.
    assert wake_cost.floor_pct(2000, 20.0, 110.0, 1) == pytest.approx(22.0)
    # A sync measured cheaper than a wake (a run where the disk answered at once) adds nothing.
    assert wake_cost.floor_pct(1000, 20.0, 10.0, 3) == pytest.approx(2.0)


def test_a_short_wake_phase_receives_every_message(tmp_path: object) -> None:
    # A real sender process at 500 msg/s for 0.2 s: bounded by the phase's own deadline.
    result = wake_cost.receive_phase("wake", 500.0, 0.2, 64, 10, str(tmp_path))
    assert result["us_wake"] > 0
    assert result["msgs_per_wake"] >= 1.0


def test_summaries_are_min_median_max() -> None:
    rows = [{"a": 3.0}, {"a": 1.0}, {"a": 2.0}]
    assert wake_cost.summarize(rows) == {"a": [1.0, 2.0, 3.0]}
