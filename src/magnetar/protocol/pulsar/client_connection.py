"""The client side of one Pulsar connection, as a sans-IO state machine (the h11 pattern).

The mirror of ``connection.ServerConnection``: construct it (CONNECT is queued at once), write
what ``data_to_send()`` returns, feed received bytes with ``receive_data(data, now_ms)`` and
handle the typed events; call ``tick(now_ms)`` when ``next_deadline_ms()`` is reached. No
sockets, no clock: time is passed in by the caller.

States and transitions (``_TRANSITIONS`` is the only place a state changes)::

    CONNECTING --CONNECTED--> CONNECTED
    any --close / protocol error / handshake or keep-alive timeout--> CLOSED

Invariants and policies (shared/reference/pulsar_protocol.md sections 2 and 4):
* Nothing but CONNECTED is accepted before the handshake completes (the official client closes
  the socket on anything else, and so do we); server_version must be present.
* Only commands a client may send can be queued (``CLIENT_SENT_TYPES``); SEND carries a CRC32C
  block iff the negotiated protocol version is >= 6.
* PING is answered with PONG and AUTH_CHALLENGE with AUTH_RESPONSE here; the owner never sees
  them. Keep-alive follows the official client: every ``keep_alive_interval_ms`` of silence a
  PING is queued, and if nothing arrives within another interval the connection is terminated.
* Commands a client never receives (CONNECT, SEND, FLOW, REACHED_END_OF_TOPIC, ...) after the
  handshake are protocol violations: the connection is CLOSED.
* Queued outbound bytes are bounded by ``PULSAR_SEND_BUFFER_BYTES_MAX``.
"""

from __future__ import annotations

import enum
import struct
from dataclasses import dataclass

from magnetar.base.checksum import crc32c
from magnetar.base.errors import LimitExceededError
from magnetar.base.invariant import invariant
from magnetar.base.limits import PULSAR_MESSAGE_BYTES_MAX, PULSAR_SEND_BUFFER_BYTES_MAX
from magnetar.protocol.pulsar._receiving import FrameReceiver
from magnetar.protocol.pulsar.errors import (
    ConnectionClosedError,
    FrameChecksumMismatchError,
    ProtocolViolationError,
)
from magnetar.protocol.pulsar.frames import (
    MAGIC_CRC32C,
    Buffer,
    Frame,
    FrameDecoder,
    MessagePayload,
    encode_command,
    payload_frame_parts,
    type_name,
)
from magnetar.protocol.pulsar.generated import pulsar_api_pb2 as pb

T = pb.BaseCommand
_MAGIC_CRC = struct.Struct(">HI")

CLIENT_PROTOCOL_VERSION = 20  # what the official 4.2.0 client sends (v20 "topic migration")
CHECKSUM_PROTOCOL_VERSION_MIN = 6  # SEND carries CRC32C from this version on
KEEP_ALIVE_INTERVAL_MS = 30_000
HANDSHAKE_TIMEOUT_MS = 10_000

# Everything the official client sends (section 2.3); nothing else goes out of a client.
CLIENT_SENT_TYPES = frozenset({
    T.PING, T.PONG, T.PARTITIONED_METADATA, T.LOOKUP, T.PRODUCER, T.SEND, T.CLOSE_PRODUCER,
    T.SUBSCRIBE, T.FLOW, T.ACK, T.REDELIVER_UNACKNOWLEDGED_MESSAGES, T.UNSUBSCRIBE, T.SEEK,
    T.CLOSE_CONSUMER, T.GET_LAST_MESSAGE_ID, T.GET_TOPICS_OF_NAMESPACE, T.GET_SCHEMA, T.AUTH_RESPONSE,
    T.CONSUMER_STATS,
})

# Replies matched to a pending request by their request_id.
RESPONSE_TYPES = frozenset({
    T.SUCCESS, T.ERROR, T.PRODUCER_SUCCESS, T.PARTITIONED_METADATA_RESPONSE, T.LOOKUP_RESPONSE,
    T.GET_LAST_MESSAGE_ID_RESPONSE, T.GET_TOPICS_OF_NAMESPACE_RESPONSE, T.GET_SCHEMA_RESPONSE,
    T.ACK_RESPONSE, T.CONSUMER_STATS_RESPONSE,
})


