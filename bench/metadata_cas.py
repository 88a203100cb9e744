"""Benchmark: compare-and-set updates per second and p99 latency, embedded store and ZooKeeper.

One client updates a few keys in a loop, each update a CAS on the version it last wrote
(``put(path, value, version)``), so every update is a full round trip (ZooKeeper) or a synced
RocksDB batch (embedded). Each run is bounded in count and time; the whole measurement repeats
``--repeats`` times and reports min / median / max. ZooKeeper is started by
``scripts/zookeeper.sh`` on a private directory and loopback port, and stopped by PID after.

    .venv/bin/python bench/metadata_cas.py [--updates 2000] [--seconds 20] [--repeats 3] [--stores embedded,zookeeper]
"""

from __future__ import annotations

import argparse
import asyncio
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from magnetar.metadata import MetadataStore
from magnetar.runtime.metadata import open_metadata_store

REPO = Path(__file__).resolve().parent.parent
KEYS_COUNT = 4


async def one_run(url: str, updates_max: int, seconds_max: float) -> tuple[float, float, int]:
    """(updates/s, p99 latency ms, updates done) for one run against ``url``."""
    store: MetadataStore = await open_metadata_store(url, session_timeout_ms=10_000)
    try:
        versions = {}
        for key in range(KEYS_COUNT):
            path = f"/bench/k{key}"
            existing = await store.get(path)
            versions[path] = existing.version if existing else await store.put(path, b"0", -1)
        latencies_ns: list[int] = []
        started = time.monotonic()
        deadline = started + seconds_max
        for sequence in range(updates_max):
            path = f"/bench/k{sequence % KEYS_COUNT}"
            before = time.monotonic_ns()
            versions[path] = await store.put(path, str(sequence).encode(), versions[path])
            latencies_ns.append(time.monotonic_ns() - before)
            if time.monotonic() > deadline:
                break
        elapsed = time.monotonic() - started
    finally:
        await store.close()
    latencies_ns.sort()
    p99_ms = latencies_ns[min(len(latencies_ns) - 1, int(len(latencies_ns) * 0.99))] / 1e6
    return len(latencies_ns) / elapsed, p99_ms, len(latencies_ns)


def summary(values: list[float]) -> str:
    return f"min {min(values):.1f} / median {statistics.median(values):.1f} / max {max(values):.1f}"


def measure(name: str, url_for_run, args: argparse.Namespace) -> None:  # type: ignore[no-untyped-def]
    rates, p99s, counts = [], [], []
    for run_index in range(args.repeats):
        rate, p99, count = asyncio.run(one_run(url_for_run(run_index), args.updates, args.seconds))
        rates.append(rate)
        p99s.append(p99)
        counts.append(count)
    print(f"{name:10s} CAS updates/s: {summary(rates)}   p99 ms: {summary(p99s)}   updates per run: {counts}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--updates", type=int, default=2000, help="updates per run (bound)")
    parser.add_argument("--seconds", type=float, default=20.0, help="seconds per run (bound)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--stores", default="embedded,zookeeper")
    args = parser.parse_args()
    print("command:", shlex.join([Path(sys.executable).name, *sys.argv]))
    stores = args.stores.split(",")
    with tempfile.TemporaryDirectory(prefix="magnetar-bench-md-") as tmp:
        if "embedded" in stores:
            measure("embedded", lambda i: f"embedded:{tmp}/embedded-{i}", args)
        if "zookeeper" in stores:
            script = str(REPO / "scripts" / "zookeeper.sh")
            zk_dir = f"{tmp}/zookeeper"
            try:
                started = subprocess.run(["bash", script, "start", zk_dir], capture_output=True, text=True, timeout=120)
                if started.returncode != 0:
                    raise SystemExit(f"ZooKeeper did not start:\n{started.stderr}")
                url = started.stdout.strip().splitlines()[-1]
                measure("zookeeper", lambda i: f"{url}/bench-{i}", args)
            finally:
                subprocess.run(["bash", script, "stop", zk_dir], capture_output=True, timeout=60)


if __name__ == "__main__":
    main()
