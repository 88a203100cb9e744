"""One client connection, broker side: protocol events in, broker actions and replies out.

The runtime feeds bytes into the ``ServerConnection`` and hands every event to ``Session.handle``,
one at a time and in order. Requests that wait on metadata (PRODUCER, SUBSCRIBE, lookups, schema
reads: ``_CONCURRENT_KINDS``) are answered from their own task so the connection keeps reading
meanwhile, with the ordering Pulsar gives (``broker/requests.py``); the rest are handled in order.
Replies are queued on the ``ServerConnection``; ``on_output`` tells the runtime there is
something to write.

The session is both channels its producers and consumers need (``ProducerChannel``,
``ConsumerChannel``). ``writable()`` is false while queued outgoing bytes (here and in the
runtime's socket buffer, reported through ``set_transport_backlog``) exceed
``connection_outbound_bytes_high``: dispatch to this connection pauses and the runtime stops
reading from it, so a client that never reads holds a bounded amount of broker memory.

Authentication: with ``service.authenticator`` set, the runtime's ``ServerConnection`` does not
auto-accept CONNECT; ``handle(ClientConnected)`` asks the authenticator for the role of the
CONNECT's ``auth_method_name``/``auth_data`` (and the TLS client certificate's CN the runtime
passed in). ``role`` is then the authenticated role (None while authentication is off);
authorization reads it. A refused CONNECT is still answered CONNECTED, but the session holds no
role and answers its first request with ``AuthenticationError`` (in that request's own response
type) and closes the connection; requests never reach a handler. Why not ERROR in place of
CONNECTED, as Java's broker does: the official C++ client (3.x/4.x) treats anything but CONNECTED
during the handshake as a dropped connection and retries until its operation timeout, so the
user would see ``Timeout`` instead of ``AuthenticationError``; an error on the first lookup is
fatal to it and surfaces as ``pulsar.AuthenticationError`` at once.

Expiring credentials (a token with ``exp``): the runtime calls ``check_credentials(now_ms)`` every
``auth_refresh_check_interval_s``. Once expired, a client that advertised ``supports_auth_refresh``
is sent AUTH_CHALLENGE; its AUTH_RESPONSE must authenticate to the same role (a new expiry), or
the connection is closed; still unanswered at the next check, it is closed. A client that cannot
refresh is closed at once, as Java's broker does. A refused connection is closed at the first check.

Every handle (producer or consumer id) is bounded by ``BROKER_HANDLES_PER_CONNECTION_COUNT_MAX``.
Errors in one request become an ERROR (or ``*_RESPONSE`` Failed) for that request only.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from magnetar.base.errors import InvalidArgumentError
from magnetar.base.limits import BROKER_HANDLES_PER_CONNECTION_COUNT_MAX
from magnetar.base.types import EARLIEST, TopicName
from magnetar.broker.authorization import Operation, authorize
from magnetar.broker.compaction import compacted_view
from magnetar.broker.consumer import Consumer, SubType
from magnetar.broker.errors import BrokerError, to_broker_error
from magnetar.broker.ids import before, is_earliest, is_latest, position_of, to_position
from magnetar.broker.producer import AccessMode, Producer, SendItem
from magnetar.broker.replicated import (
    adopt_replicated_partitions,
    is_replicator_producer,
    mark_replicated_subscription,
    replicated_source,
)
from magnetar.broker.requests import InFlightRequests
from magnetar.broker.service import BrokerService
from magnetar.broker.session_requests import get_last_message_id, seek
from magnetar.broker.subscription import Subscription
from magnetar.catalog.lookup import LookupKind
from magnetar.catalog.schema import SchemaRefusedError, carries_schema, version_bytes, version_from_bytes
from magnetar.protocol.pulsar import (
    AckCommand,
    AckReceived,
    ClientConnected,
    CommandReceived,
    ConnectionTerminated,
    CorruptSend,
    Event,
    FlowReceived,
    MessagePayload,
    SendReceived,
    ServerConnection,
    State,
    UnsupportedCommand,
    commands,
    pb,
)
from magnetar.security import AuthenticationFailedError, Principal
from magnetar.security.authorization import Need

log = logging.getLogger(__name__)
T = pb.BaseCommand


class Session:
    def __init__(self, service: BrokerService, connection: ServerConnection, on_output: Callable[[], None],
                 *, tls_peer_cn: str | None = None) -> None:
        self.service = service
        self.connection = connection
        self._on_output = on_output
        #: CN of the client certificate when the connection came over TLS with one (runtime).
        self.tls_peer_cn = tls_peer_cn
        #: The authenticated role; None while authentication is disabled (or before CONNECT).
        self.role: str | None = None
        self.principal: Principal | None = None
        #: Why CONNECT was refused; while set, every request is refused and the connection closed.
        self.refusal: str | None = None
        self._challenged = False  # AUTH_CHALLENGE sent, no valid AUTH_RESPONSE yet
        #: Credentials renewed through AUTH_CHALLENGE / AUTH_RESPONSE on this connection.
        self.refreshed_count = 0
        #: Closed because its credentials expired or could not be renewed.
        self.closed_for_credentials = False
        #: The client's ``host:port`` as the runtime sees it ("" in the simulator): admin stats show it.
        self.peer_address = ""
        self.producers: dict[int, Producer] = {}
        #: Producer ids this broker closed (CLOSE_PRODUCER: topic unloaded or moved) and the client
        #: has not re-created here, oldest first: their SENDs still in flight are dropped, not
        #: answered by closing the connection (Pulsar's ``recentlyClosedProducers``).
        self._closed_producers: dict[int, None] = {}
        self.consumers: dict[int, tuple[Consumer, Subscription]] = {}
        self._transport_backlog_bytes = 0
        self._outbound_bound = service.config.outbound_bytes_bound  # fixed while the connection is open
        self._closed = False
        self._pending_sends = 0  # SENDs handed to producers and not yet answered
        #: Of those, the ones to non-persistent topics (dropped ones included, until answered):
        #: at ``max_concurrent_non_persistent_messages_per_connection`` further ones are dropped.
        self._non_persistent_pending = 0
        #: Set when half of the SENDs a full connection holds were answered; made only while the
        #: runtime waits for it (``wait_send_room``): no Event call per answered SEND.
        self._send_room: asyncio.Event | None = None
        #: What the run ``_hand_run`` just handed over still waits for (None: nothing).
        self._waiting: Awaitable[None] | None = None
        #: PRODUCER, SUBSCRIBE and lookups being answered from their own tasks.
        self.requests = InFlightRequests()

    # --- channel side (used by producers and dispatchers) ---------------------------------------

    def is_open(self) -> bool:
        return not self._closed and self.connection.state is State.CONNECTED

    def outbound_bytes(self) -> int:
        return self.connection.outbound_bytes + self._transport_backlog_bytes

    def writable(self) -> bool:  # per receive and write: the bound read once (no lookups by name)
        return self.outbound_bytes() < self._outbound_bound

    def set_transport_backlog(self, size: int) -> None:
        """The runtime reports bytes handed to the socket and not yet drained."""
        was = self.writable()
        self._transport_backlog_bytes = size
        if not was and self.writable():
            self.notify_writable()

    def notify_writable(self) -> None:
        for _consumer, subscription in self.consumers.values():
            if subscription.dispatcher is not None:
                subscription.dispatcher.wake()

    def _out(self) -> None:
        self._on_output()

    @property
    def pending_sends(self) -> int:
        return self._pending_sends

    async def wait_send_room(self) -> None:
        """Returns once this connection may take more SENDs: at ``pending_sends_per_connection_max``
        unanswered ones the runtime stops reading until half of them were answered."""
        while self._pending_sends >= self.service.config.pending_sends_per_connection_max and not self._closed:
            if self._send_room is None:
                self._send_room = asyncio.Event()
            await self._send_room.wait()

    def _send_answered(self) -> None:
        self._pending_sends -= 1
        room = self._send_room
        if room is not None and self._pending_sends <= self.service.config.pending_sends_per_connection_max // 2:
            self._send_room = None
            room.set()

    def _non_persistent_send_answered(self) -> None:
        self._non_persistent_pending -= 1
        self._send_answered()

    def send_receipt(self, producer_id: int, sequence_id: int, ledger_id: int, entry_id: int,
                     highest_sequence_id: int | None) -> None:
        if self.is_open():
            self.connection.send_receipt(producer_id, sequence_id, ledger_id, entry_id, highest_sequence_id)
            self._out()

    def send_send_error(self, producer_id: int, sequence_id: int, code: int, message: str) -> None:
        if self.is_open():
            self.connection.send_send_error(producer_id, sequence_id, code, message)
            self._out()

    def send_close_producer(self, producer_id: int) -> None:
        self.producers.pop(producer_id, None)
        self._closed_producers[producer_id] = None
        if len(self._closed_producers) > BROKER_HANDLES_PER_CONNECTION_COUNT_MAX:
            del self._closed_producers[next(iter(self._closed_producers))]
        if self.is_open():
            self.connection.send_close_producer(producer_id)
            self._out()

    def send_message(self, consumer_id: int, ledger_id: int, entry_id: int, partition: int, data: bytes,
                     redelivery_count: int, ack_set: Sequence[int]) -> None:
        if self.is_open():
            self.connection.send_message(consumer_id, ledger_id, entry_id, data, partition=partition,
                                         redelivery_count=redelivery_count, ack_set=ack_set)
            self._out()

    def send_close_consumer(self, consumer_id: int) -> None:
        self.consumers.pop(consumer_id, None)
        if self.is_open():
            self.connection.send_close_consumer(consumer_id)
            self._out()

    def send_active_consumer_change(self, consumer_id: int, is_active: bool) -> None:
        if self.is_open():
            self.connection.send_active_consumer_change(consumer_id, is_active)
            self._out()

    # --- events ---------------------------------------------------------------------------------

    async def handle_all(self, events: Sequence[Event]) -> bool:
        """``start_handle_all`` awaited to its end."""
        started = self.start_handle_all(events)
        return started if isinstance(started, bool) else await started

    def start_handle_all(self, events: Sequence[Event]) -> bool | Awaitable[bool]:
        """Act on the events of one receive, in order: each run of SENDs goes to its producers as
        runs (``_on_sends``), the rest one at a time (``handle``). True once the connection
        terminated (the events after that one are not looked at).

        Synchronous while nothing waits: SENDs no producer or topic holds back are handed over in
        this call (False; no coroutine frame per receive). Else the rest, from the first event
        that waits or is not a SEND, is an awaitable of the answer (``_handle_rest``)."""
        index, count = 0, len(events)
        while index < count:
            if type(events[index]) is not SendReceived:
                return self._handle_rest(events, index, None)
            end = index + 1
            while end < count and type(events[end]) is SendReceived:
                end += 1
            waiting = self._on_sends(events[index:end] if index or end < count else events)  # type: ignore[arg-type]
            self._out()
            if waiting is not None:
                return self._handle_rest(events, end, waiting)
            index = end
        return False

    async def _handle_rest(self, events: Sequence[Event], index: int, waiting: Awaitable[None] | None) -> bool:
        """``start_handle_all`` from ``events[index]`` on, once ``waiting`` (the SENDs before it
        still being handed over) is done."""
        if waiting is not None:
            await waiting
            self._out()
        count = len(events)
        while index < count:
            event = events[index]
            if type(event) is SendReceived:
                end = index + 1
                while end < count and type(events[end]) is SendReceived:
                    end += 1
                sends = self._on_sends(events[index:end])  # type: ignore[arg-type]
                if sends is not None:
                    await sends
                self._out()
                index = end
                continue
            await self.handle(event)
            if isinstance(event, ConnectionTerminated):
                return True
            index += 1
        return False

    async def handle(self, event: Event) -> None:
        """Act on one event; request failures are answered, never raised."""
        if isinstance(event, SendReceived):
            waiting = self._on_sends((event,))
            if waiting is not None:
                await waiting
        elif isinstance(event, CorruptSend):
            waiting = self._on_producer_sends(event.command.producer_id, ((event.command, None, True, None),))
            if waiting is not None:
                await waiting
        elif isinstance(event, FlowReceived):
            if self.refusal is not None:
                self._refuse(T.FLOW, None)
            else:
                self._flow(event.consumer_id, event.permits)
        elif isinstance(event, AckReceived):
            if self.refusal is not None:
                self._refuse(T.ACK, event.ack.request_id)
            else:
                await self._on_ack(event.ack)
        elif isinstance(event, CommandReceived):
            await self._on_command(event.type, event.body)
        elif isinstance(event, UnsupportedCommand):
            log.info("ignoring unsupported command type %s", event.type)
        elif isinstance(event, ClientConnected):
            if self.connection.state is State.CONNECTING:
                self._authenticate_connect(event)
        elif isinstance(event, ConnectionTerminated):
            return
        self._out()

    def _refuse(self, kind: int, request_id: int | None) -> None:
        """Answer a request of a refused connection with AuthenticationError, then close it."""
        reason = self.refusal or "not authenticated"
        if request_id is not None:
            if kind == T.PARTITIONED_METADATA:
                self.connection.send_partitioned_metadata_error(request_id, pb.AuthenticationError, reason)
            elif kind == T.LOOKUP:
                self.connection.send_lookup_error(request_id, pb.AuthenticationError, reason)
            elif kind == T.GET_SCHEMA:
                self.connection.send_get_schema_error(request_id, pb.AuthenticationError, reason)
            else:
                self.connection.send_error(request_id, pb.AuthenticationError, reason)
        self.connection.close(reason)

    async def _on_command(self, kind: int, body: object) -> None:
        handler = _HANDLERS.get(kind)
        request_id = getattr(body, "request_id", None)
        if self.refusal is not None:
            self._refuse(kind, request_id)
            return
        if handler is None:
            if request_id is not None and kind not in _LOOKUP_KINDS:
                self.connection.send_error(request_id, pb.NotAllowedError, f"command {kind} is not supported")
            return
        if kind in _CONCURRENT_KINDS:
            await self.requests.room()
            if not self._claim(kind, body):
                return
            self.requests.start(self._answer_concurrently(kind, body, handler, request_id))
            return
        await self._answer(kind, body, handler, request_id)

    def _claim(self, kind: int, body: Any) -> bool:
        """Record a creation as pending; False (answered ServiceNotReady, as Java's broker does)
        while one with the same producer (consumer) id still is."""
        if kind == T.PRODUCER:
            table, handle_id, what = self.requests.producers, body.producer_id, "Producer"
        elif kind == T.SUBSCRIBE:
            table, handle_id, what = self.requests.consumers, body.consumer_id, "Consumer"
        else:
            return True
        if handle_id in table:
            self.connection.send_error(body.request_id, pb.ServiceNotReady, f"{what} is already present on the connection")
            return False
        table[handle_id] = body.request_id
        return True

    async def _answer_concurrently(self, kind: int, body: Any, handler: Callable[[Session, Any], Awaitable[None]],
                                   request_id: int | None) -> None:
        try:
            await self._answer(kind, body, handler, request_id)
        finally:
            if kind == T.PRODUCER:
                self.requests.release(self.requests.producers, body.producer_id, body.request_id)
            elif kind == T.SUBSCRIBE:
                self.requests.release(self.requests.consumers, body.consumer_id, body.request_id)
            self._out()

    async def _answer(self, kind: int, body: object, handler: Callable[[Session, Any], Awaitable[None]],
                      request_id: int | None) -> None:
        try:
            await handler(self, body)
        except Exception as error:  # one failed request must not take the connection down
            broker_error = to_broker_error(error)
            if not isinstance(error, BrokerError | SchemaRefusedError):
                log.exception("request %s failed", kind)
            if request_id is None or not self.is_open():
                return
            if kind == T.PARTITIONED_METADATA:
                self.connection.send_partitioned_metadata_error(request_id, broker_error.code, broker_error.message)
            elif kind == T.LOOKUP:
                self.connection.send_lookup_error(request_id, broker_error.code, broker_error.message)
            elif kind == T.GET_SCHEMA:
                self.connection.send_get_schema_error(request_id, broker_error.code, broker_error.message)
            else:
                self.connection.send_error(request_id, broker_error.code, broker_error.message)

    def _authenticate_connect(self, event: ClientConnected) -> None:
        authenticator = self.service.authenticator
        if authenticator is None:
            self.connection.accept_connect()
            return
        try:
            principal = authenticator.authenticate(event.auth_method_name, event.auth_data, self.tls_peer_cn)
        except AuthenticationFailedError as error:
            log.info("CONNECT refused (method %r): %s", (event.auth_method_name or "none")[:64], error.reason)
            self.refusal = f"Unable to authenticate: {error.reason}"
            self.connection.accept_connect()
            return
        self.principal = principal
        self.role = principal.role
        self.connection.accept_connect()

    def _check_handles(self) -> None:
        # Pending creations count (minus this one: it is recorded as pending before it runs).
        if len(self.producers) + len(self.consumers) + self.requests.pending_handles() > BROKER_HANDLES_PER_CONNECTION_COUNT_MAX:
            raise BrokerError(pb.TooManyRequests, "too many producers and consumers on this connection")

    async def _authorize(self, need: Need, name: TopicName, subscription: str | None = None) -> None:
        """Refuse with ``AuthorizationError`` unless this connection's role may (authorization on)."""
        await authorize(self.service.policies, self.role, Operation.on_topic(need, name, subscription))

    # --- lookup ---------------------------------------------------------------------------------

    async def _partitioned_metadata(self, body: pb.CommandPartitionedTopicMetadata) -> None:
        name = _topic_name(body.topic)
        await self._authorize(Need.LOOKUP, name)
        self.connection.send_partitioned_metadata(body.request_id, await self.service.partitions(name))

    async def _lookup(self, body: pb.CommandLookupTopic) -> None:
        name = _topic_name(body.topic)
        await self._authorize(Need.LOOKUP, name)
        await self.service.check_namespace(name)
        answer = await self.service.lookup.lookup(name, body.authoritative)
        url, url_tls = self.service.listener_urls(body.advertised_listener_name, answer)
        # A client on TLS connects to broker_url_tls (the C++ client reads only that field then).
        url_tls = url_tls if url_tls is not None else answer.url_tls
        if answer.kind is LookupKind.CONNECT:
            self.connection.send_lookup_connect(body.request_id, url, url_tls, authoritative=answer.authoritative)
        else:
            self.connection.send_lookup_redirect(body.request_id, url, url_tls, authoritative=answer.authoritative)

    async def _topics_of_namespace(self, body: pb.CommandGetTopicsOfNamespace) -> None:
        pattern = body.topics_pattern if body.HasField("topics_pattern") else None
        await authorize(self.service.policies, self.role, Operation.on_namespace(Need.NAMESPACE_CONSUME, body.namespace))
        topics = await self.service.topics_of_namespace(body.namespace, pattern, body.mode)
        self.connection.send_get_topics_of_namespace_response(body.request_id, topics)

    async def _get_schema(self, body: pb.CommandGetSchema) -> None:
        name = _topic_name(body.topic)
        await self._authorize(Need.LOOKUP, name)
        version = None
        if body.HasField("schema_version") and body.schema_version:
            version = version_from_bytes(bytes(body.schema_version))
        found = await self.service.schemas.get(name, version if version is not None and version >= 0 else None)
        if found is None:
            self.connection.send_get_schema_error(body.request_id, pb.TopicNotFound, "no schema registered")
            return
        self.connection.send_get_schema_response(body.request_id, found[1].to_pb(), version_bytes(found[0]))

    async def _get_or_create_schema(self, body: pb.CommandGetOrCreateSchema) -> None:
        """Java clients' explicit registration (the 4.2.0 client never sends it)."""
        try:
            name = _topic_name(body.topic)
            await self._authorize(Need.PRODUCE, name)
            version = await self.service.schemas.register(name, body.schema)
        except (BrokerError, SchemaRefusedError) as error:
            self.connection.send_get_or_create_schema_response(body.request_id, code=error.code,
                                                               message=error.message)
            return
        self.connection.send_get_or_create_schema_response(body.request_id, version_bytes(version))

    # --- producers ------------------------------------------------------------------------------

    async def _producer(self, body: pb.CommandProducer) -> None:
        existing = self.producers.get(body.producer_id)
        if existing is not None:
            if str(existing.topic.name) == body.topic:
                self.connection.send_producer_success(body.request_id, existing.name,
                                                      existing.topic.last_sequence_id(existing.name),
                                                      schema_version=existing.schema_version)
                return
            raise BrokerError(pb.ProducerBusy, f"producer id {body.producer_id} is in use on this connection")
        self._check_handles()
        topic_name = _topic_name(body.topic)
        await self._authorize(Need.PRODUCE, topic_name)
        if is_replicator_producer(body.producer_name):
            await adopt_replicated_partitions(self.service.partitioned, topic_name,
                                              {kv.key: kv.value for kv in body.metadata})
        topic = await self.service.get_topic(topic_name, create=True)
        await topic.dedup.ready()  # recovered before the first producer: last_sequence_id is right
        if is_replicator_producer(body.producer_name):
            await topic.repl_dedup.ready()  # source positions recovered before the first replicated SEND
        schema_version = None
        if body.HasField("schema") and carries_schema(body.schema):  # before admission: refused if incompatible
            schema_version = version_bytes(await self.service.schemas.register(topic.name, body.schema))
        name = body.producer_name if body.HasField("producer_name") and body.producer_name else (
            self.service.next_producer_name())
        mode = AccessMode(body.producer_access_mode) if body.HasField("producer_access_mode") else AccessMode.SHARED
        producer = Producer(topic, body.producer_id, name, self, mode,
                            self.service.config.pending_sends_per_producer_max, connection_key=self)
        producer.schema_version = schema_version
        producer.epoch = body.epoch
        if body.HasField("topic_epoch"):
            producer.topic_epoch = body.topic_epoch
        producer.on_answered = self._send_answered if topic.name.is_persistent else self._non_persistent_send_answered
        if not self.requests.claimed(self.requests.producers, body.producer_id, body.request_id):
            log.info("producer %s closed before its creation completed", body.producer_id)
            return  # CLOSE_PRODUCER (answered) or the connection closed meanwhile: no answer, as Java
        admitted = topic.add_producer(producer, body.request_id, self._admit_waiting)
        self.producers[body.producer_id] = producer
        self._closed_producers.pop(body.producer_id, None)
        self.connection.send_producer_success(body.request_id, name, producer.report_last_sequence_id(),
                                              schema_version=schema_version, topic_epoch=producer.topic_epoch,
                                              producer_ready=admitted)

    def _admit_waiting(self, producer: Producer, request_id: int) -> None:
        if self.is_open() and self.producers.get(producer.producer_id) is producer:
            self.connection.send_producer_success(request_id, producer.name,
                                                  producer.report_last_sequence_id(),
                                                  schema_version=producer.schema_version,
                                                  topic_epoch=producer.topic_epoch)
            self._out()

    def _on_sends(self, sends: Sequence[SendReceived]) -> Awaitable[None] | None:
        """SENDs of one receive: each producer's consecutive ones as one run. None once all were
        handed over; else an awaitable of the rest (a producer or its topic waits)."""
        index, count = 0, len(sends)
        while index < count:
            end = self._hand_run(sends, index)
            if self._waiting is not None:
                waiting, self._waiting = self._waiting, None
                return waiting if end == count else self._sends_after(waiting, sends, end)
            index = end
        return None

    async def _sends_after(self, waiting: Awaitable[None], sends: Sequence[SendReceived], index: int) -> None:
        """``_on_sends`` from ``sends[index]`` on, once ``waiting`` is done; each wait in turn."""
        await waiting
        while index < len(sends):
            index = self._hand_run(sends, index)
            if self._waiting is not None:
                waiting, self._waiting = self._waiting, None
                await waiting

    def _hand_run(self, sends: Sequence[SendReceived], index: int) -> int:
        """Hand the run of one producer's SENDs at ``sends[index]`` over; returns where it ended.
        If the producer (or its topic) must wait, ``_waiting`` holds what to await."""
        producer_id = sends[index].command.producer_id
        run: list[SendItem] = []
        messages: list[MessagePayload] = []
        count = len(sends)
        while index < count:
            event = sends[index]
            command = event.command
            if command.producer_id != producer_id:
                break
            message = event.message
            # The stored entry: the wire form as the client checksummed it (its view copied
            # out of the receive buffer once), with a checksum block added only if it had none.
            data = message.headers_and_payload if message.checksum is not None else message.checksummed()
            run.append((command, bytes(data), message.last_chunk, None))
            messages.append(message)
            index += 1
        self._waiting = self._on_producer_sends(producer_id, run, messages)
        return index

    def _on_producer_sends(self, producer_id: int, run: Sequence[SendItem],
                           messages: Sequence[MessagePayload] = ()) -> Awaitable[None] | None:
        """``run``: SENDs of producer ``producer_id`` in order (``messages``: theirs, none for a
        bad checksum). None once handed over; else an awaitable of the rest."""
        if self.refusal is not None:
            self._refuse(T.SEND, None)
            return None
        producer = self.producers.get(producer_id)
        if producer is None:
            if producer_id in self._closed_producers:
                # Sent before the client read our CLOSE_PRODUCER: it resends it to the topic's
                # next owner (no receipt came). Closing the connection would disconnect every
                # other producer, consumer and lookup on it.
                log.debug("SEND for producer %s closed by the broker: dropped", producer_id)
                return None
            # Java closes the connection: the client then re-creates its producers and resends.
            log.warning("SEND for unknown producer %s; closing the connection", producer_id)
            self.connection.close("SEND for an unknown producer")
            return None
        self._pending_sends += len(run)
        if producer.topic.name.is_persistent and not producer.replicator:
            return producer.start_send_run(run)
        return self._send_one_by_one(producer, run, messages)

    async def _send_one_by_one(self, producer: Producer, run: Sequence[SendItem],
                               messages: Sequence[MessagePayload]) -> None:
        """A non-persistent topic's or a replicator's SENDs: one at a time."""
        config = self.service.config
        for index, (command, data, records_sequence, _) in enumerate(run):  # one at a time
            if not producer.topic.name.is_persistent:
                self._non_persistent_pending += 1
                if self._non_persistent_pending > config.max_concurrent_non_persistent_messages_per_connection:
                    producer.drop(command, len(data) if data is not None else 0)  # Pulsar drops it, receipt (-1,-1)
                    continue
            source = replicated_source(messages[index].metadata) if producer.replicator and messages else None
            await producer.send(command, data, records_sequence=records_sequence, source=source)

    async def _close_producer(self, body: pb.CommandCloseProducer) -> None:
        if self.requests.producers.pop(body.producer_id, None) is not None:
            self.connection.send_success(body.request_id)  # the creation is abandoned (broker/requests.py)
            return
        producer = self.producers.pop(body.producer_id, None)
        if producer is not None:
            producer.topic.remove_producer(producer)
        self.connection.send_success(body.request_id)

    # --- consumers ------------------------------------------------------------------------------

    async def _subscribe(self, body: pb.CommandSubscribe) -> None:
        if body.consumer_id in self.consumers:
            self.connection.send_success(body.request_id)
            return
        self._check_handles()
        create = body.force_topic_creation if body.HasField("force_topic_creation") else True
        name = _topic_name(body.topic)
        await self._authorize(Need.CONSUME, name, body.subscription)
        topic = await self.service.get_topic(name, create=create)
        read_log = (compacted_view(topic.log, topic.compaction, topic.name, SubType(body.subType))
                    if body.read_compacted else None)  # refused before any subscription is made
        if body.HasField("schema") and carries_schema(body.schema):
            await self.service.schemas.check_consumer(topic.name, body.schema)
        durable = body.durable if body.HasField("durable") else True
        if not durable and body.HasField("start_message_id"):
            start = body.start_message_id
            if is_earliest(start):
                initial = EARLIEST
            elif is_latest(start):
                initial = topic.log.last_position
            else:
                initial = before(to_position(start))
        elif body.initialPosition == pb.CommandSubscribe.Earliest:
            initial = EARLIEST
        else:
            initial = topic.log.last_position
        if not body.subscription:
            raise BrokerError(pb.InvalidTopicName, "subscription name must not be empty")
        subscription = await topic.subscription(body.subscription, durable=durable, initial_mark_delete=initial)
        if durable and body.HasField("replicate_subscription_state") and body.replicate_subscription_state:
            await mark_replicated_subscription(subscription.cursor)  # geo-replication keeps it in step
        ranges: tuple[tuple[int, int], ...] = ()
        if body.HasField("keySharedMeta") and body.keySharedMeta.keySharedMode == pb.STICKY:
            ranges = tuple((r.start, r.end) for r in body.keySharedMeta.hashRanges)
        if not self.requests.claimed(self.requests.consumers, body.consumer_id, body.request_id):
            log.info("consumer %s closed before its creation completed", body.consumer_id)
            if not durable and not subscription.consumers:
                await subscription.close(delete=True)  # what the consumer's leaving would have done
            return
        consumer = Consumer(body.consumer_id, body.consumer_name, SubType(body.subType), self,
                            priority_level=body.priority_level, hash_ranges=ranges, connection_key=self)
        subscription.add_consumer(consumer, read_log)
        self.consumers[body.consumer_id] = (consumer, subscription)
        self.connection.send_success(body.request_id)

    def _consumer(self, consumer_id: int) -> tuple[Consumer, Subscription] | None:
        return self.consumers.get(consumer_id)

    def _flow(self, consumer_id: int, permits: int) -> None:
        found = self._consumer(consumer_id)
        if found is None:
            return
        try:
            found[1].flow(found[0], permits)
        except Exception:  # FLOW has no reply: a failure is logged, the connection stays
            log.exception("FLOW failed")

    async def _on_ack(self, ack: AckCommand) -> None:
        """An ACK; a failure is answered like any request's (an ERROR when it has a request id)."""
        try:
            found = self._consumer(ack.consumer_id)
            if found is not None:
                positions = [(position_of(m.ledger_id, m.entry_id), m.ack_set) for m in ack.message_ids]
                await found[1].acknowledge(ack.cumulative, positions)
        except Exception as error:  # one failed request must not take the connection down
            broker_error = to_broker_error(error)
            if not isinstance(error, BrokerError):
                log.exception("ACK failed")
            if ack.request_id is not None and self.is_open():
                self.connection.send_error(ack.request_id, broker_error.code, broker_error.message)
            return
        if ack.request_id is not None:
            self.connection.send_ack_response(ack.consumer_id, ack.request_id)

    async def _redeliver(self, body: pb.CommandRedeliverUnacknowledgedMessages) -> None:
        found = self._consumer(body.consumer_id)
        if found is not None:
            found[1].redeliver(found[0], [to_position(m) for m in body.message_ids])

    async def _unsubscribe(self, body: pb.CommandUnsubscribe) -> None:
        found = self._consumer(body.consumer_id)
        if found is None:
            raise BrokerError(pb.ConsumerNotFound, f"consumer {body.consumer_id} not found")
        consumer, subscription = found
        if any(c is not consumer for c in subscription.consumers):
            raise BrokerError(pb.UnknownError, "Unconnected or shared consumer attempting to unsubscribe")
        self.consumers.pop(body.consumer_id, None)
        await subscription.remove_consumer(consumer)
        await subscription.close(delete=True)
        self.connection.send_success(body.request_id)

    async def _close_consumer(self, body: pb.CommandCloseConsumer) -> None:
        if self.requests.consumers.pop(body.consumer_id, None) is not None:
            self.connection.send_success(body.request_id)  # the creation is abandoned (broker/requests.py)
            return
        found = self.consumers.pop(body.consumer_id, None)
        if found is not None:
            await found[1].remove_consumer(found[0])
        self.connection.send_success(body.request_id)

    async def _consumer_stats(self, body: pb.CommandConsumerStats) -> None:
        self.connection.send_command(commands.consumer_stats_error(body.request_id, pb.NotAllowedError,
                                                                   "consumer stats are not supported"))

    async def _auth_response(self, body: pb.CommandAuthResponse) -> None:
        authenticator = self.service.authenticator
        principal = self.principal
        if authenticator is None or principal is None:
            return  # nothing to renew (authentication off); Java ignores it too
        data = body.response if body.HasField("response") else pb.AuthData()
        method = data.auth_method_name if data.HasField("auth_method_name") else principal.method
        try:
            renewed = authenticator.authenticate(method, bytes(data.auth_data), self.tls_peer_cn)
        except AuthenticationFailedError as error:
            log.info("AUTH_RESPONSE refused for role %r: %s; closing", principal.role, error.reason)
            self._close_for_credentials(f"authentication refresh failed: {error.reason}")
            return
        if renewed.role != principal.role:
            log.warning("AUTH_RESPONSE changed the role from %r to %r; closing", principal.role, renewed.role)
            self._close_for_credentials("the role cannot change during an authentication refresh")
            return
        self.principal = renewed
        self._challenged = False
        self.refreshed_count += 1

    def _close_for_credentials(self, reason: str) -> None:
        self.closed_for_credentials = True
        self.connection.close(reason)

    def check_credentials(self, now_ms: int) -> None:
        """Challenge or close a connection whose credentials expired (wall-clock ``now_ms``)."""
        if not self.is_open():
            return
        if self.refusal is not None:
            self._close_for_credentials(self.refusal)
            return
        principal = self.principal
        if principal is None or principal.expires_at_ms is None:
            return
        if self._challenged:
            self._close_for_credentials("authentication refresh not answered in time")
            return
        if now_ms < principal.expires_at_ms:
            return
        if not self.connection.features.supports_auth_refresh:
            self._close_for_credentials("credentials expired and the client cannot refresh them")
            return
        self.connection.send_auth_challenge(principal.method, b"refresh")
        self._challenged = True
        self._out()

    # --- teardown -------------------------------------------------------------------------------

    async def close(self) -> None:
        """The connection is gone: producers leave their topics, consumers' unacked entries go back."""
        if self._closed:
            return
        self._closed = True
        room, self._send_room = self._send_room, None
        if room is not None:
            room.set()
        self.requests.abandon_all()  # their tasks end by themselves and attach nothing
        for producer in list(self.producers.values()):
            producer.topic.remove_producer(producer)
        self.producers.clear()
        for consumer, subscription in list(self.consumers.values()):
            try:
                await subscription.remove_consumer(consumer)
            except Exception:
                log.exception("removing consumer %s", consumer.consumer_id)
        self.consumers.clear()


def _topic_name(text: str) -> TopicName:
    try:
        return TopicName.parse(text)
    except InvalidArgumentError as error:
        raise BrokerError(pb.InvalidTopicName, str(error)) from error


_LOOKUP_KINDS = frozenset({T.PARTITIONED_METADATA, T.LOOKUP, T.GET_SCHEMA})
#: Answered from their own task (they wait on metadata); the others in order.
_CONCURRENT_KINDS = frozenset({T.PARTITIONED_METADATA, T.LOOKUP, T.GET_TOPICS_OF_NAMESPACE, T.GET_SCHEMA,
                               T.GET_OR_CREATE_SCHEMA, T.PRODUCER, T.SUBSCRIBE})

_HANDLERS: dict[int, Callable[[Session, Any], Awaitable[None]]] = {
    T.PARTITIONED_METADATA: Session._partitioned_metadata,
    T.LOOKUP: Session._lookup,
    T.GET_TOPICS_OF_NAMESPACE: Session._topics_of_namespace,
    T.GET_SCHEMA: Session._get_schema,
    T.GET_OR_CREATE_SCHEMA: Session._get_or_create_schema,
    T.PRODUCER: Session._producer,
    T.CLOSE_PRODUCER: Session._close_producer,
    T.SUBSCRIBE: Session._subscribe,
    T.REDELIVER_UNACKNOWLEDGED_MESSAGES: Session._redeliver,
    T.SEEK: seek,
    T.GET_LAST_MESSAGE_ID: get_last_message_id,
    T.UNSUBSCRIBE: Session._unsubscribe,
    T.CLOSE_CONSUMER: Session._close_consumer,
    T.CONSUMER_STATS: Session._consumer_stats,
    T.AUTH_RESPONSE: Session._auth_response,
}
