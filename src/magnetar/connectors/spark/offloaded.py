"""Offloaded ledgers of a slice, read from their Parquet files as Arrow (pure pyarrow; no pyspark).

How ``format("magnetar")`` reads the offloaded part of a Spark partition: each offloaded ledger's
file (one per ledger, ``runtime.lakehouse``'s layout) is opened with ``pyarrow.parquet`` (memory-mapped when the lakehouse
is a local directory), only the
row groups that hold the wanted entries (the file's ``magnetar.row_groups`` key) and only the
columns the rows need are decoded (the replay columns ``entry``/``entrySpliced`` and ``topic`` /
``partition`` are never read), the entry range is cut with Arrow compute (no filter at all when
the row groups lie inside it), and every record batch goes out already in the connector's schema
(``rows.arrow_schema``): its columns in order, cast in Arrow where the file's type differs,
``topic``/``partition``/``redeliveryCount`` as constant columns. No Python runs per row or per
entry; batches are cut at ``SPARK_ARROW_BATCH_BYTES_MAX`` (estimated from the row groups' sizes)
and ``SPARK_ARROW_BATCH_ROWS_MAX`` rows.

``valueSchema`` columns come from the typed columns the offload decoded from the topic's schema,
when the file says (``magnetar.value_kind``) they were decoded the way this read decodes values
(JSON schema for ``valueFormat=json``, Avro for ``avro``) and the column has the field's type;
otherwise the values are decoded as the bookie path decodes them (``rows.decode_value_columns``,
Python per value: the one per-row step left, and only for such reads).

Invariant: the rows are those the bookie path builds from the same entries (same values, ids,
keys, properties, times; tested), and every entry of the range is there: a file lacking one fails
the read (``LakehouseReadError``) instead of returning fewer rows.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from magnetar.base.errors import MagnetarError
from magnetar.base.limits import SPARK_ARROW_BATCH_BYTES_MAX, SPARK_ARROW_BATCH_ROWS_MAX
from magnetar.base.types import TopicName
from magnetar.connectors.spark.plan import EntryRange, Slice
from magnetar.connectors.spark.rows import (
    AvroValues,
    ValueField,
    arrow_schema,
    decode_value_columns,
    value_arrow_type,
)
from magnetar.runtime.lakehouse import LazyLakehouse
from magnetar.runtime.lakehouse.layout import ROW_GROUPS_KEY, VALUE_KIND_KEY


class LakehouseReadError(MagnetarError):
    """An offloaded ledger's file cannot give the rows planned from it (a ledger not offloaded, or
    entries missing from its file)."""


#: Columns of the lakehouse files read for every row, in the connector's order (``topic`` and
#: ``partition`` are the slice's, ``redeliveryCount`` is 0: not read).
FILE_COLUMNS = ("key", "value", "messageId", "publishTime", "eventTime", "properties", "producerName", "sequenceId")
#: Names the lakehouse files take before a schema's typed columns (a field of one of these names
#: is stored as ``value_<name>``: ``runtime.lakehouse.rows``).
LAKEHOUSE_BASE_COLUMNS = frozenset({*FILE_COLUMNS, "topic", "partition", "schemaVersion", "entry", "entrySpliced"})


def offloaded_batches(lakehouse: LazyLakehouse, piece: Slice, fields: tuple[ValueField, ...] = (),
                      avro_schemas: Mapping[int, str] | None = None) -> Iterator[pa.RecordBatch]:
    """Record batches (the connector's schema) of every message in ``piece``'s ranges, every one
    of which must be offloaded (``piece.offloaded``), in order."""
    shaper = _Shaper(piece, fields, avro_schemas)
    managed_ledger = TopicName.parse(piece.topic).persistence_path
    for r in piece.ranges:
        uid = piece.offloaded.get(r.ledger_id)
        if uid is None:
            raise LakehouseReadError(f"{piece.topic}: ledger {r.ledger_id} is not offloaded")
        what = f"{piece.topic} ledger {r.ledger_id}"
        local = lakehouse.local_offloaded(managed_ledger, r.ledger_id, uid)
        if local is not None:  # memory-mapped: pages are decoded straight from the page cache
            yield from _ledger_batches(pq.ParquetFile(local, memory_map=True), r, shaper, what)
            continue
        with lakehouse.open_offloaded(managed_ledger, r.ledger_id, uid) as handle:
            yield from _ledger_batches(pq.ParquetFile(handle), r, shaper, what)


def _row_groups(parquet: pq.ParquetFile, r: EntryRange) -> tuple[list[int], bool]:
    """The row groups holding entries of ``r``, and whether they hold nothing else (no filter)."""
    metadata = parquet.metadata
    listed = (metadata.metadata or {}).get(ROW_GROUPS_KEY, b"").decode()
    spans = [tuple(int(x) for x in part.split(":")) for part in listed.split(",") if part]
    if len(spans) != metadata.num_row_groups:  # not indexed: scan every group and filter
        return list(range(metadata.num_row_groups)), False
    wanted = [i for i, (low, high) in enumerate(spans) if high >= r.first and low <= r.last]
    inside = all(r.first <= spans[i][0] and spans[i][1] <= r.last for i in wanted)
    return wanted, inside


def _batch_rows(parquet: pq.ParquetFile, groups: list[int]) -> int:
    """Rows per batch: ``SPARK_ARROW_BATCH_BYTES_MAX`` worth at the largest rows of ``groups``."""
    metadata = parquet.metadata
    per_row = max((metadata.row_group(i).total_byte_size / max(1, metadata.row_group(i).num_rows) for i in groups),
                  default=1.0)
    return max(1, min(SPARK_ARROW_BATCH_ROWS_MAX, int(SPARK_ARROW_BATCH_BYTES_MAX // max(1.0, per_row))))


def _ledger_batches(parquet: pq.ParquetFile, r: EntryRange, shaper: _Shaper, what: str) -> Iterator[pa.RecordBatch]:
    groups, inside = _row_groups(parquet, r)
    typed = shaper.typed_columns(parquet)
    columns = [*FILE_COLUMNS, *sorted(set(typed.values()))]
    if shaper.avro is not None:
        columns.append("schemaVersion")
    seen = 0  # distinct entries of r read (rows are in entry order)
    last_entry = -1
    for batch in parquet.iter_batches(batch_size=_batch_rows(parquet, groups), row_groups=groups, columns=columns):
        entries = batch.column("messageId").field("entry")
        if not inside:
            mask = pc.and_(pc.greater_equal(entries, r.first), pc.less_equal(entries, r.last))
            batch, entries = batch.filter(mask), entries.filter(mask)
        if batch.num_rows == 0:
            continue
        ids = entries.to_numpy()
        seen += int(np.count_nonzero(ids[1:] != ids[:-1])) + int(ids[0] != last_entry)
        last_entry = int(ids[-1])
        yield shaper.shape(batch, typed)
    if seen != r.count:
        raise LakehouseReadError(f"{what}: the lakehouse file lacks entries of {r.first}..{r.last}: found {seen} "
                           f"of {r.count}")


class _Shaper:
    """Turns batches of a file's columns into the connector's schema (one per slice)."""

    def __init__(self, piece: Slice, fields: tuple[ValueField, ...], avro_schemas: Mapping[int, str] | None) -> None:
        self.topic = piece.topic
        self.partition = piece.partition
        self.fields = fields
        self.avro = AvroValues(avro_schemas) if avro_schemas is not None else None
        self.schema = arrow_schema(fields)
        self._constants: dict[int, tuple[pa.Array, pa.Array, pa.Array]] = {}

    def typed_columns(self, parquet: pq.ParquetFile) -> dict[str, str]:
        """``valueSchema`` field -> the file's typed column holding it, where that column may be
        used as is (see the module docstring)."""
        kind = (parquet.metadata.metadata or {}).get(VALUE_KIND_KEY, b"").decode()
        if not self.fields or kind != ("AVRO" if self.avro is not None else "JSON"):
            return {}
        stored = parquet.schema_arrow
        out = {}
        for field in self.fields:
            column = f"value_{field.name}" if field.name in LAKEHOUSE_BASE_COLUMNS else field.name
            index = stored.get_field_index(column)
            if index >= 0 and stored.field(index).type == value_arrow_type(field):
                out[field.name] = column
        return out

    def _constant_columns(self, n: int) -> tuple[pa.Array, pa.Array, pa.Array]:
        found = self._constants.get(n)
        if found is None:
            if len(self._constants) >= 4:  # batches mostly share one row count
                self._constants.clear()
            found = self._constants[n] = (pa.repeat(pa.scalar(self.topic, pa.string()), n),
                                          pa.repeat(pa.scalar(self.partition, pa.int32()), n),
                                          pa.array(np.zeros(n, np.int32)))
        return found

    def shape(self, batch: pa.RecordBatch, typed: dict[str, str]) -> pa.RecordBatch:
        topic, partition, redeliveries = self._constant_columns(batch.num_rows)
        schema = self.schema

        def column(name: str) -> pa.Array:
            array = batch.column(name)
            wanted = schema.field(name).type
            return array if array.type == wanted else array.cast(wanted)

        columns = [column("key"), column("value"), topic, partition, column("messageId"), column("publishTime"),
                   column("eventTime"), column("properties"), column("producerName"), column("sequenceId"),
                   redeliveries]
        if self.fields:
            columns.extend(self._value_columns(batch, typed))
        return pa.RecordBatch.from_arrays(columns, schema=schema)

    def _value_columns(self, batch: pa.RecordBatch, typed: dict[str, str]) -> list[pa.Array]:
        missing = tuple(f for f in self.fields if f.name not in typed)
        decoded: dict[str, pa.Array] = {}
        if missing:
            versions = (batch.column("schemaVersion").to_numpy(zero_copy_only=False) if self.avro is not None
                        else None)
            arrays = decode_value_columns(batch.column("value"), missing, self.avro, versions)
            decoded = {f.name: a for f, a in zip(missing, arrays, strict=True)}
        return [batch.column(typed[f.name]) if f.name in typed else decoded[f.name] for f in self.fields]


__all__ = ["FILE_COLUMNS", "LakehouseReadError", "offloaded_batches"]
