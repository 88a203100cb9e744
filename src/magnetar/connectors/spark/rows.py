"""Entries and messages to the connector's rows, as Arrow record batches (pure; no pyspark).

Row schema (``SCHEMA_DDL``): ``key`` (binary: the partition key's UTF-8 bytes, or its base64
decoding when the producer set ``partition_key_b64_encoded``), ``value`` (binary), ``topic``,
``partition`` (-1 for a non-partitioned topic), ``messageId`` (ledger, entry, batchIndex; -1 for
a message that is not in a batch), ``publishTime``, ``eventTime`` (null when unset), ``properties``,
``producerName``, ``sequenceId`` (a batch member's own, or the entry's plus its index),
``redeliveryCount`` (0 when read from bookies: nothing was redelivered). With ``valueSchema``
(``"name TYPE, ..."``) each value is decoded as a JSON object and the named fields follow as
columns (null when the value is not JSON or lacks the field).
"""

from __future__ import annotations

import base64
import functools
import io
import json
import re
import struct
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import fastavro
import numpy as np
import pyarrow as pa
from google.protobuf.message import DecodeError

from magnetar.base.errors import InvalidArgumentError, LimitExceededError
from magnetar.base.invariant import invariant
from magnetar.protocol.pulsar.batch import NONE, decompress, is_batch
from magnetar.protocol.pulsar.errors import MalformedFrameError
from magnetar.protocol.pulsar.generated import pulsar_api_pb2 as pb
from magnetar.protocol.pulsar.stored import split_stored_entry

#: Arrow ``binary`` offsets are 32-bit: one record batch's values stay below 2 GiB (batches are
#: cut at ``SPARK_ARROW_BATCH_BYTES_MAX``, far below, plus at most one entry).
ARROW_BINARY_BYTES_MAX = 2**31 - 1

SCHEMA_DDL = (
    "key BINARY, value BINARY, topic STRING, partition INT, "
    "messageId STRUCT<ledger: BIGINT, entry: BIGINT, batchIndex: INT>, publishTime TIMESTAMP, "
    "eventTime TIMESTAMP, properties MAP<STRING, STRING>, producerName STRING, sequenceId BIGINT, "
    "redeliveryCount INT"
)

_TIMESTAMP = pa.timestamp("us", tz="UTC")
MESSAGE_ID_TYPE = pa.struct([("ledger", pa.int64()), ("entry", pa.int64()), ("batchIndex", pa.int32())])
ARROW_FIELDS = [
    pa.field("key", pa.binary()),
    pa.field("value", pa.binary()),
    pa.field("topic", pa.string()),
    pa.field("partition", pa.int32()),
    pa.field("messageId", MESSAGE_ID_TYPE),
    pa.field("publishTime", _TIMESTAMP),
    pa.field("eventTime", _TIMESTAMP),
    pa.field("properties", pa.map_(pa.string(), pa.string())),
    pa.field("producerName", pa.string()),
    pa.field("sequenceId", pa.int64()),
    pa.field("redeliveryCount", pa.int32()),
]

#: valueSchema types: DDL name -> (Arrow type, Python converter of a JSON value).
_VALUE_TYPES: dict[str, tuple[pa.DataType, Any]] = {
    "STRING": (pa.string(), str),
    "INT": (pa.int32(), int),
    "INTEGER": (pa.int32(), int),
    "BIGINT": (pa.int64(), int),
    "LONG": (pa.int64(), int),
    "DOUBLE": (pa.float64(), float),
    "FLOAT": (pa.float32(), float),
    "BOOLEAN": (pa.bool_(), bool),
}
_FIELD = re.compile(r"^\s*`?([A-Za-z_][A-Za-z0-9_]*)`?\s+([A-Za-z]+)\s*$")


@dataclass(frozen=True)
class ValueField:
    name: str
    ddl_type: str


