"""``format("magnetar")``: the PySpark Python Data Source (the only module importing pyspark).

Batch read (``MagnetarBatchReader``), micro-batch streaming read (``MagnetarStreamReader``:
offsets per partition, ``maxRecordsPerTrigger``/``maxBytesPerTrigger``/``minRecordsPerTrigger``
as Spark read limits, ``Trigger.AvailableNow``, ``failOnDataLoss``), batch and streaming write
(``MagnetarBatchWriter``/``MagnetarStreamWriter``, exactly once through broker deduplication under
the conditions in ``sink``). Tasks yield Arrow record batches. Every method that Spark runs in a
separate Python process gets what it needs through pickled, frozen values (options, slices).
"""

from __future__ import annotations

import gc
import uuid
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, replace
from typing import Any

import pyarrow as pa
from pyspark import TaskContext
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
    InputPartition,
    WriterCommitMessage,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxBytes,
    ReadMaxRows,
    ReadMinRows,
    SupportsTriggerAvailableNow,
)

from magnetar.base.types import Position
from magnetar.connectors.spark import fetch
from magnetar.connectors.spark.fetch import Connections, DataLossError
from magnetar.connectors.spark.offsets import BEGINNING, Named, Spec, canonical, from_offset, spec_for
from magnetar.connectors.spark.options import ReadOptions, WriteOptions
from magnetar.connectors.spark.plan import PartitionLayout, Slice, cut
from magnetar.connectors.spark.progress import advance_subscription
from magnetar.connectors.spark.rows import parse_value_schema, schema_ddl
from magnetar.connectors.spark.sink import producer_name, to_message, write_messages
from magnetar.runtime.lakehouse import LazyLakehouse, open_lakehouse

FORMAT = "magnetar"


class SlicePartition(InputPartition):
    """One Spark task: a slice plus how to reach the cluster."""

    def __init__(self, piece: Slice, options: ReadOptions, avro_schemas: dict[int, str] | None = None) -> None:
        super().__init__(piece.topic)
        self.piece = piece
        self.options = options
        self.avro_schemas = avro_schemas  # valueFormat=avro: the topic's writer schemas by version


#: Tasks of this Python worker that froze the objects alive at their start (``_freeze_long_lived``).
_freezes = 0
#: The first task freezes what the imports left; the second also what the first one's lazy imports
#: (``pyarrow.compute`` and others) left; later tasks find nothing new that lives on.
FREEZES_COUNT_MAX = 2


def _freeze_long_lived() -> None:
    """In a Spark task, at the start of a Python worker's first ``FREEZES_COUNT_MAX`` tasks: move
    every object alive (mostly the modules pyspark and this connector import) to the permanent
    generation, after a collection in the first (before later ones Spark's daemon has just
    collected). The daemon runs a full ``gc.collect()`` after every task of a reused worker;
    walking those objects cost tens of ms per task here (8% of the workers' CPU in a 1M-row read).
    Objects later tasks allocate are collected as before. A counter, not ``gc.get_freeze_count()``,
    says whether to freeze: that call walks every frozen object (~5-20 ms per task). Outside a
    task (driver, tests) nothing changes."""
    global _freezes
    if _freezes >= FREEZES_COUNT_MAX or TaskContext.get() is None:
        return
    if _freezes == 0:
        gc.collect()
    gc.freeze()
    _freezes += 1


def _read_partition(partition: SlicePartition) -> Iterator[pa.RecordBatch]:
    _freeze_long_lived()
    options = partition.options
    fields = parse_value_schema(options.value_schema)
    return fetch.iterate(
        lambda cx: fetch.read_slice(cx, partition.piece, options.read_mode, fields, partition.avro_schemas),
        options.service_url, options.metadata_url, lakehouse_of(options), credentials=options.credentials,
    )


def call(work: Callable[[Connections], Awaitable[Any]], options: ReadOptions) -> Any:
    """``fetch.call`` with the connections ``options`` ask for (driver side: planning)."""
    return fetch.call(work, options.service_url, options.metadata_url, lakehouse_of(options),
                      admin_url=options.admin_url, credentials=options.credentials)


def lakehouse_of(options: ReadOptions) -> LazyLakehouse | None:
    """Where this query reads offloaded ledgers (opened lazily: nothing is imported or listed
    unless an offloaded ledger is read)."""
    if options.lakehouse is None:
        return None
    return open_lakehouse(options.lakehouse, s3_endpoint=options.lakehouse_s3_endpoint)


async def _partitions(cx: Connections, pieces: list[Slice], options: ReadOptions) -> list[InputPartition]:
    """Input partitions of ``pieces``, with the Avro writer schemas when values are Avro, and the
    lakehouse the brokers named (admin plans) unless the query named one."""
    if options.lakehouse is None and cx.lakehouse_location is not None:
        options = replace(options, lakehouse_url=cx.lakehouse_location.url,
                          lakehouse_s3_endpoint=cx.lakehouse_location.s3_endpoint or None)
    if options.value_format != "avro" or not options.value_schema:
        return [SlicePartition(piece, options) for piece in pieces]
    schemas = {name: await fetch.avro_schemas(cx, name) for name in sorted({p.topic for p in pieces})}
    return [SlicePartition(piece, options, schemas[piece.topic]) for piece in pieces]