@dataclass(frozen=True, slots=True)
class ClientConfig:
    client_version: str = "Magnetar-Client-0.1.0"
    protocol_version: int = CLIENT_PROTOCOL_VERSION
    auth_method_name: str = "none"
    auth_data: bytes | None = None
    keep_alive_interval_ms: int = KEEP_ALIVE_INTERVAL_MS
    handshake_timeout_ms: int = HANDSHAKE_TIMEOUT_MS
    proxy_to_broker_url: str | None = None


class State(enum.Enum):
    CONNECTING = "connecting"  # CONNECT queued, CONNECTED not yet received
    CONNECTED = "connected"
    CLOSED = "closed"


class Trigger(enum.Enum):
    RECEIVE_CONNECTED = "receive_connected"
    RECEIVE_COMMAND = "receive_command"
    SEND_COMMAND = "send_command"
    CLOSE = "close"


_TRANSITIONS: dict[tuple[State, Trigger], State] = {
    (State.CONNECTING, Trigger.RECEIVE_CONNECTED): State.CONNECTED,
    (State.CONNECTED, Trigger.RECEIVE_COMMAND): State.CONNECTED,
    (State.CONNECTED, Trigger.SEND_COMMAND): State.CONNECTED,
    (State.CONNECTING, Trigger.CLOSE): State.CLOSED,
    (State.CONNECTED, Trigger.CLOSE): State.CLOSED,
    (State.CLOSED, Trigger.CLOSE): State.CLOSED,
}


# --- events ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Connected:
    server_version: str
    protocol_version: int
    max_message_size_bytes: int


@dataclass(frozen=True, slots=True)
class Response:
    """A reply to a request; ``body`` is the sub-message, ``request_id`` its id."""

    type: int
    request_id: int
    body: object


@dataclass(frozen=True, slots=True)
class SendReceipt:
    producer_id: int
    sequence_id: int
    message_id: pb.MessageIdData


@dataclass(frozen=True, slots=True)
class SendError:
    producer_id: int
    sequence_id: int
    error: int
    message: str


@dataclass(frozen=True, slots=True)
class MessageReceived:
    consumer_id: int
    command: pb.CommandMessage
    message: MessagePayload


@dataclass(frozen=True, slots=True)
class CorruptMessage:
    """A MESSAGE whose checksum did not match: the client acks it with a validation error."""

    consumer_id: int
    message_id: pb.MessageIdData


@dataclass(frozen=True, slots=True)
class ProducerClosedByBroker:
    producer_id: int
    assigned_broker_url: str | None


@dataclass(frozen=True, slots=True)
class ConsumerClosedByBroker:
    consumer_id: int
    assigned_broker_url: str | None


@dataclass(frozen=True, slots=True)
class ActiveConsumerChange:
    consumer_id: int
    is_active: bool


@dataclass(frozen=True, slots=True)
class ConnectionTerminated:
    """The machine closed the connection (handshake or keep-alive timeout)."""

    reason: str


Event = (Connected | Response | SendReceipt | SendError | MessageReceived | CorruptMessage
         | ProducerClosedByBroker | ConsumerClosedByBroker | ActiveConsumerChange | ConnectionTerminated)


def connect_command(config: ClientConfig) -> pb.BaseCommand:
    body = pb.CommandConnect(
        client_version=config.client_version, protocol_version=config.protocol_version,
        auth_method_name=config.auth_method_name,
        feature_flags=pb.FeatureFlags(supports_auth_refresh=True, supports_broker_entry_metadata=True),
    )
    if config.auth_data is not None:
        body.auth_data = config.auth_data
    if config.proxy_to_broker_url is not None:
        body.proxy_to_broker_url = config.proxy_to_broker_url
    return T(type=T.CONNECT, connect=body)


