"""``magnetar chaos`` on a real ``magnetar standalone`` (3 bookies, E,Qw,Qa = 3,3,2) under the
official client: the bounded CI run is valid, and each negative control makes the checker report
loss (exit status 1). ``no-fencing`` needs a zombie writer, so it runs on a LocalCluster
(ZooKeeper, 3 bookies, 2 brokers): the owner is paused past its session, another broker takes the
topic over, and the resumed zombie's writes are acknowledged although recovery closed the ledger
before them."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO, child_env

RUN_TIMEOUT_S = 120


def _chaos(out: Path, *args: str, scenario: str = "smoke") -> tuple[int, dict[str, object]]:
    argv = [sys.executable, "-m", "magnetar.cli", "chaos", "--scenario", scenario, "--settle-s", "1",
            "--out", str(out), *args]
    result = subprocess.run(argv, env=child_env(PYTHONPATH=str(REPO / "src")), capture_output=True, text=True,
                            timeout=RUN_TIMEOUT_S)
    assert (out / "result.json").exists(), result.stdout[-3000:] + result.stderr[-3000:]
    return result.returncode, json.loads((out / "result.json").read_text())


def _anomalies(result: dict[str, object], kind: str) -> int:
    anomalies = result["anomalies"]
    assert isinstance(anomalies, dict)
    return int(anomalies[kind]["violations"])


@pytest.mark.integration
def test_bounded_chaos_run_keeps_every_acknowledged_message(tmp_path: Path) -> None:
    code, result = _chaos(tmp_path / "ok")
    counts = result["counts"]
    assert isinstance(counts, dict)
    assert code == 0, result
    assert result["valid"] is True
    assert counts["send_ok"] > 100 and counts["stored"] >= counts["send_ok"]
    assert counts["faults"] >= 3
    history = json.loads((tmp_path / "ok" / "history.json").read_text())
    assert history["meta"]["points_reached"] == {"bookie.before_journal_append": 1}


@pytest.mark.integration
@pytest.mark.parametrize(("broken", "scenario"), [("ack-before-fsync", "smoke"), ("truncate-to-lac", "lac-tail")])
def test_negative_control_makes_the_checker_report_loss(tmp_path: Path, broken: str, scenario: str) -> None:
    # truncate-to-lac needs the writer to die while its last acknowledged entries are beyond the
    # bookies' LAC (lac-tail); a random kill often lands after the LAC caught up (pipelined adds).
    code, result = _chaos(tmp_path / broken, "--break", broken, scenario=scenario)
    assert code == 1, result
    assert _anomalies(result, "lost") > 0


@pytest.mark.integration
def test_no_fencing_lets_a_zombie_owner_lose_acknowledged_messages(tmp_path: Path) -> None:
    code, result = _chaos(tmp_path / "no-fencing", "--target", "cluster", "--break", "no-fencing",
                          scenario="zombie")
    assert code == 1, result
    assert _anomalies(result, "lost") > 0
