"""One broker connection of the client (``BrokerConnection``) and the pool keyed by broker URL.

``BrokerConnection`` drives a sans-IO ``ClientConnection`` over a ``Connection`` from the injected
``Network``: a reader task feeds bytes in and dispatches events; a timer task (ticking on the
injected ``Clock``) runs the keep-alive and expires pending requests. Producers and consumers
register as handlers under their ids and get their events, and are told when the connection
goes away so they can reconnect.

States (one table, ``_TRANSITIONS``): NEW -> CONNECTING -> READY -> CLOSED; any -> CLOSED.

Invariants:
* At most ``CLIENT_PENDING_REQUESTS_COUNT_MAX`` requests await a reply; each has a deadline on
  the injected clock and fails with ``OperationTimeoutError`` when it passes.
* When the connection closes, every pending request fails with ``ConnectionLostError`` and every
  registered handler is told exactly once.
* Outbound backpressure: ``drain()`` waits while the transport's buffer is above its bound.
* The pool holds at most ``CLIENT_CONNECTIONS_COUNT_MAX`` connections, one per URL string (as
  the official client: two spellings of one host are two connections).
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol

from magnetar.base.clock import Clock
from magnetar.base.errors import (
    InvalidArgumentError,
    LimitExceededError,
    MagnetarError,
    OperationTimeoutError,
)
from magnetar.base.invariant import invariant
from magnetar.base.io import Connection, Network
from magnetar.base.limits import (
    CLIENT_CONNECTIONS_COUNT_MAX,
    CLIENT_PENDING_REQUESTS_COUNT_MAX,
    CLIENT_TIMER_TICK_MS,
    PULSAR_READ_CHUNK_BYTES,
)
from magnetar.client._util import within
from magnetar.client.config import ClientOptions
from magnetar.client.errors import ConnectError, ConnectionLostError, broker_error
from magnetar.protocol.pulsar.client_connection import (
    ActiveConsumerChange,
    ClientConfig,
    ClientConnection,
    Connected,
    ConnectionTerminated,
    ConsumerClosedByBroker,
    CorruptMessage,
    Event,
    MessageReceived,
    ProducerClosedByBroker,
    Response,
    SendError,
    SendReceipt,
)
from magnetar.protocol.pulsar.generated import pulsar_api_pb2 as pb

T = pb.BaseCommand
DEFAULT_PORT = 6650
DEFAULT_TLS_PORT = 6651


@dataclass(frozen=True, slots=True)
class BrokerAddress:
    url: str  # the exact string (pool key)
    host: str
    port: int


def parse_service_url(url: str) -> BrokerAddress:
    """``pulsar://host:port`` or ``pulsar+ssl://host:port`` (the first host of a comma list).

    For ``pulsar+ssl://`` the caller's ``Network`` must be a TLS one (``TcpNetwork`` with a client
    SSL context): the URL says what the broker expects, the network decides how to reach it.
    """
    if url.startswith("pulsar://"):
        scheme, default_port = "pulsar://", DEFAULT_PORT
    elif url.startswith("pulsar+ssl://"):
        scheme, default_port = "pulsar+ssl://", DEFAULT_TLS_PORT
    else:
        raise InvalidArgumentError(f"service URL must start with pulsar:// or pulsar+ssl://, got {url!r}")
    hostport = url[len(scheme):].split(",")[0].rstrip("/")
    host, sep, port_text = hostport.rpartition(":")
    if not sep:
        host, port_text = hostport, str(default_port)
    if not host or not port_text.isdigit():
        raise InvalidArgumentError(f"invalid service URL {url!r}")
    return BrokerAddress(url, host.strip("[]"), int(port_text))


class Handler(Protocol):
    """A producer or consumer attached to a connection."""

    def on_event(self, connection: BrokerConnection, event: Event) -> None: ...

    def on_connection_closed(self, connection: BrokerConnection) -> None: ...


class State(enum.Enum):
    NEW = "new"
    CONNECTING = "connecting"
    READY = "ready"
    CLOSED = "closed"


_TRANSITIONS: dict[State, frozenset[State]] = {
    State.NEW: frozenset({State.CONNECTING, State.CLOSED}),
    State.CONNECTING: frozenset({State.READY, State.CLOSED}),
    State.READY: frozenset({State.CLOSED}),
    State.CLOSED: frozenset(),
}


@dataclass(slots=True)
class _Pending:
    future: asyncio.Future[Response]
    deadline_ns: int
    what: str


class BrokerConnection:
    def __init__(self, address: BrokerAddress, network: Network, clock: Clock, options: ClientOptions,
                 on_closed: Callable[[BrokerConnection], None] | None = None) -> None:
        self.address = address
        self._network = network
        self._clock = clock
        self._options = options
        self._on_closed = on_closed
        self.state = State.NEW
        self._conn: Connection | None = None
        self._proto: ClientConnection | None = None
        self._pending: dict[int, _Pending] = {}
        self._next_request_id = 0
        self._producers: dict[int, Handler] = {}
        self._consumers: dict[int, Handler] = {}
        self._tasks: list[asyncio.Task[None]] = []
        self._connected: asyncio.Future[Connected] | None = None
        self.close_reason: str | None = None

    def _move(self, target: State) -> None:
        invariant(target in _TRANSITIONS[self.state], f"connection {self.address.url}: {self.state} -> {target}")
        self.state = target

    # --- lifecycle -----------------------------------------------------------------------

    def _now_ms(self) -> int:
        return self._clock.monotonic_ns() // 1_000_000

    async def open(self) -> None:
        """TCP connect and handshake, within the connection timeout. Raises ``ConnectError``."""
        self._move(State.CONNECTING)
        timeout_s = self._options.connection_timeout_ms / 1000
        try:
            self._conn = await within(self._clock, timeout_s,
                                      self._network.connect(self.address.host, self.address.port),
                                      f"connect to {self.address.url}")
        except (OSError, MagnetarError) as error:
            self._shutdown(f"connect failed: {error}")
            raise ConnectError(f"cannot connect to {self.address.url}: {error}") from error
        config = ClientConfig(
            client_version=self._options.client_version, auth_method_name=self._options.auth_method_name,
            auth_data=self._options.auth_data, keep_alive_interval_ms=self._options.keep_alive_interval_ms,
            handshake_timeout_ms=self._options.connection_timeout_ms,
        )
        self._proto = ClientConnection(self._now_ms(), config)
        self._connected = asyncio.get_running_loop().create_future()
        self._tasks.append(asyncio.ensure_future(self._read_loop()))
        self._tasks.append(asyncio.ensure_future(self._timer_loop()))
        self._flush()
        try:
            await within(self._clock, timeout_s, asyncio.shield(self._connected), "handshake")
        except (MagnetarError, OSError) as error:
            self._shutdown(f"handshake failed: {error}")
            raise ConnectError(f"handshake with {self.address.url} failed: {error}") from error
        if self.state is State.CLOSED:  # CONNECTED came, then the connection broke before we resumed
            raise ConnectError(f"connection to {self.address.url} closed during the handshake: {self.close_reason}")
        self._move(State.READY)

    @property
    def protocol_version(self) -> int:
        return 0 if self._proto is None else self._proto.protocol_version

    @property
    def max_message_size_bytes(self) -> int:
        invariant(self._proto is not None, "not opened")
        assert self._proto is not None
        return self._proto.max_message_size_bytes

    @property
    def is_ready(self) -> bool:
        return self.state is State.READY

    def close(self, reason: str = "closed by client") -> None:
        self._shutdown(reason)

    def _shutdown(self, reason: str) -> None:
        if self.state is State.CLOSED:
            return
        self._move(State.CLOSED)
        self.close_reason = reason
        if self._proto is not None:
            self._proto.close(reason)
        if self._conn is not None:
            self._conn.close()
        if self._connected is not None and not self._connected.done():
            self._connected.set_exception(ConnectionLostError(f"{self.address.url}: {reason}"))
            self._connected.exception()  # retrieved: nobody may be waiting any more
        pending, self._pending = self._pending, {}
        for item in pending.values():
            if not item.future.done():
                item.future.set_exception(ConnectionLostError(f"{self.address.url} closed during {item.what}: {reason}"))
        for task in self._tasks:
            if task is not asyncio.current_task():
                task.cancel()
        handlers = list(self._producers.values()) + list(self._consumers.values())
        self._producers.clear()
        self._consumers.clear()
        for handler in handlers:
            handler.on_connection_closed(self)
        if self._on_closed is not None:
            self._on_closed(self)

    # --- handlers ------------------------------------------------------------------------

    def add_producer(self, producer_id: int, handler: Handler) -> None:
        self._check_ready()
        self._producers[producer_id] = handler

    def remove_producer(self, producer_id: int, handler: Handler) -> None:
        if self._producers.get(producer_id) is handler:
            del self._producers[producer_id]

    def add_consumer(self, consumer_id: int, handler: Handler) -> None:
        self._check_ready()
        self._consumers[consumer_id] = handler

    def remove_consumer(self, consumer_id: int, handler: Handler) -> None:
        if self._consumers.get(consumer_id) is handler:
            del self._consumers[consumer_id]

    def _check_ready(self) -> None:
        if self.state is not State.READY:
            raise ConnectionLostError(f"connection to {self.address.url} is {self.state.value}")

    # --- sending -------------------------------------------------------------------------

    def new_request_id(self) -> int:
        self._next_request_id += 1
        return self._next_request_id

    def send(self, command: pb.BaseCommand) -> None:
        """Queue and write a simple command without waiting (``drain`` applies backpressure)."""
        self._check_ready()
        assert self._proto is not None
        self._proto.send_command(command)
        self._flush()

    def send_message(self, command: pb.BaseCommand, metadata_and_payload: bytes) -> None:
        self._check_ready()
        assert self._proto is not None
        self._proto.send_message(command, metadata_and_payload)
        self._flush()

    async def drain(self) -> None:
        if self._conn is None or self.state is State.CLOSED:
            raise ConnectionLostError(f"connection to {self.address.url} is closed")
        try:
            await self._conn.drain()
        except MagnetarError as error:
            self._shutdown(f"drain failed: {error}")
            raise ConnectionLostError(str(error)) from error

    def _flush(self) -> None:
        if self._proto is None or self._conn is None:
            return
        parts = self._proto.data_to_send()
        if not parts:
            return
        try:
            for part in parts:
                self._conn.write(part)
        except MagnetarError as error:
            self._shutdown(f"write failed: {error}")

    async def request(self, command: pb.BaseCommand, request_id: int, what: str) -> Response:
        """Send ``command`` (carrying ``request_id``) and await its reply.

        ERROR replies raise the typed ``BrokerError``; other replies are returned as is (the
        caller interprets ``*_RESPONSE`` failures). Raises ``OperationTimeoutError`` after the
        operation timeout, ``ConnectionLostError`` if the connection goes away first.
        """
        self._check_ready()
        if len(self._pending) >= CLIENT_PENDING_REQUESTS_COUNT_MAX:
            raise LimitExceededError("CLIENT_PENDING_REQUESTS_COUNT_MAX", len(self._pending) + 1,
                                CLIENT_PENDING_REQUESTS_COUNT_MAX)
        invariant(request_id not in self._pending, f"request id {request_id} reused while pending")
        future: asyncio.Future[Response] = asyncio.get_running_loop().create_future()
        deadline_ns = self._clock.monotonic_ns() + self._options.operation_timeout_ms * 1_000_000
        self._pending[request_id] = _Pending(future, deadline_ns, what)
        try:
            self.send(command)
            response = await future
        finally:
            self._pending.pop(request_id, None)
        if response.type == T.ERROR:
            body = response.body
            assert isinstance(body, pb.CommandError)
            raise broker_error(body.error, body.message)
        return response

    # --- receiving -----------------------------------------------------------------------

    async def _read_loop(self) -> None:
        reason = "connection closed by broker"
        try:
            assert self._conn is not None and self._proto is not None
            while self.state is not State.CLOSED:
                data = await self._conn.read(PULSAR_READ_CHUNK_BYTES)
                if not data:
                    break
                events = self._proto.receive_data(data, self._now_ms())
                for event in events:
                    self._dispatch(event)
                self._flush()
        except asyncio.CancelledError:
            reason = "cancelled"
            raise
        except MagnetarError as error:  # protocol violation, corrupt frame, closed transport
            reason = f"{type(error).__name__}: {error}"
        finally:
            self._shutdown(reason)

    async def _timer_loop(self) -> None:
        tick_s = CLIENT_TIMER_TICK_MS / 1000
        while self.state is not State.CLOSED:
            await self._clock.sleep(tick_s)
            assert self._proto is not None
            for event in self._proto.tick(self._now_ms()):
                self._dispatch(event)
            self._flush()
            now_ns = self._clock.monotonic_ns()
            for request_id, item in list(self._pending.items()):
                if now_ns >= item.deadline_ns and not item.future.done():
                    del self._pending[request_id]
                    item.future.set_exception(OperationTimeoutError(f"{item.what} on {self.address.url} timed out"))

    def _dispatch(self, event: Event) -> None:
        if isinstance(event, Connected):
            if self._connected is not None and not self._connected.done():
                self._connected.set_result(event)
        elif isinstance(event, Response):
            if event.type == T.PRODUCER_SUCCESS:
                body = event.body
                assert isinstance(body, pb.CommandProducerSuccess)
                if body.HasField("producer_ready") and not body.producer_ready:
                    return  # queued for exclusive access: a second PRODUCER_SUCCESS follows
            item = self._pending.get(event.request_id)
            if item is not None and not item.future.done():
                item.future.set_result(event)
        elif isinstance(event, SendReceipt | SendError | ProducerClosedByBroker):
            producer = self._producers.get(event.producer_id)
            if isinstance(event, ProducerClosedByBroker):
                self._producers.pop(event.producer_id, None)
            if producer is not None:
                producer.on_event(self, event)
        elif isinstance(event, MessageReceived | CorruptMessage | ConsumerClosedByBroker | ActiveConsumerChange):
            consumer = self._consumers.get(event.consumer_id)
            if isinstance(event, ConsumerClosedByBroker):
                self._consumers.pop(event.consumer_id, None)
            if consumer is not None:
                consumer.on_event(self, event)
        elif isinstance(event, ConnectionTerminated):
            self._shutdown(event.reason)


class ConnectionPool:
    """One ``BrokerConnection`` per broker URL string; concurrent callers share one attempt."""

    def __init__(self, network: Network, clock: Clock, options: ClientOptions) -> None:
        self._network = network
        self._clock = clock
        self._options = options
        self._connections: dict[str, BrokerConnection] = {}
        self._opening: dict[str, asyncio.Future[BrokerConnection]] = {}

    def __len__(self) -> int:
        return len(self._connections)

    async def get(self, url: str) -> BrokerConnection:
        existing = self._connections.get(url)
        if existing is not None and existing.is_ready:
            return existing
        opening = self._opening.get(url)
        if opening is not None:
            return await asyncio.shield(opening)
        if len(self._connections) >= CLIENT_CONNECTIONS_COUNT_MAX:
            raise LimitExceededError("CLIENT_CONNECTIONS_COUNT_MAX", len(self._connections) + 1, CLIENT_CONNECTIONS_COUNT_MAX)
        future: asyncio.Future[BrokerConnection] = asyncio.get_running_loop().create_future()
        self._opening[url] = future
        connection = BrokerConnection(parse_service_url(url), self._network, self._clock, self._options,
                                      on_closed=self._forget)
        try:
            await connection.open()
        except BaseException as error:
            future.set_exception(error)
            future.exception()
            raise
        finally:
            self._opening.pop(url, None)
        self._connections[url] = connection
        future.set_result(connection)
        return connection

    def _forget(self, connection: BrokerConnection) -> None:
        if self._connections.get(connection.address.url) is connection:
            del self._connections[connection.address.url]

    def close_all(self) -> None:
        for connection in list(self._connections.values()):
            connection.close("client closed")
        self._connections.clear()


async def retrying(
    operation: Callable[[], Awaitable[object]], clock: Clock, deadline_ns: int, next_backoff_s: Callable[[], float],
    retryable: Callable[[BaseException], bool],
) -> object:
    """Run ``operation`` until it succeeds, fails fatally, or the deadline passes (last error raised)."""
    while True:
        try:
            return await operation()
        except MagnetarError as error:
            if not retryable(error):
                raise
            delay_s = next_backoff_s()
            if clock.monotonic_ns() + int(delay_s * 1e9) >= deadline_ns:
                raise
            await clock.sleep(delay_s)


def suppress_closed() -> contextlib.AbstractContextManager[None]:
    """Ignore a connection that went away while sending a best-effort command."""
    return contextlib.suppress(ConnectionLostError, ConnectError)