class ClientConnection(FrameReceiver[Event]):
    """Protocol state of one connection to a broker, client side."""

    def __init__(self, now_ms: int, config: ClientConfig | None = None) -> None:
        self.config = config or ClientConfig()
        self._state = State.CONNECTING
        self._decoder = FrameDecoder()
        self._out: list[Buffer] = []
        self._out_bytes = 0
        self._handshake_deadline_ms = now_ms + self.config.handshake_timeout_ms
        self._last_received_ms = now_ms
        self._ping_sent_ms: int | None = None
        self.protocol_version = 0
        self.server_version = ""
        self.max_message_size_bytes = PULSAR_MESSAGE_BYTES_MAX
        self.close_reason: str | None = None
        self._queue(encode_command(connect_command(self.config)))

    # --- state ---------------------------------------------------------------------------

    @property
    def state(self) -> State:
        return self._state

    def _transition(self, trigger: Trigger) -> None:
        target = _TRANSITIONS.get((self._state, trigger))
        if target is None:
            if self._state is State.CLOSED:
                raise ConnectionClosedError(f"connection closed ({self.close_reason}); cannot {trigger.value}")
            raise ProtocolViolationError(f"{trigger.value} is not allowed in state {self._state.value}")
        self._state = target

    def close(self, reason: str = "closed by client") -> None:
        if self._state is not State.CLOSED:
            self.close_reason = reason
        self._transition(Trigger.CLOSE)

    def _violation(self, message: str) -> ProtocolViolationError:
        self.close(f"protocol violation: {message}")
        return ProtocolViolationError(message)

    # --- receiving -----------------------------------------------------------------------

    def _is_open(self) -> bool:
        return self._state is not State.CLOSED

    def _checksum_failure(self, error: FrameChecksumMismatchError) -> Event:
        command = error.command
        if command is None or command.type != T.MESSAGE or self._state is not State.CONNECTED:
            raise self._violation(f"checksum mismatch outside a MESSAGE: {error}")
        return CorruptMessage(command.message.consumer_id, command.message.message_id)

    def _handle(self, frame: Frame) -> Event | None:
        kind = frame.type
        if self._state is State.CONNECTING:
            if kind != T.CONNECTED:
                raise self._violation(f"{type_name(kind)} before CONNECTED")
            return self._on_connected(frame.command.connected)
        self._transition(Trigger.RECEIVE_COMMAND)
        command = frame.command
        if kind == T.PING:
            self._send(pb.BaseCommand(type=T.PONG, pong=pb.CommandPong()))
            return None
        if kind == T.PONG:
            return None
        if kind == T.AUTH_CHALLENGE:
            self._answer_challenge()
            return None
        if kind in RESPONSE_TYPES:
            field = _RESPONSE_FIELDS[kind]
            if not command.HasField(field):
                raise self._violation(f"{type_name(kind)} without its body")
            body = getattr(command, field)
            return Response(kind, int(body.request_id), body)
        if kind == T.MESSAGE:
            invariant(frame.message is not None, "the decoder guarantees a MESSAGE has a payload")
            assert frame.message is not None
            return MessageReceived(command.message.consumer_id, command.message, frame.message)
        if kind == T.SEND_RECEIPT:
            receipt = command.send_receipt
            return SendReceipt(receipt.producer_id, receipt.sequence_id, receipt.message_id)
        if kind == T.SEND_ERROR:
            failure = command.send_error
            return SendError(failure.producer_id, failure.sequence_id, failure.error, failure.message)
        if kind == T.CLOSE_PRODUCER:
            close = command.close_producer
            url = close.assignedBrokerServiceUrl if close.HasField("assignedBrokerServiceUrl") else None
            return ProducerClosedByBroker(close.producer_id, url)
        if kind == T.CLOSE_CONSUMER:
            closec = command.close_consumer
            url = closec.assignedBrokerServiceUrl if closec.HasField("assignedBrokerServiceUrl") else None
            return ConsumerClosedByBroker(closec.consumer_id, url)
        if kind == T.ACTIVE_CONSUMER_CHANGE:
            change = command.active_consumer_change
            return ActiveConsumerChange(change.consumer_id, change.is_active)
        raise self._violation(f"{type_name(kind)} is not a command a client accepts")

    def _on_connected(self, connected: pb.CommandConnected) -> Event:
        if not connected.HasField("server_version"):
            raise self._violation("CONNECTED without server_version")
        self._transition(Trigger.RECEIVE_CONNECTED)
        self.server_version = connected.server_version
        self.protocol_version = max(0, min(self.config.protocol_version, connected.protocol_version))
        if connected.HasField("max_message_size") and connected.max_message_size > 0:
            self.max_message_size_bytes = min(connected.max_message_size, PULSAR_MESSAGE_BYTES_MAX)
        return Connected(self.server_version, self.protocol_version, self.max_message_size_bytes)

    def _answer_challenge(self) -> None:
        body = pb.CommandAuthResponse(
            client_version=self.config.client_version,
            response=pb.AuthData(auth_method_name=self.config.auth_method_name,
                                 auth_data=self.config.auth_data or b""),
        )
        self._send(pb.BaseCommand(type=T.AUTH_RESPONSE, authResponse=body))

    # --- time ----------------------------------------------------------------------------

    def next_deadline_ms(self) -> int | None:
        if self._state is State.CONNECTING:
            return self._handshake_deadline_ms
        if self._state is State.CONNECTED:
            if self._ping_sent_ms is not None:
                return self._ping_sent_ms + self.config.keep_alive_interval_ms
            return self._last_received_ms + self.config.keep_alive_interval_ms
        return None

    def tick(self, now_ms: int) -> list[Event]:
        """Run the handshake and keep-alive timers; may queue a PING or terminate the connection."""
        if self._state is State.CONNECTING:
            if now_ms >= self._handshake_deadline_ms:
                self.close("handshake timeout")
                return [ConnectionTerminated("handshake timeout")]
            return []
        if self._state is not State.CONNECTED:
            return []
        interval = self.config.keep_alive_interval_ms
        if self._ping_sent_ms is not None:
            if now_ms - self._ping_sent_ms >= interval:
                self.close("keep-alive timeout")
                return [ConnectionTerminated("keep-alive timeout")]
        elif now_ms - self._last_received_ms >= interval and self.protocol_version >= 1:
            self._send(pb.BaseCommand(type=T.PING, ping=pb.CommandPing()))
            self._ping_sent_ms = now_ms
        return []

    # --- sending -------------------------------------------------------------------------

    @property
    def outbound_bytes(self) -> int:
        return self._out_bytes

    @property
    def checksum_enabled(self) -> bool:
        return self.protocol_version >= CHECKSUM_PROTOCOL_VERSION_MIN

    def data_to_send(self) -> list[Buffer]:
        out, self._out, self._out_bytes = self._out, [], 0
        return out

    def _queue(self, *parts: Buffer) -> None:
        size = sum(len(p) for p in parts)
        if self._out_bytes + size > PULSAR_SEND_BUFFER_BYTES_MAX:
            raise LimitExceededError("PULSAR_SEND_BUFFER_BYTES_MAX", self._out_bytes + size, PULSAR_SEND_BUFFER_BYTES_MAX)
        self._out.extend(parts)
        self._out_bytes += size

    def _send(self, command: pb.BaseCommand) -> None:
        invariant(command.type in CLIENT_SENT_TYPES and command.type != T.SEND,
                  f"a client does not send {type_name(command.type)} as a simple command")
        self._transition(Trigger.SEND_COMMAND)
        self._queue(encode_command(command))

    def send_command(self, command: pb.BaseCommand) -> None:
        """Queue a simple command (anything a client sends except SEND)."""
        self._send(command)

    def send_message(self, command: pb.BaseCommand, metadata_and_payload: Buffer) -> None:
        """Queue a SEND. ``metadata_and_payload`` is ``[metadata_size][metadata][payload]``
        (no checksum block): the CRC32C block is added iff the negotiated version asks for it."""
        invariant(command.type == T.SEND, "send_message only sends SEND")
        self._transition(Trigger.SEND_COMMAND)
        if self.checksum_enabled:
            block = _MAGIC_CRC.pack(MAGIC_CRC32C, crc32c(metadata_and_payload))
            header, body = payload_frame_parts(command, block + bytes(metadata_and_payload))
        else:
            header, body = payload_frame_parts(command, metadata_and_payload)
        self._queue(header, body)


_RESPONSE_FIELDS: dict[int, str] = {
    T.SUCCESS: "success", T.ERROR: "error", T.PRODUCER_SUCCESS: "producer_success",
    T.PARTITIONED_METADATA_RESPONSE: "partitionMetadataResponse", T.LOOKUP_RESPONSE: "lookupTopicResponse",
    T.GET_LAST_MESSAGE_ID_RESPONSE: "getLastMessageIdResponse",
    T.GET_TOPICS_OF_NAMESPACE_RESPONSE: "getTopicsOfNamespaceResponse",
    T.GET_SCHEMA_RESPONSE: "getSchemaResponse", T.ACK_RESPONSE: "ackResponse",
    T.CONSUMER_STATS_RESPONSE: "consumerStatsResponse",
}
