"""Benchmark (issue 9): Spark batch read of a topic through the connector, next to Spark reading the
same rows from Parquet, in the same run and the same SparkSession.

Starts ``magnetar standalone`` (one bookie; data under ``--dir``; stopped by PID at the end, also
on failure), creates the partitioned topic ``bench`` with ``--partitions`` partitions (admin REST)
and publishes ``--count`` messages of ``--size`` random bytes to it with the official client
(batching on, round-robin over partitions). Then:
* parquet copy: the connector's DataFrame (every column) written once to Parquet;
* reader alone: every Spark partition's ``read()`` run in this process, one after the other, without
  Spark (the connector's Python cost: bookie reads + Arrow batches);
* one warm-up run of each (not counted), then ``--repeats`` runs, alternating which goes first:
  connector = ``spark.read.format("magnetar").option("topic", "bench")`` (entries straight from the
  bookie, Arrow record batches out, ``minPartitions`` = 2 x cores), parquet = ``spark.read.parquet``
  of the copy. Both are measured by the same action (``--action``): ``noop`` (default) writes every
  row of every column to Spark's ``noop`` sink (all columns turned into rows); ``value`` computes
  ``sum(length(value))`` (Parquet then reads only that column, the connector still builds all).
Reports rows/s of each (min/median/max over the repeats) and the ratio connector/parquet of each
repeat; target: ratio >= 0.5.

Run: ``.venv/bin/python bench/spark_read.py [--count 1000000] [--size 1024] [--repeats 3]``.
Bounded: publishing stops after ``--seconds``; each read is one Spark job over a fixed set of rows.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "src"))

import pulsar  # noqa: E402

from magnetar.runtime.processes import StandaloneProcess  # noqa: E402

TOPIC = "bench"


def create_partitioned(http: str, partitions: int) -> None:
    request = urllib.request.Request(f"http://{http}/admin/v2/persistent/public/default/{TOPIC}/partitions",
                                     data=json.dumps(partitions).encode(), method="PUT",
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as reply:
        if reply.status not in (200, 204):
            raise RuntimeError(f"creating {TOPIC} with {partitions} partitions: HTTP {reply.status}")


def publish(url: str, count: int, size: int, seconds: float) -> int:
    """``count`` messages to the partitioned topic; returns how many were receipted."""
    client = pulsar.Client(url, operation_timeout_seconds=60, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    producer = client.create_producer(TOPIC, batching_enabled=True, batching_max_messages=1000,
                                      batching_max_publish_delay_ms=10, max_pending_messages=5000,
                                      block_if_queue_full=True)
    done = threading.Semaphore(0)
    failed: list[object] = []
    payload = os.urandom(size)
    deadline = time.monotonic() + seconds

    def receipt(result: object, _id: object) -> None:
        if result != pulsar.Result.Ok:
            failed.append(result)
        done.release()

    sent = 0
    for _ in range(count):
        if time.monotonic() > deadline:
            break
        producer.send_async(payload, receipt)
        sent += 1
    producer.flush()
    for _ in range(sent):
        done.acquire(timeout=60)
    client.close()
    if failed:
        raise RuntimeError(f"{len(failed)} sends failed: {failed[:3]}")
    return sent


CPU_USED: dict[str, list[dict[str, float]]] = {"connector": [], "parquet": []}


def timed(df: Any, action: str, name: str = "") -> float:
    before = cpu_seconds()
    start = time.perf_counter()
    if action == "noop":
        df.write.format("noop").mode("overwrite").save()
    else:
        df.selectExpr("sum(length(value))").collect()
    elapsed = time.perf_counter() - start
    if name:
        after = cpu_seconds()
        CPU_USED[name].append({role: after[role] - before[role] for role in after})
    return elapsed


def reader_alone(options: dict[str, str]) -> tuple[int, float]:
    """(rows, seconds) of running every planned partition's ``read()`` here, without Spark."""
    from magnetar.connectors.spark.source import MagnetarDataSource

    reader = MagnetarDataSource(options).reader(None)
    start = time.perf_counter()
    rows = sum(batch.num_rows for partition in reader.partitions() for batch in reader.read(partition))
    return rows, time.perf_counter() - start


def entries_alone(options: dict[str, str]) -> tuple[int, float]:
    """(bytes, seconds) of fetching every planned partition's entries at once in this process
    (pipelined bookie reads, no row building, no Spark): what the bookie can serve."""
    import asyncio

    from magnetar.connectors.spark import fetch
    from magnetar.connectors.spark.source import MagnetarDataSource, SlicePartition

    pieces = [p.piece for p in MagnetarDataSource(options).reader(None).partitions() if isinstance(p, SlicePartition)]

    async def fetch_all(cx: fetch.Connections) -> int:
        async def one(piece: Any) -> int:
            return sum([len(entry.raw) async for entry in fetch.entry_stream(cx, piece)])

        return sum(await asyncio.gather(*(one(piece) for piece in pieces)))

    start = time.perf_counter()
    size = fetch.call(fetch_all, options["serviceUrl"], options["metadataUrl"])
    return size, time.perf_counter() - start


