"""The schema registry with the official client: String/JSON/Avro/protobuf round-trip, a compatible
evolution gets a new version, an incompatible producer or consumer is refused with
``pulsar.IncompatibleSchema``, and GET_SCHEMA answers (through the client's ``get_schema_info``)."""

from __future__ import annotations

import socket
import struct
from typing import Any

import pulsar
import pytest
from google.protobuf.duration_pb2 import Duration
from google.protobuf.timestamp_pb2 import Timestamp
from pulsar.schema import AvroSchema, Integer, JsonSchema, ProtobufNativeSchema, Record, String, StringSchema

from magnetar.protocol.pulsar import encode_command, pb
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


@pytest.mark.client_errors(r"Failed to create (producer|consumer): IncompatibleSchema")
def test_protobuf_native_round_trip_and_another_root_message_refused(client: Any) -> None:
    consumer = client.subscribe("schema-pb", "s", schema=ProtobufNativeSchema(Timestamp))
    producer = client.create_producer("schema-pb", schema=ProtobufNativeSchema(Timestamp))
    producer.send(Timestamp(seconds=5, nanos=7))
    assert consumer.receive(timeout_millis=5000).value() == Timestamp(seconds=5, nanos=7)
    with pytest.raises(pulsar.IncompatibleSchema):
        client.create_producer("schema-pb", schema=ProtobufNativeSchema(Duration))


@pytest.mark.client_errors(r"Failed to create (producer|consumer): IncompatibleSchema")
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


def _read_frame(sock: socket.socket) -> pb.BaseCommand:
    def exact(n: int) -> bytes:
        out = b""
        while len(out) < n:
            chunk = sock.recv(n - len(out))
            assert chunk, "connection closed"
            out += chunk
        return out

    frame = exact(struct.unpack(">I", exact(4))[0])
    command_size = struct.unpack(">I", frame[:4])[0]
    return pb.BaseCommand.FromString(frame[4:4 + command_size])


def test_get_or_create_schema_as_a_java_client_sends_it(broker: BrokerThread) -> None:
    """The 4.2.0 client never sends GET_OR_CREATE_SCHEMA; Java clients do: a raw connection."""
    T = pb.BaseCommand
    with socket.create_connection(("127.0.0.1", broker.port), timeout=5) as sock:
        sock.sendall(encode_command(T(type=T.CONNECT, connect=pb.CommandConnect(client_version="java-like",
                                                                                 protocol_version=20))))
        assert _read_frame(sock).type == T.CONNECTED

        def get_or_create(request_id: int, record: type[Record]) -> pb.CommandGetOrCreateSchemaResponse:
            info = AvroSchema(record).schema_info()
            schema = pb.Schema(name="User", schema_data=info.schema().encode(), type=pb.Schema.Avro)
            sock.sendall(encode_command(T(type=T.GET_OR_CREATE_SCHEMA, getOrCreateSchema=pb.CommandGetOrCreateSchema(
                request_id=request_id, topic="persistent://public/default/schema-goc", schema=schema))))
            reply = _read_frame(sock)
            assert reply.type == T.GET_OR_CREATE_SCHEMA_RESPONSE
            return reply.getOrCreateSchemaResponse

        first = get_or_create(1, User)
        assert first.schema_version == b"\0" * 8 and not first.HasField("error_code")
        assert get_or_create(2, UserV2).schema_version == b"\0" * 7 + b"\1"
        refused = get_or_create(3, UserV3)
        assert refused.error_code == pb.IncompatibleSchema and not refused.HasField("schema_version")


@pytest.mark.client_errors(r"Failed to create (producer|consumer): IncompatibleSchema")
def test_schemas_persist_across_a_standalone_restart(tmp_path: Any) -> None:
    """A real ``magnetar standalone``: versions live in its metadata store (/schemas/...), so after
    a SIGTERM and restart the old version is still served and an incompatible producer refused."""
    from magnetar.runtime.processes import StandaloneProcess, free_port

    broker_port, bookie_port = free_port(), free_port()
    started: list[StandaloneProcess] = []
    try:
        for round_ in range(2):
            standalone = StandaloneProcess(str(tmp_path / "data"), broker_port=broker_port, bookie_port=bookie_port)
            started.append(standalone)
            client = pulsar.Client(standalone.broker_url, operation_timeout_seconds=15,
                                   logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
            try:
                if round_ == 0:
                    client.create_producer("schema-durable", schema=AvroSchema(User)).send(User(name="a", age=1))
                else:
                    info = client._client.get_schema_info("persistent://public/default/schema-durable", 0)
                    assert info.schema() == AvroSchema(User).schema_info().schema()
                    with pytest.raises(pulsar.IncompatibleSchema):
                        client.create_producer("schema-durable", schema=AvroSchema(UserV3))
            finally:
                client.close()
            assert standalone.terminate() == 0
    finally:
        for process in started:
            process.kill()
