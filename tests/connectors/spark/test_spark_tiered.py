"""The Spark connector over offloaded ledgers, against a real standalone (ledgers of 40 entries,
bookie copies deleted at once) and a real local Spark: ``format("magnetar")`` reads offloaded
ledgers from the lakehouse (the ledgers are gone from the bookies), ``read_topic`` reads them with
Spark's own Parquet scan plus the live tail through the connector — the same rows either way, in
order, nothing doubled; JSON values of the registered schema appear as typed columns."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from typing import Any

import pytest

from magnetar.connectors.spark.lakehouse import STREAM_PLAN_FILE, native_plan, read_stream, read_topic
from magnetar.connectors.spark.options import ReadOptions
from magnetar.runtime.processes import StandaloneProcess
from tests.cluster.helpers import wait_until
from tests.connectors.spark.conftest import admin, produce

pytestmark = pytest.mark.integration

TOPIC = "tiered-spark"


@pytest.fixture(scope="module")
def standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneProcess]:
    env = dict(os.environ, MAGNETAR_MANAGED_LEDGER_MAX_ENTRIES_PER_LEDGER="40",
               MAGNETAR_BROKER_OFFLOAD_DELETION_LAG_MS="0",
               # keep every ledger (no subscription holds them; Pulsar trims those without retention)
               MAGNETAR_BROKER_RETENTION_TIME_S="-1", MAGNETAR_BROKER_RETENTION_SIZE_BYTES="-1",
               MAGNETAR_MANAGED_LEDGER_RETENTION_TIME_S="-1", MAGNETAR_MANAGED_LEDGER_RETENTION_SIZE_BYTES="-1")
    process = StandaloneProcess(str(tmp_path_factory.mktemp("standalone") / "data"), env=env)
    try:
        yield process
    finally:
        process.terminate()


def _options(standalone: StandaloneProcess) -> dict[str, str]:
    return {"serviceUrl": standalone.broker_url, "metadataUrl": standalone.fields["metadata"], "topic": TOPIC}


def _offloaded(standalone: StandaloneProcess) -> list[dict[str, Any]]:
    base = f"/persistent/public/default/{TOPIC}"
    admin(standalone, "PUT", f"{base}/offload")
    wait_until(lambda: admin(standalone, "GET", f"{base}/offload")["status"] != "RUNNING", 60, "the offload")
    assert admin(standalone, "GET", f"{base}/offload")["status"] == "SUCCESS"
    return list(admin(standalone, "GET", f"{base}/internalStats")["ledgers"])


def _rows(df: Any) -> list[tuple[Any, ...]]:
    return [(bytes(r.value), r.messageId.ledger, r.messageId.entry, r.messageId.batchIndex, r.properties["i"],
             r.redeliveryCount) for r in df.orderBy("messageId.ledger", "messageId.entry", "messageId.batchIndex")
            .collect()]


def test_offloaded_history_reads_through_the_connector_and_natively(standalone: StandaloneProcess,
                                                                      spark: Any) -> None:
    admin(standalone, "POST", "/namespaces/public/default/retention",
          {"retentionTimeInMinutes": -1, "retentionSizeInMB": -1})
    values = [json.dumps({"n": i, "name": f"v{i}"}).encode() for i in range(300)]
    produce(standalone.broker_url, TOPIC, values[:150], batching=False)
    produce(standalone.broker_url, TOPIC, values[150:], batching=True)
    ledgers = _offloaded(standalone)
    assert sum(1 for lg in ledgers if lg["offloaded"] and lg["bookieCopyDeleted"]) >= 3
    live_values = [f"live-{i}".encode() for i in range(30)]
    produce(standalone.broker_url, TOPIC, live_values, batching=False)

    options = _options(standalone)
    through_connector = _rows(spark.read.format("magnetar").options(**options).load())
    assert [r[0] for r in through_connector] == values + live_values
    assert len({r[1:4] for r in through_connector}) == len(through_connector)

    plan = native_plan(ReadOptions.parse(options, streaming=False))
    assert plan is not None
    assert len(plan.files) == sum(1 for lg in ledgers if lg["offloaded"])
    first_live = next(lg["ledgerId"] for lg in ledgers if not lg["offloaded"])
    assert plan.tail_starts == {f"persistent://public/default/{TOPIC}": f"{first_live}:0"}
    assert not plan.tail_empty
    native = read_topic(spark, **options)
    assert _rows(native) == through_connector
    # the history really is a Parquet scan: Spark's plan names the files, not the Python source
    assert "FileScan parquet" in native._jdf.queryExecution().executedPlan().toString()

    typed = read_topic(spark, **options, valueSchema="n BIGINT, name STRING")
    got = {r.n: r.name for r in typed.select("n", "name").collect() if r.n is not None}
    assert got == {i: f"v{i}" for i in range(300)}


def test_a_lakehouse_that_lost_the_files_fails_the_read(standalone: StandaloneProcess, spark: Any,
                                                        tmp_path: Any) -> None:
    # negative control: the offloaded ledgers are only in the lakehouse; point at an empty one
    options = {**_options(standalone), "lakehouseUrl": str(tmp_path / "empty")}
    with pytest.raises(Exception, match=r"lacks|No such file|not exist|FileNotFound"):
        spark.read.format("magnetar").options(**options).load().count()


def test_starting_timestamp_and_streaming_limits_over_offloaded_ledgers(standalone: StandaloneProcess, spark: Any,
                                                                         tmp_path: Any) -> None:
    # runs after the test above: the topic's history is offloaded, its bookie copies deleted
    options = _options(standalone)
    rows = spark.read.format("magnetar").options(**options).load().select("value", "publishTime").collect()
    publish_ms = [int(r.publishTime.timestamp() * 1000) for r in rows]
    middle = publish_ms[len(rows) // 3]
    later = spark.read.format("magnetar").options(**options).option("startingTimestamp", str(middle)).load()
    assert later.count() == sum(1 for p in publish_ms if p >= middle)

    stream = (spark.readStream.format("magnetar").options(**options).option("startingOffsets", "earliest")
              .option("maxRecordsPerTrigger", "100").load().select("value", "messageId"))
    query = (stream.writeStream.format("parquet").option("path", str(tmp_path / "out"))
             .option("checkpointLocation", str(tmp_path / "checkpoint")).trigger(availableNow=True).start())
    assert query.awaitTermination(180), "the AvailableNow query did not finish"
    assert len([p for p in query.recentProgress if p["numInputRows"] > 0]) >= 3  # the limit cut batches
    out = spark.read.parquet(str(tmp_path / "out"))
    assert out.count() == len(rows)
    assert out.select("messageId").distinct().count() == len(rows)


def _stream_once(spark: Any, options: dict[str, str], checkpoint: str, out: str) -> Any:
    stream = read_stream(spark, checkpoint, **options).select("value", "messageId")
    query = (stream.writeStream.format("parquet").option("path", out).option("checkpointLocation", checkpoint)
             .trigger(availableNow=True).start())
    assert query.awaitTermination(180), "the AvailableNow query did not finish"
    return query


def test_streaming_reads_the_offloaded_history_through_the_native_parquet_stream(
        standalone: StandaloneProcess, spark: Any, tmp_path: Any) -> None:
    # runs after the tests above: history offloaded (bookie copies deleted), a live tail on the bookie
    options = {**_options(standalone), "startingOffsets": "earliest"}
    checkpoint, out = str(tmp_path / "checkpoint"), str(tmp_path / "out")
    every = spark.read.format("magnetar").options(**_options(standalone)).load().count()
    plan = native_plan(ReadOptions.parse(_options(standalone), streaming=False))
    assert plan is not None and not plan.tail_empty
    history_rows = spark.read.parquet(*plan.files).count()

    query = _stream_once(spark, options, checkpoint, out)
    by_source: dict[str, int] = {}
    for progress in query.recentProgress:
        for source in progress["sources"]:
            kind = "files" if source["description"].startswith("FileStreamSource") else "python"
            by_source[kind] = by_source.get(kind, 0) + int(source["numInputRows"])
    # every offloaded row came through Spark's Parquet file stream, only the tail through Python
    assert by_source == {"files": history_rows, "python": every - history_rows}
    assert spark.read.parquet(out).count() == every

    # more messages, and the old tail offloaded too; the restarted query keeps its split (saved
    # beside the checkpoint): only the new messages arrive, nothing twice
    produce(standalone.broker_url, TOPIC, [f"later-{i}".encode() for i in range(50)], batching=False)
    _offloaded(standalone)
    _stream_once(spark, options, checkpoint, out)
    got = spark.read.parquet(out)
    assert got.count() == every + 50
    assert got.select("messageId").distinct().count() == every + 50

    # negative control: without the saved split a restart plans anew and reads the ledgers
    # offloaded since the first start twice (once by the tail, now again as files)
    os.remove(os.path.join(checkpoint, STREAM_PLAN_FILE))
    _stream_once(spark, options, checkpoint, out)
    again = spark.read.parquet(out)
    assert again.select("messageId").distinct().count() < again.count()
