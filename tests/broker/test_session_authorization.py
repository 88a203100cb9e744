"""Every binary enforcement point of ``Session``, in process: each command, as a role without the
right and as one with it, and the response a refusal goes into (the official client reads the
error of LOOKUP, PARTITIONED_METADATA and the schema commands from their own responses, of the
others from ERROR).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from magnetar.broker import BrokerConfig
from magnetar.broker.session import Session
from magnetar.catalog.resources import TenantInfo
from magnetar.protocol.pulsar import FrameDecoder, ServerConnection, encode_command, pb
from magnetar.protocol.pulsar.frames import make_command
from magnetar.security.authorization import AuthAction
from tests.admin.harness import AdminWorld

T = pb.BaseCommand
TOPIC = "persistent://acme/ns/t"
CONFIG = BrokerConfig(authorization_enabled=True, superuser_roles=("root",))


def _connected() -> ServerConnection:
    conn = ServerConnection(now_ms=0)
    body = pb.CommandConnect(client_version="test", protocol_version=20, auth_method_name="none")
    conn.receive_data(encode_command(T(type=T.CONNECT, connect=body)), 0)
    conn.data_to_send()
    return conn


def _replies(conn: ServerConnection) -> list[pb.BaseCommand]:
    decoder = FrameDecoder()
    for chunk in conn.data_to_send():
        decoder.feed(bytes(chunk))
    out = []
    while (frame := decoder.next_frame()) is not None:
        out.append(frame.command)
    return out


def _requests() -> list[tuple[str, int, object, Callable[[pb.BaseCommand], int | None]]]:
    """(name, command type, body, the error code its reply carries: None when it succeeded)."""

    def lookup(reply: pb.BaseCommand) -> int | None:
        body = reply.lookupTopicResponse
        return body.error if body.response == pb.CommandLookupTopicResponse.Failed else None

    def metadata(reply: pb.BaseCommand) -> int | None:
        body = reply.partitionMetadataResponse
        return body.error if body.response == pb.CommandPartitionedTopicMetadataResponse.Failed else None

    def schema(reply: pb.BaseCommand) -> int | None:
        body = reply.getSchemaResponse
        if not body.HasField("error_code") or body.error_code == pb.TopicNotFound:
            return None  # a schema, or none registered yet: looked at, allowed
        return body.error_code

    def get_or_create(reply: pb.BaseCommand) -> int | None:
        body = reply.getOrCreateSchemaResponse
        return body.error_code if body.HasField("error_code") else None

    def plain(reply: pb.BaseCommand) -> int | None:
        return reply.error.error if reply.type == T.ERROR else None

    string = pb.Schema(name="s", schema_data=b"", type=pb.Schema.String)
    return [
        ("LOOKUP", T.LOOKUP, pb.CommandLookupTopic(topic=TOPIC, request_id=1), lookup),
        ("PARTITIONED_METADATA", T.PARTITIONED_METADATA,
         pb.CommandPartitionedTopicMetadata(topic=TOPIC, request_id=2), metadata),
        ("GET_SCHEMA", T.GET_SCHEMA, pb.CommandGetSchema(topic=TOPIC, request_id=3), schema),
        ("GET_OR_CREATE_SCHEMA", T.GET_OR_CREATE_SCHEMA,
         pb.CommandGetOrCreateSchema(topic=TOPIC, request_id=4, schema=string), get_or_create),
        ("GET_TOPICS_OF_NAMESPACE", T.GET_TOPICS_OF_NAMESPACE,
         pb.CommandGetTopicsOfNamespace(namespace="acme/ns", request_id=5), plain),
        ("PRODUCER", T.PRODUCER, pb.CommandProducer(topic=TOPIC, producer_id=1, request_id=6), plain),
        ("SUBSCRIBE", T.SUBSCRIBE, pb.CommandSubscribe(topic=TOPIC, subscription="s", consumer_id=1, request_id=7,
                                                       subType=pb.CommandSubscribe.Shared), plain),
        ("SUBSCRIBE locked", T.SUBSCRIBE, pb.CommandSubscribe(topic=TOPIC, subscription="locked", consumer_id=2,
                                                              request_id=8, subType=pb.CommandSubscribe.Shared),
         plain),
    ]


#: role -> the commands it may send (the others must be refused with AuthorizationError)
ALLOWED = {
    "root": {"LOOKUP", "PARTITIONED_METADATA", "GET_SCHEMA", "GET_OR_CREATE_SCHEMA", "GET_TOPICS_OF_NAMESPACE",
             "PRODUCER", "SUBSCRIBE", "SUBSCRIBE locked"},
    "ops": {"LOOKUP", "PARTITIONED_METADATA", "GET_SCHEMA", "GET_OR_CREATE_SCHEMA", "GET_TOPICS_OF_NAMESPACE",
            "PRODUCER", "SUBSCRIBE", "SUBSCRIBE locked"},
    "writer": {"LOOKUP", "PARTITIONED_METADATA", "GET_SCHEMA", "GET_OR_CREATE_SCHEMA", "PRODUCER"},
    "reader": {"LOOKUP", "PARTITIONED_METADATA", "GET_SCHEMA", "GET_TOPICS_OF_NAMESPACE", "SUBSCRIBE"},
    "topic-reader": {"LOOKUP", "PARTITIONED_METADATA", "GET_SCHEMA", "SUBSCRIBE"},  # topic grant only
    "stranger": set(),
}


def test_every_enforced_command_refuses_into_its_own_response() -> None:
    async def main() -> None:
        world = await AdminWorld(CONFIG).start()
        try:
            resources = world.service.resources
            assert resources is not None
            await resources.create_tenant("acme", TenantInfo(admin_roles=["ops"], allowed_clusters=["standalone"]))
            await resources.create_namespace("acme/ns")

            def grant(p: object) -> None:
                auth = p.auth_policies  # type: ignore[attr-defined]
                auth.namespace_auth.update({"writer": [AuthAction.PRODUCE], "reader": [AuthAction.CONSUME]})
                auth.destination_auth[TOPIC] = {"topic-reader": [AuthAction.CONSUME]}
                auth.subscription_auth_roles["locked"] = ["ops"]

            await resources.update_policies("acme/ns", grant)
            checked = 0
            for role, allowed in ALLOWED.items():
                for name, kind, body, error_of in _requests():
                    conn = _connected()
                    session = Session(world.service, conn, lambda: None)
                    session.role = role
                    for event in conn.receive_data(encode_command(make_command(kind, body)), 0):
                        await session.handle(event)
                    await session.requests.settled()  # creations and lookups answer from their own tasks
                    replies = _replies(conn)
                    assert len(replies) == 1, (role, name, replies)
                    code = error_of(replies[0])
                    if name in allowed:
                        assert code is None, (role, name, replies[0])
                    else:
                        assert code == pb.AuthorizationError, (role, name, replies[0])
                    await session.close()
                    checked += 1
            assert checked == len(ALLOWED) * len(_requests())
        finally:
            await world.close()

    asyncio.run(main())