def parse_value_schema(ddl: str | None) -> tuple[ValueField, ...]:
    """``"a INT, b STRING"`` -> fields; types from ``_VALUE_TYPES``; names must not shadow a column."""
    if not ddl:
        return ()
    fields = []
    taken = {f.name.lower() for f in ARROW_FIELDS}
    for part in ddl.split(","):
        match = _FIELD.match(part)
        if not match or match.group(2).upper() not in _VALUE_TYPES:
            raise InvalidArgumentError(
                f"valueSchema field {part.strip()!r}: expected 'name TYPE' with TYPE one of {', '.join(_VALUE_TYPES)}"
            )
        name = match.group(1)
        if name.lower() in taken:
            raise InvalidArgumentError(f"valueSchema field {name!r} clashes with a connector column")
        taken.add(name.lower())
        fields.append(ValueField(name, match.group(2).upper()))
    return tuple(fields)


def schema_ddl(fields: tuple[ValueField, ...]) -> str:
    return SCHEMA_DDL + "".join(f", `{f.name}` {f.ddl_type}" for f in fields)


def arrow_schema(fields: tuple[ValueField, ...]) -> pa.Schema:
    return pa.schema(ARROW_FIELDS + [pa.field(f.name, _VALUE_TYPES[f.ddl_type][0]) for f in fields])


def _varint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


@functools.lru_cache(maxsize=64)
def _uniform_shape(first: int, payload_size: int) -> tuple[np.ndarray, np.ndarray, int, np.ndarray, int] | None:
    """For messages whose metadata is ``first`` bytes and payload ``payload_size``: the mask and
    the expected bytes of every message's first ``4 + first`` bytes (its size field, the
    ``payload_size`` field, the ``sequence_id`` tag exact; of the sequence id's varint only the
    continuation bits: set on all but its last byte), where the varint starts, the weight of each
    varint byte and what the continuation bits add to the weighted sum (subtracted once).
    ``None`` when the varint would not be 1 to 9 bytes."""
    prefix = struct.pack(">I", first) + b"\x18" + _varint(payload_size) + b"\x40"  # 0x40: sequence_id's tag
    width = 4 + first - len(prefix)  # bytes of the sequence id's varint
    if not 1 <= width <= 9:  # 9 varint bytes hold 63 bits: the value fits an int64
        return None
    mask = np.frombuffer(b"\xff" * len(prefix) + b"\x80" * width, np.uint8)
    expected = np.frombuffer(prefix + b"\x80" * (width - 1) + b"\x00", np.uint8)
    weights = np.left_shift(np.int64(1), 7 * np.arange(width, dtype=np.int64))
    continuation = sum(0x80 << (7 * k) for k in range(width - 1))
    return mask, expected, len(prefix), weights, continuation


def _uniform_batch(view: memoryview, count: int) -> tuple[int, np.ndarray, np.ndarray] | None:
    """``(payload_size, sequence ids, values)`` of a batch whose messages are all laid out
    alike — every single-message metadata exactly ``payload_size`` then ``sequence_id`` (the
    official clients' shape), one payload size, sequence ids of one varint width — checked for
    every message at once with numpy; ``None`` when any message differs (the caller then walks
    the batch message by message). Under these checks each metadata parses, as protobuf, to
    exactly this payload size and sequence id, so both paths give the same rows. ``values`` is a
    view into ``view`` (one row of ``payload_size`` bytes per message). Few numpy calls: on ~126
    messages of 1 KiB each call's own cost is most of the time spent here."""
    total = len(view)
    if total < 6 or count < 1:
        return None
    first = _U32(view, 0)[0]
    if first < 4 or first > 25 or view[4] != 0x18:  # 0x18: payload_size's tag comes first
        return None
    stride, rest = divmod(total, count)
    payload_size = stride - 4 - first
    if payload_size < 0 or rest:
        return None
    shape = _uniform_shape(first, payload_size)
    if shape is None:
        return None
    mask, expected, varint_at, weights, continuation = shape
    rows = np.ndarray((count, stride), np.uint8, view)
    head = rows[:, : 4 + first]
    if ((head & mask) != expected).any():
        return None
    # each varint byte times its weight; its continuation bit (checked above) adds a known constant
    sequences = head[:, varint_at:] @ weights - continuation
    return payload_size, sequences, rows[:, 4 + first :]


