"""Stored entries of a ledger to the rows of its Parquet file: one row per message, batches unpacked.

Columns (the Spark connector's row columns, so a union with the live tail lines up, minus
``redeliveryCount``; then two of the lakehouse's own; then the schema's fields):

``key`` binary (the partition key's bytes), ``value`` binary, ``topic``, ``partition`` (-1: not
partitioned), ``messageId`` struct<ledger, entry, batchIndex (-1: not in a batch)>,
``publishTime``, ``eventTime`` (null when unset), ``properties`` map, ``producerName``,
``sequenceId``, ``schemaVersion`` (-1: the entry names none), ``entry`` binary and
``entrySpliced`` bool, on the entry's first row (null on the others): what brokers replay the
stored entry from, byte for byte. ``entrySpliced`` false: ``entry`` is the stored entry as the
bookies held it (compressed, encrypted or undecodable entries). True (an uncompressed entry, the
usual case): ``entry`` is the stored entry with the message payloads cut out — its header and
metadata, then per batch member its ``[size][SingleMessageMetadata]`` — and the payloads are the
``value`` of the entry's rows, spliced back in order (``splice``), so a payload is stored once.
Analysts use the per-message columns.

With a registered Avro or JSON schema each of its record's fields becomes a typed column (a name
already taken above gets the prefix ``value_``); a value that does not decode gives nulls there.
An entry that cannot be split into messages (encrypted, or malformed) becomes one row whose value
is its raw payload, so an offload never fails on content.
"""

from __future__ import annotations

import base64
import io
import json
import struct
from typing import Any

import fastavro
import pyarrow as pa

from magnetar.managed_ledger.offload import OffloadSchema
from magnetar.protocol.pulsar.batch import NONE, SingleMessage, decode_entry, is_batch
from magnetar.protocol.pulsar.stored import split_stored_entry

_U32 = struct.Struct(">I")

TIMESTAMP = pa.timestamp("us", tz="UTC")
MESSAGE_ID = pa.struct([("ledger", pa.int64()), ("entry", pa.int64()), ("batchIndex", pa.int32())])
BASE_FIELDS = [
    pa.field("key", pa.binary()),
    pa.field("value", pa.binary()),
    pa.field("topic", pa.string()),
    pa.field("partition", pa.int32()),
    pa.field("messageId", MESSAGE_ID),
    pa.field("publishTime", TIMESTAMP),
    pa.field("eventTime", TIMESTAMP),
    pa.field("properties", pa.map_(pa.string(), pa.string())),
    pa.field("producerName", pa.string()),
    pa.field("sequenceId", pa.int64()),
    pa.field("schemaVersion", pa.int64()),
    pa.field("entry", pa.binary()),
    pa.field("entrySpliced", pa.bool_()),
]
_TAKEN = {f.name for f in BASE_FIELDS}

_AVRO_TYPES: dict[str, pa.DataType] = {
    "string": pa.string(), "int": pa.int32(), "long": pa.int64(), "float": pa.float32(),
    "double": pa.float64(), "boolean": pa.bool_(), "bytes": pa.binary(),
}


def _column_type(avro_type: Any) -> tuple[pa.DataType, bool]:
    """(Arrow type, whether the value is kept as JSON text) of one Avro field type."""
    if isinstance(avro_type, list):  # a union: ["null", T] is a nullable T
        others = [t for t in avro_type if t != "null"]
        return _column_type(others[0]) if len(others) == 1 else (pa.string(), True)
    if isinstance(avro_type, dict):
        logical = avro_type.get("type")
        if isinstance(logical, str) and logical in _AVRO_TYPES:
            return _AVRO_TYPES[logical], False
        return pa.string(), True
    if isinstance(avro_type, str) and avro_type in _AVRO_TYPES:
        return _AVRO_TYPES[avro_type], False
    return pa.string(), True


