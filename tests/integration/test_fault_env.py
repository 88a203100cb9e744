"""A real subprocess armed through MAGNETAR_FAULTS dies by SIGKILL exactly at the named point."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO, child_env

CHILD = Path(__file__).with_name("fault_child.py")
POINT = "bookie.after_fsync_before_reply"


def _run(spec: str, tmp_path: Path) -> tuple[subprocess.CompletedProcess[str], Path]:
    report = tmp_path / "faults.log"
    env = child_env(MAGNETAR_FAULTS=spec, MAGNETAR_FAULTS_REPORT=str(report), PYTHONPATH=str(REPO))
    result = subprocess.run([sys.executable, str(CHILD), POINT], env=env, capture_output=True, text=True, timeout=60)
    return result, report


@pytest.mark.integration
def test_crash_at_the_seventh_hit_is_a_sigkill_there(tmp_path: Path) -> None:
    result, report = _run(f"{POINT}:crash@7", tmp_path)
    assert result.returncode == -signal.SIGKILL, result
    assert result.stdout.splitlines()[-1] == "progress 7"
    assert f"crash at {POINT} hit=7" in report.read_text()


@pytest.mark.integration
def test_unarmed_or_other_point_lets_the_process_finish(tmp_path: Path) -> None:
    result, report = _run("bookie.after_reply:crash", tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[-1] == "finished"
    assert not report.exists()


@pytest.mark.integration
def test_bad_spec_is_refused_before_anything_runs(tmp_path: Path) -> None:
    result, _ = _run(f"{POINT}:explode", tmp_path)
    assert result.returncode == 1
    assert "action must be crash, hang, error or delay:MS" in result.stderr
    assert "progress" not in result.stdout
