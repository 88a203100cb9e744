"""Shared by the geo-replication tests with real ``magnetar standalone`` processes and the official
``pulsar`` client: a node (one standalone, restartable on its ports, pausable), linking clusters the
way a user does, producing with outcomes, reading a topic back, and waiting on admin-API state."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pulsar

from magnetar.runtime.processes import StandaloneProcess, free_port

RECEIVE_TIMEOUT_MS = 15_000
QUIET = pulsar.ConsoleLogger(pulsar.LoggerLevel.Error)


def client(url: str, **options: Any) -> pulsar.Client:
    """The official client, quiet (errors only)."""
    return pulsar.Client(url, operation_timeout_seconds=15, logger=QUIET, **options)

#: How long an acknowledgement in A may take to reach B's copy of a replicated subscription during
#: traffic (a controller tick of 250 ms, the update marker's trip, on a loaded machine).
ACKS_IN_FLIGHT_S = 3.0


def admin(web_port: int, method: str, path: str, body: Any = None, token: str | None = None) -> Any:
    data = None if body is None else json.dumps(body).encode()
    headers = {"Content-Type": "application/json"}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    request = urllib.request.Request(f"http://127.0.0.1:{web_port}/admin/v2{path}", data=data, method=method,
                                     headers=headers)
    with urllib.request.urlopen(request, timeout=15) as response:
        text = response.read().decode()
        return json.loads(text) if text else None


@dataclass
class Node:
    name: str
    data_dir: str
    log_path: str
    env: dict[str, str]
    broker_port: int = field(default_factory=free_port)
    web_port: int = field(default_factory=free_port)
    bookie_port: int = field(default_factory=free_port)
    process: StandaloneProcess | None = None

    @property
    def url(self) -> str:
        return f"pulsar://127.0.0.1:{self.broker_port}"

    def start(self) -> None:
        with open(self.log_path, "a") as log:
            self.process = StandaloneProcess(self.data_dir, broker_port=self.broker_port, web_port=self.web_port,
                                             bookie_port=self.bookie_port, cluster_name=self.name, env=self.env,
                                             stderr=log.fileno())

    def kill(self) -> None:
        if self.process is not None:
            self.process.kill()
            self.process = None

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()
            self.process = None

    def pause(self) -> None:
        """SIGSTOP: the process keeps its sockets open and answers nothing (an unreachable cluster)."""
        assert self.process is not None
        os.kill(self.process.pid, signal.SIGSTOP)

    def resume(self) -> None:
        assert self.process is not None
        os.kill(self.process.pid, signal.SIGCONT)


def link(nodes: list[Node]) -> None:
    """What a user runs: register every other cluster, allow all clusters for tenant ``public`` and
    replicate ``public/default`` to all of them, on every cluster."""
    names = [n.name for n in nodes]
    for node in nodes:
        for other in nodes:
            if other is not node:
                admin(node.web_port, "PUT", f"/clusters/{other.name}", {
                    "serviceUrl": f"http://127.0.0.1:{other.web_port}", "brokerServiceUrl": other.url})
        admin(node.web_port, "POST", "/tenants/public", {"allowedClusters": names})
        admin(node.web_port, "POST", "/namespaces/public/default/replication", names)


def make_nodes(tmp_path: Path, names: list[str], env_of: dict[str, dict[str, str]] | None = None) -> list[Node]:
    env = {k: v for k, v in os.environ.items() if k != "MAGNETAR_BREAK"}
    return [Node(name, str(tmp_path / f"data-{name}"), str(tmp_path / f"{name}.log"),
                 {**env, **(env_of or {}).get(name, {})}) for name in names]


def cli_link(nodes: list[Node]) -> None:
    """``magnetar cluster link A=http://... B=http://...``: the same calls as ``link``, by the CLI."""
    members = [f"{n.name}=http://127.0.0.1:{n.web_port}" for n in nodes]
    done = subprocess.run([sys.executable, "-m", "magnetar.cli", "cluster", "link", *members],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr


def drain(url: str, topic: str, expected: set[str], *, settle_ms: int = 1_500) -> list[str]:
    """Every value stored in ``topic`` (a reader from the earliest position) until all of
    ``expected`` came and nothing more comes for ``settle_ms``; or nothing comes for
    ``RECEIVE_TIMEOUT_MS``."""
    client = pulsar.Client(url, operation_timeout_seconds=15, logger=QUIET)
    try:
        reader = client.create_reader(topic, pulsar.MessageId.earliest)
        values: list[str] = []
        while True:
            waiting = not expected <= set(values)
            try:
                message = reader.read_next(RECEIVE_TIMEOUT_MS if waiting else settle_ms)
            except pulsar.Timeout:
                return values
            values.append(message.data().decode())
    finally:
        client.close()


def produce(url: str, topic: str, values: list[str], **send_options: Any) -> list[str]:
    """Send ``values`` (batched) and return those acknowledged."""
    client = pulsar.Client(url, operation_timeout_seconds=15, logger=QUIET)
    acked: list[str] = []
    try:
        producer = client.create_producer(topic, batching_enabled=True, batching_max_publish_delay_ms=1,
                                          block_if_queue_full=True)
        for value in values:
            producer.send_async(value.encode(), lambda result, _id, v=value: acked.append(v)
                                if result == pulsar.Result.Ok else None, **send_options)
        producer.flush()
    finally:
        client.close()
    return acked




#: Between two reads of admin-API state under a deadline: the admin API has no long poll.
POLL_INTERVAL_S = 0.05


def wait_for(predicate: Callable[[], bool], timeout_s: float, what: str) -> float:
    """Poll ``predicate`` (admin-API state of a real process) until true; returns the seconds it took.
    Raises ``AssertionError`` naming ``what`` after ``timeout_s``."""
    started = time.monotonic()
    deadline = started + timeout_s
    while not predicate():
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
        time.sleep(POLL_INTERVAL_S)  # the state lives in another process: read it again
    return time.monotonic() - started


def topic_stats(node: Node, topic: str) -> Any:
    return admin(node.web_port, "GET", f"/persistent/public/default/{topic}/stats")


def replication_backlog(node: Node, topic: str, remote: str) -> int | None:
    found = topic_stats(node, topic)["replication"].get(remote)
    return None if found is None else int(found["replicationBacklog"])
