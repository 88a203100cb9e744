"""Benchmark (issue 19): geo-replication lag between two ``magnetar standalone`` processes, and the
catch-up rate after the remote cluster was down.

Starts standalones ``A`` and ``B`` (free ports, data under ``--dir``; stopped by PID at the end,
also on failure) and links them the way a user does (``magnetar cluster link``: clusters
registered in each other, tenant ``public`` allowed on both, ``public/default`` replicated to both).

* lag: the official client produces in A at ``--rate`` msg/s for ``--seconds`` (``send_async``,
  paced per 10 ms tick; batching with a 10 ms delay unless ``--no-batching``, which makes every
  message its own entry); a consumer in B receives them.
  Lag of one message = receive time in B - its publish time in A (both stamped on this machine's
  clock: the publish time is the A client's, carried unchanged by the replicator). Reports
  p50/p90/p99/max and the share of messages received.
* baseline: a second consumer in A itself receives the same messages; its p50/p99 is what the
  machine and the write path cost without replication.
* catch-up (``--outage-seconds`` > 0): B is killed (SIGKILL), A takes ``--rate`` msg/s for the
  outage, B is restarted on the same ports; reported: the backlog A's replicator had built
  (``replicationBacklog`` in A's topic stats, entries), how long after B's restart the first of
  them reached B (the remote producer's reconnect backoff, 100 ms doubling to 60 s, decides it),
  and the messages per second B received while draining (from the first to the last message of
  the backlog; also counted from B's restart).

Run: ``PYTHONPATH=src .venv/bin/python bench/geo_lag.py [--rate 2000] [--seconds 10]
[--outage-seconds 20]``. Bounded: about ``seconds + 2 * outage-seconds + 60`` s.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "src"))

from magnetar.runtime.processes import StandaloneProcess, free_port  # noqa: E402

TOPIC = "persistent://public/default/geo-lag"


class Node:
    def __init__(self, name: str, base: Path) -> None:
        self.name = name
        self.data_dir = str(base / f"data-{name}")
        self.log = open(base / f"{name}.log", "a")  # noqa: SIM115 - closed in main
        self.broker_port, self.web_port, self.bookie_port = free_port(), free_port(), free_port()
        self.process: StandaloneProcess | None = None

    @property
    def url(self) -> str:
        return f"pulsar://127.0.0.1:{self.broker_port}"

    def start(self) -> None:
        self.process = StandaloneProcess(self.data_dir, broker_port=self.broker_port, web_port=self.web_port,
                                         bookie_port=self.bookie_port, cluster_name=self.name,
                                         stderr=self.log.fileno())

    def kill(self) -> None:
        if self.process is not None:
            self.process.kill()
            self.process = None


def stats(node: Node) -> Any:
    path = "/admin/v2/persistent/public/default/geo-lag/stats"
    with urllib.request.urlopen(f"http://127.0.0.1:{node.web_port}{path}", timeout=10) as reply:
        return json.loads(reply.read())


def produce_paced(pulsar: Any, url: str, rate: int, seconds: float, batching: bool, first_value: int = 0) -> int:
    client = pulsar.Client(url, operation_timeout_seconds=30)
    producer = client.create_producer(TOPIC, block_if_queue_full=True, batching_enabled=batching,
                                      batching_max_publish_delay_ms=10)
    tick_s = 0.01
    per_tick = max(1, rate // 100)
    sent = 0
    start = time.monotonic()
    while time.monotonic() - start < seconds:
        for _ in range(per_tick):
            producer.send_async(f"{first_value + sent}".encode(), None)
            sent += 1
        next_tick = start + (sent // per_tick) * tick_s
        delay = next_tick - time.monotonic()
        if delay > 0:
            time.sleep(delay)  # pacing the load, not waiting for a condition
    producer.flush()
    client.close()
    return sent


def consume(pulsar: Any, url: str, expected: int, deadline_s: float, out: list[tuple[float, int]]) -> None:
    client = pulsar.Client(url, operation_timeout_seconds=30)
    consumer = client.subscribe(TOPIC, "lag", initial_position=pulsar.InitialPosition.Earliest,
                                receiver_queue_size=5000)
    end = time.monotonic() + deadline_s
    while len(out) < expected and time.monotonic() < end:
        try:
            message = consumer.receive(1000)
        except pulsar.Timeout:
            continue
        out.append((time.time() * 1000 - message.publish_timestamp(), int(message.data())))
        consumer.acknowledge_cumulative(message)
    client.close()


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def catch_up(pulsar: Any, a: Node, b: Node, args: argparse.Namespace) -> None:
    """B killed for the outage while A takes the load, then restarted: the backlog, how long until
    the first message of the outage reached B (the remote producer's reconnect backoff), and the
    drain rate from then on."""
    b.kill()
    offset = 10**9  # the outage's values, told apart from earlier ones B may deliver again
    outage = produce_paced(pulsar, a.url, args.rate, args.outage_seconds, args.batching, first_value=offset)
    backlog = stats(a)["replication"]["B"]["replicationBacklog"]
    b.start()
    back = time.monotonic()
    client = pulsar.Client(b.url, operation_timeout_seconds=30)
    consumer = client.subscribe(TOPIC, "lag", receiver_queue_size=5000)
    seen: set[int] = set()
    first = last = back
    end = back + 300
    while len(seen) < outage and time.monotonic() < end:
        try:
            message = consumer.receive(1000)
        except pulsar.Timeout:
            continue
        value = int(message.data())
        if value >= offset and value not in seen:
            first = first if seen else time.monotonic()
            seen.add(value)
            last = time.monotonic()
        consumer.acknowledge_cumulative(message)
    client.close()
    print(f"outage of {args.outage_seconds:.0f} s at {args.rate} msg/s: {outage} messages, A's replication "
          f"backlog {backlog} entries; the first reached B {first - back:.1f} s after B's restart (the remote "
          f"producer's reconnect backoff); B received {len(seen)} in {last - first:.1f} s from then = "
          f"{len(seen) / max(last - first, 1e-3):.0f} msg/s ({len(seen) / max(last - back, 1e-3):.0f} msg/s "
          f"counting from B's restart)")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rate", type=int, default=2000)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--outage-seconds", type=float, default=0.0)
    parser.add_argument("--dir", default=None)
    parser.add_argument("--batching", action=argparse.BooleanOptionalAction, default=True,
                        help="producer batching (10 ms); --no-batching: one entry per message")
    args = parser.parse_args()
    import pulsar

    base = Path(args.dir or tempfile.mkdtemp(prefix="geo-lag-"))
    base.mkdir(parents=True, exist_ok=True)
    a, b = Node("A", base), Node("B", base)
    try:
        a.start()
        b.start()
        subprocess.run([sys.executable, "-m", "magnetar.cli", "cluster", "link",
                        f"A=http://127.0.0.1:{a.web_port}", f"B=http://127.0.0.1:{b.web_port}"],
                       check=True, capture_output=True, timeout=60)
        expected = int(args.rate * args.seconds)
        received: list[tuple[float, int]] = []
        local: list[tuple[float, int]] = []  # the same messages consumed in A: the baseline
        consumers = [threading.Thread(target=consume, args=(pulsar, url, expected, args.seconds + 60, out))
                     for url, out in ((b.url, received), (a.url, local))]
        for consumer in consumers:
            consumer.start()
        sent = produce_paced(pulsar, a.url, args.rate, args.seconds, args.batching)
        for consumer in consumers:
            consumer.join()
        base = [lag for lag, _ in local]
        print(f"baseline, consumed in A itself: p50={percentile(base, 0.5):.1f} ms p90={percentile(base, 0.9):.1f} ms "
              f"p99={percentile(base, 0.99):.1f} ms max={max(base, default=float('nan')):.1f} ms")
        lags = [lag for lag, _ in received]
        replicator = stats(a)["replication"]["B"]
        entries = max(1, replicator["msgOutCounter"])
        print(f"A's replicator: {replicator['msgOutCounter']} entries receipted by B, publish->receipt mean "
              f"{replicator['replicationLagMsSum'] / entries:.1f} ms")
        print(f"lag at {args.rate} msg/s for {args.seconds:.0f} s (batching {args.batching}): sent={sent} received_in_B={len(received)} "
              f"p50={percentile(lags, 0.5):.1f} ms p90={percentile(lags, 0.9):.1f} ms "
              f"p99={percentile(lags, 0.99):.1f} ms max={max(lags, default=float('nan')):.1f} ms "
              f"mean={statistics.fmean(lags) if lags else float('nan'):.1f} ms")
        if args.outage_seconds > 0:
            catch_up(pulsar, a, b, args)
    finally:
        a.kill()
        b.kill()
        a.log.close()
        b.log.close()


if __name__ == "__main__":
    main()
