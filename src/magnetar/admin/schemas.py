"""Schemas through ``/admin/v2``, with Pulsar's paths and bodies.

* ``GET|PUT /namespaces/{t}/{ns}/schemaCompatibilityStrategy``: the namespace's strategy (a JSON
  string: ``ALWAYS_INCOMPATIBLE``, ``ALWAYS_COMPATIBLE``, ``BACKWARD``, ``FORWARD``, ``FULL``, the
  ``_TRANSITIVE`` forms, or ``UNDEFINED``); GET answers the one in force, the broker's (FULL, as
  Pulsar's) while the namespace's is UNDEFINED.
* ``/schemas/{t}/{ns}/{topic}/schema``: GET the latest version, POST a new one (body
  ``{"type", "schema", "properties"}``; checked under the namespace's strategy: 409 when
  incompatible), DELETE every version; ``.../schema/{version}``: GET one version;
  ``.../schemas``: GET every version; ``POST .../compatibility``: would this one be accepted?

A version is answered as ``{"version", "type", "timestamp", "data", "properties"}`` (``data`` the
definition as text). The partitions of a partitioned topic share their base topic's schemas.
"""

from __future__ import annotations

import base64
from urllib.parse import unquote

import msgspec
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute

from magnetar.admin.common import AdminContext, AdminError, api_route, json_response, namespace_of, read_body
from magnetar.base.types import TopicName
from magnetar.catalog.policies import Policies
from magnetar.catalog.schema import SchemaRecord, SchemaRefusedError
from magnetar.catalog.schema_compat import Compatibility
from magnetar.protocol.pulsar import pb

#: Pulsar's SchemaType names for the wire's Schema.Type values.
TYPE_NAMES: dict[int, str] = {
    pb.Schema.None_: "NONE", pb.Schema.String: "STRING", pb.Schema.Json: "JSON", pb.Schema.Protobuf: "PROTOBUF",
    pb.Schema.Avro: "AVRO", pb.Schema.Bool: "BOOLEAN", pb.Schema.Int8: "INT8", pb.Schema.Int16: "INT16",
    pb.Schema.Int32: "INT32", pb.Schema.Int64: "INT64", pb.Schema.Float: "FLOAT", pb.Schema.Double: "DOUBLE",
    pb.Schema.Date: "DATE", pb.Schema.Time: "TIME", pb.Schema.Timestamp: "TIMESTAMP",
    pb.Schema.KeyValue: "KEY_VALUE", pb.Schema.Instant: "INSTANT", pb.Schema.LocalDate: "LOCAL_DATE",
    pb.Schema.LocalTime: "LOCAL_TIME", pb.Schema.LocalDateTime: "LOCAL_DATE_TIME",
    pb.Schema.ProtobufNative: "PROTOBUF_NATIVE",
}
_TYPES_BY_NAME = {name: value for value, name in TYPE_NAMES.items()}
UNDEFINED = "UNDEFINED"


class PostSchemaPayload(msgspec.Struct):
    type: str
    schema: str = ""
    properties: dict[str, str] = msgspec.field(default_factory=dict)


def _topic(request: Request) -> TopicName:
    namespace = namespace_of(request)
    return TopicName.parse(f"persistent://{namespace}/{unquote(request.path_params['topic'])}")


def _version_body(version: int, record: SchemaRecord) -> dict[str, object]:
    try:
        data = record.data.decode()
    except UnicodeDecodeError:
        data = base64.b64encode(record.data).decode()
    return {"version": version, "type": TYPE_NAMES.get(record.type, str(record.type)),
            "timestamp": record.timestamp_ms, "data": data, "properties": record.properties}


def _payload_schema(payload: PostSchemaPayload) -> pb.Schema:
    kind = _TYPES_BY_NAME.get(payload.type.upper())
    if kind is None:
        raise AdminError(412, f"Unknown schema type {payload.type!r}")
    schema = pb.Schema(name=payload.type.upper(), schema_data=payload.schema.encode(), type=kind)  # type: ignore[arg-type]
    for key, value in sorted(payload.properties.items()):
        schema.properties.add(key=key, value=value)
    return schema


def _incompatible(error: SchemaRefusedError) -> AdminError:
    if error.code == pb.IncompatibleSchema:
        return AdminError(409, error.message)
    return AdminError(412, error.message)


def routes(ctx: AdminContext) -> list[BaseRoute]:
    """The namespace's compatibility strategy, then the topic's schema versions."""
    return [*_strategy_routes(ctx), *_schema_routes(ctx)]


