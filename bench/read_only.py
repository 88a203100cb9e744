"""Read-only brokers, measured with real processes and the official client (docs/read-only-brokers.md).

A local cluster: ZooKeeper, 3 bookies, 1 owner broker, 2 read-only brokers.

* ``freshness``: one producer publishes through the owner at ``--rate`` msg/s for ``--seconds``;
  one consumer reads through the owner and one through a read-only broker (two subscriptions, same
  process, same clock). Publish-to-receive latency (the send time carried in the payload, read on
  receipt) p50/p99/max for each.
* ``scale``: the owner's CPU time (utime+stime from /proc) per published message while N
  subscriptions consume: 0, N served by the read-only brokers, N on the owner itself.

Usage: ``python bench/read_only.py [--rate 2000] [--seconds 6] [--repeats 5] [--subscriptions 50] [--json]``
(each freshness run also reports the read-only minus owner gaps and the 1-minute load average).
Bounded: every phase has a message count and a deadline.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import struct
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import pulsar

from magnetar.runtime.cluster import READ_ONLY_BROKER, LocalCluster

QUIET = pulsar.ConsoleLogger(pulsar.LoggerLevel.Error)
RECEIVE_TIMEOUT_MS = 10_000


def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(p / 100 * len(ordered)))] if ordered else float("nan")


def drain(consumer: pulsar.Consumer, count: int, latencies: list[float] | None) -> int:
    got = 0
    while got < count:
        try:
            message = consumer.receive(RECEIVE_TIMEOUT_MS)
        except pulsar.Timeout:
            break
        if latencies is not None:
            latencies.append((time.monotonic_ns() - struct.unpack(">q", message.data()[:8])[0]) / 1e6)
        consumer.acknowledge(message)
        got += 1
    return got


def publish(producer: pulsar.Producer, rate: int, count: int) -> None:
    start = time.monotonic()
    for i in range(count):
        due = start + i / rate
        wait = due - time.monotonic()
        if wait > 0:
            time.sleep(wait)  # pacing the publish rate
        producer.send_async(struct.pack(">q", time.monotonic_ns()) + b"x" * 56, None)
    producer.flush()


def freshness(cluster: LocalCluster, rate: int, seconds: float, batching: bool, run: int = 0) -> dict[str, Any]:
    topic = f"persistent://public/default/freshness-{run}"
    count = int(rate * seconds)
    owner = pulsar.Client(cluster.service_url(), logger=QUIET)
    ro_url = cluster.read_only_service_url()
    assert ro_url is not None
    ro = pulsar.Client(ro_url, logger=QUIET)
    producer = owner.create_producer(topic, batching_enabled=batching, batching_max_publish_delay_ms=1,
                                     block_if_queue_full=True)
    on_owner = owner.subscribe(topic, "fresh-owner")
    on_ro = ro.subscribe(topic, "fresh-ro")
    results: dict[str, list[float]] = {"owner": [], "read_only": []}
    threads = [threading.Thread(target=drain, args=(c, count, results[k]))
               for k, c in (("owner", on_owner), ("read_only", on_ro))]
    for thread in threads:
        thread.start()
    publish(producer, rate, count)
    for thread in threads:
        thread.join(seconds + 60)
    owner.close()
    ro.close()
    out: dict[str, Any] = {kind: {"received": len(v), "p50_ms": round(percentile(v, 50), 2),
                                  "p99_ms": round(percentile(v, 99), 2), "max_ms": round(max(v), 2) if v else None}
                           for kind, v in results.items()}
    out["p50_gap_ms"] = round(out["read_only"]["p50_ms"] - out["owner"]["p50_ms"], 2)
    out["p99_gap_ms"] = round(out["read_only"]["p99_ms"] - out["owner"]["p99_ms"], 2)
    out["load_average_1m"] = os.getloadavg()[0]
    return out | {"rate_msg_s": rate, "messages": count, "batching": batching}


def summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """min / median / max over repeated freshness runs of each figure."""
    figures = {"owner_p50_ms": [r["owner"]["p50_ms"] for r in runs],
               "owner_p99_ms": [r["owner"]["p99_ms"] for r in runs],
               "read_only_p50_ms": [r["read_only"]["p50_ms"] for r in runs],
               "read_only_p99_ms": [r["read_only"]["p99_ms"] for r in runs],
               "p50_gap_ms": [r["p50_gap_ms"] for r in runs], "p99_gap_ms": [r["p99_gap_ms"] for r in runs],
               "load_average_1m": [r["load_average_1m"] for r in runs]}
    return {name: {"min": min(v), "median": round(statistics.median(v), 2), "max": max(v)}
            for name, v in figures.items()}


def scale(cluster: LocalCluster, subscriptions: int, rate: int, count: int) -> dict[str, Any]:
    owner_pid = cluster.processes["broker-0"].pid
    out: dict[str, Any] = {"messages": count, "rate_msg_s": rate, "subscriptions": subscriptions}
    ro_url = cluster.read_only_service_url()
    assert ro_url is not None
    for label, url, n in (("none", None, 0), ("read_only", ro_url, subscriptions),
                          ("owner", cluster.service_url(), subscriptions)):
        topic = f"persistent://public/default/scale-{label}"
        owner = pulsar.Client(cluster.service_url(), logger=QUIET)
        producer = owner.create_producer(topic, batching_enabled=False, block_if_queue_full=True)
        readers = pulsar.Client(url, logger=QUIET, io_threads=2, message_listener_threads=2) if url else None
        consumers = [readers.subscribe(topic, f"s{i}") for i in range(n)] if readers else []
        threads = [threading.Thread(target=drain, args=(c, count, None)) for c in consumers]
        for thread in threads:
            thread.start()
        before = cpu_s(owner_pid)
        started = time.monotonic()
        publish(producer, rate, count)  # the owner's CPU while it takes the messages in
        used = cpu_s(owner_pid) - before
        published_s = time.monotonic() - started
        for thread in threads:
            thread.join(180)
        received = time.monotonic() - started
        out[label] = {"owner_cpu_s": round(used, 3), "owner_cpu_us_per_msg": round(used / count * 1e6, 1),
                      "publish_s": round(published_s, 2), "all_received_s": round(received, 2)}
        if readers is not None:
            readers.close()
        owner.close()
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rate", type=int, default=2000)
    parser.add_argument("--seconds", type=float, default=6.0)
    parser.add_argument("--subscriptions", type=int, default=50)
    parser.add_argument("--scale-messages", type=int, default=3000)
    parser.add_argument("--scale-rate", type=int, default=500)
    parser.add_argument("--skip-scale", action="store_true")
    parser.add_argument("--batching", action="store_true", help="client batching (1 ms publish delay)")
    parser.add_argument("--repeats", type=int, default=1, help="freshness runs (min/median/max reported)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    base = Path(tempfile.mkdtemp(prefix="magnetar-ro-bench-"))
    cluster = LocalCluster(base, bookies=3, brokers=1, read_only_brokers=2, autorecovery=False)
    try:
        cluster.start(timeout_s=90)
        result: dict[str, Any] = {"read_only_brokers": len(cluster.of_kind(READ_ONLY_BROKER))}
        runs = [freshness(cluster, args.rate, args.seconds, args.batching, run) for run in range(args.repeats)]
        result["freshness"] = runs[0] if len(runs) == 1 else {"runs": runs, "summary": summary(runs)}
        if not args.skip_scale:
            result["scale"] = scale(cluster, args.subscriptions, args.scale_rate, args.scale_messages)
    finally:
        cluster.stop()
    print(json.dumps(result, indent=None if args.json else 2))


if __name__ == "__main__":
    main()
