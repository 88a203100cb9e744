"""The broker side of one Pulsar client connection, as a sans-IO state machine (the h11 pattern).

Feed received bytes with ``receive_data(data, now_ms)`` and get typed events; call ``tick(now_ms)``
when ``next_deadline_ms()`` is reached; build replies with the ``send_*`` methods; write what
``data_to_send()`` returns. No sockets, no clock: time is passed in by the caller.

States and transitions (``_TRANSITIONS`` is the only place a state changes)::

    AWAITING_CONNECT --CONNECT--> CONNECTING --accept--> CONNECTED
                                             --reject--> CLOSED
    any --close / protocol error / handshake or keep-alive timeout--> CLOSED

With ``ServerConfig.auto_accept_connect`` (the default, no authentication) CONNECT is answered with
CONNECTED at once. Otherwise the broker inspects the ``ClientConnected`` event and calls
``accept_connect()`` or ``reject_connect()``. The official client closes the socket on anything
but CONNECTED before the handshake completes, so no command may be sent while CONNECTING.

Invariants and policies:
* Nothing but CONNECT is accepted before CONNECTED (``ProtocolViolationError``, state CLOSED).
* CONNECTED.protocol_version = min(PROTOCOL_VERSION_MAX, client's); server_version and
  max_message_size are always present (a missing version silently disables the client's pings,
  checksums, nack redelivery and getLastMessageId).
* PING is answered with PONG here; the broker never sees it. When nothing has been received for
  ``keep_alive_interval_ms`` the machine queues a PING; if still nothing arrives within another
  interval it closes with ``ConnectionTerminated``.
* Commands only servers send (CONNECTED, MESSAGE, SEND_RECEIPT, ...) arriving from a client are
  protocol violations. Commands defined by the protocol but without a body in our schema
  (transactions) become ``UnsupportedCommand`` events; the connection stays usable.
* SEND, FLOW and ACK of a connected client are read without protobuf objects when they have the
  common shape (``fast_decode``), else through protobuf: the same events (``SendReceived``,
  ``FlowReceived``, ``AckReceived``) and the same errors either way.
* Only commands the 4.2.0 client accepts can be queued (``commands.CLIENT_ACCEPTED_TYPES``).
* Queued outbound bytes are bounded by ``PULSAR_SEND_BUFFER_BYTES_MAX``; ``outbound_bytes``
  lets the broker apply backpressure before it is reached.
"""

from __future__ import annotations

import enum
import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Final

from google.protobuf.message import Message

from magnetar.base.errors import LimitExceededError
from magnetar.base.invariant import invariant
from magnetar.base.limits import (
    PULSAR_FRAME_BYTES_MAX,
    PULSAR_GET_OR_CREATE_SCHEMA_PENDING_COUNT_MAX,
    PULSAR_MESSAGE_BYTES_MAX,
    PULSAR_SEND_BUFFER_BYTES_MAX,
)
from magnetar.protocol.pulsar import commands
from magnetar.protocol.pulsar._receiving import FrameReceiver
from magnetar.protocol.pulsar.errors import (
    ConnectionClosedError,
    FrameChecksumMismatchError,
    ProtocolViolationError,
)
from magnetar.protocol.pulsar.fast import encode_message_header, encode_send_receipt
from magnetar.protocol.pulsar.fast_decode import (
    ACK,
    FLOW,
    SEND,
    AckCommand,
    SendCommand,
    command_type,
    decode_ack,
    decode_flow,
    decode_send,
)
from magnetar.protocol.pulsar.frames import (
    BODY_FIELD_BY_TYPE,
    Buffer,
    Frame,
    FrameDecoder,
    MessagePayload,
    decode_message,
    encode_command,
    type_name,
)
from magnetar.protocol.pulsar.generated import pulsar_api_pb2 as pb

T = pb.BaseCommand
_COMMAND_SIZE: Final = struct.Struct(">I")

