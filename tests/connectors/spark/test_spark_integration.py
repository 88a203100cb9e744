"""The connector against a real ``magnetar standalone`` and a real local Spark (``local[2]``)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from magnetar.runtime.processes import StandaloneProcess
from tests.connectors.spark.conftest import admin, produce

pytestmark = pytest.mark.integration

PARTITIONS = 3


def read_options(standalone: StandaloneProcess) -> dict[str, str]:
    return {"serviceUrl": standalone.broker_url, "metadataUrl": standalone.fields["metadata"]}


def test_batch_read_of_a_partitioned_topic(standalone: StandaloneProcess, spark: Any) -> None:
    admin(standalone, "PUT", "/persistent/public/default/batch-t/partitions", PARTITIONS)
    for p in range(PARTITIONS):
        produce(standalone.broker_url, f"batch-t-partition-{p}", [f"p{p}-{i}".encode() for i in range(200)])
    df = (spark.read.format("magnetar").options(**read_options(standalone))
          .option("topic", "batch-t").load())  # the partitioned topic by its name: all its partitions
    rows = df.select("value", "partition", "messageId", "properties", "sequenceId").collect()
    assert len(rows) == PARTITIONS * 200
    by_partition: dict[int, list[Any]] = {}
    for row in rows:
        by_partition.setdefault(row.partition, []).append(row)
    assert sorted(by_partition) == list(range(PARTITIONS))
    for p, got in by_partition.items():
        assert [bytes(r.value) for r in got] == [f"p{p}-{i}".encode() for i in range(200)]
        assert [r.properties["i"] for r in got] == [str(i) for i in range(200)]
    by_pattern = (spark.read.format("magnetar").options(**read_options(standalone))
                  .option("topicsPattern", "batch-t").option("splitBy", "ledger").load())
    assert sorted(bytes(r.value) for r in by_pattern.select("value").collect()) == sorted(bytes(r.value) for r in rows)


def fail_once(marker: str, suffix: bytes = b"-37") -> Any:
    """A UDF that raises at the row whose value ends with ``suffix``, once (a marker file says so):
    the task fails mid-partition, after the rows before it went downstream, and Spark retries it."""
    import os
    import time

    from pyspark.sql.functions import udf

    def check(value: bytes) -> bytes:
        if value.endswith(suffix) and not os.path.exists(marker):
            with open(marker, "w"):
                pass
            time.sleep(2)  # rows already handed downstream reach the broker first
            raise RuntimeError("injected task failure")
        return value

    return udf(check, "binary")


def test_stream_restarts_from_its_checkpoint_without_duplicates_or_gaps(
    standalone: StandaloneProcess, spark: Any, tmp_path: Any
) -> None:
    from pyspark.sql.functions import col

    def run_query(expect_new: int) -> Any:
        stream = (
            spark.readStream.format("magnetar").options(**read_options(standalone))
            .option("topicsPattern", "stream-t").option("startingOffsets", "earliest")
            .option("maxRecordsPerTrigger", "60")
            .option("subscription", "pipeline").option("adminUrl", f"http://{standalone.fields['http']}").load()
            .select(fail_once(str(tmp_path / "failed"))(col("value")).alias("value"), "partition", "messageId")
        )
        query = (
            stream.writeStream.format("parquet").option("path", str(tmp_path / "out"))
            .option("checkpointLocation", str(tmp_path / "checkpoint")).trigger(availableNow=True).start()
        )
        assert query.awaitTermination(180), "the AvailableNow query did not finish"
        batches = [p for p in query.recentProgress if p["numInputRows"] > 0]
        assert sum(p["numInputRows"] for p in batches) == expect_new
        assert all(p["numInputRows"] <= 60 for p in batches)
        return batches

    def next_read(stored: int) -> list[int]:
        """Per partition, the entry the named subscription reads next (one message per entry:
        ``stored`` minus its backlog), -1 when there is no such subscription."""
        out = []
        for p in range(2):
            subscriptions = admin(standalone, "GET", f"/persistent/public/default/stream-t-partition-{p}/stats")[
                "subscriptions"]
            out.append(stored - subscriptions["pipeline"]["msgBacklog"] if "pipeline" in subscriptions else -1)
        return out

    for p in range(2):
        produce(standalone.broker_url, f"stream-t-partition-{p}", [f"p{p}-{i}".encode() for i in range(50)],
                batching=False)
    assert next_read(50) == [-1, -1]  # control: nothing creates the subscription before a commit
    assert len(run_query(100)) >= 2  # rate-limited: several micro-batches
    first = next_read(50)  # committed: at least the first batch (30 per partition); never past the data
    assert all(30 <= n <= 50 for n in first), first
    for p in range(2):
        produce(standalone.broker_url, f"stream-t-partition-{p}", [f"p{p}-{i}".encode() for i in range(50, 120)],
                batching=False)
    run_query(140)  # restarted from the checkpoint: only the new rows, one task failed and was retried
    second = next_read(120)  # the subscription followed the commits (one batch behind at most)
    assert all(f < n <= 120 for f, n in zip(first, second, strict=True)), (first, second)
    assert (tmp_path / "failed").exists()
    rows = spark.read.parquet(str(tmp_path / "out")).collect()
    values = sorted(bytes(r.value).decode() for r in rows)
    assert values == sorted(f"p{p}-{i}" for p in range(2) for i in range(120))


def test_write_then_read_back_exactly_once_despite_task_retries(standalone: StandaloneProcess, spark: Any) -> None:
    """Exactly once needs deduplication on the target topic, off by default as in Pulsar: the
    namespace ``public/eo`` turns it on (``/namespaces/{t}/{ns}/deduplication``) as a user does."""
    from pyspark.sql.functions import col, concat, lit

    def write_and_read_back(topic: str, exactly_once: bool) -> list[str]:
        df = spark.range(0, 400, 1, 2).select(
            concat(lit("v-"), col("id").cast("string")).cast("binary").alias("value"),
            col("id").cast("string").alias("key"),
        )
        (df.write.format("magnetar").option("serviceUrl", standalone.broker_url).option("topic", topic)
           .option("exactlyOnce", str(exactly_once).lower()).option("batching", "false")
           .option("failTaskAfterRows", "120")  # each task's first attempt dies after 120 receipted rows
           .mode("append").save())
        back = (spark.read.format("magnetar").options(**read_options(standalone)).option("topic", topic).load()
                .select("value").collect())
        return [bytes(r.value).decode() for r in back]

    admin(standalone, "PUT", "/namespaces/public/eo")
    admin(standalone, "POST", "/namespaces/public/eo/deduplication", True)
    assert sorted(write_and_read_back("persistent://public/eo/eo-out", True)) == sorted(f"v-{i}" for i in range(400))
    # Negative controls: the retried tasks duplicate 2 x 120 rows, and the check sees it, without the
    # writer's stable names and sequence ids, or without deduplication on the topic (the default).
    plain = write_and_read_back("persistent://public/eo/plain-out", False)
    assert len(plain) == 400 + 2 * 120 and set(plain) == {f"v-{i}" for i in range(400)}
    off = write_and_read_back("eo-dedup-off", True)
    assert len(off) == 400 + 2 * 120 and set(off) == {f"v-{i}" for i in range(400)}


def test_fail_on_data_loss(standalone: StandaloneProcess, spark: Any) -> None:
    produce(standalone.broker_url, "loss-t", [b"a", b"b", b"c"])
    base = spark.read.format("magnetar").options(**read_options(standalone)).option("topic", "loss-t")
    first = base.load().select("messageId").first().messageId.ledger
    assert first > 0  # earlier tests created ledgers 0.., so ledger 0 is not this topic's
    trimmed = base.option("startingOffsets", json.dumps({"loss-t": "0:0"}))
    with pytest.raises(Exception, match="retention trimmed"):
        trimmed.load().collect()
    assert [bytes(r.value) for r in trimmed.option("failOnDataLoss", "false").load().collect()] == [b"a", b"b", b"c"]


def _example() -> Any:
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[3] / "examples" / "spark_pipeline.py"
    spec = importlib.util.spec_from_file_location("spark_pipeline", path)
    assert spec is not None and spec.loader is not None
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    return example


def _example_args(standalone: StandaloneProcess, tmp_path: Any, topic: str, *extra: str) -> Any:
    return _example().parse_args([
        "--service-url", standalone.broker_url, "--metadata-url", standalone.fields["metadata"],
        "--input", topic, "--output", f"{topic}-counts", "--parquet", str(tmp_path / topic / "counts"),
        "--checkpoint", str(tmp_path / topic / "checkpoint"), "--available-now", *extra,
    ])


def test_example_pipeline_counts_per_key_in_windows(standalone: StandaloneProcess, spark: Any, tmp_path: Any) -> None:
    """examples/spark_pipeline.py, bounded (AvailableNow) in append mode: per-key counts of the
    windows the watermark closed reach the Parquet output and the output topic."""
    t0 = 1_700_000_040_000 - 1_700_000_040_000 % 60_000  # a minute boundary
    keys = ["a", "b", "a", "a"] * 25  # 100 messages over 10 minutes: 10 per minute, a:b = 3:1
    times = [t0 + i * 6_000 for i in range(100)]
    produce(standalone.broker_url, "clicks", [b"x"] * 100, keys=keys, event_times_ms=times)
    args = _example_args(standalone, tmp_path, "clicks", "--mode", "append")
    assert _example().run(spark, args) == 14
    counts = {(r.window.start.timestamp(), r.key): r["count"] for r in spark.read.parquet(args.parquet).collect()}
    # the watermark (latest event - 2 minutes) closed the windows of minutes 0..6
    expected = {(t0 / 1000 + 60 * m, k): c for m in range(7) for k, c in (("a", 7 if m % 2 == 0 else 8), ("b", 3 if m % 2 == 0 else 2))}
    assert counts == expected
    published = spark.read.format("magnetar").options(**read_options(standalone)).option("topic", "clicks-counts").load()
    assert sorted(json.loads(bytes(r.value))["count"] for r in published.select("value").collect()) == sorted(counts.values())


def test_example_pipeline_on_fresh_events_writes_what_it_counted(standalone: StandaloneProcess, spark: Any,
                                                                 tmp_path: Any) -> None:
    """Issue 23: run as its docstring says (--available-now) on 20,000 fresh keyed events (publish
    time now, no event time), the example writes every window's count; append mode, whose
    watermark no fresh event passes, would write none of them."""
    keys = [f"k{i % 7}" for i in range(20_000)]
    produce(standalone.broker_url, "fresh", [b"x"] * 20_000, keys=keys)
    args = _example_args(standalone, tmp_path, "fresh")
    assert _example().output_mode(args) == "update"
    written = _example().run(spark, args)
    rows = spark.read.parquet(args.parquet).collect()
    assert written == len(rows) > 0
    latest: dict[tuple[Any, str], tuple[int, int]] = {}
    for r in rows:  # the latest batch's row of each (window, key) is its count
        key = (r.window.start, r.key)
        latest[key] = max(latest.get(key, (-1, 0)), (r.batch, r["count"]))
    per_key: dict[str, int] = {}
    for (_, key), (_, count) in latest.items():
        per_key[key] = per_key.get(key, 0) + count
    assert per_key == {f"k{j}": sum(1 for k in keys if k == f"k{j}") for j in range(7)}


def test_avro_values_of_the_official_client_become_columns(standalone: StandaloneProcess, spark: Any) -> None:
    import pulsar
    from pulsar.schema import AvroSchema, Integer, Record, String

    class Click(Record):
        page = String()
        n = Integer()

    client = pulsar.Client(standalone.broker_url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    try:
        producer = client.create_producer("avro-t", schema=AvroSchema(Click))  # registers the schema
        for i in range(5):
            producer.send(Click(page=f"/p{i}", n=i))
    finally:
        client.close()
    def read(value_format: str) -> list[tuple[str, int]]:
        df = (spark.read.format("magnetar").options(**read_options(standalone)).option("topic", "avro-t")
              .option("valueSchema", "page STRING, n INT").option("valueFormat", value_format).load())
        return [(r.page, r.n) for r in df.select("page", "n").collect()]

    assert read("avro") == [(f"/p{i}", i) for i in range(5)]
    assert read("json") == [(None, None)] * 5  # control: the same bytes are not JSON
