"""What ``magnetar cluster status`` shows of the load balancer: the leader broker, the bundles
(and topics) each broker serves, and the leader's last decisions, read over HTTP from the
running brokers (``/health`` and the admin API, ``admin.balancer``)."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from typing import Any

from magnetar.runtime.cluster import LocalCluster, http_health

#: Decisions ``cluster status`` shows (the newest).
DECISIONS_SHOWN = 10


@dataclass
class BalanceStatus:
    leader: str | None = None
    bundles: dict[str, list[str]] = field(default_factory=dict)  # broker name -> bundles
    topics: dict[str, int] = field(default_factory=dict)  # broker name -> topics loaded
    decisions: list[dict[str, Any]] = field(default_factory=list)


def _get(port: int, path: str, timeout_s: float = 2.0) -> Any:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/admin/v2{path}", timeout=timeout_s) as reply:
            return json.loads(reply.read())
    except (OSError, ValueError, urllib.error.URLError):
        return None


def balance_status(cluster: LocalCluster) -> BalanceStatus:
    status = BalanceStatus()
    for broker in cluster.of_kind("broker"):
        if not broker.alive() or broker.http_port is None:
            continue
        health = http_health(broker.http_port)
        if health is not None:
            status.bundles[broker.name] = [str(b) for b in health.get("bundles", [])]
            status.topics[broker.name] = int(health.get("topics", 0))
        if status.leader is None:
            leader = _get(broker.http_port, "/brokers/leaderBroker")
            if isinstance(leader, dict):
                status.leader = str(leader.get("brokerId") or leader.get("serviceUrl"))
                decisions = _get(broker.http_port, "/broker-stats/load-balancer/decisions")
                if isinstance(decisions, dict):
                    status.decisions = list(decisions.get("decisions", []))[-DECISIONS_SHOWN:]
    return status