PROTOCOL_VERSION_MAX = 20  # v20 "topic migration": what the 4.2.0 client sends and Java answers
PROTOCOL_VERSION_PING_MIN = 1  # below this the client does not understand PING
KEEP_ALIVE_INTERVAL_MS = 30_000  # the client pings every 30 s; Java's broker default is the same
CONNECT_TIMEOUT_MS = 10_000  # a TCP connection that sends no CONNECT within this is dropped

# Requests a client may send after CONNECTED; each becomes a CommandReceived event.
# (SEND, FLOW and ACK become SendReceived, FlowReceived and AckReceived; PING/PONG are handled here.)
CLIENT_REQUEST_TYPES = frozenset({
    T.PARTITIONED_METADATA, T.LOOKUP, T.PRODUCER, T.CLOSE_PRODUCER, T.SUBSCRIBE,
    T.REDELIVER_UNACKNOWLEDGED_MESSAGES, T.UNSUBSCRIBE, T.SEEK, T.CLOSE_CONSUMER, T.GET_LAST_MESSAGE_ID,
    T.GET_TOPICS_OF_NAMESPACE, T.GET_SCHEMA, T.AUTH_RESPONSE, T.CONSUMER_STATS,
    # Sent by Java clients only; the broker may answer them with an error.
    T.GET_OR_CREATE_SCHEMA, T.WATCH_TOPIC_LIST, T.WATCH_TOPIC_LIST_CLOSE,
})


@dataclass(frozen=True, slots=True)
class ServerConfig:
    server_version: str = "Magnetar 0.1.0"
    max_message_size_bytes: int = PULSAR_MESSAGE_BYTES_MAX
    protocol_version_max: int = PROTOCOL_VERSION_MAX
    keep_alive_interval_ms: int = KEEP_ALIVE_INTERVAL_MS
    connect_timeout_ms: int = CONNECT_TIMEOUT_MS
    auto_accept_connect: bool = True


class State(enum.Enum):
    AWAITING_CONNECT = "awaiting_connect"
    CONNECTING = "connecting"  # CONNECT received, the broker has not accepted it yet
    CONNECTED = "connected"
    CLOSED = "closed"


class Trigger(enum.Enum):
    RECEIVE_CONNECT = "receive_connect"
    ACCEPT = "accept"
    REJECT = "reject"
    RECEIVE_COMMAND = "receive_command"
    SEND_COMMAND = "send_command"
    CLOSE = "close"  # by the broker, a protocol error, or a timeout


_TRANSITIONS: dict[tuple[State, Trigger], State] = {
    (State.AWAITING_CONNECT, Trigger.RECEIVE_CONNECT): State.CONNECTING,
    (State.CONNECTING, Trigger.ACCEPT): State.CONNECTED,
    (State.CONNECTING, Trigger.REJECT): State.CLOSED,
    (State.CONNECTED, Trigger.RECEIVE_COMMAND): State.CONNECTED,
    (State.CONNECTED, Trigger.SEND_COMMAND): State.CONNECTED,
    (State.AWAITING_CONNECT, Trigger.CLOSE): State.CLOSED,
    (State.CONNECTING, Trigger.CLOSE): State.CLOSED,
    (State.CONNECTED, Trigger.CLOSE): State.CLOSED,
    (State.CLOSED, Trigger.CLOSE): State.CLOSED,
}
# ``_transition``'s fast path relies on these two staying put:
invariant(_TRANSITIONS[(State.CONNECTED, Trigger.SEND_COMMAND)] is State.CONNECTED
          and _TRANSITIONS[(State.CONNECTED, Trigger.RECEIVE_COMMAND)] is State.CONNECTED,
          "commands keep a connected connection connected")


# --- events ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ClientFeatures:
    supports_auth_refresh: bool
    supports_broker_entry_metadata: bool
    supports_partial_producer: bool
    supports_topic_watchers: bool


@dataclass(frozen=True, slots=True)
class ClientConnected:
    """CONNECT arrived. With auto-accept, CONNECTED has already been queued."""

    client_version: str
    client_protocol_version: int
    protocol_version: int  # negotiated: min(PROTOCOL_VERSION_MAX, client's)
    auth_method_name: str | None
    auth_data: bytes | None
    features: ClientFeatures
    proxy_to_broker_url: str | None