class ValueColumns:
    """The typed columns of a topic's Avro/JSON schema and how values decode into them."""

    def __init__(self, schema: OffloadSchema) -> None:
        definition = json.loads(schema.definition)
        if not isinstance(definition, dict) or definition.get("type") != "record":
            raise ValueError("the schema is not an Avro record")
        self.kind = schema.kind
        self.parsed = fastavro.parse_schema(definition) if schema.kind == "AVRO" else None
        self.names: list[str] = []
        self.columns: list[str] = []
        self.types: list[pa.DataType] = []
        self.as_json: list[bool] = []
        for field in definition.get("fields", []):
            arrow_type, as_json = _column_type(field.get("type"))
            name = field["name"]
            self.names.append(name)
            self.columns.append(f"value_{name}" if name in _TAKEN else name)
            self.types.append(arrow_type)
            self.as_json.append(as_json)

    def decode(self, value: bytes) -> dict[str, Any] | None:
        try:
            if self.parsed is not None:
                record = fastavro.schemaless_reader(io.BytesIO(value), self.parsed, None)
            else:
                record = json.loads(value)
        except Exception:  # fastavro and json raise many types on bytes of another shape
            return None
        return record if isinstance(record, dict) else None

    def fields(self) -> list[pa.Field]:
        return [pa.field(c, t) for c, t in zip(self.columns, self.types, strict=True)]

    def arrays(self, values: list[bytes]) -> list[pa.Array]:
        records = [self.decode(v) for v in values]
        out = []
        for name, arrow_type, as_json in zip(self.names, self.types, self.as_json, strict=True):
            column: list[Any] = []
            for record in records:
                raw = None if record is None else record.get(name)
                if raw is not None and as_json:
                    raw = json.dumps(raw, default=str)
                column.append(raw)
            try:
                out.append(pa.array(column, arrow_type))
            except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):
                out.append(pa.nulls(len(column), arrow_type))
        return out


def value_columns(schema: OffloadSchema | None) -> ValueColumns | None:
    if schema is None or schema.kind not in ("AVRO", "JSON"):
        return None
    try:
        return ValueColumns(schema)
    except (ValueError, KeyError, TypeError, fastavro.schema.SchemaParseException):
        return None


def arrow_schema(values: ValueColumns | None) -> pa.Schema:
    return pa.schema(BASE_FIELDS + (values.fields() if values is not None else []))


def _key(metadata: Any) -> bytes | None:
    if not metadata.HasField("partition_key"):
        return None
    key: str = metadata.partition_key
    if metadata.partition_key_b64_encoded:
        try:
            return base64.b64decode(key)
        except ValueError:
            return key.encode()
    return key.encode()


