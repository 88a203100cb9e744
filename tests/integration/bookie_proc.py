"""Start and stop real ``magnetar bookie`` processes for integration tests and the benchmark."""

from __future__ import annotations

import os
import selectors
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from tests.conftest import REPO, child_env, tool

READY_PREFIX = "magnetar-bookie listening on "
START_TIMEOUT_S = 20.0


@dataclass
class BookieProcess:
    process: subprocess.Popen[str]
    port: int
    log_path: Path

    @property
    def pid(self) -> int:
        return self.process.pid

    def wait(self, timeout_s: float) -> int:
        return self.process.wait(timeout=timeout_s)

    def stop(self) -> None:
        """Stop by PID: SIGTERM, then SIGKILL if it does not exit in time."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)
        if self.process.stdout is not None:
            self.process.stdout.close()


def start_bookie(data_dir: Path, metadata_url: str, *, faults: str = "", extra_env: dict[str, str] | None = None,
                 port: int = 0) -> BookieProcess:
    """Start a bookie and wait (bounded) for its ready line; raises with its log if it fails."""
    log_path = data_dir.parent / f"{data_dir.name}.{time.monotonic_ns()}.log"
    env = child_env(PYTHONPATH=str(REPO / "src"), **(extra_env or {}))
    env.pop("MAGNETAR_FAULTS", None)
    if faults:
        env["MAGNETAR_FAULTS"] = faults
    log_file = open(log_path, "w")  # noqa: SIM115 - closed when the process is reaped by the OS
    argv = [tool("magnetar"), "bookie", "--metadata", metadata_url, "--port", str(port), "--data-dir", str(data_dir)]
    process = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=log_file, text=True, cwd=REPO)
    log_file.close()
    assert process.stdout is not None
    selector = selectors.DefaultSelector()
    selector.register(process.stdout, selectors.EVENT_READ)
    deadline = time.monotonic() + START_TIMEOUT_S
    try:
        while time.monotonic() < deadline:
            if not selector.select(timeout=max(0.0, deadline - time.monotonic())):
                continue
            line = process.stdout.readline()
            if not line:
                break
            if line.startswith(READY_PREFIX):
                port_text = line.strip().rsplit(":", 1)[1]
                return BookieProcess(process, int(port_text), log_path)
    finally:
        selector.close()
    if process.poll() is None:
        process.kill()
    process.wait(timeout=10)
    raise RuntimeError(f"bookie did not start (rc={process.returncode}):\n{log_path.read_text()[-4000:]}")


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True