#: Value bytes a builder's buffer starts with (it grows by doubling; ``value_capacity_bytes``
#: sizes it for a known batch cut).
VALUE_CAPACITY_BYTES_DEFAULT = 64 * 1024


class _Int64s:
    """A column of int64 built in row order from single values and whole numpy arrays."""

    __slots__ = ("_chunks", "_items")

    def __init__(self) -> None:
        self._chunks: list[np.ndarray] = []
        self._items: list[int] = []

    def append(self, value: int) -> None:
        self._items.append(value)

    def extend(self, values: np.ndarray) -> None:
        if self._items:
            self._chunks.append(np.array(self._items, np.int64))
            self._items = []
        self._chunks.append(values)

    def array(self) -> np.ndarray:
        if self._items:
            self._chunks.append(np.array(self._items, np.int64))
            self._items = []
        if len(self._chunks) == 1:
            return self._chunks[0]
        return np.concatenate(self._chunks) if self._chunks else np.zeros(0, np.int64)


class _Values:
    """The values of the rows being built, in row order: their bytes copied in as each entry is
    added (right after its digest check, while it is likely still in the CPU's caches; one copy
    per byte) into one numpy buffer that becomes the Arrow array's data, and their sizes (as runs
    of one size: a uniform batch is one run)."""

    __slots__ = ("_data", "_flat", "_run_counts", "_run_sizes", "end")

    def __init__(self, capacity_bytes: int) -> None:
        self._data = np.empty(max(1, capacity_bytes), np.uint8)
        self._flat = self._data.data  # a writable 1-D byte view of the buffer
        self.end = 0
        self._run_sizes: list[int] = []
        self._run_counts: list[int] = []

    def _room(self, size: int) -> int:
        start = self.end
        if start + size > len(self._data):
            grown = np.empty(max(2 * len(self._data), start + size), np.uint8)
            grown[:start] = self._data[:start]
            self._data, self._flat = grown, grown.data
        self.end = start + size
        return start

    def add(self, value: bytes | memoryview) -> None:
        size = len(value)
        start = self._room(size)
        self._flat[start : start + size] = value
        self._run_sizes.append(size)
        self._run_counts.append(1)

    def add_rows(self, values: np.ndarray) -> None:
        """A uniform batch's values: a 2-D view, one row per message."""
        count, size = values.shape
        start = self._room(count * size)
        self._data[start : self.end].reshape(count, size)[...] = values
        self._run_sizes.append(size)
        self._run_counts.append(count)

    def array(self, rows: int) -> pa.Array:
        """The Arrow binary array of the values added (it owns the buffer from then on)."""
        sizes = np.repeat(np.array(self._run_sizes, np.int64), np.array(self._run_counts, np.int64))
        invariant(len(sizes) == rows, f"{len(sizes)} value sizes for {rows} rows")
        offsets = np.zeros(rows + 1, np.int64)
        np.cumsum(sizes, out=offsets[1:])
        invariant(int(offsets[-1]) == self.end, f"value sizes add up to {int(offsets[-1])} bytes, {self.end} were copied")
        if self.end > ARROW_BINARY_BYTES_MAX:
            raise LimitExceededError("ARROW_BINARY_BYTES_MAX", self.end, ARROW_BINARY_BYTES_MAX)
        return pa.Array.from_buffers(pa.binary(), rows, [None, pa.py_buffer(offsets.astype(np.int32)),
                                                         pa.py_buffer(self._data[: self.end])])


