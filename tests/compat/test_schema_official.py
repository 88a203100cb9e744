"""The schema registry with the official client: String/JSON/Avro records round-trip, a compatible
evolution gets a new version, an incompatible producer or consumer is refused with
``pulsar.IncompatibleSchema``, and GET_SCHEMA answers (through the client's ``get_schema_info``)."""

from __future__ import annotations

from typing import Any

import pulsar
import pytest
from pulsar.schema import AvroSchema, Integer, JsonSchema, Record, String, StringSchema

from tests.compat.harness import BrokerThread

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]


class User(Record):
    name = String()
    age = Integer()


def _user_v2() -> type[Record]:
    class User(Record):  # Avro matches records by name: every version is called User
        name = String()
        age = Integer()
        email = String(default="none", required_default=True)  # added with a default: compatible

    return User


def _user_v3() -> type[Record]:
    class User(Record):
        name = String()
        age = Integer()
        city = String(required=True)  # added without a default: cannot read older data

    return User


UserV2 = _user_v2()
UserV3 = _user_v3()


@pytest.mark.parametrize("make_schema", [lambda: JsonSchema(User), lambda: AvroSchema(User)], ids=["json", "avro"])
def test_records_round_trip(client: Any, make_schema: Any) -> None:
    topic = f"schema-rt-{make_schema().schema_info().schema_type()}"
    consumer = client.subscribe(topic, "s", schema=make_schema())
    producer = client.create_producer(topic, schema=make_schema())
    producer.send(User(name="ada", age=36))
    message = consumer.receive(timeout_millis=5000)
    assert message.value().name == "ada" and message.value().age == 36
    info = client._client.get_schema_info(f"persistent://public/default/{topic}", -1)
    assert info.schema_type() == make_schema().schema_info().schema_type()


def test_string_schema_round_trip(client: Any) -> None:
    consumer = client.subscribe("schema-str", "s", schema=StringSchema())
    producer = client.create_producer("schema-str", schema=StringSchema())
    producer.send("héllo")
    assert consumer.receive(timeout_millis=5000).value() == "héllo"


def test_compatible_evolution_gets_a_new_version_and_incompatible_is_refused(broker: BrokerThread,
                                                                             client: Any) -> None:
    topic = "schema-evolve"
    v1 = client.create_producer(topic, schema=AvroSchema(User))
    v1.send(User(name="a", age=1))
    v2 = client.create_producer(topic, schema=AvroSchema(UserV2))
    v2.send(UserV2(name="b", age=2, email="b@x"))
    with pytest.raises(pulsar.IncompatibleSchema):
        client.create_producer(topic, schema=AvroSchema(UserV3))
    with pytest.raises(pulsar.IncompatibleSchema):
        client.create_producer(topic, schema=StringSchema())  # another type altogether
    with pytest.raises(pulsar.IncompatibleSchema):
        client.subscribe(topic, "bad", schema=AvroSchema(UserV3))
    full = f"persistent://public/default/{topic}"
    assert client._client.get_schema_info(full, 0).schema() == AvroSchema(User).schema_info().schema()
    assert client._client.get_schema_info(full, -1).schema() == AvroSchema(UserV2).schema_info().schema()
    reader = client.create_reader(topic, pulsar.MessageId.earliest, schema=AvroSchema(UserV2))
    first, second = reader.read_next(timeout_millis=5000), reader.read_next(timeout_millis=5000)
    assert (first.value().name, first.value().email) == ("a", "none")  # V1 data read with V2's default
    assert (second.value().name, second.value().email) == ("b", "b@x")
    same = client.create_producer(topic, schema=AvroSchema(User))  # an existing version is matched
    same.send(User(name="c", age=3))


def test_bytes_producer_is_accepted_on_a_topic_with_a_schema(client: Any) -> None:
    client.create_producer("schema-bytes", schema=StringSchema()).send("s")
    client.create_producer("schema-bytes").send(b"raw")  # BytesSchema sends no schema
