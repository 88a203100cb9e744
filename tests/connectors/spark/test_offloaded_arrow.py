"""``format("magnetar")`` over offloaded ledgers reads their Parquet files as Arrow (issue 21),
against a real standalone (ledgers of 20 entries, bookie copies deleted at once) and the official
client: the rows are those the bookie read gave for the same messages (batched and single, keys,
properties, event times, typed schema columns), the offloaded part of each Spark partition is read
without the stored-entry row path (a lakehouse whose entry columns are wiped still reads, while
the broker's replay of it fails: the negative control), and a stream over offloaded history plus
live messages adds exactly the new rows on a restart from its checkpoint."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pulsar
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from pulsar.schema import Integer, JsonSchema, Record, String

from magnetar.connectors.spark.fetch import run
from magnetar.connectors.spark.lakehouse import native_plan
from magnetar.connectors.spark.offloaded import LakehouseReadError
from magnetar.connectors.spark.options import ReadOptions
from magnetar.connectors.spark.source import MagnetarDataSource, SlicePartition
from magnetar.managed_ledger.offload import OffloadError
from magnetar.runtime.lakehouse import open_lakehouse
from magnetar.runtime.lakehouse.layout import VALUE_KIND_KEY
from magnetar.runtime.processes import StandaloneProcess
from tests.cluster.helpers import wait_until
from tests.connectors.spark.conftest import admin

pytestmark = pytest.mark.integration

TOPIC = "arrow-tiered"
PARTITIONS = 2
VALUE_SCHEMA = "n BIGINT, name STRING, absent INT"


class Event(Record):
    n = Integer()
    name = String()


@pytest.fixture(scope="module")
def standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneProcess]:
    env = dict(os.environ, MAGNETAR_MANAGED_LEDGER_MAX_ENTRIES_PER_LEDGER="20",
               MAGNETAR_BROKER_OFFLOAD_DELETION_LAG_MS="0",
               MAGNETAR_BROKER_RETENTION_TIME_S="-1", MAGNETAR_BROKER_RETENTION_SIZE_BYTES="-1",
               MAGNETAR_MANAGED_LEDGER_RETENTION_TIME_S="-1", MAGNETAR_MANAGED_LEDGER_RETENTION_SIZE_BYTES="-1")
    process = StandaloneProcess(str(tmp_path_factory.mktemp("standalone") / "data"), env=env)
    try:
        admin(process, "PUT", f"/persistent/public/default/{TOPIC}/partitions", PARTITIONS)
        yield process
    finally:
        process.terminate()


def _options(standalone: StandaloneProcess, **more: str) -> dict[str, str]:
    return {"serviceUrl": standalone.broker_url, "metadataUrl": standalone.fields["metadata"], "topic": TOPIC,
            "valueSchema": VALUE_SCHEMA, **more}


def _produce(standalone: StandaloneProcess, first: int, count: int) -> None:
    """``count`` events: the first half one entry each, the rest in producer batches; every one
    with a key, a property and an event time."""
    client = pulsar.Client(standalone.broker_url, operation_timeout_seconds=30,
                           logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    try:
        for batching, numbers in ((False, range(first, first + count // 2)),
                                  (True, range(first + count // 2, first + count))):
            producer = client.create_producer(TOPIC, schema=JsonSchema(Event), batching_enabled=batching,
                                              batching_max_messages=7, batching_max_publish_delay_ms=50)
            for n in numbers:
                producer.send_async(Event(n=n, name=f"v{n}"), None, partition_key=f"k{n % 5}",
                                    properties={"i": str(n), "even": str(n % 2 == 0)},
                                    event_timestamp=1_700_000_000_000 + n)
            producer.flush()
            producer.close()
    finally:
        client.close()


def _offload(standalone: StandaloneProcess) -> None:
    for p in range(PARTITIONS):
        base = f"/persistent/public/default/{TOPIC}-partition-{p}"
        admin(standalone, "PUT", f"{base}/offload")
        wait_until(lambda b=base: admin(standalone, "GET", f"{b}/offload")["status"] != "RUNNING", 60, "the offload")
        assert admin(standalone, "GET", f"{base}/offload")["status"] == "SUCCESS"
        wait_until(lambda b=base: all(lg["bookieCopyDeleted"] for lg in admin(standalone, "GET", f"{b}/internalStats")
                                      ["ledgers"] if lg["offloaded"]), 60, "the bookie copies deleted")


def _read(options: dict[str, str]) -> tuple[pa.Table, list[SlicePartition]]:
    """Every planned partition's ``read()`` run here, as Spark's Python worker runs it."""
    reader = MagnetarDataSource(options).reader(None)
    partitions = [p for p in reader.partitions() if isinstance(p, SlicePartition)]
    batches = [batch for partition in partitions for batch in reader.read(partition)]
    table = pa.Table.from_batches(batches)
    ids = table.column("messageId").combine_chunks()
    keys = pa.table({"p": table.column("partition"), "l": ids.field("ledger"), "e": ids.field("entry"),
                     "b": ids.field("batchIndex")})
    return table.take(pc.sort_indices(keys, sort_keys=[(k, "ascending") for k in "pleb"])), partitions


def test_offloaded_partitions_are_read_as_arrow_and_equal_the_bookie_read(standalone: StandaloneProcess,
                                                                          tmp_path: Path) -> None:
    _produce(standalone, 0, 240)
    from_bookies, planned = _read(_options(standalone))
    assert from_bookies.num_rows == 240
    assert all(p.piece.tiers == ("bookies",) for p in planned)

    _offload(standalone)
    from_lakehouse, planned = _read(_options(standalone))
    assert all(p.piece.tiers == ("lakehouse", "bookies") for p in planned)  # history + the open ledger
    assert from_lakehouse.schema == from_bookies.schema
    assert from_lakehouse.equals(from_bookies)  # every column, row for row, typed columns included
    assert sorted(from_lakehouse.column("n").to_pylist()) == list(range(240))
    assert from_lakehouse.column("absent").null_count == 240

    # the typed columns came from the files (the schema's kind recorded in each), not from the values
    plan = native_plan(ReadOptions.parse(_options(standalone), streaming=False))
    assert plan is not None and plan.files
    assert all(pq.ParquetFile(f).metadata.metadata[VALUE_KIND_KEY] == b"JSON" for f in plan.files)

    # negative control for the path taken: a copy of the lakehouse whose stored-entry columns are
    # wiped. The stored-entry reader (what brokers replay from) cannot read it ...
    source_root = Path(plan.files[0]).parents[4]  # <root>/public/default/<topic>/partition=<n>/<file>
    wiped = tmp_path / "wiped"
    shutil.copytree(source_root, wiped)
    for path in plan.files:
        copy = wiped / Path(path).relative_to(source_root)
        table = pq.read_table(copy)
        schema_metadata = pq.ParquetFile(copy).metadata.metadata
        table = table.set_column(table.schema.get_field_index("entry"), "entry",
                                 pa.nulls(table.num_rows, pa.binary()))
        pq.write_table(table.replace_schema_metadata(schema_metadata), copy)
    first_ledger, uid = next((p.piece.ranges[0].ledger_id, p.piece.offloaded[p.piece.ranges[0].ledger_id])
                             for p in planned)
    managed_ledger = f"public/default/persistent/{TOPIC}-partition-{planned[0].piece.partition}"
    with pytest.raises(OffloadError, match="lacks entries"):
        run(open_lakehouse(str(wiped)).read_offloaded(managed_ledger, first_ledger, uid, 0, 0))
    # ... while format("magnetar") reads every row from it: its offloaded partitions never touch them
    through_wiped, _ = _read(_options(standalone, lakehouseUrl=str(wiped)))
    assert through_wiped.equals(from_bookies)

    # and a file that lacks entries fails the read instead of returning fewer rows
    victim = wiped / Path(plan.files[0]).relative_to(source_root)
    shorter = pq.read_table(victim)
    pq.write_table(shorter.slice(0, shorter.num_rows // 2).replace_schema_metadata(
        pq.ParquetFile(victim).metadata.metadata), victim)
    with pytest.raises(LakehouseReadError, match="lacks entries"):
        _read(_options(standalone, lakehouseUrl=str(wiped)))


def test_a_stream_over_offloaded_history_and_live_messages_restarts_exactly(standalone: StandaloneProcess,
                                                                            spark: Any, tmp_path: Path) -> None:
    # runs after the test above: 240 events, most offloaded (bookie copies gone), the rest live
    checkpoint, out = str(tmp_path / "checkpoint"), str(tmp_path / "out")
    options = _options(standalone, startingOffsets="earliest", maxRecordsPerTrigger="100")

    def once() -> Any:
        stream = spark.readStream.format("magnetar").options(**options).load().select("n", "messageId", "key")
        query = (stream.writeStream.format("parquet").option("path", out).option("checkpointLocation", checkpoint)
                 .trigger(availableNow=True).start())
        assert query.awaitTermination(180), "the AvailableNow query did not finish"
        return spark.read.parquet(out)

    first = once()
    assert sorted(r.n for r in first.collect()) == list(range(240))

    _produce(standalone, 240, 40)  # new live messages
    second = once()
    assert sorted(r.n for r in second.collect()) == list(range(280))  # exactly the new rows added

    _offload(standalone)  # the ledgers the first runs read live are offloaded now; more arrive
    _produce(standalone, 280, 20)
    third = once()
    assert sorted(r.n for r in third.collect()) == list(range(300))
    assert third.select("messageId").distinct().count() == 300
