"""What the chaos runner drives: a set of named processes (the ``runtime.cluster.LocalCluster`` shape).

``ChaosCluster``/``ChaosProcess`` are the small interface the runner needs; ``LocalCluster``
(real ZooKeeper, bookies and brokers as separate processes) has it, and so has
``StandaloneTarget`` here: one ``magnetar standalone`` process with three bookies, the embedded
metadata store and the broker (a single node: every fault hits all of them at once).

Process names: ``zookeeper``, ``bookie-<i>``, ``broker-<i>``, ``autorecovery`` in a cluster;
``standalone`` here. ``restart(env)`` starts the process again on the same ports and data
directory with ``env`` added to its base environment (``None``: the base environment only).
"""

from __future__ import annotations

import os
import signal
import socket
from collections.abc import Mapping
from pathlib import Path
from typing import Protocol

from magnetar.runtime.processes import StandaloneProcess, free_port

STANDALONE = "standalone"
PORT_RANGE_ATTEMPTS_MAX = 50


class ChaosProcess(Protocol):
    name: str

    @property
    def pid(self) -> int:
        """The current incarnation's process id."""

    def kill(self, sig: int = signal.SIGKILL) -> None:
        """Send ``sig`` (SIGKILL: wait until it is gone)."""

    def pause(self) -> None:
        """SIGSTOP."""

    def resume(self) -> None:
        """SIGCONT."""

    def restart(self, env: dict[str, str] | None = None, timeout_s: float = 30) -> None:
        """Start again (killing a live incarnation first) on the same ports and data directory."""

    def alive(self) -> bool:
        """Whether the current incarnation runs."""


class ChaosCluster(Protocol):
    @property
    def processes(self) -> Mapping[str, ChaosProcess]:
        """Every process of the cluster by name."""

    def start(self, timeout_s: float = 60) -> None:
        """Start every process and wait until each is ready."""

    def stop(self) -> None:
        """Stop every process by its PID."""

    def service_url(self) -> str:
        """The Pulsar service URL listing every broker."""


def free_port_run(count: int, host: str = "127.0.0.1") -> int:
    """A first port ``p`` such that ``p .. p + count - 1`` were all free a moment ago."""
    for _ in range(PORT_RANGE_ATTEMPTS_MAX):
        first = free_port(host)
        socks = []
        try:
            for port in range(first, first + count):
                sock = socket.socket()
                socks.append(sock)
                sock.bind((host, port))
            return first
        except OSError:
            continue
        finally:
            for sock in socks:
                sock.close()
    raise RuntimeError(f"no run of {count} free ports found")


class StandaloneNode:
    """The one process of a ``StandaloneTarget``."""

    def __init__(self, data_dir: Path, base_env: dict[str, str], log_path: Path) -> None:
        self.name = STANDALONE
        self._data_dir = data_dir
        self._base_env = base_env
        self._log_path = log_path
        self.broker_port = free_port()
        self.bookie_port = free_port_run(3)
        self.web_port = free_port()
        self._proc: StandaloneProcess | None = None
        self._paused = False

    @property
    def pid(self) -> int:
        return self._proc.pid if self._proc is not None else -1

    def start(self, env: dict[str, str] | None = None) -> None:
        child_env = dict(os.environ)
        child_env.update(self._base_env)
        child_env.update(env or {})
        with self._log_path.open("a") as log:
            self._proc = StandaloneProcess(
                str(self._data_dir), bookies_count=3, broker_port=self.broker_port, bookie_port=self.bookie_port,
                web_port=self.web_port, env=child_env, stderr=log.fileno())
        self._paused = False

    def kill(self, sig: int = signal.SIGKILL) -> None:
        if self._proc is None or not self.alive():
            return
        if sig == signal.SIGKILL:
            if self._paused:
                self._proc.process.send_signal(signal.SIGCONT)
            self._proc.kill()
        else:
            self._proc.process.send_signal(sig)

    def pause(self) -> None:
        if self._proc is not None and self.alive():
            self._proc.process.send_signal(signal.SIGSTOP)
            self._paused = True

    def resume(self) -> None:
        if self._proc is not None and self.alive():
            self._proc.process.send_signal(signal.SIGCONT)
            self._paused = False

    def restart(self, env: dict[str, str] | None = None, timeout_s: float = 30) -> None:
        self.kill()
        self.start(env)

    def alive(self) -> bool:
        return self._proc is not None and self._proc.process.poll() is None

    def stop(self) -> None:
        if self._proc is None:
            return
        if self._paused:
            self.resume()
        if self.alive():
            self._proc.terminate()
        else:
            self._proc.process.wait()
        if self._proc.process.stdout is not None:
            self._proc.process.stdout.close()


class StandaloneTarget:
    """``magnetar standalone --bookies 3`` (E, Qw, Qa = 3, 3, 2) as a one-process chaos target."""

    def __init__(self, base_dir: Path, *, env: dict[str, str] | None = None) -> None:
        base_dir.mkdir(parents=True, exist_ok=True)
        self.node = StandaloneNode(base_dir / "data", dict(env or {}), base_dir / "standalone.log")
        self._processes: dict[str, ChaosProcess] = {STANDALONE: self.node}

    @property
    def processes(self) -> Mapping[str, ChaosProcess]:
        return self._processes

    def start(self, timeout_s: float = 60) -> None:
        self.node.start()

    def stop(self) -> None:
        self.node.stop()

    def service_url(self) -> str:
        return f"pulsar://127.0.0.1:{self.node.broker_port}"


def owner_broker(cluster: ChaosCluster) -> str | None:
    """The broker serving topics (the chaos workload's topics are the cluster's only ones), by
    each broker's ``/health``; None when no broker says so (or the target has no HTTP health)."""
    from magnetar.runtime.cluster import http_health

    for name, process in cluster.processes.items():
        port = getattr(process, "http_port", None)
        if not name.startswith("broker-") or not port or not process.alive():
            continue
        health = http_health(int(port))
        if health is not None and int(health.get("topics") or 0) > 0:
            return name
    return None
