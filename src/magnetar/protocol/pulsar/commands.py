"""Builders for the commands a broker sends, shaped the way the official client expects them.

Pure functions returning ``BaseCommand`` objects; ``frames.encode_command`` turns them into bytes
and ``connection.ServerConnection`` wraps each in a state-checked ``send_*`` method.

Quirks of the official C++ 4.2.0 client these builders encode (shared/reference/pulsar_protocol.md):
* PARTITIONED_METADATA_RESPONSE and LOOKUP_RESPONSE always set ``response``: absent means failure.
  Errors for those requests (and GET_SCHEMA) travel in the response command, never as ERROR,
  which the client would not match to the request.
* PRODUCER_SUCCESS always carries ``producer_name`` (required; the client stamps it into every
  later message and reuses it on reconnect).
* Only commands in ``CLIENT_ACCEPTED_TYPES`` may be sent: anything else (REACHED_END_OF_TOPIC
  included) makes the client drop the connection.
"""

from __future__ import annotations

from collections.abc import Iterable

from magnetar.protocol.pulsar.generated import pulsar_api_pb2 as pb

T = pb.BaseCommand

# What the 4.2.0 client handles after CONNECTED; everything else makes it close the connection.
CLIENT_ACCEPTED_TYPES = frozenset({
    T.CONNECTED, T.SEND_RECEIPT, T.SEND_ERROR, T.SUCCESS, T.ERROR, T.PARTITIONED_METADATA_RESPONSE,
    T.LOOKUP_RESPONSE, T.PRODUCER_SUCCESS, T.CLOSE_PRODUCER, T.CLOSE_CONSUMER, T.PING, T.PONG,
    T.AUTH_CHALLENGE, T.ACTIVE_CONSUMER_CHANGE, T.GET_LAST_MESSAGE_ID_RESPONSE,
    T.GET_TOPICS_OF_NAMESPACE_RESPONSE, T.GET_SCHEMA_RESPONSE, T.ACK_RESPONSE, T.CONSUMER_STATS_RESPONSE,
    T.TOPIC_MIGRATED, T.MESSAGE,
})

# Unsigned 64-bit ids the client uses for MessageId.earliest and MessageId.latest.
EARLIEST_ID_U64 = 0xFFFF_FFFF_FFFF_FFFF
LATEST_ID_U64 = 0x7FFF_FFFF_FFFF_FFFF


def message_id(
    ledger_id: int, entry_id: int, partition: int | None = None, batch_index: int | None = None,
    ack_set: Iterable[int] = (), batch_size: int | None = None,
) -> pb.MessageIdData:
    """A MessageIdData. ``(-1, -1)`` is written as all-ones u64, as Java writes it."""
    out = pb.MessageIdData(ledgerId=ledger_id & EARLIEST_ID_U64, entryId=entry_id & EARLIEST_ID_U64)
    if partition is not None:
        out.partition = partition
    if batch_index is not None:
        out.batch_index = batch_index
    if batch_size is not None:
        out.batch_size = batch_size
    out.ack_set.extend(ack_set)
    return out


def connected(server_version: str, protocol_version: int, max_message_size: int) -> pb.BaseCommand:
    flags = pb.FeatureFlags(supports_topic_watchers=False)
    body = pb.CommandConnected(
        server_version=server_version, protocol_version=protocol_version,
        max_message_size=max_message_size, feature_flags=flags,
    )
    return T(type=T.CONNECTED, connected=body)


def ping() -> pb.BaseCommand:
    return T(type=T.PING, ping=pb.CommandPing())


def pong() -> pb.BaseCommand:
    return T(type=T.PONG, pong=pb.CommandPong())


def success(request_id: int, schema: pb.Schema | None = None) -> pb.BaseCommand:
    body = pb.CommandSuccess(request_id=request_id)
    if schema is not None:
        body.schema.CopyFrom(schema)
    return T(type=T.SUCCESS, success=body)


def error(request_id: int, code: int, message: str) -> pb.BaseCommand:
    return T(type=T.ERROR, error=pb.CommandError(request_id=request_id, error=code, message=message))  # type: ignore[arg-type]


def partitioned_metadata(request_id: int, partitions: int) -> pb.BaseCommand:
    body = pb.CommandPartitionedTopicMetadataResponse(
        request_id=request_id, partitions=partitions,
        response=pb.CommandPartitionedTopicMetadataResponse.Success,
    )
    return T(type=T.PARTITIONED_METADATA_RESPONSE, partitionMetadataResponse=body)


def partitioned_metadata_error(request_id: int, code: int, message: str) -> pb.BaseCommand:
    body = pb.CommandPartitionedTopicMetadataResponse(
        request_id=request_id, response=pb.CommandPartitionedTopicMetadataResponse.Failed,
        error=code, message=message,  # type: ignore[arg-type]
    )
    return T(type=T.PARTITIONED_METADATA_RESPONSE, partitionMetadataResponse=body)


