"""A local Magnetar cluster of real processes on 127.0.0.1: ZooKeeper, N bookies, M brokers and
an AutoRecovery process.

``LocalCluster(base_dir, bookies=3, brokers=2)`` chooses free ports once (a bookie's identity is
its address, so a restart keeps them), gives every process a private data directory under
``base_dir`` and one log file ``base_dir/logs/<name>.log`` (stdout and stderr, appended across
restarts, so a child never blocks on a full pipe). ``start()`` starts ZooKeeper, waits until it
answers ``ruok``, then the bookies, then the brokers, each ready once its ready line appears in
its log after this start. ``stop()`` stops every process by its PID (SIGTERM, SIGKILL after a
grace period). The state (ports, PIDs, URLs) is written to ``base_dir/cluster.json``;
``LocalCluster.load(base_dir)`` reads it back (``magnetar cluster status|down``) and controls the
processes by PID, after checking each PID still runs the command it was started with.

With ``secure=True`` (``magnetar cluster up --secure``) the cluster is made for a network:
``base_dir/security/`` gets a CA, a server certificate for ``localhost``/``127.0.0.1``, a client
certificate whose CN is ``superuser``, an HS256 secret key and a token for ``superuser``, and a
Pulsar ``broker.conf`` that every broker reads (``--pulsar-conf``): TLS listeners for the binary
protocol and HTTPS, token and TLS-certificate authentication, authorization with ``superuser`` as
super-user, and TLS to the bookies, which require a client certificate signed by the CA (the
brokers and AutoRecovery present the server certificate). ``connect_help()`` says how to reach it.

Processes are named ``zookeeper``, ``bookie-0``.., ``broker-0``.. and ``autorecovery`` (the
auditor and replication worker, unless ``autorecovery=False``); each is a ``ClusterProcess``
with ``kill(sig)``, ``pause()`` (SIGSTOP), ``resume()`` (SIGCONT), ``restart(env)`` (same ports,
same data directory, extra environment for this run only) and ``alive()``: the chaos runner
drives faults through these. Children run in their own session, so a ``magnetar cluster up``
leaves them running after it returns.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from magnetar.runtime.autorecovery import READY_PREFIX as AUTORECOVERY_READY
from magnetar.runtime.broker_node import READY_PREFIX as BROKER_READY
from magnetar.runtime.certs import make_pki
from magnetar.runtime.processes import STOP_GRACE_S, free_port

ZOOKEEPER_JAR = "/usr/share/java/zookeeper.jar"
CHROOT = "/magnetar"
STATE_FILE = "cluster.json"
BOOKIE_READY = "magnetar-bookie listening on"
#: Metadata session timeout of the brokers: how long a dead or paused owner keeps its bundles.
BROKER_SESSION_TIMEOUT_MS_DEFAULT = 6_000
#: How often a starting process is checked for readiness.
READY_POLL_S = 0.1
#: Grace of a SIGTERM in ``stop()`` before SIGKILL (the cluster is disposable).
CLUSTER_STOP_GRACE_S = 10.0

ZOO_CFG = """tickTime=500
dataDir={data}
clientPort={port}
clientPortAddress=127.0.0.1
maxClientCnxns=0
minSessionTimeout=1000
maxSessionTimeout=60000
admin.enableServer=false
4lw.commands.whitelist=ruok,srvr,stat
"""
LOG4J = """log4j.rootLogger=WARN, FILE
log4j.appender.FILE=org.apache.log4j.FileAppender
log4j.appender.FILE.File=${zookeeper.log.file}
log4j.appender.FILE.layout=org.apache.log4j.PatternLayout
log4j.appender.FILE.layout.ConversionPattern=%d{ISO8601} %-5p [%t] %c{1} - %m%n
"""

#: The kind of a read-only broker process (``magnetar broker --read-only``, ``broker.read_only``).
READ_ONLY_BROKER = "read_only_broker"

Progress = Callable[[str, str], None]  # (process name, "starting" | "ready")

SUPERUSER_ROLE = "superuser"
SECURE_BROKER_CONF = """# Written by `magnetar cluster up --secure` (Pulsar broker.conf keys)
authenticationEnabled=true
authenticationProviders=org.apache.pulsar.broker.authentication.AuthenticationProviderToken,\
org.apache.pulsar.broker.authentication.AuthenticationProviderTls
tokenSecretKey=file://{secret}
authorizationEnabled=true
superUserRoles={superuser}
tlsCertificateFilePath={broker_cert}
tlsKeyFilePath={broker_key}
tlsTrustCertsFilePath={ca}
bookkeeperTLSTrustCertsFilePath={ca}
bookkeeperTLSCertificateFilePath={broker_cert}
bookkeeperTLSKeyFilePath={broker_key}
"""


def _security_paths(directory: Path) -> dict[str, str]:
    return {"ca": str(directory / "ca.cert.pem"), "secret": str(directory / "secret.key"),
            "server_cert": str(directory / "broker.cert.pem"), "server_key": str(directory / "broker.key-pk8.pem"),
            "token": str(directory / f"{SUPERUSER_ROLE}.token"), "broker_conf": str(directory / "broker.conf"),
            "client_cert": str(directory / f"{SUPERUSER_ROLE}.cert.pem"),
            "client_key": str(directory / f"{SUPERUSER_ROLE}.key-pk8.pem")}


def make_security(directory: Path) -> dict[str, str]:
    """A CA, broker and superuser certificates, a secret key, a superuser token and the brokers'
    Pulsar conf, in ``directory`` (made once; an existing set is kept so restarts keep their keys)."""
    from magnetar.security import create_token

    paths = _security_paths(directory)
    if all(Path(p).exists() for p in paths.values()):
        return paths
    directory.mkdir(parents=True, exist_ok=True)
    pki = make_pki(str(directory), client_roles=(SUPERUSER_ROLE,))
    secret = os.urandom(32)
    for path, data in ((paths["secret"], secret),
                       (paths["token"], create_token(SUPERUSER_ROLE, secret_key=secret).encode() + b"\n")):
        with os.fdopen(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "wb") as handle:
            handle.write(data)
    Path(paths["broker_conf"]).write_text(SECURE_BROKER_CONF.format(
        secret=paths["secret"], superuser=SUPERUSER_ROLE, broker_cert=pki["broker_cert"],
        broker_key=pki["broker_key"], ca=pki["ca"]))
    return paths


def zookeeper_ruok(port: int, timeout_s: float = 1.0) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout_s) as sock:
            sock.sendall(b"ruok")
            sock.shutdown(socket.SHUT_WR)
            return sock.recv(16) == b"imok"
    except OSError:
        return False


def tcp_open(port: int, timeout_s: float = 1.0) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout_s):
            return True
    except OSError:
        return False


def http_health(port: int, timeout_s: float = 2.0) -> dict[str, Any] | None:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=timeout_s) as response:
            body = json.loads(response.read())
            return body if isinstance(body, dict) else None
    except (OSError, ValueError):
        return None


class ClusterProcess:
    """One node of the cluster, controlled by its PID."""

    def __init__(self, name: str, kind: str, argv: list[str], log_path: Path, *, port: int,
                 http_port: int | None = None, env: dict[str, str] | None = None,
                 tls_port: int | None = None, https_port: int | None = None) -> None:
        self.tls_port = tls_port
        self.https_port = https_port
        self.name = name
        self.kind = kind  # "zookeeper" | "bookie" | "broker"
        self.argv = argv
        self.log_path = log_path
        self.port = port
        self.http_port = http_port
        self.env = dict(env or {})
        self._popen: subprocess.Popen[bytes] | None = None
        self._pid: int | None = None  # adopted from a state file (not our child)
        self._log_offset = 0

    # --- identity -------------------------------------------------------------------------------

    @property
    def pid(self) -> int:
        if self._popen is not None:
            return self._popen.pid
        if self._pid is None:
            raise RuntimeError(f"{self.name} was never started")
        return self._pid

    def _runs_our_command(self, pid: int) -> bool:
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            return False
        return [arg.decode(errors="replace") for arg in cmdline if arg] == self.argv

    def alive(self) -> bool:
        if self._popen is not None:
            return self._popen.poll() is None
        if self._pid is None:
            return False
        try:
            state = Path(f"/proc/{self._pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            return False
        return state != "Z" and self._runs_our_command(self._pid)

    # --- lifecycle ------------------------------------------------------------------------------

    def start(self, env: dict[str, str] | None = None) -> None:
        """Start the process (not waiting for it); ``env`` is extra environment for this run."""
        if self.alive():
            raise RuntimeError(f"{self.name} is already running (pid {self.pid})")
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        child_env = {**os.environ, **self.env, **(env or {})}
        with open(self.log_path, "ab") as log:
            log.write(f"=== {self.name} start {time.strftime('%Y-%m-%d %H:%M:%S')} ===\n".encode())
            log.flush()
            self._log_offset = log.tell()
            self._popen = subprocess.Popen(self.argv, env=child_env, stdout=log, stderr=subprocess.STDOUT,
                                           stdin=subprocess.DEVNULL, start_new_session=True)
        self._pid = None

    def ready(self) -> bool:
        if self.kind == "zookeeper":
            return zookeeper_ruok(self.port)
        marker = {"bookie": BOOKIE_READY, "broker": BROKER_READY,
                  READ_ONLY_BROKER: BROKER_READY}.get(self.kind, AUTORECOVERY_READY)
        try:
            with open(self.log_path, "rb") as log:
                log.seek(self._log_offset)
                return marker.encode() in log.read()
        except OSError:
            return False

    def wait_ready(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.ready():
                return
            if not self.alive():
                raise RuntimeError(f"{self.name} exited while starting; log tail:\n{self.log_tail()}")
            time.sleep(READY_POLL_S)  # polling a child's readiness under a deadline
        raise RuntimeError(f"{self.name} not ready within {timeout_s:.0f} s; log tail:\n{self.log_tail()}")

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def _signal(self, sig: int) -> bool:
        if not self.alive():
            return False
        os.kill(self.pid, sig)
        return True

    def _wait_exit(self, timeout_s: float) -> bool:
        if self._popen is not None:
            try:
                self._popen.wait(timeout_s)
                return True
            except subprocess.TimeoutExpired:
                return False
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if not self.alive():
                return True
            time.sleep(0.05)  # not our child: poll its /proc entry until it is gone
        return not self.alive()

    def kill(self, sig: int = signal.SIGKILL) -> None:
        """Send ``sig``; for SIGKILL and SIGTERM wait until the process is gone."""
        if not self._signal(sig):
            return
        if sig == signal.SIGTERM:
            self._signal(signal.SIGCONT)  # a paused process handles SIGTERM only once resumed
        if sig in (signal.SIGKILL, signal.SIGTERM) and not self._wait_exit(STOP_GRACE_S):
            self._signal(signal.SIGKILL)
            self._wait_exit(STOP_GRACE_S)

    def pause(self) -> None:
        self._signal(signal.SIGSTOP)

    def resume(self) -> None:
        self._signal(signal.SIGCONT)

    def stop(self, grace_s: float = CLUSTER_STOP_GRACE_S) -> None:
        """SIGTERM, then SIGKILL after ``grace_s``."""
        if not self._signal(signal.SIGTERM):
            return
        self._signal(signal.SIGCONT)
        if not self._wait_exit(grace_s):
            self._signal(signal.SIGKILL)
            self._wait_exit(STOP_GRACE_S)

    def restart(self, env: dict[str, str] | None = None, timeout_s: float = 30) -> None:
        """Kill -9 if running, start again on the same ports and data directory, wait until ready."""
        self.kill(signal.SIGKILL)
        self.start(env)
        self.wait_ready(timeout_s)

    def state(self) -> dict[str, Any]:
        return {"name": self.name, "kind": self.kind, "pid": self.pid if self.alive() else None,
                "port": self.port, "http_port": self.http_port, "argv": self.argv, "env": self.env,
                "log": str(self.log_path), "tls_port": self.tls_port, "https_port": self.https_port}

    @staticmethod
    def from_state(data: dict[str, Any]) -> ClusterProcess:
        process = ClusterProcess(data["name"], data["kind"], list(data["argv"]), Path(data["log"]),
                                 port=int(data["port"]), http_port=data.get("http_port"), env=data.get("env"),
                                 tls_port=data.get("tls_port"), https_port=data.get("https_port"))
        process._pid = data.get("pid")
        return process


@dataclass(frozen=True)
class ProcessStatus:
    name: str
    pid: int | None
    alive: bool
    healthy: bool
    detail: str


class LocalCluster:
    """ZooKeeper + bookies + brokers as real processes; synchronous (tests, chaos runner, CLI)."""

    def __init__(self, base_dir: Path, *, bookies: int = 3, brokers: int = 2,
                 ensemble: tuple[int, int, int] = (3, 3, 2), env: dict[str, dict[str, str]] | None = None,
                 session_timeout_ms: int = BROKER_SESSION_TIMEOUT_MS_DEFAULT, autorecovery: bool = True,
                 secure: bool = False, racks: list[str] | None = None, name: str | None = None,
                 read_only_brokers: int = 0) -> None:
        e, qw, qa = ensemble
        if not (bookies >= e >= qw >= qa >= 1 and brokers >= 1):
            raise ValueError(f"need bookies >= E >= Qw >= Qa >= 1 and brokers >= 1, got {bookies}, {ensemble}")
        self.base_dir = Path(base_dir).absolute()
        self.name = name  # the brokers' cluster name (geo-replication); None: the broker default
        self.ensemble = ensemble
        self.session_timeout_ms = session_timeout_ms
        self.security: dict[str, str] = make_security(self.base_dir / "security") if secure else {}
        env = env or {}
        self.processes: dict[str, ClusterProcess] = {}
        zk_port = free_port()
        self.metadata_url = f"zk://127.0.0.1:{zk_port}{CHROOT}"
        self._add(self._zookeeper(zk_port, env.get("zookeeper")))
        if racks is not None and len(racks) != bookies:
            raise ValueError(f"racks names one rack per bookie: {bookies} bookies, {len(racks)} racks")
        for i in range(bookies):
            self._add(self._bookie(i, free_port(), env.get(f"bookie-{i}"), racks[i] if racks else None))
        for i in range(brokers):
            self._add(self._broker(i, free_port(), free_port(), env.get(f"broker-{i}")))
        for i in range(read_only_brokers):
            self._add(self._broker(i, free_port(), free_port(), env.get(f"ro-broker-{i}"), read_only=True))
        if autorecovery:
            self._add(self._autorecovery(env.get("autorecovery")))

    def _add(self, process: ClusterProcess) -> None:
        self.processes[process.name] = process

    def _log(self, name: str) -> Path:
        return self.base_dir / "logs" / f"{name}.log"

    def _zookeeper(self, port: int, env: dict[str, str] | None) -> ClusterProcess:
        java = shutil.which("java")
        if java is None or not Path(ZOOKEEPER_JAR).exists():
            raise RuntimeError("ZooKeeper is not installed: run scripts/install-system-deps.sh")
        directory = self.base_dir / "zookeeper"
        (directory / "data").mkdir(parents=True, exist_ok=True)
        (directory / "zoo.cfg").write_text(ZOO_CFG.format(data=directory / "data", port=port))
        (directory / "log4j.properties").write_text(LOG4J)
        argv = [java, "-Xmx256m", f"-Dzookeeper.log.file={directory / 'zookeeper.log'}",
                f"-Dlog4j.configuration=file:{directory / 'log4j.properties'}", "-Dzookeeper.jmx.log4j.disable=true",
                "-cp", f"{directory}:{ZOOKEEPER_JAR}", "org.apache.zookeeper.server.quorum.QuorumPeerMain",
                str(directory / "zoo.cfg")]
        return ClusterProcess("zookeeper", "zookeeper", argv, self._log("zookeeper"), port=port, env=env)

    def _bookie(self, index: int, port: int, env: dict[str, str] | None, rack: str | None = None) -> ClusterProcess:
        name = f"bookie-{index}"
        argv = [sys.executable, "-m", "magnetar.cli", "bookie", "--metadata", self.metadata_url, "--host", "127.0.0.1",
                "--port", str(port), "--data-dir", str(self.base_dir / name), *(["--rack", rack] if rack else [])]
        if self.security:  # TLS with required client certificates: only the cluster's own nodes get in
            env = {**(env or {}), "MAGNETAR_BOOKIE_TLS_CERTIFICATE_FILE_PATH": self.security["server_cert"],
                   "MAGNETAR_BOOKIE_TLS_KEY_FILE_PATH": self.security["server_key"],
                   "MAGNETAR_BOOKIE_TLS_TRUST_CERTS_FILE_PATH": self.security["ca"],
                   "MAGNETAR_BOOKIE_TLS_REQUIRE_CLIENT_CERT": "true"}
        return ClusterProcess(name, "bookie", argv, self._log(name), port=port, env=env)

    def _broker(self, index: int, port: int, http_port: int, env: dict[str, str] | None, *,
                read_only: bool = False) -> ClusterProcess:
        name = f"ro-broker-{index}" if read_only else f"broker-{index}"
        e, qw, qa = self.ensemble
        argv = [sys.executable, "-m", "magnetar.cli", "broker", "--metadata", self.metadata_url,
                "--host", "127.0.0.1", "--advertised-address", "127.0.0.1", "--port", str(port),
                "--http-port", str(http_port), "--ensemble", f"{e},{qw},{qa}",
                "--session-timeout-ms", str(self.session_timeout_ms)]
        if read_only:
            argv.append("--read-only")
        if self.name is not None:
            argv += ["--cluster-name", self.name]
        tls_port = https_port = None
        if self.security:
            tls_port, https_port = free_port(), free_port()
            argv += ["--pulsar-conf", self.security["broker_conf"], "--port-tls", str(tls_port),
                     "--http-port-tls", str(https_port)]
        return ClusterProcess(name, READ_ONLY_BROKER if read_only else "broker", argv, self._log(name), port=port,
                              http_port=http_port, env=env, tls_port=tls_port, https_port=https_port)

    def _autorecovery(self, env: dict[str, str] | None) -> ClusterProcess:
        argv = [sys.executable, "-m", "magnetar.cli", "autorecovery", "--metadata", self.metadata_url]
        if self.security:
            argv += ["--bookie-tls-trust-cert", self.security["ca"], "--bookie-tls-cert", self.security["server_cert"],
                     "--bookie-tls-key", self.security["server_key"]]
        return ClusterProcess("autorecovery", "autorecovery", argv, self._log("autorecovery"), port=0, env=env)

    def _next_index(self, kind: str) -> int:
        return 1 + max((int(p.name.rsplit("-", 1)[1]) for p in self.of_kind(kind)), default=-1)

    def add_broker(self, env: dict[str, str] | None = None, timeout_s: float = 60) -> ClusterProcess:
        """Start one more broker in the running cluster (no data moves: the load balancer's leader
        gives it bundles); returns it once ready, the state file updated."""
        process = self._broker(self._next_index("broker"), free_port(), free_port(), env)
        return self._start_one(process, timeout_s)

    def add_bookie(self, rack: str | None = None, env: dict[str, str] | None = None,
                   timeout_s: float = 60) -> ClusterProcess:
        """Start one more bookie (new ledgers may use it at once); returns it once ready."""
        process = self._bookie(self._next_index("bookie"), free_port(), env, rack)
        return self._start_one(process, timeout_s)

    def _start_one(self, process: ClusterProcess, timeout_s: float) -> ClusterProcess:
        self._add(process)
        process.start()
        try:
            process.wait_ready(timeout_s)
        except BaseException:
            process.stop()
            del self.processes[process.name]
            raise
        self.write_state()
        return process

    # --- views ----------------------------------------------------------------------------------

    def of_kind(self, kind: str) -> list[ClusterProcess]:
        return [p for p in self.processes.values() if p.kind == kind]

    def service_url(self) -> str:
        return "pulsar://" + ",".join(f"127.0.0.1:{p.port}" for p in self.of_kind("broker"))

    def read_only_service_url(self) -> str | None:
        """The read-only brokers as one service URL (a reading application's only change)."""
        ports = [p.port for p in self.of_kind(READ_ONLY_BROKER)]
        return "pulsar://" + ",".join(f"127.0.0.1:{port}" for port in ports) if ports else None

    def broker_url(self, broker: int = 0) -> str:
        return f"pulsar://127.0.0.1:{self.processes[f'broker-{broker}'].port}"

    def http_url(self, broker: int = 0) -> str:
        return f"http://127.0.0.1:{self.processes[f'broker-{broker}'].http_port}"

    def service_url_tls(self) -> str | None:
        ports = [p.tls_port for p in self.of_kind("broker") if p.tls_port is not None]
        return "pulsar+ssl://" + ",".join(f"localhost:{port}" for port in ports) if ports else None

    def https_url(self, broker: int = 0) -> str | None:
        port = self.processes[f"broker-{broker}"].https_port
        return f"https://localhost:{port}" if port is not None else None

    def connect_help(self) -> list[str]:
        """How a user reaches a secure cluster: URLs, files and ready-to-run commands."""
        security = self.security or _security_paths(self.base_dir / "security")
        tls_url, https = self.service_url_tls(), self.https_url()
        if tls_url is None or not Path(security["token"]).exists():
            return [f"service URL {self.service_url()} (no TLS, no authentication)"]
        ca, token = security["ca"], security["token"]
        return [
            f"service URL (TLS)  {tls_url}",
            f"admin (HTTPS)      {https}",
            f"CA certificate     {ca}",
            f"superuser token    {token}  (role superuser)",
            f"client certificate {security['client_cert']} / {security['client_key']} (CN superuser)",
            f"magnetar produce my-topic -m hello --service-url {tls_url} --tls-trust-cert {ca} --token file://{token}",
            f"magnetar admin --url {https} --tls-trust-cert {ca} --token file://{token} tenants list",
            f"python: pulsar.Client('{tls_url}', tls_trust_certs_file_path='{ca}', "
            f"authentication=pulsar.AuthenticationToken(open('{token}').read().strip()))",
        ]

    # --- lifecycle ------------------------------------------------------------------------------

    def start(self, timeout_s: float = 60, progress: Progress | None = None) -> None:
        """Start everything and wait until every process is ready; on failure stop them all."""
        deadline = time.monotonic() + timeout_s
        report = progress or (lambda _name, _state: None)
        try:
            for group in (self.of_kind("zookeeper"), self.of_kind("bookie"), self.of_kind("broker"),
                          self.of_kind(READ_ONLY_BROKER), self.of_kind("autorecovery")):
                for process in group:
                    report(process.name, "starting")
                    process.start()
                for process in group:
                    process.wait_ready(max(1.0, deadline - time.monotonic()))
                    report(process.name, "ready")
        except BaseException:
            self.stop()
            raise
        self.write_state()

    def stop(self) -> None:
        """Stop every process by PID: AutoRecovery, brokers, bookies, then ZooKeeper."""
        for kind in ("autorecovery", READ_ONLY_BROKER, "broker", "bookie", "zookeeper"):
            for process in self.of_kind(kind):
                try:
                    process.stop()
                except OSError:
                    continue  # gone between the check and the signal
        with contextlib.suppress(OSError):
            self.write_state()

    def write_state(self) -> None:
        self.base_dir.mkdir(parents=True, exist_ok=True)
        state = {"metadata_url": self.metadata_url, "service_url": self.service_url(),
                 "service_url_tls": self.service_url_tls(), "security": self.security,
                 "ensemble": list(self.ensemble), "session_timeout_ms": self.session_timeout_ms,
                 "name": self.name, "processes": [p.state() for p in self.processes.values()]}
        tmp = self.base_dir / f"{STATE_FILE}.tmp"
        tmp.write_text(json.dumps(state, indent=2))
        tmp.replace(self.base_dir / STATE_FILE)

    @classmethod
    def load(cls, base_dir: Path) -> LocalCluster:
        """The cluster described by ``base_dir/cluster.json`` (its processes adopted by PID)."""
        state = json.loads((Path(base_dir) / STATE_FILE).read_text())
        cluster = cls.__new__(cls)
        cluster.base_dir = Path(base_dir).absolute()
        cluster.metadata_url = state["metadata_url"]
        e, qw, qa = (int(x) for x in state["ensemble"])
        cluster.ensemble = (e, qw, qa)
        cluster.session_timeout_ms = int(state["session_timeout_ms"])
        cluster.security = dict(state.get("security") or {})
        cluster.name = state.get("name")  # brokers added later join the same named cluster
        cluster.processes = {}
        for data in state["processes"]:
            cluster._add(ClusterProcess.from_state(data))
        return cluster

    def status(self) -> list[ProcessStatus]:
        out = []
        for process in self.processes.values():
            alive = process.alive()
            pid = process.pid if alive else None
            if not alive:
                out.append(ProcessStatus(process.name, None, False, False, "not running"))
            elif process.kind == "zookeeper":
                ok = zookeeper_ruok(process.port)
                out.append(ProcessStatus(process.name, pid, True, ok, "imok" if ok else "no answer to ruok"))
            elif process.kind == "autorecovery":
                out.append(ProcessStatus(process.name, pid, True, True, "running"))
            elif process.kind == "bookie":
                ok = tcp_open(process.port)
                out.append(ProcessStatus(process.name, pid, True, ok, f"127.0.0.1:{process.port}"))
            else:
                health = http_health(process.http_port or 0)
                ok = health is not None and health.get("status") == "ok"
                detail = f"bundles={len(health.get('bundles', []))} topics={health.get('topics')}" if health else "no /health"
                if health and health.get("readOnly"):
                    detail = f"read-only topics={health.get('topics')}"
                out.append(ProcessStatus(process.name, pid, True, ok, detail))
        return out