def _sparse_binary(n: int, pairs: list[tuple[int, bytes]]) -> pa.Array:
    if not pairs:
        return pa.nulls(n, pa.binary())
    column: list[bytes | None] = [None] * n
    for row, value in pairs:
        column[row] = value
    return pa.array(column, pa.binary())


def _sparse_timestamps(n: int, pairs: list[tuple[int, int]]) -> pa.Array:
    """Milliseconds at some rows, null elsewhere, as microsecond timestamps."""
    if not pairs:
        return pa.nulls(n, _TIMESTAMP)
    column: list[int | None] = [None] * n
    for row, ms in pairs:
        column[row] = ms * 1000
    return pa.array(column, _TIMESTAMP)


def _map_column(n: int, rows: list[int], keys: list[str], values: list[str]) -> pa.MapArray:
    """A ``map<string, string>`` column of ``n`` rows from (row, key, value) triples in row order."""
    counts = np.bincount(np.array(rows, np.int64), minlength=n) if rows else np.zeros(n, np.int64)
    offsets = np.zeros(n + 1, np.int32)
    np.cumsum(counts, out=offsets[1:])
    return pa.MapArray.from_arrays(pa.array(offsets), pa.array(keys, pa.string()), pa.array(values, pa.string()))


class AvroValues:
    """Decodes Avro record values with the writer schema of the version their entry names (the
    newest registered one when the entry names none or an unknown one); a value that does not
    decode, or is not a record, gives ``None`` (its columns are null)."""

    def __init__(self, schemas: Mapping[int, str]) -> None:
        self.schemas = {version: fastavro.parse_schema(json.loads(text)) for version, text in schemas.items()}
        self.newest = max(self.schemas) if self.schemas else None

    def decode(self, value: bytes | None, version: int) -> dict[str, Any] | None:
        schema = self.schemas.get(version)
        if schema is None and self.newest is not None:
            schema = self.schemas[self.newest]
        if value is None or schema is None:
            return None
        try:
            record = fastavro.schemaless_reader(io.BytesIO(value), schema, None)
        except Exception:  # fastavro raises many types on bytes that are not this schema's
            return None
        return record if isinstance(record, dict) else None


def _key_bytes(key: str, b64: bool) -> bytes:
    if b64:
        try:
            return base64.b64decode(key)
        except ValueError:
            return key.encode()
    return key.encode()


_U32 = struct.Struct(">I").unpack_from
_SINGLE = pb.SingleMessageMetadata
_S = {f.name: f for f in pb.SingleMessageMetadata.DESCRIPTOR.fields}
_SEQUENCE, _PAYLOAD = _S["sequence_id"], _S["payload_size"]
_PROPERTIES, _KEY, _PAYLOAD_SIZE = _S["properties"].number, _S["partition_key"].number, _S["payload_size"].number
_EVENT_TIME, _KEY_B64, _SEQUENCE_NO = _S["event_time"].number, _S["partition_key_b64_encoded"].number, _SEQUENCE.number


#: Row counts whose constant columns a builder keeps (``RowBuilder._same_columns``).
SAME_COLUMNS_KEPT_COUNT_MAX = 4


@dataclass(frozen=True)
class _SameColumns:
    """Columns of a batch that depend only on its row count, when no row has a key, an event time
    or properties and none was redelivered (the usual case): Arrow arrays are immutable, so one
    copy serves every batch of that size."""

    no_keys: pa.Array
    topic: pa.Array
    partition: pa.Array
    no_event_times: pa.Array
    no_properties: pa.Array
    no_redeliveries: pa.Array


