"""A second standalone on a taken data directory or port says so in one line (issue 23)."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest

from magnetar.runtime.processes import StandaloneProcess, free_port

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


def _standalone(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "magnetar.cli", "standalone", *args],
                          capture_output=True, text=True, timeout=60)


def test_a_second_standalone_on_the_same_directory_names_the_first(tmp_path: Path) -> None:
    data = str(tmp_path / "data")
    bookie_port = free_port()  # a bookie's identity is its address: the restart below keeps it
    first = StandaloneProcess(data, bookie_port=bookie_port)
    try:
        second = _standalone("--data-dir", data, "--broker-port", "0", "--web-port", "0", "--bookie-port", "0")
        assert second.returncode == 1
        assert second.stderr.strip().splitlines() == [
            f"error: a standalone already runs on {Path(data).resolve()} (PID {first.pid}); stop it "
            f"(kill {first.pid}) or give another --data-dir"]
    finally:
        first.kill()  # SIGKILL: the pid file stays behind, the lock goes with the process
    assert (Path(data) / "standalone.pid").exists()
    again = StandaloneProcess(data, bookie_port=bookie_port)  # so a restart is not blocked
    again.kill()


@pytest.mark.parametrize(("option", "what"), [("--bookie-port", "bookie-0"), ("--broker-port", "Pulsar protocol"),
                                              ("--web-port", "HTTP")])
def test_a_port_in_use_is_one_line(tmp_path: Path, option: str, what: str) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        ports = {"--broker-port": "0", "--web-port": "0", "--bookie-port": "0", option: str(port)}
        result = _standalone("--data-dir", str(tmp_path / "data"), *[x for kv in ports.items() for x in kv])
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == [
        f"error: port {port} ({what}) on 127.0.0.1 is already in use by another process "
        f"(another standalone, broker or bookie?); choose another with {option}"]
