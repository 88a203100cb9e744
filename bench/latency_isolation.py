"""Latency isolation (issue 22): a light synchronous producer next to a heavy one.

On one fresh ``magnetar standalone`` (1 bookie, fsync before every ack), per repeat:

* ``alone``: a light producer (official client, no batching) sends 1 KiB messages one at a time,
  each ``send()`` waiting for its receipt, on its own topic, for ``--seconds``;
* ``loaded``: the same light producer while a heavy producer (``magnetar perf produce
  --no-batching --max-pending 500``, its own process and topic) keeps 500 messages in flight.

Reported per phase: the light producer's acknowledgements, p50/p99/max latency (ms); for the
loaded phase also the heavy producer's rate and the standalone's CPU. Target (issue 22): the
light producer's p99 <= 5 ms while loaded.

Run: ``.venv/bin/python bench/latency_isolation.py --seconds 8 --repeats 3``.
Bounded: ``repeats * (2 * seconds + start-up + 20)`` seconds.
"""

from __future__ import annotations

import argparse
import json
import os
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
from run import cpu_seconds  # noqa: E402

from magnetar.runtime.processes import StandaloneProcess  # noqa: E402


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def light_producer(url: str, topic: str, seconds: float, size: int) -> dict[str, float]:
    import pulsar

    client = pulsar.Client(url, operation_timeout_seconds=30)
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


def one_repeat(root: Path, tag: str, args: argparse.Namespace) -> dict[str, float]:
    env = dict(os.environ, PYTHONPATH=args.src or str(REPO / "src"))
    env.pop("MAGNETAR_FAULTS", None)
    standalone = StandaloneProcess(str(root / tag), env=env, stderr=subprocess.DEVNULL)
    row: dict[str, float] = {}
    try:
        url = standalone.broker_url
        alone = light_producer(url, f"light-alone-{tag}", args.seconds, args.size)
        row.update({f"alone_{k}": v for k, v in alone.items()})
        heavy_json = root / f"heavy-{tag}.json"
        heavy = heavy_producer(url, f"heavy-{tag}", args.seconds + 6, args.size, args.pending, heavy_json)
        try:
            time.sleep(3)  # the heavy producer connects and fills its window (a bench, not a test)
            cpu0, busy0, start = cpu_seconds([standalone.pid]), machine_busy_seconds(), time.perf_counter()
            loaded = light_producer(url, f"light-loaded-{tag}", args.seconds, args.size)
            elapsed = time.perf_counter() - start
            row.update({f"loaded_{k}": v for k, v in loaded.items()})
            row["loaded_server_cpu_pct"] = 100 * (cpu_seconds([standalone.pid]) - cpu0) / elapsed
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
    parser.add_argument("--src", default="", help="PYTHONPATH of the standalone (default: this tree)")
    parser.add_argument("--json", default="")
    args = parser.parse_args()
    rows: list[dict[str, float]] = []
    with tempfile.TemporaryDirectory(prefix="isolation-") as tmp:
        for repeat in range(args.repeats):
            row = one_repeat(Path(tmp), f"r{repeat}", args)
            rows.append(row)
            print(f"repeat {repeat + 1}: " + ", ".join(f"{k}={v:.1f}" for k, v in row.items()), flush=True)
    print(f"\n{' '.join(sys.argv)}")
    summary: dict[str, Any] = {}
    for key in rows[0]:
        values = [r[key] for r in rows if key in r]
        summary[key] = {"min": min(values), "median": statistics.median(values), "max": max(values)}
        print(f"{key:>24}  {summary[key]['min']:.1f} / {summary[key]['median']:.1f} / {summary[key]['max']:.1f}")
    if args.json:
        Path(args.json).write_text(json.dumps({"argv": sys.argv, "rows": rows, "summary": summary}, indent=1))


if __name__ == "__main__":
    main()