class RowBuilder:
    """Accumulates rows of one topic partition; ``take()`` yields them as one record batch.

    Columns are gathered in their cheapest form: per entry (ledger, entry, publish time, producer,
    schema version, how many rows) and per message only what varies (its value and sequence id;
    a whole uniform batch's as numpy arrays); the values' bytes are copied once, as the entry is
    added, into the buffer of the Arrow array to be (``_Values``); keys, event times and
    properties are recorded sparsely, as (row, value), so a batch without them costs nothing
    there. ``take`` expands the rest with numpy/Arrow: per-entry columns are repeated, and a
    message's ``batchIndex`` is its row number minus its entry's first row.
    ``value_capacity_bytes``: what the values' buffer starts with (the batch cut, when known).
    """

    def __init__(self, topic: str, partition: int, value_fields: tuple[ValueField, ...] = (),
                 avro_schemas: Mapping[int, str] | None = None, *,
                 value_capacity_bytes: int = VALUE_CAPACITY_BYTES_DEFAULT) -> None:
        self.topic = topic
        self.partition = partition
        self.value_fields = value_fields
        self.avro = AvroValues(avro_schemas) if avro_schemas is not None else None
        self._schema = arrow_schema(value_fields)
        self._value_capacity_bytes = value_capacity_bytes
        self._same: dict[int, _SameColumns] = {}
        self._reset()

    def _reset(self) -> None:
        # per entry (a broker message counts as an entry of one row)
        self.e_ledger: list[int] = []
        self.e_entry: list[int] = []
        self.e_rows: list[int] = []
        self.e_first_index: list[int] = []  # batchIndex of the entry's first row (-1: not a batch)
        self.e_publish_ms: list[int] = []
        self.e_producer: list[str] = []
        self.e_redelivery: list[int] = []
        self.e_schema_version: list[int] = []  # -1: the entry names none
        # per row
        self.rows = 0
        self.values = _Values(self._value_capacity_bytes)
        self.sequences = _Int64s()
        # sparse, (row, value) in row order
        self.keys: list[tuple[int, bytes]] = []
        self.events: list[tuple[int, int]] = []
        self.prop_rows: list[int] = []
        self.prop_keys: list[str] = []
        self.prop_values: list[str] = []

    def __len__(self) -> int:
        return self.rows

    @property
    def value_bytes(self) -> int:
        return self.values.end

    def _entry(self, ledger_id: int, entry_id: int, rows: int, first_index: int, publish_ms: int,
               producer: str, redelivery: int = 0, schema_version: bytes = b"") -> None:
        self.e_ledger.append(ledger_id)
        self.e_entry.append(entry_id)
        self.e_rows.append(rows)
        self.e_first_index.append(first_index)
        self.e_publish_ms.append(publish_ms)
        self.e_producer.append(producer)
        self.e_redelivery.append(redelivery)
        self.e_schema_version.append(int.from_bytes(schema_version, "big") if len(schema_version) == 8 else -1)

    def add_entry(self, ledger_id: int, entry_id: int, stored: bytes | memoryview) -> int:
        """Every message of one stored entry; returns how many rows were added. Raises
        ``MalformedFrameError`` for an entry that is not a valid (batch) message."""
        metadata, payload = split_stored_entry(stored)
        codec = metadata.compression
        data = payload if codec == NONE else decompress(codec, payload, metadata.uncompressed_size)
        row = self.rows
        if not is_batch(metadata):
            self._entry(ledger_id, entry_id, 1, -1, metadata.publish_time, metadata.producer_name,
                        schema_version=metadata.schema_version)
            self.values.add(data)
            self.rows += 1
            self.sequences.append(metadata.sequence_id)
            if metadata.HasField("partition_key"):
                self.keys.append((row, _key_bytes(metadata.partition_key, metadata.partition_key_b64_encoded)))
            if metadata.event_time:
                self.events.append((row, metadata.event_time))
            for p in metadata.properties:
                self.prop_rows.append(row)
                self.prop_keys.append(p.key)
                self.prop_values.append(p.value)
            return 1
        count = metadata.num_messages_in_batch
        self._entry(ledger_id, entry_id, count, 0, metadata.publish_time, metadata.producer_name,
                    schema_version=metadata.schema_version)
        self._add_batch(data, count, row, metadata.sequence_id)
        return count

    def _add_batch(self, data: bytes | memoryview, count: int, row: int, base_sequence: int) -> None:
        """The messages of an uncompressed batch payload (``batch.decode_batch``'s format, walked
        without building per-message objects beyond the parsed metadata)."""
        view = memoryview(data)
        total = len(view)
        if count > total:  # every message takes at least its 4-byte size field
            raise MalformedFrameError(f"batch of {count} messages cannot fit in {total} bytes")
        values, sequences = self.values, self.sequences
        uniform = _uniform_batch(view, count)
        if uniform is not None:
            _, batch_sequences, batch_values = uniform
            values.add_rows(batch_values)
            sequences.extend(batch_sequences)
            self.rows += count
            return
        parse = _SINGLE.FromString
        offset = 0
        try:
            for index in range(count):
                size = _U32(view, offset)[0]
                offset += 4
                fields = parse(view[offset : offset + size]).ListFields()
                offset += size
                if len(fields) == 2 and fields[0][0] is _PAYLOAD and fields[1][0] is _SEQUENCE:  # the usual shape
                    payload_size = fields[0][1]
                    sequences.append(fields[1][1])
                else:
                    payload_size = self._sparse_fields(fields, row + index, base_sequence + index)
                end = offset + payload_size
                if end > total:
                    raise MalformedFrameError(f"payload_size {payload_size} of message {index} exceeds the batch")
                values.add(view[offset:end])
                offset = end
        except (struct.error, DecodeError) as error:
            raise MalformedFrameError(f"malformed batch entry: {error}") from error
        if offset != total:
            raise MalformedFrameError(f"batch has {total - offset} trailing bytes after {count} messages")
        self.rows += count

    def _sparse_fields(self, fields: list[tuple[Any, Any]], row: int, default_sequence: int) -> int:
        """Records a message's keys, event time, properties and sequence id; returns payload_size."""
        payload_size = -1
        sequence = default_sequence
        key: str | None = None
        b64 = False
        for descriptor, value in fields:
            number = descriptor.number
            if number == _PAYLOAD_SIZE:
                payload_size = value
            elif number == _SEQUENCE_NO:
                sequence = value
            elif number == _KEY:
                key = value
            elif number == _KEY_B64:
                b64 = value
            elif number == _EVENT_TIME:
                if value:
                    self.events.append((row, value))
            elif number == _PROPERTIES:
                for p in value:
                    self.prop_rows.append(row)
                    self.prop_keys.append(p.key)
                    self.prop_values.append(p.value)
        if payload_size < 0:
            raise MalformedFrameError(f"message {row} of a batch has no payload_size")
        if key is not None:
            self.keys.append((row, _key_bytes(key, b64)))
        self.sequences.append(sequence)
        return payload_size

    def add_message(self, message: Any) -> None:
        """One message received through the broker (a ``magnetar.client.Message``)."""
        mid = message.message_id
        row = self.rows
        self._entry(mid.ledger_id, mid.entry_id, 1, mid.batch_index, message.publish_time_ms,
                    message.producer_name, message.redelivery_count)
        self.values.add(message.payload)
        self.rows += 1
        self.sequences.append(message.sequence_id)
        if message.key is not None:
            self.keys.append((row, message.key.encode()))
        if message.event_time_ms:
            self.events.append((row, message.event_time_ms))
        for key, value in message.properties.items():
            self.prop_rows.append(row)
            self.prop_keys.append(key)
            self.prop_values.append(value)

    def take(self) -> pa.RecordBatch:
        """The rows gathered so far as one record batch (the builder starts over)."""
        n = self.rows
        rows = np.array(self.e_rows, np.int64)
        entry_of_row = np.repeat(np.arange(len(rows)), rows)
        first_rows = np.cumsum(rows) - rows
        batch_index = (np.repeat(np.array(self.e_first_index, np.int64) - first_rows, rows)
                       + np.arange(n)).astype(np.int32)
        message_id = pa.StructArray.from_arrays(
            [pa.array(np.repeat(np.array(self.e_ledger, np.int64), rows)),
             pa.array(np.repeat(np.array(self.e_entry, np.int64), rows)),
             pa.array(batch_index)],
            fields=list(MESSAGE_ID_TYPE),
        )
        publish_us = np.repeat(np.array(self.e_publish_ms, np.int64) * 1000, rows)
        values = self.values.array(n)
        same = self._same_columns(n)
        columns = [
            _sparse_binary(n, self.keys) if self.keys else same.no_keys,
            values,
            same.topic,
            same.partition,
            message_id,
            pa.array(publish_us, _TIMESTAMP),
            _sparse_timestamps(n, self.events) if self.events else same.no_event_times,
            _map_column(n, self.prop_rows, self.prop_keys, self.prop_values) if self.prop_rows else same.no_properties,
            pa.array(self.e_producer, pa.string()).take(pa.array(entry_of_row)),
            pa.array(self.sequences.array(), pa.int64()),
            pa.array(np.repeat(np.array(self.e_redelivery, np.int32), rows)) if any(self.e_redelivery)
            else same.no_redeliveries,
        ]
        if self.value_fields:
            columns.extend(self._value_columns(values, rows))
        self._reset()
        return pa.RecordBatch.from_arrays(columns, schema=self._schema)

    def _same_columns(self, n: int) -> _SameColumns:
        """The columns that are the same for every batch of ``n`` rows of this partition (kept for
        the last few ``n``: batches cut at a byte size mostly have one row count)."""
        same = self._same.get(n)
        if same is None:
            if len(self._same) >= SAME_COLUMNS_KEPT_COUNT_MAX:
                self._same.clear()
            same = self._same[n] = _SameColumns(
                no_keys=pa.nulls(n, pa.binary()),
                topic=pa.repeat(pa.scalar(self.topic, pa.string()), n),
                partition=pa.repeat(pa.scalar(self.partition, pa.int32()), n),
                no_event_times=pa.nulls(n, _TIMESTAMP),
                no_properties=_map_column(n, [], [], []),
                no_redeliveries=pa.array(np.zeros(n, np.int32)),
            )
        return same

    def _value_columns(self, values: pa.Array, rows: np.ndarray) -> list[pa.Array]:
        versions = np.repeat(np.array(self.e_schema_version, np.int64), rows) if self.avro is not None else None
        return decode_value_columns(values, self.value_fields, self.avro, versions)