def lookup_connect(
    request_id: int, broker_url: str, broker_url_tls: str | None = None, authoritative: bool = True,
) -> pb.BaseCommand:
    """LOOKUP answered with "connect here": the client opens (or reuses) a connection keyed by the URL string."""
    body = pb.CommandLookupTopicResponse(
        request_id=request_id, response=pb.CommandLookupTopicResponse.Connect,
        brokerServiceUrl=broker_url, authoritative=authoritative, proxy_through_service_url=False,
    )
    if broker_url_tls is not None:
        body.brokerServiceUrlTls = broker_url_tls
    return T(type=T.LOOKUP_RESPONSE, lookupTopicResponse=body)


def lookup_redirect(
    request_id: int, broker_url: str, broker_url_tls: str | None = None, authoritative: bool = False,
) -> pb.BaseCommand:
    """LOOKUP answered with "ask there": the client re-sends LOOKUP to ``broker_url`` (at most 20 hops)."""
    body = pb.CommandLookupTopicResponse(
        request_id=request_id, response=pb.CommandLookupTopicResponse.Redirect,
        brokerServiceUrl=broker_url, authoritative=authoritative,
    )
    if broker_url_tls is not None:
        body.brokerServiceUrlTls = broker_url_tls
    return T(type=T.LOOKUP_RESPONSE, lookupTopicResponse=body)


def lookup_error(request_id: int, code: int, message: str) -> pb.BaseCommand:
    """A failed lookup. ServiceNotReady / TooManyRequests make the client close the connection."""
    body = pb.CommandLookupTopicResponse(
        request_id=request_id, response=pb.CommandLookupTopicResponse.Failed, error=code, message=message,  # type: ignore[arg-type]
    )
    return T(type=T.LOOKUP_RESPONSE, lookupTopicResponse=body)


def producer_success(
    request_id: int, producer_name: str, last_sequence_id: int = -1, schema_version: bytes | None = None,
    topic_epoch: int | None = None, producer_ready: bool = True,
) -> pb.BaseCommand:
    body = pb.CommandProducerSuccess(
        request_id=request_id, producer_name=producer_name, last_sequence_id=last_sequence_id,
        producer_ready=producer_ready,
    )
    if schema_version is not None:
        body.schema_version = schema_version
    if topic_epoch is not None:
        body.topic_epoch = topic_epoch
    return T(type=T.PRODUCER_SUCCESS, producer_success=body)


def send_receipt(
    producer_id: int, sequence_id: int, ledger_id: int, entry_id: int, highest_sequence_id: int | None = None,
) -> pb.BaseCommand:
    """Receipts must follow SEND order per producer; the client closes the connection otherwise."""
    body = pb.CommandSendReceipt(
        producer_id=producer_id, sequence_id=sequence_id, message_id=message_id(ledger_id, entry_id),
    )
    if highest_sequence_id is not None:
        body.highest_sequence_id = highest_sequence_id
    return T(type=T.SEND_RECEIPT, send_receipt=body)


def send_error(producer_id: int, sequence_id: int, code: int, message: str) -> pb.BaseCommand:
    """Any code but ChecksumError makes the client close the connection and resend everything."""
    body = pb.CommandSendError(producer_id=producer_id, sequence_id=sequence_id, error=code, message=message)  # type: ignore[arg-type]
    return T(type=T.SEND_ERROR, send_error=body)


def message(
    consumer_id: int, msg_id: pb.MessageIdData, redelivery_count: int = 0, ack_set: Iterable[int] = (),
    consumer_epoch: int | None = None,
) -> pb.BaseCommand:
    """MESSAGE command (its payload goes in the frame). ``redelivery_count`` is only set when > 0, as Java does."""
    body = pb.CommandMessage(consumer_id=consumer_id)
    body.message_id.CopyFrom(msg_id)
    if redelivery_count > 0:
        body.redelivery_count = redelivery_count
    body.ack_set.extend(ack_set)
    if consumer_epoch is not None and consumer_epoch > -1:
        body.consumer_epoch = consumer_epoch
    return T(type=T.MESSAGE, message=body)


def close_producer(producer_id: int, request_id: int = 0, assigned_url: str | None = None,
                   assigned_url_tls: str | None = None) -> pb.BaseCommand:
    body = pb.CommandCloseProducer(producer_id=producer_id, request_id=request_id)
    if assigned_url is not None:
        body.assignedBrokerServiceUrl = assigned_url
    if assigned_url_tls is not None:
        body.assignedBrokerServiceUrlTls = assigned_url_tls
    return T(type=T.CLOSE_PRODUCER, close_producer=body)