@dataclass(frozen=True, slots=True)
class CommandReceived:
    """A request; ``body`` is the sub-message (``pb.CommandProducer``, ``pb.CommandFlow``, ...)."""

    type: int
    body: Message


# The events made per message (SEND; FLOW and ACK on the consume path) are plain classes with
# ``__slots__``, not frozen dataclasses: compiled, a frozen dataclass's generated ``__init__`` runs
# interpreted (``object.__setattr__`` per field); this one is native (docs/performance.md,
# session 13). Immutable (``Final`` fields); equal when their fields are, as before.


class SendReceived:
    """A SEND with its message. ``message.headers_and_payload`` is what the broker stores."""

    __slots__ = ("command", "message")

    def __init__(self, command: SendCommand, message: MessagePayload) -> None:
        self.command: Final = command
        self.message: Final = message

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, SendReceived):
            return NotImplemented
        return self.command == other.command and self.message == other.message

    def __repr__(self) -> str:
        return f"SendReceived(command={self.command!r}, message={self.message!r})"


class CorruptSend:
    """A SEND whose checksum did not match. Answer SEND_ERROR(ChecksumError) in receipt order."""

    __slots__ = ("command",)

    def __init__(self, command: SendCommand) -> None:
        self.command: Final = command

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, CorruptSend):
            return NotImplemented
        return self.command == other.command

    def __repr__(self) -> str:
        return f"CorruptSend(command={self.command!r})"


class FlowReceived:
    """FLOW: ``permits`` more messages for consumer ``consumer_id``."""

    __slots__ = ("consumer_id", "permits")

    def __init__(self, consumer_id: int, permits: int) -> None:
        self.consumer_id: Final = consumer_id
        self.permits: Final = permits

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, FlowReceived):
            return NotImplemented
        return self.consumer_id == other.consumer_id and self.permits == other.permits

    def __hash__(self) -> int:
        return hash((self.consumer_id, self.permits))

    def __repr__(self) -> str:
        return f"FlowReceived(consumer_id={self.consumer_id!r}, permits={self.permits!r})"


class AckReceived:
    """ACK. ``command`` is the BaseCommand's bytes: ``decoded()`` gives every field (the broker
    acts on ``ack`` only)."""

    __slots__ = ("ack", "command")

    def __init__(self, ack: AckCommand, command: bytes) -> None:
        self.ack: Final = ack
        self.command: Final = command

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, AckReceived):
            return NotImplemented
        return self.ack == other.ack and self.command == other.command

    def __hash__(self) -> int:
        return hash((self.ack, self.command))

    def __repr__(self) -> str:
        return f"AckReceived(ack={self.ack!r}, command={self.command!r})"

    def decoded(self) -> pb.CommandAck:
        base = pb.BaseCommand()
        base.ParseFromString(self.command)
        return base.ack


@dataclass(frozen=True, slots=True)
class UnsupportedCommand:
    """A protocol command Magnetar defines no body for (transactions)."""

    type: int


@dataclass(frozen=True, slots=True)
class ConnectionTerminated:
    """The machine closed the connection (timeout); the caller closes the socket."""

    reason: str


Event = (ClientConnected | CommandReceived | SendReceived | CorruptSend | FlowReceived | AckReceived
         | UnsupportedCommand | ConnectionTerminated)


