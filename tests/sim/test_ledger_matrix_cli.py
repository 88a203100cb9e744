"""``magnetar sim --scenario ledger-matrix``: the crash matrix runs through the CLI with the real
``BookieServer`` injected, replays byte for byte from its seed, and a negative control exits 1."""

from __future__ import annotations

import subprocess

from tests.conftest import REPO, child_env, tool

CLI_TIMEOUT_S = 120


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([tool("magnetar"), "sim", "--scenario", "ledger-matrix", *args], cwd=REPO,
                          env=child_env(), capture_output=True, text=True, timeout=CLI_TIMEOUT_S)


def test_one_seed_prints_trace_and_ok_verdict_and_replays_identically() -> None:
    first = _cli("--seed", "3", "--fault", "power-cut", "-E", "3", "--qw", "3", "--qa", "2", "--ops", "20")
    second = _cli("--seed", "3", "--fault", "power-cut", "-E", "3", "--qw", "3", "--qa", "2", "--ops", "20")
    assert first.returncode == 0, first.stdout + first.stderr
    assert "seed 3 scenario ledger-matrix fault power-cut quorum (3,3,2)" in first.stdout
    assert "verdict: OK" in first.stdout
    assert "bookie0" in first.stdout and "writer" in first.stdout  # the trace is printed
    assert first.stdout == second.stdout


def test_negative_control_reports_a_violation_with_exit_1() -> None:
    broken = _cli("--seed", "0", "--fault", "zombie", "--break", "recovery-without-fencing", "-q")
    assert broken.returncode == 1, broken.stdout + broken.stderr
    assert "VIOLATION" in broken.stdout and "I1: acknowledged entry" in broken.stdout


def test_bad_fault_or_quorum_is_refused_with_exit_2() -> None:
    assert _cli("--seed", "1", "--fault", "nope", "-q").returncode == 2
    assert _cli("--seed", "1", "-E", "2", "--qw", "3", "-q").returncode == 2
