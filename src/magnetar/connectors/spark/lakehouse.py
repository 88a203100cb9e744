"""``read_topic(spark, **options)``: a batch read of whole topics where the offloaded history goes
through Spark's own Parquet scan and only the live tail through ``format("magnetar")``.

A Python Data Source cannot hand Spark a native scan: every record batch of ``format("magnetar")``
crosses the Python worker, even the Arrow batches it reads from offloaded files without Python per
row (``offloaded``; docs/spark.md). Offloaded ledgers are Parquet files already, with the
connector's columns (``runtime/lakehouse/rows.py``), so this helper plans on the driver which files
hold the offloaded ledgers of each partition (the ledger list names one attempt per ledger, so no
file is read twice and orphans of a crashed attempt are never read), reads them with
``spark.read.parquet`` (JVM, columnar, no Python per row) and unions the rest, from each partition's
first ledger that is not offloaded, read by ``format("magnetar")``. The result has the same columns
as ``format("magnetar")`` (``redeliveryCount`` 0), plus the schema's typed columns when the files
have them and ``valueSchema`` asks for them by name.

``read_stream(spark, checkpoint_location, **options)`` does the same for a streaming query: Spark's
own Parquet file stream over the history files, unioned with ``format("magnetar")``'s stream of
the rest (the split is kept beside the checkpoint; see its docstring).

Options are ``format("magnetar")``'s; only whole topics (``startingOffsets``/``endingOffsets``
earliest/latest, no ``startingTimestamp``) are planned this way, and only a filesystem lakehouse
(Spark here has no S3 filesystem jars): anything else is read by ``format("magnetar")`` alone,
which gives the same rows.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
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


def _plan(options: ReadOptions) -> tuple[dict[str, PartitionLayout], str | None]:
    """Every partition's layout, and the offload root: the query's, else the one the brokers named."""
    async def plan(cx: Connections) -> tuple[dict[str, PartitionLayout], str | None]:
        names = await fetch.resolve_partitions(cx, options.topics, options.topics_pattern)
        layouts = {name: await fetch.load_layout(cx, name) for name in names}
        told = cx.lakehouse_location.url if cx.lakehouse_location is not None else None
        return layouts, options.lakehouse or told

    result: tuple[dict[str, PartitionLayout], str | None] = fetch.call(
        plan, options.service_url, options.metadata_url, admin_url=options.admin_url, credentials=options.credentials)
    return result


@dataclass(frozen=True)
class NativePlan:
    """A read split into the offloaded history (Parquet files, read natively) and the live tail
    (``startingOffsets``/``endingOffsets`` per partition, read by ``format("magnetar")``), fixed
    when planned: the tail ends where each partition's readable end was then."""

    files: tuple[str, ...]
    tail_starts: dict[str, str]
    tail_ends: dict[str, str]

    @property
    def tail_empty(self) -> bool:
        return self.tail_starts == self.tail_ends


def native_plan(options: ReadOptions) -> NativePlan | None:
    """The history/tail split of ``options``' read, or None when it cannot be split that way. A
    streaming tail starts at each partition's first ledger not offloaded (or after the history)."""
    if (options.starting != "earliest" or options.ending != "latest" or options.starting_timestamp_ms is not None
            or options.read_mode == "broker"):
        return None
    layouts, root = _plan(options)
    if root is None or root.startswith("s3://"):
        return None
    files: list[str] = []
    starts: dict[str, str] = {}
    ends: dict[str, str] = {}
    for name, layout in layouts.items():
        managed_ledger = _managed_ledger_name(name)
        first_live = None
        for span in layout.ledgers:
            if span.offload_uid and first_live is None:
                files.append(os.path.join(root, table_dir(managed_ledger), file_name(span.ledger_id, span.offload_uid)))
            elif first_live is None:
                first_live = span
        end = layout.latest
        start = Position(first_live.ledger_id, 0) if first_live is not None else end
        # an empty tail (nothing readable past the history) is read from nowhere: start == end
        starts[name] = format_position(start if layout.ranges(start, end) else end)
        ends[name] = format_position(end)
    return NativePlan(tuple(files), starts, ends)


def _managed_ledger_name(partition: str) -> str:
    return TopicName.parse(partition).persistence_path


