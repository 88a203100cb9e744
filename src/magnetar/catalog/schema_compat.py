"""Schema compatibility: can a reader schema read data written with a writer schema (Avro rules)?
And Pulsar's strategies built on that question (``check_strategy``).

Strategies (Pulsar's ``SchemaCompatibilityStrategy``; the broker default is FULL, as Pulsar's):
BACKWARD: the new schema reads what the latest one wrote; FORWARD: the latest reads what the new
one writes; FULL: both; the ``_TRANSITIVE`` forms check against every version, not only the
latest; ALWAYS_COMPATIBLE accepts anything; ALWAYS_INCOMPATIBLE refuses any new version (an
identical definition still matches its existing version before any check).

For AVRO and JSON (whose definitions are Avro record schemas, as the official client sends them)
the Avro schema-resolution rules decide, as Avro's own resolver applies them:

* records are not compared by name (a record's top-level name may change; Pulsar's Java
  generator names it after the class); a reader field present in the writer must read the
  writer's field type; a reader field missing from the writer needs a ``default``; writer fields
  the reader lacks are skipped (removing a field is compatible);
* named types are compared by (unqualified) name where Avro compares them: enums, fixed, and the
  branch of a union that reads a named writer type (a union branch is chosen by name);
* primitives match themselves, plus Avro's promotions (int -> long/float/double, long ->
  float/double, float -> double, string <-> bytes);
* unions: every writer branch must be readable by the reader (a reader union needs one branch
  that reads it); arrays by items, maps by values; enums need the writer's symbols (or a reader
  default); fixed needs the same name and size.

Other schema types are compatible when their type matches and, for PROTOBUF_NATIVE, the root
message name is the same; identical definitions always are. Nothing here does I/O.
"""

from __future__ import annotations

import enum
import json
from typing import Any

from magnetar.base.errors import InvalidArgumentError
from magnetar.protocol.pulsar import pb

_PRIMITIVES = frozenset({"null", "boolean", "int", "long", "float", "double", "bytes", "string"})
_PROMOTIONS = {
    "int": {"int", "long", "float", "double"},
    "long": {"long", "float", "double"},
    "float": {"float", "double"},
    "string": {"string", "bytes"},
    "bytes": {"bytes", "string"},
}
_AVRO_LIKE = frozenset({pb.Schema.Avro, pb.Schema.Json, pb.Schema.Protobuf})
#: Depth of nested types one check follows (a guard against pathological definitions).
AVRO_NESTING_DEPTH_MAX = 64


class Compatibility(enum.Enum):
    """Pulsar's ``SchemaCompatibilityStrategy`` (UNDEFINED: the broker's default applies)."""

    ALWAYS_INCOMPATIBLE = "ALWAYS_INCOMPATIBLE"
    ALWAYS_COMPATIBLE = "ALWAYS_COMPATIBLE"
    BACKWARD = "BACKWARD"
    FORWARD = "FORWARD"
    FULL = "FULL"
    BACKWARD_TRANSITIVE = "BACKWARD_TRANSITIVE"
    FORWARD_TRANSITIVE = "FORWARD_TRANSITIVE"
    FULL_TRANSITIVE = "FULL_TRANSITIVE"

    @property
    def transitive(self) -> bool:
        return self.value.endswith("_TRANSITIVE")

    @property
    def backward(self) -> bool:
        return self.value.startswith(("BACKWARD", "FULL"))

    @property
    def forward(self) -> bool:
        return self.value.startswith(("FORWARD", "FULL"))


#: Pulsar's broker default (``schemaCompatibilityStrategy=FULL``).
DEFAULT_COMPATIBILITY = Compatibility.FULL


class IncompatibleSchemaError(InvalidArgumentError):
    """The new schema cannot read what the existing one wrote; the message says why."""


def parse_avro(data: bytes) -> Any:
    try:
        return json.loads(data.decode())
    except (UnicodeDecodeError, ValueError) as error:
        raise InvalidArgumentError(f"schema definition is not valid JSON: {error}") from None


