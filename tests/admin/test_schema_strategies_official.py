"""Schema compatibility strategies per namespace, with the official client's AvroSchema, and the
``/admin/v2/schemas`` resource (a real broker with its HTTP endpoint)."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

import pulsar
import pytest
from pulsar.schema import AvroSchema, Integer, Record, String
from typer.testing import CliRunner

from magnetar.cli.admin import admin_app
from tests.admin.conftest import HttpBroker

NS_PATH = "/admin/v2/namespaces/public/default/schemaCompatibilityStrategy"


class User(Record):
    name = String()
    age = Integer()


class Person(Record):  # the same fields under another record name
    name = String()
    age = Integer()


class UserWithEmail(Record):  # a field added without a default
    name = String()
    age = Integer()
    email = String(required=True)


class UserWithNickname(Record):  # a field added with a default (null)
    name = String()
    age = Integer()
    nickname = String(required_default=True)


class NameOnly(Record):  # age dropped (it has no default)
    name = String()


class UserEmailDefaulted(Record):  # UserWithEmail's email given a default
    name = String()
    age = Integer()
    email = String(required=True, default="", required_default=True)


def http(broker: HttpBroker, method: str, path: str, body: Any = None) -> tuple[int, Any]:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(f"{broker.http_url}{path}", method=method, data=data,
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=10) as reply:
            raw = reply.read()
            return reply.status, json.loads(raw) if raw else None
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read() or b"null")


@pytest.fixture
def client(http_broker: HttpBroker) -> Any:
    c = pulsar.Client(http_broker.thread.url, operation_timeout_seconds=10)
    yield c
    c.close()


def producer_accepted(client: Any, topic: str, record: type[Record]) -> bool:
    try:
        client.create_producer(topic, schema=AvroSchema(record)).close()
    except pulsar.IncompatibleSchema:
        return False
    return True


def test_full_is_the_default_and_the_record_name_is_not_compared(http_broker: HttpBroker, client: Any) -> None:
    assert http(http_broker, "GET", NS_PATH) == (200, "FULL")
    topic = "schema-full"
    assert producer_accepted(client, topic, User)
    assert producer_accepted(client, topic, Person)  # renamed record, same fields: Avro reads it
    assert not producer_accepted(client, topic, UserWithEmail)  # new reader lacks a default
    assert producer_accepted(client, topic, UserWithNickname)  # a field with a default: both ways
    assert not producer_accepted(client, topic, NameOnly)  # age dropped: the latest cannot read that


@pytest.mark.parametrize("strategy, email, nickname", [
    ("BACKWARD", False, True),
    ("FORWARD", True, True),  # old readers skip the new field
    ("ALWAYS_COMPATIBLE", True, True),
    ("ALWAYS_INCOMPATIBLE", False, False),
])
def test_each_strategy_with_the_official_client(http_broker: HttpBroker, client: Any, strategy: str,
                                               email: bool, nickname: bool) -> None:
    assert http(http_broker, "PUT", NS_PATH, strategy)[0] == 204
    assert http(http_broker, "GET", NS_PATH) == (200, strategy)
    assert producer_accepted(client, f"s-{strategy}-e", User)
    assert producer_accepted(client, f"s-{strategy}-e", UserWithEmail) is email
    assert producer_accepted(client, f"s-{strategy}-n", User)
    assert producer_accepted(client, f"s-{strategy}-n", UserWithNickname) is nickname
    assert producer_accepted(client, f"s-{strategy}-n", User)  # an existing version is always matched


def test_transitive_checks_every_version(http_broker: HttpBroker, client: Any) -> None:
    """email required, then given a default, then dropped: the latest version reads data without
    it (FORWARD accepts), the first one cannot (FORWARD_TRANSITIVE refuses)."""
    for strategy, accepted in (("FORWARD", True), ("FORWARD_TRANSITIVE", False)):
        assert http(http_broker, "PUT", NS_PATH, strategy)[0] == 204
        topic = f"schema-{strategy}"
        assert producer_accepted(client, topic, UserWithEmail)
        assert producer_accepted(client, topic, UserEmailDefaulted)
        assert producer_accepted(client, topic, User) is accepted


def test_schemas_resource(http_broker: HttpBroker, client: Any) -> None:
    base = "/admin/v2/schemas/public/default/schema-rest"
    assert http(http_broker, "GET", f"{base}/schema")[0] == 404
    client.create_producer("schema-rest", schema=AvroSchema(User)).close()
    status, latest = http(http_broker, "GET", f"{base}/schema")
    assert status == 200 and latest["version"] == 0 and latest["type"] == "AVRO"
    assert json.loads(latest["data"])["name"] == "User" and latest["timestamp"] > 0
    definition = AvroSchema(UserWithNickname).schema_info().schema()
    assert http(http_broker, "POST", f"{base}/schema", {"type": "AVRO", "schema": definition,
                                                           "properties": {"k": "v"}}) == (200, {"version": {"version": 1}})
    refused = AvroSchema(UserWithEmail).schema_info().schema()
    assert http(http_broker, "POST", f"{base}/compatibility", {"type": "AVRO", "schema": refused})[1] == {
        "isCompatibility": False, "schemaCompatibilityStrategy": "FULL"}
    assert http(http_broker, "POST", f"{base}/schema", {"type": "AVRO", "schema": refused})[0] == 409
    assert http(http_broker, "GET", f"{base}/schema/1")[1]["properties"] == {"k": "v"}
    assert [v["version"] for v in http(http_broker, "GET", f"{base}/schemas")[1]["getSchemaResponses"]] == [0, 1]
    assert http(http_broker, "DELETE", f"{base}/schema") == (200, {"version": 1})
    assert http(http_broker, "GET", f"{base}/schema")[0] == 404
    assert http(http_broker, "PUT", NS_PATH, "SOMETIMES")[0] == 412


def test_cli_strategy_and_schema(http_broker: HttpBroker, client: Any) -> None:
    runner = CliRunner()

    def cli(*args: str) -> str:
        result = runner.invoke(admin_app, ["--url", http_broker.http_url, *args])
        assert result.exit_code == 0, (args, result.output)
        return result.output

    assert cli("namespaces", "get-schema-compatibility-strategy", "public/default").strip() == "FULL"
    cli("namespaces", "set-schema-compatibility-strategy", "public/default", "-c", "backward")
    assert cli("namespaces", "get-schema-compatibility-strategy", "public/default").strip() == "BACKWARD"
    client.create_producer("schema-cli", schema=AvroSchema(User)).close()
    assert json.loads(cli("topics", "get-schema", "schema-cli"))["type"] == "AVRO"
    assert json.loads(cli("topics", "get-schema", "schema-cli", "--version", "0"))["version"] == 0
