"""The schema against the published field numbers, and the generated code against the schema."""

from __future__ import annotations

import filecmp
import shutil
import subprocess
from pathlib import Path

import pytest

from magnetar.protocol.pulsar import pb
from magnetar.protocol.pulsar.frames import BODY_FIELD_BY_TYPE
from tests.conftest import REPO

GENERATED = REPO / "src" / "magnetar" / "protocol" / "pulsar" / "generated"
T = pb.BaseCommand

# BaseCommand body field per type, as shared/reference/pulsar_protocol.md 2.1 lists them.
PUBLISHED_BODIES = {
    2: "connect", 3: "connected", 4: "subscribe", 5: "producer", 6: "send", 7: "send_receipt", 8: "send_error",
    9: "message", 10: "ack", 11: "flow", 12: "unsubscribe", 13: "success", 14: "error", 15: "close_producer",
    16: "close_consumer", 17: "producer_success", 18: "ping", 19: "pong", 20: "redeliverUnacknowledgedMessages",
    21: "partitionMetadata", 22: "partitionMetadataResponse", 23: "lookupTopic", 24: "lookupTopicResponse",
    25: "consumerStats", 26: "consumerStatsResponse", 27: "reachedEndOfTopic", 28: "seek", 29: "getLastMessageId",
    30: "getLastMessageIdResponse", 31: "active_consumer_change", 32: "getTopicsOfNamespace",
    33: "getTopicsOfNamespaceResponse", 34: "getSchema", 35: "getSchemaResponse", 36: "authChallenge",
    37: "authResponse", 38: "ackResponse", 39: "getOrCreateSchema", 40: "getOrCreateSchemaResponse",
    64: "watchTopicList", 65: "watchTopicListSuccess", 66: "watchTopicUpdate", 67: "watchTopicListClose",
    68: "topicMigrated",
}

R, O, REP = "required", "optional", "repeated"  # noqa: E741

# (message, field, number, label) spot checks from the fact sheet, where a mistake would break the client.
PUBLISHED_FIELDS = [
    ("MessageIdData", "ledgerId", 1, R), ("MessageIdData", "entryId", 2, R), ("MessageIdData", "ack_set", 5, REP),
    ("CommandConnect", "client_version", 1, R), ("CommandConnect", "protocol_version", 4, O),
    ("CommandConnect", "feature_flags", 10, O), ("CommandConnected", "server_version", 1, R),
    ("CommandConnected", "protocol_version", 2, O), ("CommandConnected", "max_message_size", 3, O),
    ("CommandPartitionedTopicMetadataResponse", "request_id", 2, R),
    ("CommandPartitionedTopicMetadataResponse", "response", 3, O),
    ("CommandLookupTopic", "advertised_listener_name", 7, O), ("CommandLookupTopicResponse", "request_id", 4, R),
    ("CommandLookupTopicResponse", "proxy_through_service_url", 8, O),
    ("CommandProducer", "producer_access_mode", 10, O), ("CommandProducer", "initial_subscription_name", 13, O),
    ("CommandProducerSuccess", "producer_name", 2, R), ("CommandProducerSuccess", "producer_ready", 6, O),
    ("CommandSend", "num_messages", 3, O), ("CommandSend", "message_id", 9, O),
    ("CommandSendReceipt", "message_id", 3, O), ("CommandSendError", "message", 4, R),
    ("CommandSubscribe", "subType", 3, R), ("CommandSubscribe", "start_message_id", 9, O),
    ("CommandSubscribe", "initialPosition", 13, O), ("CommandSubscribe", "keySharedMeta", 17, O),
    ("CommandSubscribe", "consumer_epoch", 19, O), ("CommandFlow", "messagePermits", 2, R),
    ("CommandMessage", "ack_set", 4, REP), ("CommandAck", "ack_type", 2, R), ("CommandAck", "request_id", 8, O),
    ("CommandSeek", "message_publish_time", 4, O), ("CommandGetLastMessageIdResponse", "last_message_id", 1, R),
    ("CommandGetLastMessageIdResponse", "consumer_mark_delete_position", 3, O),
    ("CommandGetTopicsOfNamespace", "namespace", 2, R), ("CommandGetSchemaResponse", "schema_version", 5, O),
    ("CommandConsumerStats", "consumer_id", 4, R), ("CommandConsumerStatsResponse", "messageAckRate", 16, O),
    ("MessageMetadata", "publish_time", 3, R), ("MessageMetadata", "num_messages_in_batch", 11, O),
    ("MessageMetadata", "ordering_key", 18, O), ("MessageMetadata", "null_partition_key", 30, O),
    ("SingleMessageMetadata", "payload_size", 3, R), ("SingleMessageMetadata", "sequence_id", 8, O),
    ("Schema", "schema_data", 3, R), ("Schema", "type", 4, R), ("KeySharedMeta", "hashRanges", 3, REP),
]


def test_body_fields_match_the_published_table() -> None:
    assert BODY_FIELD_BY_TYPE == PUBLISHED_BODIES
    without_body = {v.number for v in T.Type.DESCRIPTOR.values} - set(PUBLISHED_BODIES)
    assert without_body == set(range(50, 64))  # transactions: no client we serve sends them


@pytest.mark.parametrize(("message", "field", "number", "label"), PUBLISHED_FIELDS)
def test_published_field_numbers_and_labels(message: str, field: str, number: int, label: str) -> None:
    descriptor = getattr(pb, message).DESCRIPTOR.fields_by_name[field]
    actual = "required" if descriptor.is_required else "repeated" if descriptor.is_repeated else "optional"
    assert (descriptor.number, actual) == (number, label)


def test_defaults_the_client_relies_on() -> None:
    assert pb.MessageIdData(ledgerId=1, entryId=1).partition == -1
    assert pb.CommandProducerSuccess().last_sequence_id == -1
    assert pb.CommandProducerSuccess().producer_ready is True
    assert pb.CommandSubscribe().durable is True
    # presence of num_messages_in_batch (even = default 1) survives a round trip: it marks a batch
    metadata = pb.MessageMetadata(producer_name="p", sequence_id=0, publish_time=0, num_messages_in_batch=1)
    assert pb.MessageMetadata.FromString(metadata.SerializeToString()).HasField("num_messages_in_batch")


def _generate(into: Path) -> None:
    subprocess.run(["bash", str(REPO / "scripts" / "gen_proto.sh"), str(into)], check=True, timeout=120)


def differing_files(expected: Path, actual: Path) -> list[str]:
    names = sorted({p.name for p in expected.iterdir() if p.is_file() and p.suffix in (".py", ".pyi")}
                   | {p.name for p in actual.iterdir() if p.is_file() and p.suffix in (".py", ".pyi")})
    return [n for n in names if not (expected / n).exists() or not (actual / n).exists()
            or not filecmp.cmp(expected / n, actual / n, shallow=False)]


def test_generated_code_has_not_drifted(tmp_path: Path) -> None:
    _generate(tmp_path)
    assert differing_files(GENERATED, tmp_path) == [], "run scripts/gen_proto.sh and commit the result"


def test_drift_check_catches_an_edit(tmp_path: Path) -> None:
    copy = tmp_path / "copy"
    shutil.copytree(GENERATED, copy, ignore=shutil.ignore_patterns("__pycache__"))
    assert differing_files(GENERATED, copy) == []
    with (copy / "pulsar_api_pb2.py").open("a") as handle:
        handle.write("# hand edit\n")
    assert differing_files(GENERATED, copy) == ["pulsar_api_pb2.py"]
