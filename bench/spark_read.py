"""Benchmark (issue 9): Spark batch read of a topic through the connector, next to Spark reading the
same rows from Parquet, in the same run and the same SparkSession.

Starts ``magnetar standalone`` (one bookie; data under ``--dir``; stopped by PID at the end, also
on failure), publishes ``--count`` messages of ``--size`` bytes to ``--partitions`` partitions
(``bench-partition-N``) with the official client (batching on), then per repeat:
* connector: ``spark.read.format("magnetar")`` of every partition (entries read straight from the
  bookie, Arrow batches out), ``minPartitions`` = 2 x cores, materialized with the ``noop`` sink;
* parquet: the same rows (all connector columns, written once before the repeats from the
  connector's DataFrame), ``spark.read.parquet(...)`` materialized the same way.
Reports rows/s of each and the ratio connector/parquet, min/median/max over ``--repeats``;
target: ratio >= 0.5.

Run: ``.venv/bin/python bench/spark_read.py [--count 1000000] [--size 1024] [--repeats 3]``.
Bounded: publishing stops after ``--seconds``; each read is one Spark job over a fixed set of rows.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "src"))

import pulsar  # noqa: E402

from magnetar.runtime.processes import StandaloneProcess  # noqa: E402


def publish(url: str, partitions: int, count: int, size: int, seconds: float) -> int:
    """``count`` messages round-robin over the partitions; returns how many were receipted."""
    client = pulsar.Client(url, operation_timeout_seconds=60, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    producers = [client.create_producer(f"bench-partition-{p}", batching_enabled=True,
                                        batching_max_messages=1000, batching_max_publish_delay_ms=10,
                                        max_pending_messages=5000, block_if_queue_full=True)
                 for p in range(partitions)]
    done = threading.Semaphore(0)
    failed: list[object] = []
    payload = os.urandom(size)
    deadline = time.monotonic() + seconds

    def receipt(result: object, _id: object) -> None:
        if result != pulsar.Result.Ok:
            failed.append(result)
        done.release()

    sent = 0
    for i in range(count):
        if time.monotonic() > deadline:
            break
        producers[i % partitions].send_async(payload, receipt)
        sent += 1
    for producer in producers:
        producer.flush()
    for _ in range(sent):
        done.acquire(timeout=60)
    client.close()
    if failed:
        raise RuntimeError(f"{len(failed)} sends failed: {failed[:3]}")
    return sent


def timed_noop(df: object) -> float:
    start = time.perf_counter()
    df.write.format("noop").mode("overwrite").save()  # type: ignore[attr-defined]
    return time.perf_counter() - start


def summary(values: list[float]) -> str:
    return f"min {min(values):,.0f}  median {statistics.median(values):,.0f}  max {max(values):,.0f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=1_000_000)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=600, help="publishing stops after this long")
    parser.add_argument("--dir", default=None, help="parent of the data directory (default: a temp dir)")
    args = parser.parse_args()

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    work = Path(tempfile.mkdtemp(prefix="magnetar-spark-bench-", dir=args.dir))
    standalone = StandaloneProcess(str(work / "data"))
    spark = None
    try:
        start = time.perf_counter()
        rows = publish(standalone.broker_url, args.partitions, args.count, args.size, args.seconds)
        print(f"published {rows:,} messages of {args.size} B to {args.partitions} partitions "
              f"in {time.perf_counter() - start:.1f} s")
        from pyspark.sql import SparkSession

        cores = os.cpu_count() or 2
        spark = (SparkSession.builder.master("local[*]").appName("magnetar-spark-read-bench")
                 .config("spark.ui.enabled", "false").config("spark.driver.memory", "4g")
                 .config("spark.sql.shuffle.partitions", str(cores)).getOrCreate())
        spark.sparkContext.setLogLevel("ERROR")
        connector = (spark.read.format("magnetar").option("serviceUrl", standalone.broker_url)
                     .option("metadataUrl", standalone.fields["metadata"]).option("topicsPattern", "bench")
                     .option("minPartitions", str(2 * cores)).load())
        parquet_path = str(work / "parquet")
        connector.write.parquet(parquet_path)
        parquet = spark.read.parquet(parquet_path)
        counted = parquet.count()
        if counted != rows:
            raise RuntimeError(f"the connector read {counted:,} rows, {rows:,} were published")
        print(f"spark local[*] on {cores} cores; parquet copy {counted:,} rows")
        rates: dict[str, list[float]] = {"connector": [], "parquet": []}
        for repeat in range(args.repeats):
            seconds = {"connector": timed_noop(connector), "parquet": timed_noop(parquet)}
            for name, elapsed in seconds.items():
                rates[name].append(rows / elapsed)
            print(f"repeat {repeat + 1}: connector {seconds['connector']:.2f} s, parquet {seconds['parquet']:.2f} s")
        ratios = [c / p for c, p in zip(rates["connector"], rates["parquet"], strict=True)]
        print(f"connector rows/s: {summary(rates['connector'])}")
        print(f"parquet   rows/s: {summary(rates['parquet'])}")
        print(f"ratio connector/parquet: min {min(ratios):.2f}  median {statistics.median(ratios):.2f}  "
              f"max {max(ratios):.2f}  (target >= 0.50)")
    finally:
        if spark is not None:
            spark.stop()
        standalone.terminate()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