def _columns(stored: Any, options: ReadOptions) -> Any:
    """``stored`` (rows of offloaded files) with ``format("magnetar")``'s columns; None when the
    values cannot be decoded natively (Avro values without typed columns in the files)."""
    from pyspark.sql import functions as F

    fields = parse_value_schema(options.value_schema)
    if options.value_format == "avro" and any(f.name not in stored.columns for f in fields):
        return None  # Spark here cannot decode Avro natively
    # typed columns the offload wrote from the topic's schema, else JSON values decoded by Spark itself
    decoded = F.from_json(F.col("value").cast("string"), ", ".join(f"`{f.name}` {f.ddl_type}" for f in fields))
    typed = [(F.col(f.name) if f.name in stored.columns else decoded.getField(f.name)).cast(f.ddl_type)
             .alias(f.name) for f in fields]
    return stored.select(*COLUMNS, F.lit(0).cast("int").alias("redeliveryCount"), *typed)


def read_topic(spark: Any, **raw: str) -> Any:
    """A DataFrame of the topics ``raw`` names (``format("magnetar")`` options), history from
    Parquet natively. See the module docstring."""
    options = ReadOptions.parse(raw, streaming=False)
    reader = spark.read.format("magnetar").options(**raw)
    planned = native_plan(options)
    if planned is None or not planned.files:
        return reader.load()
    history = _columns(spark.read.parquet(*planned.files), options)
    if history is None:
        return reader.load()
    if planned.tail_empty:  # no Python source to plan and run for nothing at every action
        return history
    live = (reader.option("startingOffsets", json.dumps(planned.tail_starts, sort_keys=True))
            .option("endingOffsets", json.dumps(planned.tail_ends, sort_keys=True)).load())
    return history.unionByName(live)


# --- streaming --------------------------------------------------------------------------------

#: The history/tail split of a streaming query, kept beside its checkpoint (see ``read_stream``).
STREAM_PLAN_FILE = "magnetar-stream-plan.json"
#: Characters a Hadoop glob gives a meaning; a history file path with one is not globbed.
_GLOB_SPECIALS = frozenset("{}[]*?\\,")


def read_stream(spark: Any, checkpoint_location: str, **raw: str) -> Any:
    """A streaming DataFrame of the topics ``raw`` names (``format("magnetar")``'s options, from
    ``startingOffsets=earliest``): the offloaded history through Spark's own Parquet file stream
    (native scan, no Python per row) unioned with ``format("magnetar")``'s stream of the rest, from
    each partition's first ledger not offloaded. A Python data source cannot hand Spark a native
    scan, so the split is made here, once: at the query's first start the history files and the
    tail's starting offsets are written to ``checkpoint_location/magnetar-stream-plan.json`` (give
    the query the same ``checkpointLocation``, a local directory) and every restart reuses them,
    since Spark's checkpoint then holds both sources' progress and a new split (more ledgers
    offloaded since) would read those ledgers twice. Reads that cannot be split (other starting
    offsets, an S3 lakehouse, Avro values without typed columns) are ``format("magnetar")``'s
    stream alone: the same rows, through Python."""
    options = ReadOptions.parse(raw, streaming=True)
    reader = spark.readStream.format("magnetar").options(**raw)
    plan_file = os.path.join(checkpoint_location, STREAM_PLAN_FILE)
    if os.path.exists(plan_file):
        with open(plan_file, encoding="utf-8") as stored:
            saved = json.load(stored)
        files, starts = tuple(saved["files"]), dict(saved["tailStarts"])
    else:
        planned = native_plan(options)
        if planned is None or not planned.files or any(_GLOB_SPECIALS & set(f) for f in planned.files):
            return reader.load()
        files, starts = planned.files, dict(planned.tail_starts)  # a stream's tail has no end
        os.makedirs(checkpoint_location, exist_ok=True)
        with open(plan_file, "w", encoding="utf-8") as out:
            json.dump({"files": list(files), "tailStarts": starts}, out, sort_keys=True)
    history = _columns(_file_streams(spark, files), options)
    if history is None:
        return reader.load()
    live = reader.option("startingOffsets", json.dumps(starts, sort_keys=True)).load()
    return history.unionByName(live)


def _file_streams(spark: Any, files: tuple[str, ...]) -> Any:
    """Spark's Parquet file stream over exactly ``files``: one source per directory (a topic
    partition's table), its ``pathGlobFilter`` naming that directory's files (Hadoop globs with
    whole paths in braces match nothing in a file stream), unioned."""
    schema = spark.read.parquet(*files).schema
    by_directory: dict[str, list[str]] = {}
    for path in files:
        by_directory.setdefault(os.path.dirname(path), []).append(os.path.basename(path))
    streams = [spark.readStream.schema(schema).option("pathGlobFilter", "{" + ",".join(names) + "}").parquet(directory)
               for directory, names in sorted(by_directory.items())]
    union = streams[0]
    for stream in streams[1:]:
        union = union.unionByName(stream)
    return union


__all__ = ["STREAM_PLAN_FILE", "NativePlan", "native_plan", "read_stream", "read_topic"]
