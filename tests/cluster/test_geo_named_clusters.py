"""Two named clusters on real ZooKeeper, as a user runs them: ``magnetar cluster up --name A`` and
``--name B`` (each its own ZooKeeper, one bookie, one broker: the smallest real cluster), linked
with ``magnetar cluster link``; messages produced in A with the official client are consumed in B,
each once, and A's topic stats show the replicator to B connected with an empty backlog. Both
clusters are stopped by PID (``magnetar cluster down``) whatever happens."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pulsar
import pytest

from magnetar.runtime.cluster import STATE_FILE, LocalCluster
from tests.integration.geo import QUIET, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

TOPIC = "persistent://public/default/named-clusters"


def magnetar(*args: str, timeout_s: float = 150) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, COLUMNS="200")
    return subprocess.run([sys.executable, "-m", "magnetar.cli", *args], capture_output=True, text=True,
                          timeout=timeout_s, env=env)


def broker_of(directory: Path) -> dict[str, Any]:
    state = json.loads((directory / STATE_FILE).read_text())
    return next(p for p in state["processes"] if p["kind"] == "broker")


def replication_to(http_port: int, remote: str) -> dict[str, Any]:
    import urllib.request

    url = f"http://127.0.0.1:{http_port}/admin/v2/persistent/public/default/named-clusters/stats"
    with urllib.request.urlopen(url, timeout=15) as reply:
        return dict(json.loads(reply.read())["replication"].get(remote, {}))


def test_two_named_zookeeper_clusters_replicate(tmp_path: Path) -> None:
    directories = {name: tmp_path / f"cluster-{name}" for name in ("A", "B")}
    try:
        for name, directory in directories.items():
            up = magnetar("cluster", "up", "--name", name, "--dir", str(directory), "--bookies", "1",
                          "--brokers", "1", "--ensemble", "1,1,1", "--no-autorecovery")
            assert up.returncode == 0, up.stdout + up.stderr
            assert json.loads((directory / STATE_FILE).read_text())["name"] == name
        brokers = {name: broker_of(directory) for name, directory in directories.items()}
        linked = magnetar("cluster", "link", *(f"{name}=http://127.0.0.1:{b['http_port']}" for name, b in brokers.items()))
        assert linked.returncode == 0, linked.stdout + linked.stderr

        values = [f"z-{i}" for i in range(50)]
        client_a = pulsar.Client(f"pulsar://127.0.0.1:{brokers['A']['port']}", operation_timeout_seconds=30,
                                 logger=QUIET)
        client_b = pulsar.Client(f"pulsar://127.0.0.1:{brokers['B']['port']}", operation_timeout_seconds=30,
                                 logger=QUIET)
        try:
            consumer = client_b.subscribe(TOPIC, "in-b", initial_position=pulsar.InitialPosition.Earliest)
            producer = client_a.create_producer(TOPIC)
            for value in values:
                producer.send(value.encode())
            got = []
            for _ in values:
                message = consumer.receive(60_000)
                got.append(message.data().decode())
                consumer.acknowledge(message)
            with pytest.raises(pulsar.Timeout):
                consumer.receive(2_000)  # and nothing more: each message once
        finally:
            client_a.close()
            client_b.close()
        assert got == values  # in order, once each
        wait_for(lambda: replication_to(brokers["A"]["http_port"], "B").get("replicationBacklog") == 0, 30,
                 "A's replication backlog to B to be empty")
        assert replication_to(brokers["A"]["http_port"], "B")["connected"] is True
        assert replication_to(brokers["B"]["http_port"], "A")["outboundConnection"] == "pulsar.repl.B-->A"
    finally:
        for directory in directories.values():
            if (directory / STATE_FILE).exists():
                LocalCluster.load(directory).stop()  # every process by PID