def value_arrow_type(field: ValueField) -> pa.DataType:
    """The Arrow type of a ``valueSchema`` field's column."""
    arrow_type: pa.DataType = _VALUE_TYPES[field.ddl_type][0]
    return arrow_type


def decode_value_columns(values: pa.Array, fields: tuple[ValueField, ...], avro: AvroValues | None,
                         versions: np.ndarray | None) -> list[pa.Array]:
    """The ``valueSchema`` columns of ``values``: each value decoded as a JSON object, or with
    ``avro`` (the writer schema of its row's schema version in ``versions``); a field that is
    missing or does not convert gives null."""
    decoded: list[dict[str, Any] | None] = []
    if avro is not None:
        invariant(versions is not None, "Avro values need their rows' schema versions")
        assert versions is not None
        decoded = [avro.decode(value, version)
                   for value, version in zip(values.to_pylist(), versions.tolist(), strict=True)]
    else:
        for value in values.to_pylist():
            try:
                obj = json.loads(value)
            except ValueError:
                obj = None
            decoded.append(obj if isinstance(obj, dict) else None)
    out = []
    for field in fields:
        arrow_type, convert = _VALUE_TYPES[field.ddl_type]
        column = []
        for obj in decoded:
            raw = None if obj is None else obj.get(field.name)
            try:
                column.append(None if raw is None else convert(raw))
            except (TypeError, ValueError):
                column.append(None)
        out.append(pa.array(column, arrow_type))
    return out
