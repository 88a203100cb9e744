"""Magnetar nodes as child processes: start, wait for the ready line, stop by PID.

Used by integration tests, benchmarks and (later) ``magnetar cluster``. A child is started with
``python -m magnetar.cli``; it is ready once it printed its ready line on stdout, and it is
always stopped by its own PID (SIGTERM, then SIGKILL after a grace period).
"""

from __future__ import annotations

import os
import random
import selectors
import signal
import socket
import subprocess
import sys
import time

#: How long a child may take to print its ready line.
READY_TIMEOUT_S = 60.0
#: How long a SIGTERMed child may take to exit before it is SIGKILLed.
STOP_GRACE_S = 30.0


#: Ports for nodes that restart on the same address come from below the kernel's ephemeral range
#: (``ip_local_port_range``), not from it: while such a node is down (killed, restarting), a port
#: from that range can become the local port of any outbound connection on the machine, and the
#: restart then finds it taken (seen in a chaos run beside other tests: three restarts of a
#: standalone refused with "port ... already in use"). At or above this floor.
FIXED_PORT_FLOOR = 10_000
FIXED_PORT_ATTEMPTS_MAX = 200
_EPHEMERAL_RANGE = "/proc/sys/net/ipv4/ip_local_port_range"


def _ephemeral_low() -> int:
    """The first port of the kernel's ephemeral range (0 if unknown)."""
    try:
        with open(_EPHEMERAL_RANGE) as file:
            return int(file.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 0


def free_port(host: str = "127.0.0.1") -> int:
    """A port that was free a moment ago (for nodes whose identity is their address): below the
    ephemeral range where the machine has one (``FIXED_PORT_FLOOR``), else any the OS picks."""
    low = _ephemeral_low()
    if low > FIXED_PORT_FLOOR:
        for _ in range(FIXED_PORT_ATTEMPTS_MAX):
            port = random.randrange(FIXED_PORT_FLOOR, low)
            with socket.socket() as sock:
                try:
                    sock.bind((host, port))
                except OSError:
                    continue
                return port
    with socket.socket() as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


class StandaloneProcess:
    """``magnetar standalone`` as a child process.

    Ports default to 0 (any free one); pass fixed ports to restart a standalone on the same data
    directory (a bookie's identity is its address). ``fields`` holds the ready line's
    ``key=value`` pairs (broker, metadata, bookies, quorum, http).
    """

    def __init__(
        self,
        data_dir: str,
        *,
        bookies_count: int = 1,
        broker_port: int = 0,
        bookie_port: int = 0,
        web_port: int = 0,
        env: dict[str, str] | None = None,
        stderr: int | None = subprocess.PIPE,
        cluster_name: str | None = None,
        extra_args: tuple[str, ...] = (),
    ) -> None:
        argv = [sys.executable, "-m", "magnetar.cli", "standalone", "--data-dir", data_dir,
                "--bookies", str(bookies_count), "--broker-port", str(broker_port),
                "--bookie-port", str(bookie_port), "--web-port", str(web_port), *extra_args]
        if cluster_name is not None:
            argv += ["--cluster-name", cluster_name]
        child_env = dict(os.environ if env is None else env)
        self.security_line = ""
        self.process = subprocess.Popen(argv, env=child_env, stdout=subprocess.PIPE, stderr=stderr, text=True)
        try:
            self.fields = self._wait_ready()
        except BaseException:
            self.kill()
            raise

    def _wait_ready(self) -> dict[str, str]:
        # Raw reads of the pipe: a buffered readline could pull several lines into its buffer and
        # leave select() waiting for bytes that already arrived.
        assert self.process.stdout is not None
        fd = self.process.stdout.fileno()
        selector = selectors.DefaultSelector()
        selector.register(fd, selectors.EVENT_READ)
        deadline = time.monotonic() + READY_TIMEOUT_S
        pending = b""
        while time.monotonic() < deadline:
            if not selector.select(timeout=1):
                continue
            chunk = os.read(fd, 65536)
            if not chunk:
                break
            pending += chunk
            while b"\n" in pending:
                raw, pending = pending.split(b"\n", 1)
                line = raw.decode(errors="replace")
                if line.startswith("magnetar standalone security:"):
                    self.security_line = line.strip()
                if line.startswith("magnetar standalone ready"):
                    return dict(part.split("=", 1) for part in line.split()[3:])
        stderr = ""
        if self.process.stderr is not None and self.process.poll() is not None:
            stderr = self.process.stderr.read()[-4000:]
        raise RuntimeError(f"magnetar standalone did not start: {stderr}")

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def broker_url(self) -> str:
        return self.fields["broker"]

    @property
    def http_url(self) -> str:
        return f"http://{self.fields['http']}"

    @property
    def bookies(self) -> list[tuple[str, int]]:
        out = []
        for bookie in self.fields["bookies"].split(","):
            host, port = bookie.rsplit(":", 1)
            out.append((host, int(port)))
        return out

    def kill(self) -> None:
        """SIGKILL: nothing of the shutdown path runs."""
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(STOP_GRACE_S)

    def terminate(self) -> int:
        """SIGTERM and wait; SIGKILL after ``STOP_GRACE_S``. Returns the exit status."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                return self.process.wait(STOP_GRACE_S)
            except subprocess.TimeoutExpired:
                self.process.kill()
        return self.process.wait()
