"""``read_topic(spark, **options)``: a batch read of whole topics where the offloaded history goes
through Spark's own Parquet scan and only the live tail through ``format("magnetar")``.

A Python Data Source cannot hand Spark a native scan: every row of ``format("magnetar")`` crosses
the Python worker (docs/spark.md). Offloaded ledgers are Parquet files already, with the
connector's columns (``runtime/lakehouse/rows.py``), so this helper plans on the driver which files
hold the offloaded ledgers of each partition (the ledger list names one attempt per ledger, so no
file is read twice and orphans of a crashed attempt are never read), reads them with
``spark.read.parquet`` (JVM, columnar, no Python per row) and unions the rest, from each partition's
first ledger that is not offloaded, read by ``format("magnetar")``. The result has the same columns
as ``format("magnetar")`` (``redeliveryCount`` 0), plus the schema's typed columns when the files
have them and ``valueSchema`` asks for them by name.

Options are ``format("magnetar")``'s; only whole topics (``startingOffsets``/``endingOffsets``
earliest/latest, no ``startingTimestamp``) are planned this way, and only a filesystem lakehouse
(Spark here has no S3 filesystem jars): anything else is read by ``format("magnetar")`` alone,
which gives the same rows.
"""

from __future__ import annotations

import json
import os
from typing import Any

from magnetar.base.types import Position, TopicName
from magnetar.connectors.spark import fetch
from magnetar.connectors.spark.fetch import Connections
from magnetar.connectors.spark.offsets import format_position
from magnetar.connectors.spark.options import ReadOptions
from magnetar.connectors.spark.plan import PartitionLayout
from magnetar.connectors.spark.rows import parse_value_schema
from magnetar.runtime.lakehouse import file_name, table_dir

#: The connector's columns, in its order.
COLUMNS = ("key", "value", "topic", "partition", "messageId", "publishTime", "eventTime", "properties",
           "producerName", "sequenceId")


def _plan(options: ReadOptions) -> dict[str, PartitionLayout]:
    async def plan(cx: Connections) -> dict[str, PartitionLayout]:
        names = await fetch.resolve_partitions(cx, options.topics, options.topics_pattern)
        return {name: await fetch.load_layout(cx, name) for name in names}

    result: dict[str, PartitionLayout] = fetch.call(plan, options.service_url, options.metadata_url)
    return result


def native_plan(options: ReadOptions) -> tuple[list[str], dict[str, str]] | None:
    """(Parquet files of the offloaded history, ``startingOffsets`` of the tail per partition), or
    None when this read cannot be split that way."""
    root = options.lakehouse
    if (root is None or root.startswith("s3://") or options.starting != "earliest" or options.ending != "latest"
            or options.starting_timestamp_ms is not None or options.read_mode == "broker"):
        return None
    files: list[str] = []
    tail: dict[str, str] = {}
    for name, layout in _plan(options).items():
        managed_ledger = _managed_ledger_name(name)
        first_live = None
        for span in layout.ledgers:
            if span.offload_uid and first_live is None:
                files.append(os.path.join(root, table_dir(managed_ledger), file_name(span.ledger_id, span.offload_uid)))
            elif first_live is None:
                first_live = span
        tail[name] = format_position(Position(first_live.ledger_id, 0)) if first_live else "latest"
    return files, tail


def _managed_ledger_name(partition: str) -> str:
    return TopicName.parse(partition).persistence_path


def read_topic(spark: Any, **raw: str) -> Any:
    """A DataFrame of the topics ``raw`` names (``format("magnetar")`` options), history from
    Parquet natively. See the module docstring."""
    from pyspark.sql import functions as F

    options = ReadOptions.parse(raw, streaming=False)
    reader = spark.read.format("magnetar").options(**raw)
    planned = native_plan(options)
    if planned is None:
        return reader.load()
    files, tail = planned
    live = reader.option("startingOffsets", json.dumps(tail, sort_keys=True)).load()
    if not files:
        return live
    stored = spark.read.parquet(*files)
    fields = parse_value_schema(options.value_schema)
    if options.value_format == "avro" and any(f.name not in stored.columns for f in fields):
        return reader.load()  # Avro values without typed columns: Spark here cannot decode Avro natively
    # typed columns the offload wrote from the topic's schema, else JSON values decoded by Spark itself
    decoded = F.from_json(F.col("value").cast("string"), ", ".join(f"`{f.name}` {f.ddl_type}" for f in fields))
    typed = [(F.col(f.name) if f.name in stored.columns else decoded.getField(f.name)).cast(f.ddl_type)
             .alias(f.name) for f in fields]
    history = stored.select(*COLUMNS, F.lit(0).cast("int").alias("redeliveryCount"), *typed)
    return history.unionByName(live)


__all__ = ["native_plan", "read_topic"]
