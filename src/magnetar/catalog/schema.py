"""The schema registry: schema versions per topic, stored in the metadata store.

Layout (Pulsar's): ``/schemas/{tenant}/{namespace}/{topic}/{version:010d}``, one node per version,
each a ``SchemaRecord`` (type, name, definition bytes, properties). The partitions of a partitioned
topic share their base topic's schemas. A version is created with a create-if-absent put, so two
brokers registering at once cannot both get the same version: the loser reads again and matches
or checks against the winner. Without a metadata store (unit tests, in-memory brokers) versions
live in this object only.

What is true:
* Versions count from 0 and go on the wire as 8 big-endian bytes (Pulsar's LongSchemaVersion).
* ``register`` (a PRODUCER with a schema) returns the version of an identical definition if one
  exists, else checks the new one under the topic's namespace strategy (``schemaCompatibilityStrategy``;
  UNDEFINED: the broker's, FULL by default as in Pulsar; see ``schema_compat``) and adds it; an
  incompatible one raises a ``SchemaRefusedError`` with ``IncompatibleSchema``, which the official client
  reports as ``pulsar.IncompatibleSchema``.
* ``check_consumer`` (a SUBSCRIBE with a schema) registers it when the topic has none, accepts an
  identical one or one that reads what the latest wrote without adding a version, and refuses
  others (under ALWAYS_COMPATIBLE it accepts any).
* A schema of type None (BYTES: the client sends none at all) is never stored; producers without a
  schema are accepted on any topic (Pulsar's schemaValidationEnforced=false).
* At most ``SCHEMA_VERSIONS_PER_TOPIC_COUNT_MAX`` versions per topic and ``SCHEMA_DATA_BYTES_MAX``
  bytes per definition (``LimitExceededError`` beyond, reported as NotAllowedError).
"""

from __future__ import annotations

import struct
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from urllib.parse import quote

import msgspec

from magnetar.base.errors import BadVersionError, InvalidArgumentError, LimitExceededError, MagnetarError
from magnetar.base.limits import SCHEMA_DATA_BYTES_MAX, SCHEMA_VERSIONS_PER_TOPIC_COUNT_MAX
from magnetar.base.types import TopicName
from magnetar.catalog.schema_compat import (
    DEFAULT_COMPATIBILITY,
    Compatibility,
    IncompatibleSchemaError,
    check_backward,
    check_strategy,
)
from magnetar.metadata.api import MetadataStore
from magnetar.protocol.pulsar import pb

SCHEMAS_ROOT = "/schemas"
_VERSION = struct.Struct(">q")
#: Create-if-absent attempts one registration makes when other brokers keep winning the race.
REGISTER_ATTEMPTS_MAX = 8


