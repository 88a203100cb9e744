"""Latency isolation (issue 22): a light synchronous producer next to a heavy one.

On one fresh ``magnetar standalone`` (1 bookie, fsync before every ack), per repeat:

* ``alone``: a light producer (official client, no batching) sends 1 KiB messages one at a time,
  each ``send()`` waiting for its receipt, on its own topic, for ``--seconds``;
* ``loaded``: the same light producer while a heavy producer (``magnetar perf produce
  --no-batching --max-pending 500``, its own process and topic) keeps 500 messages in flight;
  with ``--heavy-partitions N`` its topic is partitioned N ways (one connection, N ledgers, so
  up to N times the standalone's per-ledger window of its adds in one journal group).

Reported per phase: the light producer's acknowledgements, p50/p99/max latency (ms); for the
loaded phase also the heavy producer's rate, the standalone's CPU, the share of the phase its
event-loop thread waited for a CPU while runnable (``loaded_loop_runq_wait_pct``, schedstat), and
``loaded_over_alone_p99``
(the loaded p99 over the alone p99 of the same repeat: what the heavy producer adds, apart from
what the disk's fsync costs alone). Target (issue 22): the light producer's p99 <= 5 ms while
loaded.

The standalone's CPU is summed over its process and descendants (bookie child processes).
``--variant label[=SRC_DIR][:KEY=VALUE,...]`` (repeatable, as in ``bench/steady_load.py``) runs
each repeat once per variant, alternating, with ``PYTHONPATH=SRC_DIR`` and the extra environment;
the summary gives min / median / max per variant and per-pair ratios against the first variant.

Run: ``.venv/bin/python bench/latency_isolation.py --seconds 8 --repeats 3``.
Bounded: ``repeats * variants * (2 * seconds + start-up + 20)`` seconds.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO / "src"))
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE / "peers"))

from bookie_append import machine_busy_seconds  # noqa: E402
from measures import cpu_seconds  # noqa: E402

from magnetar.runtime.processes import StandaloneProcess  # noqa: E402


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def light_producer(url: str, topic: str, seconds: float, size: int) -> dict[str, float]:
    import pulsar

    quiet = logging.getLogger("latency_isolation.pulsar")
    quiet.setLevel(logging.WARNING)  # the client's INFO lines per connection and producer drown the figures
    client = pulsar.Client(url, operation_timeout_seconds=30, logger=quiet)
    try:
        producer = client.create_producer(topic, batching_enabled=False, send_timeout_millis=30_000)
        payload = b"x" * size
        for _ in range(20):  # warm-up: connection, ledger, caches
            producer.send(payload)
        latencies: list[float] = []
        deadline = time.perf_counter() + seconds
        while time.perf_counter() < deadline:
            start = time.perf_counter()
            producer.send(payload)
            latencies.append(1000 * (time.perf_counter() - start))
        producer.close()
    finally:
        client.close()
    return {"acks": float(len(latencies)), "p50_ms": percentile(latencies, 0.50),
            "p99_ms": percentile(latencies, 0.99), "max_ms": max(latencies)}


def heavy_producer(url: str, topic: str, seconds: float, size: int, pending: int, out: Path) -> subprocess.Popen[bytes]:
    argv = [sys.executable, "-m", "magnetar.cli", "perf", "produce", topic, "-u", url, "--no-batching",
            "-s", str(size), "--max-pending", str(pending), "-d", str(seconds), "--json", str(out)]
    return subprocess.Popen(argv, env=dict(os.environ, PYTHONPATH=str(REPO / "src")),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def parse_variant(spec: str, default_src: str) -> tuple[str, str, dict[str, str]]:
    head, _, env_part = spec.partition(":")
    label, _, src = head.partition("=")
    # KEY=VALUE items are separated by commas before the next KEY= (a value may hold commas).
    env = dict(item.split("=", 1) for item in re.split(r",(?=[A-Z_][A-Z0-9_]*=)", env_part) if item)
    return label, src or default_src, env


def runqueue_wait_s(pid: int) -> float:
    """Seconds the process's main thread (the standalone's event loop) spent runnable but waiting
    for a CPU (``/proc/<pid>/task/<pid>/schedstat``, second field, ns)."""
    with open(f"/proc/{pid}/task/{pid}/schedstat") as stat:
        return int(stat.read().split()[1]) / 1e9


def create_partitioned(http_url: str, topic: str, partitions: int) -> None:
    """``topic`` as a partitioned topic (the admin API's PUT .../partitions, body: the count)."""
    import urllib.request

    request = urllib.request.Request(f"{http_url}/admin/v2/persistent/public/default/{topic}/partitions",
                                     data=str(partitions).encode(), method="PUT",
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as response:
        if response.status not in (200, 204):
            raise RuntimeError(f"creating {topic} with {partitions} partitions: HTTP {response.status}")


def one_repeat(root: Path, tag: str, args: argparse.Namespace, src: str, extra_env: dict[str, str]) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": src, **extra_env}  # a variant may extend PYTHONPATH itself
    env.pop("MAGNETAR_FAULTS", None)
    standalone = StandaloneProcess(str(root / tag), env=env, stderr=subprocess.DEVNULL)
    row: dict[str, float] = {}
    try:
        url = standalone.broker_url
        alone = light_producer(url, f"light-alone-{tag}", args.seconds, args.size)
        row.update({f"alone_{k}": v for k, v in alone.items()})
        heavy_json = root / f"heavy-{tag}.json"
        if args.heavy_partitions > 1:
            create_partitioned(standalone.http_url, f"heavy-{tag}", args.heavy_partitions)
        heavy = heavy_producer(url, f"heavy-{tag}", args.seconds + 6, args.size, args.pending, heavy_json)
        try:
            time.sleep(3)  # the heavy producer connects and fills its window (a bench, not a test)
            cpu0, busy0, start = cpu_seconds([standalone.pid]), machine_busy_seconds(), time.perf_counter()
            wait0 = runqueue_wait_s(standalone.pid)
            loaded = light_producer(url, f"light-loaded-{tag}", args.seconds, args.size)
            elapsed = time.perf_counter() - start
            row.update({f"loaded_{k}": v for k, v in loaded.items()})
            # The isolation itself: what the heavy producer adds to the light one's tail, against
            # the light producer alone on the same standalone and disk moments before.
            row["loaded_over_alone_p99"] = loaded["p99_ms"] / max(1e-9, alone["p99_ms"])
            row["loaded_server_cpu_pct"] = 100 * (cpu_seconds([standalone.pid]) - cpu0) / elapsed
            # Starved or idle: how long the loop thread was ready to run but had no CPU.
            row["loaded_loop_runq_wait_pct"] = 100 * (runqueue_wait_s(standalone.pid) - wait0) / elapsed
            row["machine_pct"] = 100 * (machine_busy_seconds() - busy0) / elapsed
        finally:
            heavy.wait(timeout=args.seconds + 60)
        if heavy_json.exists():
            row["heavy_msgs_s"] = json.loads(heavy_json.read_text())["publish"]["msgs_s"]
    finally:
        standalone.terminate()
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--pending", type=int, default=500, help="the heavy producer's messages in flight")
    parser.add_argument("--heavy-partitions", type=int, default=1,
                        help="the heavy producer's topic partitioned this many ways (one connection, many ledgers)")
    parser.add_argument("--src", default="", help="PYTHONPATH of the standalone (default: this tree)")
    parser.add_argument("--variant", action="append", default=[], help="label[=SRC_DIR][:KEY=VALUE,...]")
    parser.add_argument("--json", default="")
    args = parser.parse_args()
    default_src = args.src or str(REPO / "src")
    variants = [parse_variant(v, default_src) for v in (args.variant or ["this"])]
    rows: dict[str, list[dict[str, float]]] = {label: [] for label, _, _ in variants}
    with tempfile.TemporaryDirectory(prefix="isolation-") as tmp:
        for repeat in range(args.repeats):
            for label, src, env in variants:
                row = one_repeat(Path(tmp), f"{label}{repeat}", args, src, env)
                rows[label].append(row)
                print(f"{label} repeat {repeat + 1}: " + ", ".join(f"{k}={v:.1f}" for k, v in row.items()), flush=True)
    print(f"\n{' '.join(sys.argv)}")
    summary: dict[str, Any] = {}
    for label, label_rows in rows.items():
        summary[label] = {}
        print(label)
        for key in label_rows[0]:
            values = [r[key] for r in label_rows if key in r]
            summary[label][key] = {"min": min(values), "median": statistics.median(values), "max": max(values)}
            s = summary[label][key]
            print(f"{key:>24}  {s['min']:.1f} / {s['median']:.1f} / {s['max']:.1f}")
    first = variants[0][0]
    for label in list(rows)[1:]:
        for key in ("loaded_p99_ms", "loaded_over_alone_p99", "loaded_acks", "loaded_server_cpu_pct"):
            per_pair = [b[key] / a[key] for a, b in zip(rows[first], rows[label], strict=True)
                        if a.get(key) and key in b]
            print(f"{label}/{first} {key} per pair: " + ", ".join(f"{r:.2f}" for r in per_pair))
    if args.json:
        Path(args.json).write_text(json.dumps({"argv": sys.argv, "rows": rows, "summary": summary}, indent=1))


if __name__ == "__main__":
    main()