class ServerConnection(FrameReceiver[Event]):
    """Protocol state of one client connection, broker side."""

    def __init__(self, now_ms: int, config: ServerConfig | None = None) -> None:
        self.config = config or ServerConfig()
        invariant(0 < self.config.max_message_size_bytes <= PULSAR_MESSAGE_BYTES_MAX, "max_message_size out of bounds")
        self._state = State.AWAITING_CONNECT
        # A frame may carry max_message_size of metadata and payload plus the command around it
        # (Java's 10 KiB MESSAGE_SIZE_FRAME_PADDING); a larger one ends the connection.
        self._decoder = FrameDecoder(self.config.max_message_size_bytes + PULSAR_FRAME_BYTES_MAX
                                     - PULSAR_MESSAGE_BYTES_MAX)
        self._out: list[Buffer] = []
        self._out_bytes = 0
        self._connect_deadline_ms = now_ms + self.config.connect_timeout_ms
        self._last_received_ms = now_ms
        self._ping_sent_ms: int | None = None
        # GET_OR_CREATE_SCHEMA requests not yet answered: only they may get the reply type the
        # 4.2.0 client would drop the connection on (at most PULSAR_GET_OR_CREATE_SCHEMA_PENDING_COUNT_MAX kept).
        self._get_or_create_pending: dict[int, None] = {}
        self.protocol_version = 0  # negotiated; set on CONNECT
        self.client_version = ""
        self.features = ClientFeatures(False, False, False, False)
        self.close_reason: str | None = None

    # --- state ---------------------------------------------------------------------------

    @property
    def state(self) -> State:
        return self._state

    def _transition(self, trigger: Trigger) -> None:
        if self._state is State.CONNECTED and (trigger is Trigger.SEND_COMMAND or trigger is Trigger.RECEIVE_COMMAND):
            return  # twice per message: no tuple of two Enums hashed (Enum.__hash__ is Python code)
        target = _TRANSITIONS.get((self._state, trigger))
        if target is None:
            if self._state is State.CLOSED:
                raise ConnectionClosedError(f"connection closed ({self.close_reason}); cannot {trigger.value}")
            raise ProtocolViolationError(f"{trigger.value} is not allowed in state {self._state.value}")
        self._state = target

    def close(self, reason: str = "closed by broker") -> None:
        """Mark the connection closed; queued bytes may still be drained and written."""
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
        if command is None or command.type != T.SEND or self._state is not State.CONNECTED:
            raise self._violation(f"checksum mismatch outside a SEND: {error}")
        return CorruptSend(SendCommand.of(command.send))

    def _decode_hot(self, frame: memoryview) -> Event | None:
        # SEND, FLOW and ACK of a connected client in their common shape, without protobuf
        # objects (``fast_decode``); None sends the frame through ``decode_frame`` and ``_handle``,
        # which then also raise the errors for malformed bytes.
        if self._state is not State.CONNECTED:
            return None
        command_size: int = _COMMAND_SIZE.unpack_from(frame, 4)[0]  # an int: native arithmetic, compiled
        command_end = 8 + command_size
        if command_size < 2 or command_end > len(frame):
            return None
        command = bytes(frame[8:command_end])
        kind = command_type(command)
        if kind == SEND:  # the ints of fast_decode (``Final``): no attribute lookups per frame
            send = decode_send(command)
            if send is None or command_end == len(frame):
                return None
            try:
                return SendReceived(send, decode_message(frame[command_end:]))
            except FrameChecksumMismatchError:
                return CorruptSend(send)
        if command_end != len(frame):
            return None
        if kind == FLOW:
            flow = decode_flow(command)
            return None if flow is None else FlowReceived(flow[0], flow[1])
        if kind == ACK:
            ack = decode_ack(command)
            return None if ack is None else AckReceived(ack, command)
        return None

    def _handle(self, frame: Frame) -> Event | None:
        kind = frame.type
        if self._state is State.AWAITING_CONNECT:
            if kind != T.CONNECT:
                raise self._violation(f"{type_name(kind)} before CONNECT")
            return self._on_connect(frame.command.connect)
        if self._state is State.CONNECTING:
            raise self._violation(f"{type_name(kind)} before the handshake completed")
        self._transition(Trigger.RECEIVE_COMMAND)
        if kind == T.PING:
            self._queue(encode_command(commands.pong()))
            return None
        if kind == T.PONG:
            return None
        if kind == T.SEND:
            invariant(frame.message is not None, "the decoder guarantees a SEND has a message")
            if not frame.command.HasField("send"):
                raise self._violation("SEND without its body")
            return SendReceived(SendCommand.of(frame.command.send), frame.message)  # type: ignore[arg-type]
        if kind == T.FLOW or kind == T.ACK:
            return self._flow_or_ack(frame)
        if kind in CLIENT_REQUEST_TYPES:
            field_name = BODY_FIELD_BY_TYPE[kind]
            if not frame.command.HasField(field_name):
                raise self._violation(f"{type_name(kind)} without its body")
            if kind == T.GET_OR_CREATE_SCHEMA:
                pending = self._get_or_create_pending
                pending[frame.command.getOrCreateSchema.request_id] = None
                while len(pending) > PULSAR_GET_OR_CREATE_SCHEMA_PENDING_COUNT_MAX:
                    del pending[next(iter(pending))]
            body = getattr(frame.command, field_name)
            invariant(isinstance(body, Message), "bodies are protobuf messages")
            return CommandReceived(kind, body)
        if kind == T.CONNECT:
            raise self._violation("second CONNECT on a connected connection")
        if frame.body is None:
            return UnsupportedCommand(kind)
        raise self._violation(f"{type_name(kind)} is a server-to-client command")

    def _flow_or_ack(self, frame: Frame) -> Event:
        """FLOW / ACK outside the hot decoder's common shape: the same events."""
        if frame.type == T.FLOW:
            if not frame.command.HasField("flow"):
                raise self._violation("FLOW without its body")
            return FlowReceived(frame.command.flow.consumer_id, frame.command.flow.messagePermits)
        if not frame.command.HasField("ack"):
            raise self._violation("ACK without its body")
        return AckReceived(AckCommand.of(frame.command.ack), bytes(frame.command.SerializeToString()))

    def _on_connect(self, connect: pb.CommandConnect) -> Event:
        self._transition(Trigger.RECEIVE_CONNECT)
        flags = connect.feature_flags
        self.features = ClientFeatures(
            flags.supports_auth_refresh, flags.supports_broker_entry_metadata,
            flags.supports_partial_producer, flags.supports_topic_watchers,
        )
        self.client_version = connect.client_version
        self.protocol_version = max(0, min(self.config.protocol_version_max, connect.protocol_version))
        event = ClientConnected(
            client_version=connect.client_version,
            client_protocol_version=connect.protocol_version,
            protocol_version=self.protocol_version,
            auth_method_name=connect.auth_method_name if connect.HasField("auth_method_name") else None,
            auth_data=connect.auth_data if connect.HasField("auth_data") else None,
            features=self.features,
            proxy_to_broker_url=connect.proxy_to_broker_url if connect.HasField("proxy_to_broker_url") else None,
        )
        if self.config.auto_accept_connect:
            self.accept_connect()
        return event

    # --- handshake -----------------------------------------------------------------------

    def accept_connect(self) -> None:
        """Answer CONNECT with CONNECTED (done automatically with ``auto_accept_connect``)."""
        self._transition(Trigger.ACCEPT)
        self._queue(encode_command(commands.connected(
            self.config.server_version, self.protocol_version, self.config.max_message_size_bytes,
        )))

    def reject_connect(self, code: int, message: str) -> None:
        """Refuse the handshake: queue ERROR and close (the client retries with backoff)."""
        if self._state is not State.CONNECTING:
            raise ProtocolViolationError(f"reject_connect in state {self._state.value}")
        self._queue(encode_command(commands.error(0, code, message)))
        self.close_reason = f"connect rejected: {message}"
        self._transition(Trigger.REJECT)

    # --- time ----------------------------------------------------------------------------

    def next_deadline_ms(self) -> int | None:
        """When ``tick`` next has something to do, or None once closed."""
        if self._state in (State.AWAITING_CONNECT, State.CONNECTING):
            return self._connect_deadline_ms
        if self._state is State.CONNECTED:
            if self._ping_sent_ms is not None:
                return self._ping_sent_ms + self.config.keep_alive_interval_ms
            return self._last_received_ms + self.config.keep_alive_interval_ms
        return None

    def tick(self, now_ms: int) -> list[Event]:
        """Run the handshake and keep-alive timers; may queue a PING or close the connection."""
        if self._state in (State.AWAITING_CONNECT, State.CONNECTING):
            if now_ms >= self._connect_deadline_ms:
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
        elif now_ms - self._last_received_ms >= interval and self.protocol_version >= PROTOCOL_VERSION_PING_MIN:
            self._send(commands.ping())
            self._ping_sent_ms = now_ms
        return []

    # --- sending -------------------------------------------------------------------------

    @property
    def outbound_bytes(self) -> int:
        return self._out_bytes

    def data_to_send(self) -> list[Buffer]:
        """Drain the queued bytes, in order (suits ``transport.writelines``)."""
        out, self._out, self._out_bytes = self._out, [], 0
        return out

    def _queue(self, part: Buffer) -> None:
        size = len(part)
        if self._out_bytes + size > PULSAR_SEND_BUFFER_BYTES_MAX:
            raise LimitExceededError("PULSAR_SEND_BUFFER_BYTES_MAX", self._out_bytes + size, PULSAR_SEND_BUFFER_BYTES_MAX)
        self._out.append(part)
        self._out_bytes += size

    def _queue_two(self, header: Buffer, body: Buffer) -> None:
        """A payload frame's two parts (the body, a stored entry, is not copied)."""
        size = len(header) + len(body)
        if self._out_bytes + size > PULSAR_SEND_BUFFER_BYTES_MAX:
            raise LimitExceededError("PULSAR_SEND_BUFFER_BYTES_MAX", self._out_bytes + size, PULSAR_SEND_BUFFER_BYTES_MAX)
        out = self._out
        out.append(header)
        out.append(body)
        self._out_bytes += size

    def _send(self, command: pb.BaseCommand) -> None:
        invariant(command.type in commands.CLIENT_ACCEPTED_TYPES,
                  f"the official client drops the connection on {type_name(command.type)}")
        self._transition(Trigger.SEND_COMMAND)
        self._queue(encode_command(command))

    def send_command(self, command: pb.BaseCommand) -> None:
        """Queue any simple command the client accepts (the helpers below cover the usual ones)."""
        self._send(command)

    def send_partitioned_metadata(self, request_id: int, partitions: int) -> None:
        self._send(commands.partitioned_metadata(request_id, partitions))

    def send_partitioned_metadata_error(self, request_id: int, code: int, message: str) -> None:
        self._send(commands.partitioned_metadata_error(request_id, code, message))

    def send_lookup_connect(self, request_id: int, broker_url: str, broker_url_tls: str | None = None,
                            authoritative: bool = True) -> None:
        self._send(commands.lookup_connect(request_id, broker_url, broker_url_tls, authoritative))

    def send_lookup_redirect(self, request_id: int, broker_url: str, broker_url_tls: str | None = None,
                             authoritative: bool = False) -> None:
        self._send(commands.lookup_redirect(request_id, broker_url, broker_url_tls, authoritative))

    def send_lookup_error(self, request_id: int, code: int, message: str) -> None:
        self._send(commands.lookup_error(request_id, code, message))

    def send_producer_success(self, request_id: int, producer_name: str, last_sequence_id: int = -1,
                              schema_version: bytes | None = None, topic_epoch: int | None = None,
                              producer_ready: bool = True) -> None:
        self._send(commands.producer_success(
            request_id, producer_name, last_sequence_id, schema_version, topic_epoch, producer_ready,
        ))

    def send_receipt(self, producer_id: int, sequence_id: int, ledger_id: int, entry_id: int,
                     highest_sequence_id: int | None = None) -> None:
        # Once per unbatched message: encoded without protobuf objects (same bytes, fast.py).
        self._transition(Trigger.SEND_COMMAND)
        self._queue(encode_send_receipt(producer_id, sequence_id, ledger_id, entry_id, highest_sequence_id))

    def send_send_error(self, producer_id: int, sequence_id: int, code: int, message: str) -> None:
        self._send(commands.send_error(producer_id, sequence_id, code, message))

    def send_success(self, request_id: int, schema: pb.Schema | None = None) -> None:
        self._send(commands.success(request_id, schema))

    def send_error(self, request_id: int, code: int, message: str) -> None:
        self._send(commands.error(request_id, code, message))

    def send_message(self, consumer_id: int, ledger_id: int, entry_id: int, headers_and_payload: Buffer, *,
                     partition: int | None = -1, redelivery_count: int = 0, ack_set: Sequence[int] = (),
                     batch_index: int | None = None, consumer_epoch: int | None = None) -> None:
        """Queue a MESSAGE frame for the entry at ``ledger_id:entry_id`` (signed ids, -1 written as
        all-ones u64); ``headers_and_payload`` (a stored entry) is queued without copying. Once per
        dispatched entry: the command is encoded without protobuf objects (same bytes, ``fast.py``)."""
        header = encode_message_header(consumer_id, ledger_id, entry_id, len(headers_and_payload),
                                       partition=partition, redelivery_count=redelivery_count, ack_set=ack_set,
                                       batch_index=batch_index, consumer_epoch=consumer_epoch)
        self._transition(Trigger.SEND_COMMAND)
        self._queue_two(header, headers_and_payload)

    def send_close_producer(self, producer_id: int, assigned_url: str | None = None,
                            assigned_url_tls: str | None = None) -> None:
        self._send(commands.close_producer(producer_id, 0, assigned_url, assigned_url_tls))

    def send_close_consumer(self, consumer_id: int, assigned_url: str | None = None,
                            assigned_url_tls: str | None = None) -> None:
        self._send(commands.close_consumer(consumer_id, 0, assigned_url, assigned_url_tls))

    def send_active_consumer_change(self, consumer_id: int, is_active: bool) -> None:
        self._send(commands.active_consumer_change(consumer_id, is_active))

    def send_get_last_message_id_response(self, request_id: int, last_message_id: pb.MessageIdData,
                                           mark_delete_position: pb.MessageIdData | None) -> None:
        self._send(commands.get_last_message_id_response(request_id, last_message_id, mark_delete_position))

    def send_get_topics_of_namespace_response(self, request_id: int, topics: Iterable[str]) -> None:
        self._send(commands.get_topics_of_namespace_response(request_id, topics))

    def send_get_schema_response(self, request_id: int, schema: pb.Schema, schema_version: bytes) -> None:
        self._send(commands.get_schema_response(request_id, schema, schema_version))

    def send_get_schema_error(self, request_id: int, code: int, message: str) -> None:
        self._send(commands.get_schema_error(request_id, code, message))

    def send_get_or_create_schema_response(self, request_id: int, schema_version: bytes | None = None,
                                           code: int | None = None, message: str | None = None) -> None:
        """Answer a GET_OR_CREATE_SCHEMA received on this connection (never sent unasked)."""
        invariant(request_id in self._get_or_create_pending, "GET_OR_CREATE_SCHEMA_RESPONSE only answers a request")
        del self._get_or_create_pending[request_id]
        self._transition(Trigger.SEND_COMMAND)
        self._queue(encode_command(commands.get_or_create_schema_response(request_id, schema_version, code, message)))

    def send_auth_challenge(self, auth_method_name: str, challenge: bytes) -> None:
        """Ask for fresh credentials; only clients that advertised supports_auth_refresh answer."""
        if not self.features.supports_auth_refresh:
            raise ProtocolViolationError("the client did not advertise supports_auth_refresh")
        self._send(commands.auth_challenge(
            self.config.server_version, auth_method_name, challenge, self.protocol_version,
        ))

    def send_ack_response(self, consumer_id: int, request_id: int, code: int | None = None,
                          message: str | None = None) -> None:
        self._send(commands.ack_response(consumer_id, request_id, code, message))