def _strategy_routes(ctx: AdminContext) -> list[BaseRoute]:
    strategy_path = "/namespaces/{tenant}/{namespace}/schemaCompatibilityStrategy"

    @api_route(strategy_path, ["GET"], "Get the namespace's schema compatibility strategy")
    async def get_strategy(request: Request) -> Response:
        namespace = namespace_of(request)
        stored = (await ctx.resources.policies(namespace)).schema_compatibility_strategy
        return json_response(ctx.service.config.schema_compatibility_strategy if stored == UNDEFINED else stored)

    @api_route(strategy_path, ["PUT"], "Set the namespace's schema compatibility strategy", body=str)
    async def set_strategy(request: Request) -> Response:
        namespace = namespace_of(request)
        value = str(await read_body(request, str)).upper()
        if value != UNDEFINED and value not in {c.value for c in Compatibility}:
            raise AdminError(412, f"Invalid schema compatibility strategy {value!r}")

        def change(policies: Policies) -> None:
            policies.schema_compatibility_strategy = value

        await ctx.resources.update_policies(namespace, change)
        return Response(status_code=204)

    return [get_strategy, set_strategy]


def _schema_routes(ctx: AdminContext) -> list[BaseRoute]:
    base = "/schemas/{tenant}/{namespace}/{topic}"

    async def require_namespace(namespace: str) -> None:
        if not await ctx.resources.namespace_exists(namespace):
            raise AdminError(404, f"Namespace {namespace} does not exist")

    @api_route(f"{base}/schema", ["GET"], "Get the latest schema of a topic")
    async def get_latest(request: Request) -> Response:
        topic = _topic(request)
        await require_namespace(topic.namespace)
        found = await ctx.service.schemas.get(topic)
        if found is None:
            raise AdminError(404, f"No schema found for {topic}")
        return json_response(_version_body(*found))

    @api_route(f"{base}/schema/{{version:int}}", ["GET"], "Get one version of a topic's schema")
    async def get_version(request: Request) -> Response:
        topic = _topic(request)
        await require_namespace(topic.namespace)
        found = await ctx.service.schemas.get(topic, int(request.path_params["version"]))
        if found is None:
            raise AdminError(404, f"No schema version {request.path_params['version']} for {topic}")
        return json_response(_version_body(*found))

    @api_route(f"{base}/schemas", ["GET"], "Get every version of a topic's schema")
    async def get_all(request: Request) -> Response:
        topic = _topic(request)
        await require_namespace(topic.namespace)
        records = await ctx.service.schemas.versions(topic)
        return json_response({"getSchemaResponses": [_version_body(v, r) for v, r in enumerate(records)]})

    @api_route(f"{base}/schema", ["POST"], "Upload a new version of a topic's schema", body=PostSchemaPayload)
    async def post(request: Request) -> Response:
        topic = _topic(request)
        await require_namespace(topic.namespace)
        payload = await read_body(request, PostSchemaPayload)
        try:
            version = await ctx.service.schemas.register(topic, _payload_schema(payload))
        except SchemaRefusedError as error:
            raise _incompatible(error) from None
        return json_response({"version": {"version": version}})

    @api_route(f"{base}/compatibility", ["POST"], "Test whether a schema would be accepted", body=PostSchemaPayload)
    async def compatibility(request: Request) -> Response:
        topic = _topic(request)
        await require_namespace(topic.namespace)
        payload = await read_body(request, PostSchemaPayload)
        strategy = await ctx.service.schemas.strategy(topic)
        try:
            await ctx.service.schemas.check_compatibility(topic, _payload_schema(payload))
        except SchemaRefusedError as error:
            if error.code != pb.IncompatibleSchema:
                raise _incompatible(error) from None
            return json_response({"isCompatibility": False, "schemaCompatibilityStrategy": strategy.value})
        return json_response({"isCompatibility": True, "schemaCompatibilityStrategy": strategy.value})

    @api_route(f"{base}/schema", ["DELETE"], "Delete every version of a topic's schema")
    async def delete(request: Request) -> Response:
        topic = _topic(request)
        await require_namespace(topic.namespace)
        records = await ctx.service.schemas.versions(topic)
        if not records:
            raise AdminError(404, f"No schema found for {topic}")
        await ctx.service.schemas.delete(topic)
        return json_response({"version": len(records) - 1})

    return [get_latest, get_version, get_all, post, compatibility, delete]