class SchemaRefusedError(MagnetarError):
    """The registry refused a schema; ``code`` is the ``pb.ServerError`` value to report
    (``IncompatibleSchema``, ``NotAllowedError`` beyond a bound, ``ServiceNotReady`` under a race);
    the broker's ``to_broker_error`` turns it into a broker error with the same code."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class SchemaRecord(msgspec.Struct, frozen=True):
    type: int
    name: str
    data: bytes
    properties: dict[str, str] = msgspec.field(default_factory=dict)
    timestamp_ms: int = 0  # when this version was added (0: before versions carried it)

    def to_pb(self) -> pb.Schema:
        schema = pb.Schema(name=self.name, schema_data=self.data, type=self.type)  # type: ignore[arg-type]
        for key, value in sorted(self.properties.items()):
            schema.properties.add(key=key, value=value)
        return schema

    @classmethod
    def from_pb(cls, schema: pb.Schema) -> SchemaRecord:
        return cls(int(schema.type), schema.name, bytes(schema.schema_data),
                   {kv.key: kv.value for kv in schema.properties})

    def same_definition(self, other: SchemaRecord) -> bool:
        return self.type == other.type and self.data == other.data


def version_bytes(version: int) -> bytes:
    return _VERSION.pack(version)


def version_from_bytes(data: bytes) -> int:
    if len(data) != _VERSION.size:
        raise InvalidArgumentError(f"a schema version is {_VERSION.size} bytes, got {len(data)}")
    return int(_VERSION.unpack(data)[0])


def schema_path(topic: TopicName) -> str:
    base = topic.partitioned_topic_name
    return f"{SCHEMAS_ROOT}/{base.tenant}/{base.namespace_portion}/{quote(base.local_name, safe='')}"


@dataclass
class _Versions:
    records: list[SchemaRecord] = field(default_factory=list)


class SchemaRegistry:
    def __init__(self, metadata: MetadataStore | None, compatibility: Compatibility | None = None, *,
                 strategy_of: Callable[[TopicName], Awaitable[Compatibility]] | None = None,
                 now_ms: Callable[[], int] | None = None) -> None:
        """``compatibility`` fixes the strategy for every topic; else ``strategy_of(topic)`` says it
        (the namespace's policy), else ``DEFAULT_COMPATIBILITY``. ``now_ms`` stamps new versions."""
        self._metadata = metadata
        self._compatibility = compatibility
        self._strategy_of = strategy_of
        self._now_ms = now_ms
        self._local: dict[str, _Versions] = {}  # without a metadata store

    async def strategy(self, topic: TopicName) -> Compatibility:
        if self._compatibility is not None:
            return self._compatibility
        if self._strategy_of is not None:
            return await self._strategy_of(topic)
        return DEFAULT_COMPATIBILITY

    # --- reads ----------------------------------------------------------------------------------

    async def versions(self, topic: TopicName) -> list[SchemaRecord]:
        """Every version of ``topic``'s schema, oldest first (index = version)."""
        path = schema_path(topic)
        if self._metadata is None:
            return list(self._local.get(path, _Versions()).records)
        out = []
        for child in await self._metadata.children(path):
            found = await self._metadata.get(f"{path}/{child}")
            if found is not None:
                out.append(msgspec.json.decode(found.value, type=SchemaRecord))
        return out

    async def get(self, topic: TopicName, version: int | None = None) -> tuple[int, SchemaRecord] | None:
        """Version ``version`` (latest if None) of ``topic``'s schema, or None."""
        records = await self.versions(topic)
        if not records:
            return None
        index = len(records) - 1 if version is None else version
        if not 0 <= index < len(records):
            return None
        return index, records[index]

    # --- writes ---------------------------------------------------------------------------------

    async def register(self, topic: TopicName, schema: pb.Schema) -> int:
        """The version of ``schema`` for a producer: an identical one, or a new compatible one."""
        record = _checked(schema)
        if self._now_ms is not None:
            record = msgspec.structs.replace(record, timestamp_ms=self._now_ms())
        strategy = await self.strategy(topic)
        for _ in range(REGISTER_ATTEMPTS_MAX):
            records = await self.versions(topic)
            for version, existing in enumerate(records):
                if existing.same_definition(record):
                    return version
            self._check(strategy, record, records)
            if len(records) >= SCHEMA_VERSIONS_PER_TOPIC_COUNT_MAX:
                raise SchemaRefusedError(pb.NotAllowedError, str(LimitExceededError(
                    "SCHEMA_VERSIONS_PER_TOPIC_COUNT_MAX", len(records) + 1, SCHEMA_VERSIONS_PER_TOPIC_COUNT_MAX)))
            if await self._add(topic, len(records), record):
                return len(records)
        raise SchemaRefusedError(pb.ServiceNotReady, f"schema of {topic} keeps changing; try again")

    async def check_consumer(self, topic: TopicName, schema: pb.Schema) -> int | None:
        """Accept a subscriber's schema: registered if the topic has none; returns its version if stored."""
        record = _checked(schema)
        records = await self.versions(topic)
        if not records:
            return await self.register(topic, schema)
        for version, existing in enumerate(records):
            if existing.same_definition(record):
                return version
        if await self.strategy(topic) is not Compatibility.ALWAYS_COMPATIBLE:
            _translated(lambda: check_backward(record.to_pb(), records[-1].to_pb()))  # it must read the data
        return None

    async def delete(self, topic: TopicName) -> None:
        """Forget every version (the topic was deleted)."""
        path = schema_path(topic)
        if self._metadata is None:
            self._local.pop(path, None)
            return
        for child in await self._metadata.children(path):
            await self._metadata.delete(f"{path}/{child}")
        if await self._metadata.exists(path):
            await self._metadata.delete(path)

    def _check(self, strategy: Compatibility, new: SchemaRecord, records: list[SchemaRecord]) -> None:
        _translated(lambda: check_strategy(strategy, new.to_pb(), [r.to_pb() for r in records]))

    async def check_compatibility(self, topic: TopicName, schema: pb.Schema) -> None:
        """Raise ``SchemaRefusedError`` IncompatibleSchema unless ``schema`` could be added now."""
        record = _checked(schema)
        records = await self.versions(topic)
        if not any(existing.same_definition(record) for existing in records):
            self._check(await self.strategy(topic), record, records)

    async def _add(self, topic: TopicName, version: int, record: SchemaRecord) -> bool:
        """Store ``record`` as ``version``; False if another registration took that version first."""
        path = schema_path(topic)
        if self._metadata is None:
            versions = self._local.setdefault(path, _Versions())
            if len(versions.records) != version:
                return False
            versions.records.append(record)
            return True
        try:
            await self._metadata.put(f"{path}/{version:010d}", msgspec.json.encode(record), -1)
        except BadVersionError:
            return False
        return True


def _translated(check: Callable[[], None]) -> None:
    try:
        check()
    except IncompatibleSchemaError as error:
        raise SchemaRefusedError(pb.IncompatibleSchema, f"incompatible schema: {error}") from None
    except InvalidArgumentError as error:
        raise SchemaRefusedError(pb.IncompatibleSchema, f"invalid schema definition: {error}") from None


def _checked(schema: pb.Schema) -> SchemaRecord:
    if not carries_schema(schema):
        raise SchemaRefusedError(pb.IncompatibleSchema, "a schema of type None is not stored")
    if len(schema.schema_data) > SCHEMA_DATA_BYTES_MAX:
        raise SchemaRefusedError(pb.NotAllowedError, str(LimitExceededError(
            "SCHEMA_DATA_BYTES_MAX", len(schema.schema_data), SCHEMA_DATA_BYTES_MAX)))
    return SchemaRecord.from_pb(schema)


def carries_schema(schema: pb.Schema | None) -> bool:
    """Whether a PRODUCER/SUBSCRIBE schema is one to register (BYTES sends none; None is none)."""
    return schema is not None and schema.type != 0
