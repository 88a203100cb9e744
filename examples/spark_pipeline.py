"""Example pipeline: stream a Magnetar topic through Spark, count messages per key in one-minute
event-time windows, and write the counts both to another Magnetar topic and to Parquet.

    .venv/bin/magnetar standalone --data-dir data/standalone          # in another terminal
    .venv/bin/magnetar admin namespaces set-policy public/default deduplication true  # exactly once
    .venv/bin/python examples/spark_pipeline.py --input clicks --output click-counts \\
        --metadata-url embedded:$PWD/data/standalone/metadata --parquet out/click-counts \\
        --checkpoint out/checkpoints

Stopping and restarting with the same ``--checkpoint`` resumes where it stopped. The counts topic
is written exactly once only where deduplication is on (off by default, as in Pulsar: the
``set-policy`` line above turns it on for the namespace; without it the writer is at least once). ``--available-now``
processes what is in the topic and stops (a batch job with streaming semantics).

When a window's count is written (``--mode``):

- ``append`` (the default when streaming): once, final, when the watermark passes the window's
  end: the watermark is the latest event time seen minus 2 minutes, so a window is written when
  events at least 2 minutes past its end have arrived. Late events are dropped.
- ``update`` (the default with ``--available-now``): each batch writes the count so far of every
  window it changed, with the batch id; the row with the highest ``batch`` for a (window, key)
  is that window's current count. A bounded run over fresh events has no event 2 minutes past
  the last windows, so in ``append`` mode it would write nothing; ``update`` shows them all.

The pipeline prints which mode it runs in and, at the end of a bounded run, how many rows it wrote.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any


def build(spark: Any, args: argparse.Namespace) -> Any:
    """The windowed counts of ``args.input`` as a streaming DataFrame."""
    from pyspark.sql import functions as F

    messages = (
        spark.readStream.format("magnetar")
        .option("serviceUrl", args.service_url)
        .option("metadataUrl", args.metadata_url)
        .option("topic", args.input)
        .option("startingOffsets", "earliest")
        .option("maxRecordsPerTrigger", "100000")
        .options(**({"subscription": "windowed-counts", "adminUrl": args.admin_url} if args.admin_url else {}))
        .load()
    )
    return (
        messages.withColumn("key", F.coalesce(F.col("key").cast("string"), F.lit("(none)")))
        .withColumn("time", F.coalesce("eventTime", "publishTime"))
        .withWatermark("time", "2 minutes")
        .groupBy(F.window("time", "1 minute"), "key")
        .count()
    )


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="windowed counts per key: Magnetar -> Magnetar + Parquet")
    parser.add_argument("--service-url", default="pulsar://127.0.0.1:6650")
    parser.add_argument("--metadata-url", required=True, help="embedded:<standalone data dir>/metadata or zk://...")
    parser.add_argument("--input", required=True)
    parser.add_argument("--output", required=True)
    parser.add_argument("--parquet", required=True)
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--available-now", action="store_true",
                        help="process what the topic holds, then stop")
    parser.add_argument("--mode", choices=("append", "update"), default=None,
                        help="append: each window once, when the watermark closes it (default when streaming); "
                             "update: every batch writes the counts it changed (default with --available-now)")
    parser.add_argument("--admin-url", default=None,
                        help="broker HTTP address: the subscription 'windowed-counts' then follows the query")
    return parser.parse_args(argv)


def output_mode(args: argparse.Namespace) -> str:
    return args.mode or ("update" if args.available_now else "append")


EMITTED = {
    "append": "append mode: a window's count is written once, when events 2 minutes past its end have arrived",
    "update": "update mode: every batch writes the current count of each window it changed (latest batch wins)",
}


def run(spark: Any, args: argparse.Namespace) -> int:
    """Start the query and wait for it (until the topic is drained with ``--available-now``).
    Returns the number of window counts written."""
    from pyspark.sql import functions as F

    mode = output_mode(args)
    print(EMITTED[mode], file=sys.stderr, flush=True)
    counts = build(spark, args)
    written = [0]

    def write_both(batch: Any, batch_id: int) -> None:
        batch = batch.withColumn("batch", F.lit(batch_id)).persist()
        rows = batch.count()
        if rows:
            (batch.select(F.col("key"),
                          F.to_json(F.struct(F.col("window.start").alias("start"), F.col("window.end").alias("end"),
                                             "key", "count", "batch")).alias("value"))
             .write.format("magnetar").option("serviceUrl", args.service_url).option("topic", args.output)
             .option("producerName", f"windowed-counts-{batch_id}").mode("append").save())
            batch.write.mode("append").parquet(args.parquet)
        written[0] += rows
        batch.unpersist()

    writer = counts.writeStream.outputMode(mode).foreachBatch(write_both).option(
        "checkpointLocation", args.checkpoint)
    query = (writer.trigger(availableNow=True) if args.available_now else writer).start()
    query.awaitTermination()
    print(f"wrote {written[0]} window counts to {args.parquet} and topic {args.output} ({mode} mode)",
          file=sys.stderr, flush=True)
    return written[0]


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    spark = SparkSession.builder.appName("magnetar-windowed-counts").getOrCreate()
    try:
        run(spark, args)
    finally:
        spark.stop()


if __name__ == "__main__":
    main()
