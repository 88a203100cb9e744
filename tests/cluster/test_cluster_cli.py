"""``magnetar cluster up|status|down`` as a user runs it: processes outlive ``up``, ``status``
checks them, ``down`` stops every one of them by PID."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from magnetar.runtime.cluster import LocalCluster

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]


def magnetar(*args: str, timeout_s: float = 120) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, COLUMNS="200")
    return subprocess.run([sys.executable, "-m", "magnetar.cli", "cluster", *args], capture_output=True, text=True,
                          timeout=timeout_s, env=env)


def running(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_cluster_up_status_down(tmp_path: Path) -> None:
    directory = str(tmp_path / "c")
    try:
        up = magnetar("up", "--dir", directory, "--bookies", "3", "--brokers", "2")
        assert up.returncode == 0, up.stdout + up.stderr
        state = json.loads((tmp_path / "c" / "cluster.json").read_text())
        pids = [p["pid"] for p in state["processes"]]
        assert len(pids) == 7 and all(running(pid) for pid in pids)
        assert state["service_url"].count(",") == 1 and "service URL" in up.stdout
        for process in state["processes"]:
            assert str(process["pid"]) in up.stdout and str(process["port"]) in up.stdout

        status = magnetar("status", "--dir", directory, timeout_s=60)
        assert status.returncode == 0, status.stdout + status.stderr
        # the admin CLI finds a broker from the cluster's directory; every broker serves the console
        tenants = subprocess.run([sys.executable, "-m", "magnetar.cli", "admin", "--cluster-dir", directory,
                                  "tenants", "list"], capture_output=True, text=True, timeout=60)
        assert tenants.returncode == 0 and "public" in tenants.stdout, tenants.stdout + tenants.stderr
        for broker in (p for p in state["processes"] if p["kind"] == "broker"):
            base = f"http://127.0.0.1:{broker['http_port']}"
            with urllib.request.urlopen(f"{base}/", timeout=30) as page:
                assert b"/console/static/app.js" in page.read()
            with urllib.request.urlopen(f"{base}/console/api/cluster", timeout=30) as reply:
                assert len(json.loads(reply.read())["brokers"]) == 2  # both load reports
        again = magnetar("up", "--dir", directory, timeout_s=60)
        assert again.returncode == 1 and "already running" in again.stdout

        down = magnetar("down", "--dir", directory, timeout_s=90)
        assert down.returncode == 0 and "stopped 7 processes" in down.stdout, down.stdout + down.stderr
        assert not any(running(pid) for pid in pids)
        after = magnetar("status", "--dir", directory, timeout_s=60)
        assert after.returncode == 1
    finally:
        if (tmp_path / "c" / "cluster.json").exists():
            LocalCluster.load(Path(directory)).stop()  # never leave processes behind