def check_strategy(strategy: Compatibility, new: pb.Schema, existing: list[pb.Schema]) -> None:
    """Raise ``IncompatibleSchemaError`` unless ``new`` may follow ``existing`` (oldest first)."""
    if not existing or strategy is Compatibility.ALWAYS_COMPATIBLE:
        return
    if strategy is Compatibility.ALWAYS_INCOMPATIBLE:
        raise IncompatibleSchemaError("the compatibility strategy is ALWAYS_INCOMPATIBLE: no new version")
    against = existing if strategy.transitive else existing[-1:]
    for index in range(len(against) - 1, -1, -1):
        old = against[index]
        if strategy.backward:
            check_backward(new, old)
        if strategy.forward:
            try:
                check_backward(old, new)
            except IncompatibleSchemaError as error:
                raise IncompatibleSchemaError(f"{strategy.value}: the existing schema cannot read the new "
                                              f"one: {error}") from None


def check_backward(new: pb.Schema, old: pb.Schema) -> None:
    """Raise ``IncompatibleSchemaError`` unless ``new`` can read data written with ``old``."""
    if new.type != old.type:
        raise IncompatibleSchemaError(
            f"schema type {pb.Schema.Type.Name(new.type)} cannot replace {pb.Schema.Type.Name(old.type)}")
    if bytes(new.schema_data) == bytes(old.schema_data):
        return
    if new.type in _AVRO_LIKE:
        reader, writer = parse_avro(new.schema_data), parse_avro(old.schema_data)
        problem = _AvroCheck(reader, writer).check(reader, writer, "", 0)
        if problem:
            raise IncompatibleSchemaError(problem)
    elif new.type == pb.Schema.ProtobufNative:
        new_root = _json_field(new.schema_data, "rootMessageTypeName")
        old_root = _json_field(old.schema_data, "rootMessageTypeName")
        if new_root != old_root:
            raise IncompatibleSchemaError(f"protobuf root message {new_root!r} is not {old_root!r}")


def _json_field(data: bytes, name: str) -> object:
    parsed = parse_avro(data)
    return parsed.get(name) if isinstance(parsed, dict) else None


def _type_name(schema: Any) -> str:
    if isinstance(schema, str):
        return schema
    if isinstance(schema, list):
        return "union"
    if isinstance(schema, dict):
        return str(schema.get("type"))
    return repr(schema)


def _named(schema: Any) -> bool:
    return isinstance(schema, dict) and schema.get("type") in ("record", "enum", "fixed", "error")


def _short(name: object) -> str:
    return str(name).rsplit(".", 1)[-1]