def cpu_seconds() -> dict[str, float]:
    """CPU seconds (user + system) used so far by this run's child processes, by role: the
    standalone, Spark's JVM, and the Python workers the JVM started."""
    tick = os.sysconf("SC_CLK_TCK")
    parents: dict[int, int] = {}
    cpu: dict[int, float] = {}
    commands: dict[int, bytes] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            fields = Path(f"/proc/{name}/stat").read_text().rsplit(")", 1)[1].split()
            commands[int(name)] = Path(f"/proc/{name}/cmdline").read_bytes()
        except OSError:
            continue
        parents[int(name)] = int(fields[1])
        cpu[int(name)] = (int(fields[11]) + int(fields[12])) / tick
    out = {"standalone": 0.0, "spark jvm": 0.0, "python workers": 0.0}
    for pid in cpu:
        ancestor, chain = pid, []
        while ancestor in parents and ancestor != os.getpid():
            chain.append(ancestor)
            ancestor = parents[ancestor]
        if ancestor != os.getpid() or not chain:
            continue
        command = commands.get(pid, b"")
        role = ("standalone" if b"standalone" in command else "spark jvm" if b"java" in command.split(b"\0")[0]
                else "python workers")
        out[role] += cpu[pid]
    return out


def summary(values: list[float]) -> str:
    return f"min {min(values):,.0f}  median {statistics.median(values):,.0f}  max {max(values):,.0f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--count", type=int, default=1_000_000)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--action", choices=("noop", "value"), default="noop")
    parser.add_argument("--seconds", type=float, default=600, help="publishing stops after this long")
    parser.add_argument("--dir", default=None, help="parent of the data directory (default: a temp dir)")
    args = parser.parse_args()

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    work = Path(tempfile.mkdtemp(prefix="magnetar-spark-bench-", dir=args.dir))
    standalone = StandaloneProcess(str(work / "data"))
    spark = None
    try:
        create_partitioned(standalone.fields["http"], args.partitions)
        start = time.perf_counter()
        rows = publish(standalone.broker_url, args.count, args.size, args.seconds)
        print(f"published {rows:,} messages of {args.size} B to {TOPIC} ({args.partitions} partitions) "
              f"in {time.perf_counter() - start:.1f} s")
        from pyspark.sql import SparkSession

        cores = os.cpu_count() or 2
        options = {"serviceUrl": standalone.broker_url, "metadataUrl": standalone.fields["metadata"],
                   "topic": TOPIC, "minPartitions": str(2 * cores)}
        alone_rows, alone_s = reader_alone(options)
        print(f"reader alone (no Spark, one process, one partition after the other): {alone_rows:,} rows "
              f"in {alone_s:.2f} s = {alone_rows / alone_s:,.0f} rows/s")
        fetched, fetch_s = entries_alone(options)
        print(f"entries alone (all partitions at once, no rows, no Spark): {fetched / 1e6:,.0f} MB in {fetch_s:.2f} s "
              f"= {fetched / 1e6 / fetch_s:,.0f} MB/s = {rows / fetch_s:,.0f} rows/s (the bookie's ceiling here)")
        spark = (SparkSession.builder.master("local[*]").appName("magnetar-spark-read-bench")
                 .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
                 .config("spark.driver.memory", "4g")
                 .config("spark.sql.shuffle.partitions", str(cores)).getOrCreate())
        spark.sparkContext.setLogLevel("ERROR")
        connector = spark.read.format("magnetar").options(**options).load()
        parquet_path = str(work / "parquet")
        connector.write.parquet(parquet_path)
        parquet = spark.read.parquet(parquet_path)
        counted = parquet.count()
        if counted != rows:
            raise RuntimeError(f"the connector read {counted:,} rows, {rows:,} were published")
        print(f"spark local[*] on {cores} cores; parquet copy {counted:,} rows; action {args.action}")
        frames = {"connector": connector, "parquet": parquet}
        warm = {name: timed(df, args.action) for name, df in frames.items()}
        print(f"warm-up (not counted): connector {warm['connector']:.2f} s, parquet {warm['parquet']:.2f} s")
        rates: dict[str, list[float]] = {"connector": [], "parquet": []}
        ratios: list[float] = []
        for repeat in range(args.repeats):
            order = ["connector", "parquet"] if repeat % 2 == 0 else ["parquet", "connector"]
            seconds = {name: timed(frames[name], args.action, name) for name in order}
            for name, elapsed in seconds.items():
                rates[name].append(rows / elapsed)
            ratios.append(seconds["parquet"] / seconds["connector"])
            print(f"repeat {repeat + 1}: connector {seconds['connector']:.2f} s, parquet {seconds['parquet']:.2f} s, "
                  f"ratio {ratios[-1]:.2f}")
        print(f"connector rows/s: {summary(rates['connector'])}")
        print(f"parquet   rows/s: {summary(rates['parquet'])}")
        print(f"ratio connector/parquet per repeat: {', '.join(f'{r:.2f}' for r in ratios)}; min {min(ratios):.2f}  "
              f"median {statistics.median(ratios):.2f}  max {max(ratios):.2f}  (target >= 0.50)")
        for name, runs in CPU_USED.items():
            roles = ", ".join(f"{role} {statistics.median(r[role] for r in runs):.1f}" for role in runs[0])
            print(f"CPU seconds per {name} run (median): {roles}")
    finally:
        if spark is not None:
            spark.stop()
        standalone.terminate()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
