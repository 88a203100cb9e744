"""``magnetar admin --cluster-dir DIR`` finds a live broker of a ``magnetar cluster up`` cluster."""

from __future__ import annotations

import json
import os
from pathlib import Path

from typer.testing import CliRunner

from magnetar.cli.admin import admin_app
from magnetar.runtime.cluster import STATE_FILE
from tests.admin.conftest import HttpBroker

runner = CliRunner()


def _state(directory: Path, brokers: list[tuple[int | None, list[str], int]]) -> None:
    processes = [{"name": f"broker-{i}", "kind": "broker", "pid": pid, "port": 1, "http_port": http_port,
                  "argv": argv, "env": {}, "log": str(directory / f"broker-{i}.log")}
                 for i, (pid, argv, http_port) in enumerate(brokers)]
    directory.mkdir(parents=True, exist_ok=True)
    (directory / STATE_FILE).write_text(json.dumps({"metadata_url": "zk://127.0.0.1:1/m", "ensemble": [1, 1, 1],
                                                    "session_timeout_ms": 1000, "processes": processes}))


def test_admin_takes_the_clusters_directory(http_broker: HttpBroker, tmp_path: Path) -> None:
    # This test process stands for a live broker (its PID and command line); broker-0 is dead.
    ours = [a.decode() for a in Path("/proc/self/cmdline").read_bytes().split(b"\0") if a]
    _state(tmp_path, [(None, ["gone"], 9), (os.getpid(), ours, http_broker.http.port)])
    result = runner.invoke(admin_app, ["--cluster-dir", str(tmp_path), "tenants", "list"])
    assert result.exit_code == 0, result.output
    assert "public" in result.output


def test_admin_says_what_to_do_without_a_cluster(tmp_path: Path) -> None:
    result = runner.invoke(admin_app, ["--cluster-dir", str(tmp_path / "none"), "tenants", "list"])
    assert result.exit_code == 2
    assert "no cluster in" in result.output and "magnetar cluster up --dir" in result.output
    _state(tmp_path / "dead", [(None, ["gone"], 9)])
    result = runner.invoke(admin_app, ["--cluster-dir", str(tmp_path / "dead"), "tenants", "list"])
    assert result.exit_code == 2 and "no broker of the cluster" in result.output
