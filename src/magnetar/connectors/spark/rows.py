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
import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from magnetar.base.errors import InvalidArgument
from magnetar.protocol.pulsar.batch import decode_entry, is_batch
from magnetar.protocol.pulsar.stored import split_stored_entry

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
            raise InvalidArgument(
                f"valueSchema field {part.strip()!r}: expected 'name TYPE' with TYPE one of {', '.join(_VALUE_TYPES)}"
            )
        name = match.group(1)
        if name.lower() in taken:
            raise InvalidArgument(f"valueSchema field {name!r} clashes with a connector column")
        taken.add(name.lower())
        fields.append(ValueField(name, match.group(2).upper()))
    return tuple(fields)


def schema_ddl(fields: tuple[ValueField, ...]) -> str:
    return SCHEMA_DDL + "".join(f", `{f.name}` {f.ddl_type}" for f in fields)


def arrow_schema(fields: tuple[ValueField, ...]) -> pa.Schema:
    return pa.schema(ARROW_FIELDS + [pa.field(f.name, _VALUE_TYPES[f.ddl_type][0]) for f in fields])


def _key_bytes(key: str | None, b64: bool) -> bytes | None:
    if key is None:
        return None
    if b64:
        try:
            return base64.b64decode(key)
        except ValueError:
            return key.encode()
    return key.encode()


class RowBuilder:
    """Accumulates rows of one topic partition column by column; ``take()`` yields a record batch."""

    def __init__(self, topic: str, partition: int, value_fields: tuple[ValueField, ...] = ()) -> None:
        self.topic = topic
        self.partition = partition
        self.value_fields = value_fields
        self._schema = arrow_schema(value_fields)
        self._reset()

    def _reset(self) -> None:
        self.keys: list[bytes | None] = []
        self.values: list[bytes] = []
        self.ledgers: list[int] = []
        self.entries: list[int] = []
        self.indexes: list[int] = []
        self.publish: list[int] = []
        self.event: list[int | None] = []
        self.prop_keys: list[str] = []
        self.prop_values: list[str] = []
        self.prop_offsets: list[int] = [0]
        self.producers: list[str] = []
        self.sequences: list[int] = []
        self.redeliveries: list[int] = []

    def __len__(self) -> int:
        return len(self.values)

    def add_entry(self, ledger_id: int, entry_id: int, stored: bytes | memoryview) -> int:
        """Every message of one stored entry; returns how many rows were added."""
        metadata, payload = split_stored_entry(stored)
        messages = decode_entry(metadata, payload)
        count = len(messages)
        publish_us = metadata.publish_time * 1000
        producer = metadata.producer_name
        self.ledgers.extend([ledger_id] * count)
        self.entries.extend([entry_id] * count)
        self.publish.extend([publish_us] * count)
        self.producers.extend([producer] * count)
        self.redeliveries.extend([0] * count)
        if not is_batch(metadata):
            message = messages[0]
            self.values.append(message.payload)
            self.indexes.append(-1)
            self.keys.append(
                _key_bytes(metadata.partition_key, metadata.partition_key_b64_encoded)
                if metadata.HasField("partition_key") else None
            )
            self.event.append(metadata.event_time * 1000 if metadata.event_time else None)
            self._add_properties([(p.key, p.value) for p in metadata.properties])
            self.sequences.append(metadata.sequence_id)
            return 1
        base_sequence = metadata.sequence_id
        for index, message in enumerate(messages):
            single = message.metadata
            assert single is not None
            self.values.append(message.payload)
            self.indexes.append(index)
            self.keys.append(
                _key_bytes(single.partition_key, single.partition_key_b64_encoded)
                if single.HasField("partition_key") else None
            )
            self.event.append(single.event_time * 1000 if single.event_time else None)
            if single.properties:
                for p in single.properties:
                    self.prop_keys.append(p.key)
                    self.prop_values.append(p.value)
            self.prop_offsets.append(len(self.prop_keys))
            self.sequences.append(single.sequence_id if single.HasField("sequence_id") else base_sequence + index)
        return count

    def _add_properties(self, pairs: Iterable[tuple[str, str]]) -> None:
        for key, value in pairs:
            self.prop_keys.append(key)
            self.prop_values.append(value)
        self.prop_offsets.append(len(self.prop_keys))

    def add_message(self, message: Any) -> None:
        """One message received through the broker (a ``magnetar.client.Message``)."""
        mid = message.message_id
        self.keys.append(message.key.encode() if message.key is not None else None)
        self.values.append(message.payload)
        self.ledgers.append(mid.ledger_id)
        self.entries.append(mid.entry_id)
        self.indexes.append(mid.batch_index)
        self.publish.append(message.publish_time_ms * 1000)
        self.event.append(message.event_time_ms * 1000 if message.event_time_ms else None)
        self._add_properties(message.properties.items())
        self.producers.append(message.producer_name)
        self.sequences.append(message.sequence_id)
        self.redeliveries.append(message.redelivery_count)

    def take(self) -> pa.RecordBatch:
        """The rows gathered so far as one record batch (the builder starts over)."""
        n = len(self.values)
        message_id = pa.StructArray.from_arrays(
            [pa.array(self.ledgers, pa.int64()), pa.array(self.entries, pa.int64()),
             pa.array(self.indexes, pa.int32())],
            fields=list(MESSAGE_ID_TYPE),
        )
        columns = [
            pa.array(self.keys, pa.binary()),
            pa.array(self.values, pa.binary()),
            pa.repeat(pa.scalar(self.topic, pa.string()), n),
            pa.repeat(pa.scalar(self.partition, pa.int32()), n),
            message_id,
            pa.array(self.publish, _TIMESTAMP),
            pa.array(self.event, _TIMESTAMP),
            pa.MapArray.from_arrays(pa.array(self.prop_offsets, pa.int32()), pa.array(self.prop_keys, pa.string()),
                                    pa.array(self.prop_values, pa.string())),
            pa.array(self.producers, pa.string()),
            pa.array(self.sequences, pa.int64()),
            pa.array(self.redeliveries, pa.int32()),
        ]
        if self.value_fields:
            columns.extend(self._value_columns())
        self._reset()
        return pa.RecordBatch.from_arrays(columns, schema=self._schema)

    def _value_columns(self) -> list[pa.Array]:
        decoded: list[dict[str, Any] | None] = []
        for value in self.values:
            try:
                obj = json.loads(value)
            except ValueError:
                obj = None
            decoded.append(obj if isinstance(obj, dict) else None)
        out = []
        for field in self.value_fields:
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
