"""Schema compatibility rules (Avro resolution, BACKWARD) and the registry over a metadata store:
versions persisted per topic, matched, refused when incompatible, raced by two brokers, bounded."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from magnetar.base.limits import SCHEMA_DATA_BYTES_MAX
from magnetar.base.types import TopicName
from magnetar.catalog.schema import (
    Compatibility,
    SchemaRefusedError,
    SchemaRegistry,
    schema_path,
    version_bytes,
    version_from_bytes,
)
from magnetar.catalog.schema_compat import IncompatibleSchemaError, check_backward, check_strategy
from magnetar.metadata.memory import MemoryMetadataServer
from magnetar.protocol.pulsar import pb
from tests.manual_clock import ManualClock

TOPIC = TopicName.parse("persistent://t/ns/users")


def _record(*fields: dict[str, Any], name: str = "User") -> dict[str, Any]:
    return {"type": "record", "name": name, "fields": list(fields)}


def _avro(definition: object, kind: int = pb.Schema.Avro) -> pb.Schema:
    return pb.Schema(name="AVRO", schema_data=json.dumps(definition).encode(), type=kind)  # type: ignore[arg-type]


NAME = {"name": "name", "type": ["null", "string"]}
AGE = {"name": "age", "type": "int"}
V1 = _record(NAME, AGE)


@pytest.mark.parametrize("new, why", [
    (_record(NAME, AGE, {"name": "email", "type": "string", "default": ""}), "added with a default"),
    (_record(NAME), "a field removed"),
    (_record(NAME, {"name": "age", "type": "long"}), "int promoted to long"),
    (_record(NAME, {"name": "age", "type": ["null", "int"]}), "a union reads its branch"),
    (_record({"name": "name", "type": ["null", "bytes"]}, AGE), "string read as bytes"),
    (_record(NAME, {"name": "years", "type": "int", "aliases": ["age"]}), "renamed with an alias"),
    (_record(NAME, AGE, name="Person"), "the top-level record renamed: Avro does not compare it"),
])
def test_backward_compatible_changes(new: dict[str, Any], why: str) -> None:
    check_backward(_avro(new), _avro(V1))


@pytest.mark.parametrize("new, why", [
    (_record(NAME, AGE, {"name": "email", "type": "string"}), "added without a default"),
    (_record(NAME, {"name": "age", "type": "string"}), "int cannot become string"),
    (_record({"name": "name", "type": "string"}, AGE), "a union writer has a null the reader lacks"),
])
def test_backward_incompatible_changes(new: dict[str, Any], why: str) -> None:
    with pytest.raises(IncompatibleSchemaError):
        check_backward(_avro(new), _avro(V1))


def test_nested_records_enums_and_named_references() -> None:
    address = {"type": "record", "name": "Address", "fields": [{"name": "city", "type": "string"}]}
    color = {"type": "enum", "name": "Color", "symbols": ["RED", "GREEN"]}
    old = _record({"name": "home", "type": address}, {"name": "work", "type": "Address"}, {"name": "c", "type": color})
    wider = dict(color, symbols=["RED", "GREEN", "BLUE"])
    new = _record({"name": "home", "type": address}, {"name": "work", "type": "Address"}, {"name": "c", "type": wider})
    check_backward(_avro(new), _avro(old))
    narrower = dict(color, symbols=["RED"])
    with pytest.raises(IncompatibleSchemaError, match="enum"):
        check_backward(_avro(_record({"name": "home", "type": address}, {"name": "work", "type": "Address"},
                                     {"name": "c", "type": narrower})), _avro(old))
    stricter = {"type": "record", "name": "Address", "fields": [{"name": "city", "type": "string"},
                                                                 {"name": "zip", "type": "int"}]}
    with pytest.raises(IncompatibleSchemaError, match=r"work\.zip"):
        check_backward(_avro(_record({"name": "home", "type": address}, {"name": "work", "type": stricter},
                                     {"name": "c", "type": color})), _avro(old))


def test_types_must_match_and_json_follows_avro_rules() -> None:
    string = pb.Schema(name="STRING", schema_data=b"null", type=pb.Schema.String)
    with pytest.raises(IncompatibleSchemaError, match="type"):
        check_backward(string, _avro(V1))
    check_backward(_avro(_record(NAME), pb.Schema.Json), _avro(V1, pb.Schema.Json))
    with pytest.raises(IncompatibleSchemaError):
        check_backward(_avro(_record(NAME, AGE, {"name": "x", "type": "int"}), pb.Schema.Json),
                       _avro(V1, pb.Schema.Json))


async def _store() -> Any:
    return await MemoryMetadataServer(ManualClock()).connect()  # type: ignore[arg-type]


def test_registry_persists_matches_and_refuses() -> None:
    async def run() -> None:
        store = await _store()
        registry = SchemaRegistry(store)
        assert await registry.register(TOPIC, _avro(V1)) == 0
        assert await registry.register(TOPIC, _avro(V1)) == 0  # identical: matched
        v2 = _record(NAME, AGE, {"name": "email", "type": "string", "default": ""})
        assert await registry.register(TOPIC, _avro(v2)) == 1
        with pytest.raises(SchemaRefusedError) as refused:
            await registry.register(TOPIC, _avro(_record(NAME, AGE, {"name": "x", "type": "int"})))
        assert refused.value.code == pb.IncompatibleSchema and "without a default" in refused.value.message
        assert await store.children(schema_path(TOPIC)) == ["0000000000", "0000000001"]
        again = SchemaRegistry(store)  # another broker (or a restart) sees the same versions
        found = await again.get(TopicName.parse("persistent://t/ns/users-partition-3"))  # partitions share
        assert found is not None and found[0] == 1 and json.loads(found[1].data) == v2
        assert await again.get(TOPIC, 5) is None
        assert await again.check_consumer(TOPIC, _avro(_record(NAME))) is None  # compatible, not stored
        with pytest.raises(SchemaRefusedError):
            await again.check_consumer(TOPIC, _avro(_record(NAME, {"name": "z", "type": "int"})))
        await again.delete(TOPIC)
        assert await registry.get(TOPIC) is None

    asyncio.run(run())


def test_negative_control_always_compatible_accepts_what_backward_refuses() -> None:
    async def run() -> None:
        registry = SchemaRegistry(None, Compatibility.ALWAYS_COMPATIBLE)
        await registry.register(TOPIC, _avro(V1))
        assert await registry.register(TOPIC, _avro(_record(NAME, AGE, {"name": "x", "type": "int"}))) == 1

    asyncio.run(run())


def test_two_brokers_racing_for_one_version() -> None:
    async def run() -> None:
        store = await _store()
        a, b = SchemaRegistry(store), SchemaRegistry(store)
        await a.register(TOPIC, _avro(V1))
        one = _record(NAME, AGE, {"name": "e", "type": "string", "default": ""})
        two = _record(NAME, AGE, {"name": "f", "type": "string", "default": ""})
        versions = await asyncio.gather(a.register(TOPIC, _avro(one)), b.register(TOPIC, _avro(two)))
        assert sorted(versions) == [1, 2]
        assert len(await a.versions(TOPIC)) == 3

    asyncio.run(run())


def test_bounds_and_none_type() -> None:
    async def run() -> None:
        registry = SchemaRegistry(None)
        with pytest.raises(SchemaRefusedError) as too_big:
            await registry.register(TOPIC, pb.Schema(name="s", schema_data=b"x" * (SCHEMA_DATA_BYTES_MAX + 1),
                                                     type=pb.Schema.String))
        assert too_big.value.code == pb.NotAllowedError and "SCHEMA_DATA_BYTES_MAX" in too_big.value.message
        with pytest.raises(SchemaRefusedError):
            await registry.register(TOPIC, pb.Schema(name="none", schema_data=b"", type=0))  # type: ignore[arg-type]

    asyncio.run(run())
    assert version_from_bytes(version_bytes(7)) == 7 and version_bytes(0) == b"\0" * 8


def test_named_types_are_compared_by_name_in_unions_enums_and_fixed() -> None:
    address = {"type": "record", "name": "Address", "fields": [{"name": "city", "type": "string"}]}
    place = dict(address, name="Place")
    old = _record({"name": "where", "type": ["null", address]})
    check_backward(_avro(_record({"name": "where", "type": address})), _avro(_record({"name": "where", "type": place})))
    with pytest.raises(IncompatibleSchemaError, match="union"):  # a union branch is picked by name
        check_backward(_avro(_record({"name": "where", "type": ["null", place]})), _avro(old))
    color = {"type": "enum", "name": "Color", "symbols": ["RED"]}
    with pytest.raises(IncompatibleSchemaError, match="enum"):
        check_backward(_avro(_record({"name": "c", "type": dict(color, name="Hue")})),
                       _avro(_record({"name": "c", "type": color})))
    digest = {"type": "fixed", "name": "Digest", "size": 16}
    with pytest.raises(IncompatibleSchemaError, match="fixed"):
        check_backward(_avro(_record({"name": "d", "type": dict(digest, name="Hash")})),
                       _avro(_record({"name": "d", "type": digest})))


ADDED_WITH_DEFAULT = _record(NAME, AGE, {"name": "email", "type": "string", "default": ""})
ADDED_WITHOUT_DEFAULT = _record(NAME, AGE, {"name": "email", "type": "string"})
AGE_REMOVED = _record(NAME)


@pytest.mark.parametrize("strategy, accepted, refused", [
    (Compatibility.BACKWARD, [ADDED_WITH_DEFAULT, AGE_REMOVED], [ADDED_WITHOUT_DEFAULT]),
    (Compatibility.FORWARD, [ADDED_WITH_DEFAULT, ADDED_WITHOUT_DEFAULT], [AGE_REMOVED]),
    (Compatibility.FULL, [ADDED_WITH_DEFAULT], [ADDED_WITHOUT_DEFAULT, AGE_REMOVED]),
    (Compatibility.ALWAYS_COMPATIBLE, [ADDED_WITHOUT_DEFAULT, AGE_REMOVED], []),
    (Compatibility.ALWAYS_INCOMPATIBLE, [], [ADDED_WITH_DEFAULT]),
])
def test_each_strategy_accepts_and_refuses_the_right_evolutions(strategy: Compatibility, accepted: list[Any],
                                                                refused: list[Any]) -> None:
    for new in accepted:
        check_strategy(strategy, _avro(new), [_avro(V1)])
    for new in refused:
        with pytest.raises(IncompatibleSchemaError):
            check_strategy(strategy, _avro(new), [_avro(V1)])


def test_transitive_strategies_check_every_version() -> None:
    """V1 -> V2 (age has a default now) -> V3 (age removed): V3 reads V2, not V1 (no default there)."""
    v2 = _record(NAME, {"name": "age", "type": "int", "default": 0})
    v3 = _record(NAME, {"name": "age2", "type": "int", "default": 0})
    history = [_avro(V1), _avro(v2)]
    check_strategy(Compatibility.FORWARD, _avro(v3), history)
    with pytest.raises(IncompatibleSchemaError):
        check_strategy(Compatibility.FORWARD_TRANSITIVE, _avro(v3), history)
