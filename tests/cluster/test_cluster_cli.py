"""``magnetar cluster up|status|add-broker|add-bookie|down`` as a user runs it: processes outlive
``up``, ``status`` checks them (and shows the load balancer), ``add-*`` grow the running cluster,
``down`` stops every one of them by PID."""

from __future__ import annotations

import asyncio
import json
import os
import ssl
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

        # One more broker and one more bookie (in a rack) in the running cluster.
        added = magnetar("add-broker", "--dir", directory, timeout_s=90)
        assert added.returncode == 0 and "broker-2 ready" in added.stdout, added.stdout + added.stderr
        added = magnetar("add-bookie", "--dir", directory, "--rack", "rack-9", "--region", "region-a", timeout_s=90)
        assert added.returncode == 0 and "bookie-3 ready" in added.stdout, added.stdout + added.stderr
        assert "rack /region-a/rack-9" in added.stdout
        broker_http = next(p["http_port"] for p in state["processes"] if p["kind"] == "broker")
        with urllib.request.urlopen(f"http://127.0.0.1:{broker_http}/admin/v2/bookies/racks-info", timeout=30) as r:
            placed = [info for info in json.loads(r.read())["default"].values() if info["rack"] == "/region-a/rack-9"]
        assert [info["region"] for info in placed] == ["region-a"]
        pids = [p["pid"] for p in json.loads((tmp_path / "c" / "cluster.json").read_text())["processes"]]
        assert len(pids) == 9 and all(running(pid) for pid in pids)
        status = magnetar("status", "--dir", directory, timeout_s=60)
        assert status.returncode == 0, status.stdout + status.stderr
        assert "leader broker 127.0.0.1:" in status.stdout and "broker\tbundles\ttopics" in status.stdout
        assert "broker-2" in status.stdout and "bookie-3" in status.stdout

        down = magnetar("down", "--dir", directory, timeout_s=90)
        assert down.returncode == 0 and "stopped 9 processes" in down.stdout, down.stdout + down.stderr
        assert not any(running(pid) for pid in pids)
        after = magnetar("status", "--dir", directory, timeout_s=60)
        assert after.returncode == 1
    finally:
        if (tmp_path / "c" / "cluster.json").exists():
            LocalCluster.load(Path(directory)).stop()  # never leave processes behind


async def bookie_answers(port: int, security: dict[str, str], without: str | None = None) -> bool:
    """Whether the bookie answers a read over TLS with the cluster's certificate (or without it)."""
    from magnetar.base.errors import MagnetarError
    from magnetar.ledger.bookie_client import BookieClient
    from magnetar.runtime.clock import SystemClock
    from magnetar.runtime.network import TcpNetwork
    from magnetar.runtime.tls import bookie_client_network

    if without == "plain":
        network = TcpNetwork()
    elif without == "no-client-cert":
        network = bookie_client_network(security["ca"])
    else:
        network = bookie_client_network(security["ca"], security["server_cert"], security["server_key"])
    try:
        client = await asyncio.wait_for(BookieClient.connect(network, "127.0.0.1", port, SystemClock()), 10)
        try:
            await asyncio.wait_for(client.read(424242, 0), 10)
        finally:
            await client.close()
    except (TimeoutError, MagnetarError, OSError, ssl.SSLError):
        return False
    return True


def test_cluster_up_secure(tmp_path: Path) -> None:
    """``--secure``: TLS, token and certificate authentication; the printed recipe works."""
    import pulsar

    directory = str(tmp_path / "s")
    try:
        up = magnetar("up", "--dir", directory, "--bookies", "1", "--brokers", "1", "--ensemble", "1,1,1",
                      "--no-autorecovery", "--secure")
        assert up.returncode == 0, up.stdout + up.stderr
        state = json.loads((tmp_path / "s" / "cluster.json").read_text())
        security, url = state["security"], state["service_url_tls"]
        assert url.startswith("pulsar+ssl://localhost:") and url in up.stdout and security["token"] in up.stdout
        token = Path(security["token"]).read_text().strip()
        logger = pulsar.ConsoleLogger(pulsar.LoggerLevel.Error)
        client = pulsar.Client(url, tls_trust_certs_file_path=security["ca"], tls_validate_hostname=True,
                               authentication=pulsar.AuthenticationToken(token), operation_timeout_seconds=20,
                               logger=logger)
        try:
            topic = "persistent://public/default/secure-cluster"
            consumer = client.subscribe(topic, "s", initial_position=pulsar.InitialPosition.Earliest)
            client.create_producer(topic).send(b"secure")
            assert consumer.receive(timeout_millis=20_000).data() == b"secure"
        finally:
            client.close()
        anonymous = pulsar.Client(url, tls_trust_certs_file_path=security["ca"], operation_timeout_seconds=5,
                                  logger=logger)
        try:
            with pytest.raises(pulsar.AuthenticationError):
                anonymous.create_producer("persistent://public/default/secure-cluster")
        finally:
            anonymous.close()
        bookie_port = next(p["port"] for p in state["processes"] if p["kind"] == "bookie")
        assert asyncio.run(bookie_answers(bookie_port, security)) is True  # TLS with the cluster's certificate
        for without in ("plain", "no-client-cert"):  # the bookies let nothing else in
            assert asyncio.run(bookie_answers(bookie_port, security, without)) is False
    finally:
        if (tmp_path / "s" / "cluster.json").exists():
            LocalCluster.load(Path(directory)).stop()