class _AvroCheck:
    """One reader/writer resolution; named types are looked up in each side's own definitions."""

    def __init__(self, reader: Any, writer: Any) -> None:
        self.reader_names: dict[str, Any] = {}
        self.writer_names: dict[str, Any] = {}
        _collect_names(reader, self.reader_names)
        _collect_names(writer, self.writer_names)
        self._seen: set[tuple[str, str]] = set()

    def check(self, reader: Any, writer: Any, where: str, depth: int) -> str | None:
        """None if ``reader`` reads ``writer``; else why not."""
        if depth > AVRO_NESTING_DEPTH_MAX:
            return f"{where or 'schema'}: nested deeper than {AVRO_NESTING_DEPTH_MAX}"
        reader = self._resolve(reader, self.reader_names)
        writer = self._resolve(writer, self.writer_names)
        if isinstance(writer, list):
            for branch in writer:
                problem = self.check(reader, branch, where, depth + 1)
                if problem:
                    return problem
            return None
        if isinstance(reader, list):
            branches = [self._resolve(branch, self.reader_names) for branch in reader]
            if _named(writer):  # Avro picks a union branch of a named type by its name
                branches = [b for b in branches if _named(b) and _type_name(b) == _type_name(writer)
                            and _short(b.get("name")) == _short(writer.get("name"))]
            if any(self.check(branch, writer, where, depth + 1) is None for branch in branches):
                return None
            return f"{where or 'schema'}: no branch of the union reads {_type_name(writer)}" + (
                f" {writer.get('name')}" if _named(writer) else "")
        reader_type, writer_type = _type_name(reader), _type_name(writer)
        if reader_type in _PRIMITIVES or writer_type in _PRIMITIVES:
            if reader_type in _PROMOTIONS.get(writer_type, {writer_type}):
                return None
            return f"{where or 'schema'}: {reader_type} cannot read {writer_type}"
        if reader_type != writer_type:
            return f"{where or 'schema'}: {reader_type} cannot read {writer_type}"
        if reader_type == "record":
            return self._record(reader, writer, where, depth)
        if reader_type == "array":
            return self.check(reader.get("items"), writer.get("items"), f"{where}[]", depth + 1)
        if reader_type == "map":
            return self.check(reader.get("values"), writer.get("values"), f"{where}{{}}", depth + 1)
        if reader_type == "enum":
            if _short(reader.get("name")) != _short(writer.get("name")):
                return f"{where or 'schema'}: enum {reader.get('name')} cannot read enum {writer.get('name')}"
            missing = set(writer.get("symbols", [])) - set(reader.get("symbols", []))
            if missing and "default" not in reader:
                return f"{where or 'schema'}: enum lacks symbols {sorted(missing)}"
            return None
        if reader_type == "fixed":
            if _short(reader.get("name")) != _short(writer.get("name")) or reader.get("size") != writer.get("size"):
                return f"{where or 'schema'}: fixed {reader.get('name')} differs"
            return None
        return f"{where or 'schema'}: unknown Avro type {reader_type!r}"

    def _record(self, reader: dict[str, Any], writer: dict[str, Any], where: str, depth: int) -> str | None:
        key = (json.dumps(reader, sort_keys=True), json.dumps(writer, sort_keys=True))
        if key in self._seen:
            return None  # a recursive type already being checked
        self._seen.add(key)
        written = {field["name"]: field for field in writer.get("fields", []) if isinstance(field, dict)}
        for field in reader.get("fields", []):
            if not isinstance(field, dict) or "name" not in field:
                return f"{where or 'schema'}: malformed field {field!r}"
            name = field["name"]
            found = written.get(name)
            if found is None:
                for alias in field.get("aliases", []):
                    found = written.get(alias)
                    if found is not None:
                        break
            path = f"{where}.{name}" if where else name
            if found is None:
                if "default" not in field:
                    return f"field {path!r} was added without a default"
                continue
            problem = self.check(field.get("type"), found.get("type"), path, depth + 1)
            if problem:
                return problem
        return None

    @staticmethod
    def _resolve(schema: Any, names: dict[str, Any]) -> Any:
        if isinstance(schema, str) and schema not in _PRIMITIVES:
            return names.get(schema, names.get(_short(schema), schema))
        if isinstance(schema, dict) and isinstance(schema.get("type"), (dict, list)):
            return schema["type"]  # {"type": {...}} wrapper
        if isinstance(schema, dict) and schema.get("type") in _PRIMITIVES and len(schema) <= 2:
            return schema["type"]  # {"type": "int", "logicalType": ...}
        return schema


def _collect_names(schema: Any, names: dict[str, Any], depth: int = 0) -> None:
    if depth > AVRO_NESTING_DEPTH_MAX:
        return
    if isinstance(schema, list):
        for branch in schema:
            _collect_names(branch, names, depth + 1)
    elif isinstance(schema, dict):
        if schema.get("type") in ("record", "enum", "fixed", "error") and "name" in schema:
            full = str(schema["name"])
            if "namespace" in schema and "." not in full:
                full = f"{schema['namespace']}.{full}"
            names[full] = schema
            names.setdefault(_short(full), schema)
        for field in schema.get("fields", []) or []:
            if isinstance(field, dict):
                _collect_names(field.get("type"), names, depth + 1)
        for key in ("items", "values", "type"):
            if isinstance(schema.get(key), (dict, list)):
                _collect_names(schema[key], names, depth + 1)