def close_consumer(consumer_id: int, request_id: int = 0, assigned_url: str | None = None,
                   assigned_url_tls: str | None = None) -> pb.BaseCommand:
    body = pb.CommandCloseConsumer(consumer_id=consumer_id, request_id=request_id)
    if assigned_url is not None:
        body.assignedBrokerServiceUrl = assigned_url
    if assigned_url_tls is not None:
        body.assignedBrokerServiceUrlTls = assigned_url_tls
    return T(type=T.CLOSE_CONSUMER, close_consumer=body)


def active_consumer_change(consumer_id: int, is_active: bool) -> pb.BaseCommand:
    body = pb.CommandActiveConsumerChange(consumer_id=consumer_id, is_active=is_active)
    return T(type=T.ACTIVE_CONSUMER_CHANGE, active_consumer_change=body)


def get_last_message_id_response(
    request_id: int, last_message_id: pb.MessageIdData, mark_delete_position: pb.MessageIdData | None,
) -> pb.BaseCommand:
    """Include the mark-delete position: without it ``has_message_available()`` misbehaves for readers."""
    body = pb.CommandGetLastMessageIdResponse(request_id=request_id)
    body.last_message_id.CopyFrom(last_message_id)
    if mark_delete_position is not None:
        body.consumer_mark_delete_position.CopyFrom(mark_delete_position)
    return T(type=T.GET_LAST_MESSAGE_ID_RESPONSE, getLastMessageIdResponse=body)


def get_topics_of_namespace_response(
    request_id: int, topics: Iterable[str], filtered: bool = False, topics_hash: str | None = None,
) -> pb.BaseCommand:
    body = pb.CommandGetTopicsOfNamespaceResponse(request_id=request_id, filtered=filtered, changed=True)
    body.topics.extend(topics)
    if topics_hash is not None:
        body.topics_hash = topics_hash
    return T(type=T.GET_TOPICS_OF_NAMESPACE_RESPONSE, getTopicsOfNamespaceResponse=body)


def get_schema_response(request_id: int, schema: pb.Schema, schema_version: bytes) -> pb.BaseCommand:
    body = pb.CommandGetSchemaResponse(request_id=request_id, schema_version=schema_version)
    body.schema.CopyFrom(schema)
    return T(type=T.GET_SCHEMA_RESPONSE, getSchemaResponse=body)


def get_schema_error(request_id: int, code: int, message: str) -> pb.BaseCommand:
    """A missing schema is ``TopicNotFound``; the client logs it quietly."""
    body = pb.CommandGetSchemaResponse(request_id=request_id, error_code=code, error_message=message)  # type: ignore[arg-type]
    return T(type=T.GET_SCHEMA_RESPONSE, getSchemaResponse=body)


def get_or_create_schema_response(request_id: int, schema_version: bytes | None = None, code: int | None = None,
                                  message: str | None = None) -> pb.BaseCommand:
    """Only as the reply to a GET_OR_CREATE_SCHEMA (sent by Java clients; the 4.2.0 client never
    sends one and would drop the connection on this reply)."""
    body = pb.CommandGetOrCreateSchemaResponse(request_id=request_id)
    if schema_version is not None:
        body.schema_version = schema_version
    if code is not None:
        body.error_code = code  # type: ignore[assignment]
        body.error_message = message or ""
    return T(type=T.GET_OR_CREATE_SCHEMA_RESPONSE, getOrCreateSchemaResponse=body)


def auth_challenge(server_version: str, auth_method_name: str, challenge: bytes,
                   protocol_version: int) -> pb.BaseCommand:
    """Only after CONNECTED (before it the client closes) and only to clients with supports_auth_refresh."""
    body = pb.CommandAuthChallenge(
        server_version=server_version, protocol_version=protocol_version,
        challenge=pb.AuthData(auth_method_name=auth_method_name, auth_data=challenge),
    )
    return T(type=T.AUTH_CHALLENGE, authChallenge=body)


def ack_response(consumer_id: int, request_id: int, code: int | None = None, message: str | None = None) -> pb.BaseCommand:
    """Only for an ACK that carried a request_id (the Python client never sets one)."""
    body = pb.CommandAckResponse(consumer_id=consumer_id, request_id=request_id)
    if code is not None:
        body.error = code  # type: ignore[assignment]
    if message is not None:
        body.message = message
    return T(type=T.ACK_RESPONSE, ackResponse=body)


def consumer_stats_error(request_id: int, code: int, message: str) -> pb.BaseCommand:
    body = pb.CommandConsumerStatsResponse(request_id=request_id, error_code=code, error_message=message)  # type: ignore[arg-type]
    return T(type=T.CONSUMER_STATS_RESPONSE, consumerStatsResponse=body)
