"""A remote cluster that is down or unreachable for a long time, with real ``magnetar standalone``
processes and the official ``pulsar`` client (issue 19's fault evidence):

* **killed**: B is killed with SIGKILL and stays down for ``MAGNETAR_GEO_OUTAGE_S`` seconds
  (default 60) while A keeps taking messages; B restarts on the same ports and data.
* **paused**: B is stopped with SIGSTOP for ``MAGNETAR_GEO_PAUSE_S`` seconds (default 10): its
  sockets stay open and nothing answers (the replicator's sends hang rather than fail); then SIGCONT.

Both: A's replication backlog grows during the outage (sampled at its middle and its end), then
drains to 0; B's copy of the topic, compared with what A acknowledged, has 0 lost and 0 duplicated
(``magnetar.chaos.replication``; its negative control is in ``test_geo_replication.py``). The
catch-up is printed: how long after B was back (restart complete, or SIGCONT) the first message of
the outage reached a consumer in B (the remote producer's reconnect backoff decides it), and the
drain rate from then on (the outage's messages per second until the last one arrived).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pulsar
import pytest

from magnetar.base.limits import (
    CLIENT_BACKOFF_MAX_MS,
    REPLICATION_BACKOFF_MAX_MS,
    REPLICATION_CONNECT_TIMEOUT_MS,
    REPLICATION_REMOTE_BACKOFF_MAX_MS,
)
from magnetar.chaos.replication import check_replication
from tests.integration.geo import (
    RECEIVE_TIMEOUT_MS,
    Node,
    client,
    drain,
    link,
    make_nodes,
    produce,
    replication_backlog,
    wait_for,
)

OUTAGE_S = float(os.environ.get("MAGNETAR_GEO_OUTAGE_S", "60"))
PAUSE_S = float(os.environ.get("MAGNETAR_GEO_PAUSE_S", "10"))
#: Messages produced in A per second of outage (batched: a few entries per second of it).
OUTAGE_RATE_PER_S = 200
#: After the outage the remote producer (or the replicator, if the producer gave up: its backoff
#: goes up to a minute, as in Pulsar) may still be in its reconnect backoff and then needs a
#: connection: the first message may come this late.
CATCH_UP_WAIT_MS = (max(CLIENT_BACKOFF_MAX_MS, REPLICATION_BACKOFF_MAX_MS) + REPLICATION_CONNECT_TIMEOUT_MS
                    + RECEIVE_TIMEOUT_MS)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(int(240 + 2 * OUTAGE_S))]


@dataclass
class Outage:
    acked: list[str] = field(default_factory=list)
    during: list[str] = field(default_factory=list)
    backlog_samples: list[int] = field(default_factory=list)
    back_to_resumed_s: float = 0.0  # B back (restarted, resumed) -> the first message of the outage in B
    drain_rate_per_s: float = 0.0  # messages of the outage per second, from the first to the last in B


def _produce_through(a: Node, short: str, seconds: float, out: Outage) -> None:
    """Produce ``OUTAGE_RATE_PER_S`` a second for ``seconds`` (one call per second, so the outage
    lasts as long as asked), sampling A's replication backlog at the middle and at the end."""
    started = time.monotonic()
    second = 0
    while time.monotonic() - started < seconds:
        values = [f"o-{second}-{i}" for i in range(OUTAGE_RATE_PER_S)]
        acked = produce(a.url, f"persistent://public/default/{short}", values)
        out.acked += acked
        out.during += acked
        second += 1
        if second == max(1, int(seconds // 2)):
            out.backlog_samples.append(replication_backlog(a, short, "B") or 0)
        pause_s = started + second - time.monotonic()
        if pause_s > 0:
            time.sleep(pause_s)  # pacing the load over the outage, not waiting for a condition
    out.backlog_samples.append(replication_backlog(a, short, "B") or 0)


def _outage(tmp_path: Path, short: str, take_down: Callable[[Node], None], bring_back: Callable[[Node], None],
            seconds: float) -> Outage:
    a, b = make_nodes(tmp_path, ["A", "B"])
    topic = f"persistent://public/default/{short}"
    out = Outage()
    try:
        a.start()
        b.start()
        link([a, b])
        out.acked += produce(a.url, topic, [f"before-{i}" for i in range(500)])
        in_b = client(b.url)
        try:
            consumer = in_b.subscribe(topic, "catch-up", initial_position=pulsar.InitialPosition.Earliest,
                                      receiver_queue_size=5000)
            for _ in range(500):  # replication works before the outage
                consumer.acknowledge(consumer.receive(RECEIVE_TIMEOUT_MS))
        finally:
            in_b.close()
        take_down(b)
        _produce_through(a, short, seconds, out)
        bring_back(b)
        back = time.monotonic()
        _catch_up(b, short, back, out)
        print(f"outage {seconds:.0f} s: {len(out.during)} messages produced in A; A's replication backlog "
              f"{out.backlog_samples} entries (middle, end); replication resumed "
              f"{out.back_to_resumed_s:.1f} s after B was back, then drained at {out.drain_rate_per_s:.0f} msg/s")
        wait_for(lambda: replication_backlog(a, short, "B") == 0, 30, "A's replication backlog to drain")
        source = drain(a.url, topic, set(out.acked))
        remote = drain(b.url, topic, set(source))
        result = check_replication(out.acked, source, remote)
        print("after the outage:", result.summary())
        assert result.ok, result.summary()
        return out
    finally:
        a.kill()
        b.kill()


def _catch_up(b: Node, short: str, back: float, out: Outage) -> None:
    """Receive the outage's messages in B: the first one tells when replication resumed (the
    remote producer reconnects with the client's backoff, 100 ms doubling to 60 s, as Pulsar's),
    the drain rate counts from it to the last one."""
    in_b = client(b.url)
    try:
        consumer = in_b.subscribe(f"persistent://public/default/{short}", "catch-up", receiver_queue_size=5000)
        missing = set(out.during)
        first = 0.0
        while missing:
            message = consumer.receive(CATCH_UP_WAIT_MS)
            value = message.data().decode()
            if value in missing:  # not one from before the outage whose ack B had not yet persisted
                first = first or time.monotonic()
                missing.discard(value)
            consumer.acknowledge(message)
        done = time.monotonic()
    finally:
        in_b.close()
    out.back_to_resumed_s = first - back
    out.drain_rate_per_s = len(out.during) / max(done - first, 1e-3)


def _restart(node: Node) -> None:
    node.start()


def test_remote_cluster_killed_for_an_outage_then_restarted(tmp_path: Path) -> None:
    out = _outage(tmp_path, "outage-killed", Node.kill, _restart, OUTAGE_S)
    middle, end = out.backlog_samples
    assert 0 < middle < end  # the backlog grew while B was down
    assert len(out.during) >= OUTAGE_RATE_PER_S * OUTAGE_S * 0.5
    # The remote producers' backoff is capped (Pulsar's client default would wait up to a minute):
    assert out.back_to_resumed_s <= (REPLICATION_REMOTE_BACKOFF_MAX_MS + REPLICATION_CONNECT_TIMEOUT_MS) / 1000 + 5


def test_remote_cluster_paused_then_resumed(tmp_path: Path) -> None:
    out = _outage(tmp_path, "outage-paused", Node.pause, Node.resume, PAUSE_S)
    middle, end = out.backlog_samples
    assert 0 < middle < end  # the backlog grew while B answered nothing
