"""Fault schedules: every registered fault point is covered, the seed matrix has its cells, and a
seed replays the same schedule."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from magnetar.base.errors import InvalidArgumentError, LimitExceededError
from magnetar.chaos import faults as schedule
from magnetar.faults import REGISTRY


def test_every_registered_fault_point_is_covered_by_a_scenario() -> None:
    covered: set[str] = set()
    for name in schedule.SCENARIOS:
        covered |= schedule.covered_points(schedule.build(name, seed=3, injections=50))
    assert set(REGISTRY) <= covered, sorted(set(REGISTRY) - covered)
    assert set(REGISTRY) == schedule.covered_points(schedule.build("every-point", seed=1))


def test_coverage_check_notices_a_point_no_scenario_reaches() -> None:
    steps = [s for s in schedule.build("every-point", seed=1) if s.point != "bookie.after_reply"]
    assert "bookie.after_reply" in set(REGISTRY) - schedule.covered_points(steps)


def test_seed_matrix_has_c1_to_c5_for_each_dying_node_and_s() -> None:
    steps = schedule.build("seed-matrix", seed=7)
    labels = [s.label for s in steps]
    for timing in ("C1/C2", "C3", "C4", "C5"):
        assert any(label.startswith(timing) for label in labels), timing
    assert any("bookie+broker die" in label for label in labels)
    assert sum(label.startswith("S/") for label in labels) == 4
    c1 = next(s for s in steps if s.label == "C1/C2 bookie dies")
    c5 = next(s for s in steps if s.label == "C5 bookie dies")
    assert (c1.point, c5.point) == ("bookie.after_fsync_before_reply",) * 2
    assert c5.hit == c1.hit + 1  # the same point, one entry later
    recovery = schedule.arm_step("ledger.recovery.after_fence", random.Random(1))
    assert (recovery.process, recovery.trigger) == (schedule.OTHER_BROKER, schedule.BROKER)


def test_random_schedule_is_a_function_of_the_seed() -> None:
    first = schedule.build("random", seed=11, injections=120)
    assert first == schedule.build("random", seed=11, injections=120)
    assert first != schedule.build("random", seed=12, injections=120)
    kinds = {s.kind for s in first}
    assert kinds == set(schedule.StepKind)
    assert len(first) == 120


def test_bad_scenario_and_limits() -> None:
    with pytest.raises(InvalidArgumentError):
        schedule.build("nope", seed=1)
    with pytest.raises(LimitExceededError):
        schedule.build("random", seed=1, injections=10**6)


def test_chaos_targets_run_their_brokers_with_deduplication_on(tmp_path: Path) -> None:
    """Deduplication is off by default (as in Pulsar); a chaos run checks "no duplicates with
    dedup on", so every target starts its brokers with it on (the ``no-dedup`` break still wins)."""
    from magnetar.chaos.runner import BROKER_DEDUP_ENV, RunConfig, make_target
    from magnetar.chaos.target import StandaloneTarget

    standalone = make_target(RunConfig(), tmp_path / "s", {"MAGNETAR_BREAK": "no-dedup"})
    assert isinstance(standalone, StandaloneTarget)
    assert standalone.node._base_env == {"MAGNETAR_BREAK": "no-dedup", **BROKER_DEDUP_ENV}
    cluster = make_target(RunConfig(target="cluster"), tmp_path / "c", {})
    envs = {name: getattr(process, "env", {}) for name, process in cluster.processes.items()}
    assert all(env.get("MAGNETAR_BROKER_DEDUPLICATION") == "true" for name, env in envs.items()
               if name.startswith("broker-")), envs
    assert not any("MAGNETAR_BROKER_DEDUPLICATION" in env for name, env in envs.items()
                   if not name.startswith("broker-"))