async def _layouts(cx: Connections, options: ReadOptions) -> dict[str, PartitionLayout]:
    names = await fetch.resolve_partitions(cx, options.topics, options.topics_pattern)
    return {name: await fetch.load_layout(cx, name) for name in names}


async def _resolve(cx: Connections, layout: PartitionLayout, spec: Spec, options: ReadOptions) -> Position:
    if spec == "earliest":
        return layout.earliest
    if spec == "latest":
        return layout.latest
    assert isinstance(spec, Position)
    return _checked_start(layout, spec, options.fail_on_data_loss)


def _checked_start(layout: PartitionLayout, start: Position, fail_on_data_loss: bool) -> Position:
    """``start``, or the earliest stored entry when retention trimmed it and loss is accepted."""
    if layout.trimmed(start):
        if fail_on_data_loss:
            raise DataLossError(layout.describe_loss(start))
        return layout.earliest
    return start


async def _starts(cx: Connections, layouts: dict[str, PartitionLayout], options: ReadOptions,
                  default: Named) -> dict[str, Position]:
    starts = {}
    for name, layout in layouts.items():
        if options.starting_timestamp_ms is not None:
            starts[name] = await fetch.position_for_timestamp(cx, layout, options.starting_timestamp_ms)
        else:
            starts[name] = await _resolve(cx, layout, spec_for(options.starting, name, default), options)
    return starts


# --- batch read --------------------------------------------------------------------------------


class MagnetarBatchReader(DataSourceReader):
    def __init__(self, options: ReadOptions) -> None:
        self.read_options = options

    def partitions(self) -> list[InputPartition]:
        options = self.read_options

        async def plan(cx: Connections) -> list[InputPartition]:
            layouts = await _layouts(cx, options)
            starts = await _starts(cx, layouts, options, "earliest")
            ends = {n: await _resolve(cx, lay, spec_for(options.ending, n, "latest"), options) for n, lay in layouts.items()}
            pieces = cut(layouts, starts, ends, split_by=options.split_by, min_partitions=options.min_partitions)
            return await _partitions(cx, pieces, options)

        return list(call(plan, options))

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, SlicePartition):  # Spark's placeholder when nothing is to be read
            return iter(())
        return _read_partition(partition)


# --- streaming read ----------------------------------------------------------------------------


class MagnetarStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Offsets ``{partition: "L:E"}``; see ``offsets``. The source reads without a cursor (Spark's
    checkpoint is the position); ``commit`` only moves the optional named subscription."""

    def __init__(self, options: ReadOptions) -> None:
        self.read_options = options
        self._target: dict[str, Position] | None = None

    def _call(self, work: Any) -> Any:
        return call(work, self.read_options)

    def initialOffset(self) -> dict[str, str]:
        options = self.read_options

        async def initial(cx: Connections) -> dict[str, Position]:
            return await _starts(cx, await _layouts(cx, options), options, "latest")

        return canonical(self._call(initial))

    def getDefaultReadLimit(self) -> ReadLimit:
        options = self.read_options
        if options.max_records_per_trigger is not None:
            return ReadMaxRows(options.max_records_per_trigger)
        if options.max_bytes_per_trigger is not None:
            return ReadMaxBytes(options.max_bytes_per_trigger)
        if options.min_records_per_trigger is not None:
            return ReadMinRows(options.min_records_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        async def latest(cx: Connections) -> dict[str, Position]:
            return {name: layout.latest for name, layout in (await _layouts(cx, self.read_options)).items()}

        self._target = self._call(latest)

    def reportLatestOffset(self) -> dict[str, str]:
        async def latest(cx: Connections) -> dict[str, Position]:
            return {name: layout.latest for name, layout in (await _layouts(cx, self.read_options)).items()}

        return canonical(self._call(latest))

    def latestOffset(self, start: dict[str, str] | None = None, limit: ReadLimit | None = None) -> dict[str, str]:
        options = self.read_options
        begin = from_offset(start)
        target = self._target
        limited = limit is not None and not isinstance(limit, ReadAllAvailable)

        async def latest(cx: Connections) -> dict[str, Position]:
            layouts = await _layouts(cx, options)
            starts: dict[str, Position] = {}
            ends: dict[str, Position] = {}
            for name, layout in layouts.items():
                starts[name] = _checked_start(layout, begin.get(name, BEGINNING), options.fail_on_data_loss)
                end = layout.latest
                if target is not None:
                    cap = target.get(name, BEGINNING)
                    end = min(end, max(cap, starts[name]))
                ends[name] = max(end, starts[name])
            if not limited:
                return ends
            max_rows = limit.max_rows if isinstance(limit, ReadMaxRows) else options.max_records_per_trigger
            max_bytes = limit.max_bytes if isinstance(limit, ReadMaxBytes) else options.max_bytes_per_trigger
            min_rows = limit.min_rows if isinstance(limit, ReadMinRows) else options.min_records_per_trigger
            busy = [n for n in sorted(layouts) if layouts[n].ranges(starts[n], ends[n])]
            if min_rows is not None and target is None:
                available = 0
                for name in busy:
                    available += await fetch.count_records(cx, layouts[name], starts[name], ends[name],
                                                           min_rows - available)
                    if available >= min_rows:
                        break
                if available < min_rows:
                    return starts
            if max_rows is None and max_bytes is None:
                return ends
            share = max(1, len(busy))
            for name in busy:
                ends[name], _ = await fetch.advance(
                    cx, layouts[name], starts[name], ends[name],
                    max_records=None if max_rows is None else max(1, max_rows // share),
                    max_bytes=None if max_bytes is None else max(1, max_bytes // share),
                )
            return ends

        positions = self._call(latest)
        for name, position in begin.items():  # a partition never disappears from the offset
            positions.setdefault(name, position)
        return canonical(positions)

    def partitions(self, start: dict[str, str], end: dict[str, str]) -> list[InputPartition]:
        options = self.read_options
        begin, finish = from_offset(start), from_offset(end)

        async def plan(cx: Connections) -> list[InputPartition]:
            layouts = await _layouts(cx, options)
            layouts = {n: lay for n, lay in layouts.items() if n in finish}
            starts = {n: _checked_start(lay, begin.get(n, BEGINNING), options.fail_on_data_loss)
                      for n, lay in layouts.items()}
            pieces = cut(layouts, starts, finish, split_by=options.split_by, min_partitions=options.min_partitions)
            return await _partitions(cx, pieces, options)

        if start == end:
            return []
        return list(self._call(plan))

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, SlicePartition)
        return _read_partition(partition)

    def commit(self, end: dict[str, str]) -> None:
        """Positions live in Spark's checkpoint; with the ``subscription`` option the named
        subscription is moved to ``end`` on every partition (see ``progress``)."""
        options = self.read_options
        if options.subscription is not None and options.admin_url is not None:
            advance_subscription(options.admin_url, options.subscription, from_offset(end), options.credentials)


# --- write -------------------------------------------------------------------------------------


@dataclass
class WriteCommit(WriterCommitMessage):
    partition_id: int
    rows: int


def _write_rows(rows: Iterator[Any], options: WriteOptions, prefix: str, batch_id: int) -> WriteCommit:
    context = TaskContext.get()
    partition_id = context.partitionId() if context is not None else 0
    first_attempt = context is None or context.attemptNumber() == 0
    messages = (to_message(row.asDict(), options.topic) for row in rows)
    sent = fetch.run(write_messages(
        options.service_url, messages, name=producer_name(prefix, partition_id), batch_id=batch_id,
        exactly_once=options.exactly_once, batching=options.batching,
        fail_after_rows=options.fail_task_after_rows if first_attempt else None,
        auth=None if options.credentials is None else (options.credentials.method, options.credentials.data.encode()),
    ))
    return WriteCommit(partition_id, sent)


class MagnetarBatchWriter(DataSourceWriter):
    def __init__(self, options: WriteOptions) -> None:
        self.write_options = options
        self.prefix = options.producer_name or f"spark-{uuid.uuid4().hex[:16]}"  # fixed for the whole job

    def write(self, iterator: Iterator[Any]) -> WriteCommit:
        return _write_rows(iterator, self.write_options, self.prefix, 0)


class MagnetarStreamWriter(DataSourceStreamWriter):
    def __init__(self, options: WriteOptions) -> None:
        self.write_options = options

    def write(self, iterator: Iterator[Any]) -> WriteCommit:
        context = TaskContext.get()
        query_id = context.getLocalProperty("sql.streaming.queryId") if context is not None else None
        batch_id = context.getLocalProperty("streaming.sql.batchId") if context is not None else None
        prefix = self.write_options.producer_name or f"spark-{query_id or 'query'}"
        return _write_rows(iterator, self.write_options, prefix, int(batch_id or 0))

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Every row was receipted by the broker before its task returned: nothing left to do."""

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Rows already sent stay; the re-run of this batch is deduplicated (see ``sink``)."""


# --- the data source ---------------------------------------------------------------------------


class MagnetarDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return FORMAT

    def schema(self) -> str:
        return schema_ddl(parse_value_schema(self.options.get("valueschema")))

    def reader(self, schema: Any) -> MagnetarBatchReader:
        return MagnetarBatchReader(ReadOptions.parse(self.options, streaming=False))

    def streamReader(self, schema: Any) -> MagnetarStreamReader:
        return MagnetarStreamReader(ReadOptions.parse(self.options, streaming=True))

    def writer(self, schema: Any, overwrite: bool) -> MagnetarBatchWriter:
        return MagnetarBatchWriter(WriteOptions.parse(self.options))

    def streamWriter(self, schema: Any, overwrite: bool) -> MagnetarStreamWriter:
        return MagnetarStreamWriter(WriteOptions.parse(self.options))
