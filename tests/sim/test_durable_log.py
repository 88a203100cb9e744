"""The durable-log scenario: no acknowledged record lost over many seeds, and the checker can fail."""

from __future__ import annotations

import subprocess

import pytest

from magnetar.base.errors import InvalidArgumentError
from magnetar.sim.scenarios import ScenarioOptions, run_scenario
from tests.conftest import REPO, child_env, tool

BROKEN = ScenarioOptions(breaks=frozenset({"ack-before-fsync"}))


def test_fifty_seeds_lose_nothing_acknowledged() -> None:
    failures = []
    crashes = torn = 0
    for seed in range(50):
        world, verdict = run_scenario("durable-log", seed)
        if not verdict.ok:
            failures.append(f"seed {seed}: {verdict.text()}")
        text = world.trace_text()
        crashes += text.count(" crash ")
        torn += text.count("torn-tail")
    assert not failures, "\n".join(failures)
    assert crashes > 100 and torn > 5, "the faults actually happened"


def test_negative_control_ack_before_fsync_is_caught() -> None:
    caught = [seed for seed in range(10) if not run_scenario("durable-log", seed, BROKEN)[1].ok]
    assert len(caught) >= 3, caught
    verdict = run_scenario("durable-log", caught[0], BROKEN)[1]
    assert any(v.startswith(("lost:", "changed:")) for v in verdict.violations)


def test_unknown_scenario_or_break_is_refused() -> None:
    with pytest.raises(InvalidArgumentError):
        run_scenario("nope", 1)
    with pytest.raises(InvalidArgumentError):
        run_scenario("durable-log", 1, ScenarioOptions(breaks=frozenset({"nope"})))


def _cli(*args: str, hash_seed: str | None) -> subprocess.CompletedProcess[str]:
    env = child_env()
    env.pop("PYTHONHASHSEED", None)
    if hash_seed is not None:
        env["PYTHONHASHSEED"] = hash_seed
    return subprocess.run([tool("magnetar"), "sim", *args], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=120)


def test_cli_same_seed_prints_identical_output_and_exit_codes_tell_the_verdict() -> None:
    first = _cli("--seed", "5", "--ops", "20", hash_seed=None)
    second = _cli("--seed", "5", "--ops", "20", hash_seed="12345")
    assert first.returncode == 0, first.stderr
    assert first.stdout == second.stdout
    assert "verdict: OK" in first.stdout and "server     crash" in first.stdout
    broken = _cli("--seed", "1", "--break", "ack-before-fsync", "-q", hash_seed=None)
    assert broken.returncode == 1 and "VIOLATION" in broken.stdout