class LedgerRows:
    """Rows of one ledger, gathered entry by entry; ``take()`` gives them as an Arrow table."""

    def __init__(self, topic: str, partition: int, values: ValueColumns | None) -> None:
        self.topic = topic
        self.partition = partition
        self.values = values
        self.schema = arrow_schema(values)
        self._reset()

    def _reset(self) -> None:
        self.columns: dict[str, list[Any]] = {f.name: [] for f in BASE_FIELDS}
        self.stored_bytes = 0

    def __len__(self) -> int:
        return len(self.columns["value"])

    def add(self, ledger_id: int, entry_id: int, stored: bytes) -> None:
        self.stored_bytes += len(stored)
        try:
            metadata, payload = split_stored_entry(stored)
        except Exception:  # not a Pulsar entry at all: keep it whole, replay still works
            self._row(None, ledger_id, entry_id, -1, 0, None, {}, "", -1, -1, bytes(stored), stored)
            return
        version = int.from_bytes(metadata.schema_version, "big") if len(metadata.schema_version) == 8 else -1
        try:
            messages = [] if metadata.encryption_keys else decode_entry(metadata, payload)
        except Exception:  # a codec or batch error: the content stays readable as the raw payload
            messages = []
        if not messages:
            self._row(_key(metadata), ledger_id, entry_id, -1, metadata.publish_time, metadata.event_time or None,
                      {p.key: p.value for p in metadata.properties}, metadata.producer_name,
                      metadata.sequence_id, version, bytes(payload), stored)
            return
        batch = is_batch(metadata)
        skeleton = _skeleton(stored, payload, messages, batch) if metadata.compression == NONE else None
        for index, message in enumerate(messages):
            single = message.metadata
            source = single if single is not None else metadata
            event = source.event_time or None
            sequence = (single.sequence_id if single is not None and single.HasField("sequence_id")
                        else metadata.sequence_id + index)
            self._row(_key(source), ledger_id, entry_id, index if batch else -1, metadata.publish_time, event,
                      {p.key: p.value for p in source.properties}, metadata.producer_name, sequence, version,
                      message.payload, (stored if skeleton is None else skeleton) if index == 0 else None,
                      skeleton is not None)

    def _row(self, key: bytes | None, ledger_id: int, entry_id: int, batch_index: int, publish_ms: int,
             event_ms: int | None, properties: dict[str, str], producer: str, sequence: int, version: int,
             value: bytes, stored: bytes | None, spliced: bool = False) -> None:
        c = self.columns
        c["key"].append(key)
        c["value"].append(value)
        c["topic"].append(self.topic)
        c["partition"].append(self.partition)
        c["messageId"].append({"ledger": ledger_id, "entry": entry_id, "batchIndex": batch_index})
        c["publishTime"].append(publish_ms * 1000)
        c["eventTime"].append(None if event_ms is None else event_ms * 1000)
        c["properties"].append(list(properties.items()))
        c["producerName"].append(producer)
        c["sequenceId"].append(sequence)
        c["schemaVersion"].append(version)
        c["entry"].append(None if stored is None else bytes(stored))
        c["entrySpliced"].append(None if stored is None else spliced)

    def take(self) -> pa.Table:
        arrays = [pa.array(self.columns[f.name], f.type) for f in BASE_FIELDS]
        if self.values is not None:
            arrays.extend(self.values.arrays(self.columns["value"]))
        self._reset()
        return pa.Table.from_arrays(arrays, schema=self.schema)


def _skeleton(stored: bytes, payload: memoryview, messages: list[SingleMessage], batch: bool) -> bytes:
    """``stored`` without its message payloads (see the module docstring)."""
    header = bytes(stored[: len(stored) - len(payload)])
    if not batch:
        return header
    pieces = [header]
    offset = 0
    for message in messages:
        (size,) = _U32.unpack_from(payload, offset)
        pieces.append(bytes(payload[offset: offset + 4 + size]))
        offset += 4 + size + len(message.payload)
    return b"".join(pieces)


def splice(skeleton: bytes, values: list[bytes]) -> bytes:
    """The stored entry from its skeleton and its messages' payloads (inverse of ``_skeleton``)."""
    metadata, rest = split_stored_entry(skeleton)
    header = skeleton[: len(skeleton) - len(rest)]
    if not is_batch(metadata):
        return header + values[0]
    pieces = [header]
    offset = 0
    for value in values:
        (size,) = _U32.unpack_from(rest, offset)
        pieces.append(bytes(rest[offset: offset + 4 + size]))
        pieces.append(value)
        offset += 4 + size
    return b"".join(pieces)


COLUMNS_FOR_REPLAY = ["messageId", "entry", "entrySpliced", "value"]


def entries_of(table: pa.Table) -> list[tuple[int, bytes]]:
    """(entry id, stored entry) of every entry in ``table`` (``COLUMNS_FOR_REPLAY`` at least), in order."""
    ids = table.column("messageId").combine_chunks().field("entry").to_pylist()
    stored = table.column("entry").to_pylist()
    spliced = table.column("entrySpliced").to_pylist()
    values = table.column("value").to_pylist()
    out: list[tuple[int, bytes]] = []
    index = 0
    while index < len(ids):
        entry_id, data, splice_it = ids[index], stored[index], spliced[index]
        end = index + 1
        while end < len(ids) and ids[end] == entry_id:
            end += 1
        if data is not None:
            out.append((entry_id, splice(data, values[index:end]) if splice_it else data))
        index = end
    return out


__all__ = ["BASE_FIELDS", "COLUMNS_FOR_REPLAY", "LedgerRows", "ValueColumns", "arrow_schema", "entries_of", "splice",
           "value_columns"]
