"""The peers as child processes on 127.0.0.1, each with a private data dir under the run's
directory, stopped by PID (its process group: RabbitMQ's Erlang VM starts helpers).

* RabbitMQ (``rabbitmq-server`` from Debian): its own ``epmd`` on a free port (so the VM does not
  start a shared daemon that outlives the run), a private node name, mnesia and log dirs;
  the benchmark declares a durable quorum queue and publishes with publisher confirms (a
  quorum queue confirms after its Raft log is fsync'd).
* NATS (``nats-server`` from Debian, 2.9): JetStream with file storage in a private store dir.
  2.9 has no ``sync_interval: always`` (added in 2.10): JetStream acks once the message is
  written to its file, and fsyncs periodically, so its figures are an upper bound for a
  fsync-per-ack NATS.
* Redis (``redis-server`` from Debian): ``appendonly yes``, ``appendfsync always`` (the AOF is
  fsync'd before the reply of every write batch), no RDB snapshots.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "src"))

from magnetar.runtime.processes import STOP_GRACE_S, free_port  # noqa: E402

READY_TIMEOUT_S = 90.0
RABBITMQ_SERVER = "/usr/lib/rabbitmq/bin/rabbitmq-server"


class PeerUnavailable(RuntimeError):
    """The peer is not installed here, or did not start (the table says which, and why)."""


def _port_open(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.5)
        return sock.connect_ex(("127.0.0.1", port)) == 0


class Child:
    """One server process in its own session; ``stop`` signals its process group by its PID."""

    def __init__(self, name: str, argv: list[str], data_dir: Path, env: dict[str, str] | None = None) -> None:
        self.name = name
        self.log_path = data_dir / f"{name}.log"
        log = open(self.log_path, "w")  # noqa: SIM115 - the child writes to it until stopped
        try:
            self.process = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT,
                                            start_new_session=True, cwd=data_dir)
        finally:
            log.close()

    @property
    def pid(self) -> int:
        return self.process.pid

    def wait_port(self, port: int, timeout_s: float = READY_TIMEOUT_S) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                break
            if _port_open(port):
                return
            time.sleep(0.1)
        tail = self.log_path.read_text(errors="replace")[-2000:] if self.log_path.exists() else ""
        self.stop()
        raise PeerUnavailable(f"{self.name} did not listen on {port}: {tail}")

    def stop(self) -> None:
        """SIGTERM to the child's process group (its id is the child's PID), SIGKILL after the grace."""
        if self.process.poll() is None:
            try:
                os.killpg(self.process.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                self.process.wait(STOP_GRACE_S)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()
        try:  # helpers left in the group (the Erlang VM's port programs) after the leader exited
            os.killpg(self.process.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


class Peer:
    """A started peer: its children and the port clients connect to."""

    def __init__(self, name: str, port: int, children: list[Child], note: str) -> None:
        self.name = name
        self.port = port
        self.children = children
        self.note = note

    def stop(self) -> None:
        for child in reversed(self.children):
            child.stop()


def start_redis(root: Path) -> Peer:
    binary = shutil.which("redis-server")
    if binary is None:
        raise PeerUnavailable("redis-server is not installed (bench/peers/install.sh)")
    data = root / "redis"
    data.mkdir(parents=True)
    port = free_port()
    child = Child("redis", [binary, "--bind", "127.0.0.1", "--port", str(port), "--dir", str(data),
                            "--appendonly", "yes", "--appendfsync", "always", "--save", "",
                            "--daemonize", "no", "--protected-mode", "yes"], data)
    child.wait_port(port)
    return Peer("redis", port, [child], "Redis 7 Streams (XADD), appendfsync always")


def start_nats(root: Path) -> Peer:
    binary = shutil.which("nats-server")
    if binary is None:
        raise PeerUnavailable("nats-server is not installed (bench/peers/install.sh)")
    data = root / "nats"
    data.mkdir(parents=True)
    port = free_port()
    config = data / "nats.conf"
    config.write_text(f'listen: 127.0.0.1:{port}\nhttp: 0\njetstream {{ store_dir: "{data / "js"}" }}\n')
    child = Child("nats", [binary, "-c", str(config)], data)
    child.wait_port(port)
    return Peer("nats", port, [child], "NATS 2.9 JetStream, file storage (acks before fsync: 2.9 has no sync always)")


def start_rabbitmq(root: Path) -> Peer:
    if not os.access(RABBITMQ_SERVER, os.X_OK) or shutil.which("epmd") is None:
        raise PeerUnavailable("rabbitmq-server is not installed (bench/peers/install.sh)")
    data = root / "rabbitmq"
    (data / "log").mkdir(parents=True)
    port, dist_port, epmd_port = free_port(), free_port(), free_port()
    (data / "enabled_plugins").write_text("[].\n")
    (data / "rabbitmq.conf").write_text(f"listeners.tcp.default = 127.0.0.1:{port}\nloopback_users = none\n")
    cookie = data / ".erlang.cookie"
    cookie.write_text("magnetarbenchcookie")
    cookie.chmod(0o400)
    env = dict(os.environ, HOME=str(data), ERL_EPMD_PORT=str(epmd_port), ERL_EPMD_ADDRESS="127.0.0.1",
               RABBITMQ_NODENAME="magnetarbench@localhost", RABBITMQ_NODE_IP_ADDRESS="127.0.0.1",
               RABBITMQ_NODE_PORT=str(port), RABBITMQ_DIST_PORT=str(dist_port),
               RABBITMQ_MNESIA_BASE=str(data / "mnesia"), RABBITMQ_LOG_BASE=str(data / "log"),
               RABBITMQ_CONFIG_FILE=str(data / "rabbitmq.conf"),
               RABBITMQ_ENABLED_PLUGINS_FILE=str(data / "enabled_plugins"),
               RABBITMQ_PID_FILE=str(data / "rabbitmq.pid"), RABBITMQ_CONF_ENV_FILE=str(data / "rabbitmq-env.conf"))
    (data / "rabbitmq-env.conf").write_text("")
    epmd = Child("epmd", ["epmd", "-port", str(epmd_port), "-address", "127.0.0.1"], data, env)
    epmd.wait_port(epmd_port, 15)
    try:
        server = Child("rabbitmq", [RABBITMQ_SERVER], data, env)
        server.wait_port(port)
    except BaseException:
        epmd.stop()
        raise
    return Peer("rabbitmq", port, [epmd, server], "RabbitMQ 3.10 quorum queue, publisher confirms")


STARTERS = {"rabbitmq": start_rabbitmq, "nats": start_nats, "redis": start_redis}
