"""The broker node's server loop: one task group per client connection over a ``base.io.Network``.

``start_broker`` assembles a broker from capabilities (``Clock``, ``Network``, a ``MetadataStore``
and a ledger client) and starts it in the running loop: ``runtime`` calls it with TCP and the
system clock (``magnetar standalone``, ``magnetar broker``, tests), ``sim`` with the simulated
network and virtual clock (the whole-stack simulation).
Per connection: a reader feeds bytes into a ``ServerConnection`` and hands events to the
``Session`` in order; a writer drains queued frames to the socket; a ticker runs the keep-alive
and handshake timers. Backpressure: the reader stops reading while the session is not writable
(outgoing bytes above ``connection_outbound_bytes_high``), and dispatchers stop sending to it, so
a client that never reads cannot grow broker memory; and it hands a connection's SENDs over only
while fewer than ``pending_sends_per_connection_max`` are unanswered (exactly: the rest of a read
waits), so one connection cannot fill the shared journal with its backlog; and at most
``BROKER_SENDS_PER_TURN_COUNT_MAX`` SENDs per loop pass, across receives (``SendTurn``), the rest
after the other connections' turns (``hand_over_within_bound``), so a light producer's SEND is not
handed over behind a heavy producer's whole read. What a session queues
between two flushes leaves with one socket write (``writelines``). Bad input (malformed frame,
oversized frame, protocol violation) closes that client's connection only. At most
``BROKER_CONNECTIONS_COUNT_MAX`` connections are served; beyond it new ones are closed at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Final, Protocol, cast

from magnetar.base.clock import Clock
from magnetar.base.errors import ClosedError, InvalidArgumentError
from magnetar.base.io import Connection, Listener, Network
from magnetar.base.limits import (
    BROKER_CONNECTIONS_COUNT_MAX,
    BROKER_READ_SLICE_BYTES,
    BROKER_SENDS_PER_TURN_COUNT_MAX,
    PULSAR_READ_CHUNK_BYTES,
)
from magnetar.base.loop_ref import LoopRef
from magnetar.broker.config import BrokerConfig
from magnetar.broker.log import LogStore
from magnetar.broker.managed_log import ManagedLogStore
from magnetar.broker.service import BrokerService
from magnetar.broker.session import Session
from magnetar.ledger.manager import LedgerManager
from magnetar.managed_ledger import ManagedLedgerConfig, ManagedLedgerFactory
from magnetar.managed_ledger.offload import LedgerOffloader
from magnetar.metadata.api import MetadataStore
from magnetar.protocol.pulsar import (
    ConnectionTerminated,
    CorruptSend,
    Event,
    SendReceived,
    ServerConfig,
    ServerConnection,
    State,
)
from magnetar.protocol.pulsar.frames import Buffer
from magnetar.security import Authenticator

log = logging.getLogger(__name__)

#: A receive whose frames average at least this many bytes reads whole chunks next (``read_bytes_after``):
#: at most 16 frames in a 256 KiB chunk, as many as one fair turn hands over.
BROKER_LARGE_FRAME_BYTES_MIN: Final = PULSAR_READ_CHUNK_BYTES // BROKER_SENDS_PER_TURN_COUNT_MAX
CLOSE_GRACE_S = 5.0  # how long close() lets connection loops end by themselves
_SEND_EVENTS = (SendReceived, CorruptSend)  # events a producer answers: each counts as a pending SEND


class Reloadable(Protocol):
    """Files re-read when they change (certificates, keys, password files): ``runtime`` has them."""

    def reload_if_changed(self) -> object: ...


class Credentials(Reloadable, Protocol):
    """What authenticates clients, from files the runtime reads (``runtime.security.CredentialFiles``)."""

    @property
    def authenticator(self) -> Authenticator | None: ...


def conn_tls_peer_cn(conn: Connection) -> str | None:
    """The client certificate's CN on a TLS connection (None on plain TCP or without a certificate)."""
    peer_cn = getattr(conn, "tls_peer_cn", None)
    return peer_cn if isinstance(peer_cn, str) else None


class DirectReads(Protocol):
    """A connection that hands received bytes to a plain callback (``runtime.network.TcpConnection``)."""

    def read_now(self, max_bytes: int) -> bytes | None: ...

    def set_receiver(self, receiver: Callable[[], None] | None) -> None: ...


class WriteFlow(Protocol):
    """A connection that reports its transport's write flow control (``runtime.network.TcpConnection``)."""

    @property
    def writing_paused(self) -> bool: ...


class SendRoom(Protocol):
    """What ``hand_over_within_bound`` uses of a session (``broker.session.Session``)."""

    @property
    def pending_sends(self) -> int: ...

    async def wait_send_room(self) -> None: ...

    async def handle_all(self, events: Sequence[Event]) -> bool: ...


class SendTurn:
    """One connection's turn: the SENDs it handed over since it last let the loop run the other
    connections (a yield, a wait, a park), at most ``size`` (``BROKER_SENDS_PER_TURN_COUNT_MAX``)
    per loop pass *across receives*. Counting per receive let a heavy producer's connection hand
    over the rest of one receive's turn and a whole turn of the next buffered receive in one pass
    (up to twice the turn), and the loop's pass, which a light producer's SEND and its journal
    completion each wait for, grew with it (issue 22, latency isolation)."""

    __slots__ = ("size", "used")

    def __init__(self, size: int = BROKER_SENDS_PER_TURN_COUNT_MAX) -> None:
        self.size = size
        self.used = 0  # SENDs (events, on the one-turn path) handed over in this turn

    def spent(self) -> bool:
        return self.used >= self.size

    def fits(self, count: int) -> bool:
        """``count`` more fit in this turn; counted if so."""
        if self.used + count > self.size:
            return False
        self.used += count
        return True


async def hand_over_within_bound(session: SendRoom, events: list[Event], bound: int,
                                 hold_reading: Callable[[], None], is_open: Callable[[], bool],
                                 turn: SendTurn) -> bool:
    """Hand ``events`` to the session in order, never more SENDs than leave the connection
    within ``bound`` (``pending_sends_per_connection_max``) unanswered ones: at the bound the rest
    of this receive waits (``hold_reading`` first) until half of them were answered. The bound is
    exact, not "checked before the next read": one 64 KiB read holds ~60 SENDs of 1 KiB, so a
    connection with many partitions would otherwise put the bound plus a read's worth of adds in
    one journal group beside everyone else's (issue 22, latency isolation).

    Fair turns: at most ``turn.size`` SENDs (``BROKER_SENDS_PER_TURN_COUNT_MAX``) are handed over
    per loop pass, counting those this connection handed over earlier in the same pass
    (``turn.used``, another receive's); once the turn is spent the rest waits one pass
    (``asyncio.sleep(0)``: what became ready before, other connections' SENDs and the journal's
    answers among them, runs first; the ready queue is FIFO, so busy connections take turns). A
    receive of a light producer (one SEND) never waits. True once the connection terminated."""
    start, count = 0, len(events)
    while start < count:
        room = bound - session.pending_sends
        if room <= 0:
            hold_reading()
            await session.wait_send_room()
            turn.used = 0  # waited: a later pass
            if not is_open() or session.pending_sends >= bound:
                return True  # closed meanwhile (the wait's other way out): the rest goes with it
            continue
        left = turn.size - turn.used
        if left <= 0:
            await asyncio.sleep(0)  # this connection's turn is over: the others' SENDs first
            turn.used = 0
            if not is_open():
                return True  # closed during the other turns: the rest goes with it
            continue
        room = room if room < left else left
        end = start
        sends = 0
        while end < count and sends < room:
            if type(events[end]) in _SEND_EVENTS:
                sends += 1
            end += 1
        while end < count and type(events[end]) not in _SEND_EVENTS:
            end += 1  # the non-SEND events up to the next SEND need no room
        turn.used += sends
        if await session.handle_all(events if start == 0 and end == count else events[start:end]):
            return True
        start = end
    return False


def read_bytes_after(read_bytes: int, events_count: int) -> int:
    """How much the next read of a connection may take, after a read of ``read_bytes`` that
    completed ``events_count`` events: a whole received chunk (``PULSAR_READ_CHUNK_BYTES``) while
    its frames are large (at least ``BROKER_LARGE_FRAME_BYTES_MIN`` per event: a batched
    producer's, a few frames per chunk), else a slice (``BROKER_READ_SLICE_BYTES``).

    The slice bounds the frames one receive decodes before other connections get a turn (~60
    unbatched 1 KiB SENDs, not ~250); large frames need no such bound, and slicing a chunk costs
    a copy of its bytes (issue 22, "Session 13: isolation and ingest" in docs/performance.md)."""
    if read_bytes >= BROKER_LARGE_FRAME_BYTES_MIN * (events_count if events_count > 1 else 1):
        return PULSAR_READ_CHUNK_BYTES
    return BROKER_READ_SLICE_BYTES


class _ConnectionLoop:
    def __init__(self, server: BrokerServer, conn: Connection) -> None:
        self.server = server
        self.conn = conn
        self.clock = server.clock
        # Read per receive and bound once (issue 22, steady load: a method or attribute looked up
        # by name on an interpreted object, the clock capability or the service's config, per
        # message): the clock's reading and the connection's SEND bound (fixed while it is open).
        self._monotonic_ns: Callable[[], int] = server.clock.monotonic_ns
        self._send_bound = server.service.config.pending_sends_per_connection_max
        self.protocol = ServerConnection(self._now_ms(), server.connection_config())
        self.session = Session(server.service, self.protocol, self._wake_writer, tls_peer_cn=conn_tls_peer_cn(conn))
        self.session.peer_address = conn.peer
        self._output = asyncio.Event()
        #: Set once the session is writable again; made only while the reader waits for it (no
        #: Event call per flush).
        self._writable: asyncio.Event | None = None
        self._done = asyncio.Event()
        self._linger: asyncio.Task[None] | None = None
        self._write_soon_scheduled = False
        #: SENDs read on this connection are being answered: ``pending_sends`` was above 0 after
        #: a read and no write has gone out since it came back to 0.
        self._answering = False
        #: One socket write per flush: ``writelines`` (TCP: one ``writev``) where the connection
        #: has it (``_write_chunks``).
        self._writelines: Callable[[list[Buffer]], None] | None = getattr(conn, "writelines", None)
        #: Its ``write``, bound once, and its write-flow flag where it has one (TCP: ``None``
        #: elsewhere, whose flushes the writer task does): read per flush, a lookup by name with a
        #: default each time before (issue 22, the broker's part of a lone SEND).
        self._write: Callable[[Buffer], None] | None = getattr(conn, "write", None)
        self._flow: WriteFlow | None = cast(WriteFlow, conn) if hasattr(conn, "writing_paused") else None
        self._draining = False  # the writer task waits in drain()
        self._drain_wanted = False  # a direct write left the transport above its high-water mark
        #: Reading stopped by us for SEND back-pressure (``pending_sends_per_connection_max``)
        #: and not yet resumed by a read: the client's PONG may sit unread, so the keep-alive
        #: must not close the connection (Pulsar's keep-alive skips the close while auto-read is
        #: off, which it turns off for this). A client not reading our replies is still closed.
        self._reading_held = False
        #: What the next read may take: a slice (many small frames) or a whole chunk (large ones).
        self._read_bytes = BROKER_READ_SLICE_BYTES
        #: The SENDs this connection handed over in the current loop pass, across receives.
        self._turn = SendTurn()
        #: Where the connection has them (TCP), receives are handled by a plain call from the
        #: transport's callback while the read loop waits (``_receive_directly``); else the loop
        #: reads (the simulated network).
        self._direct = cast(DirectReads, conn) if hasattr(conn, "set_receiver") else None
        #: Its ``read_now``, bound once: called twice per receive (issue 22, steady load).
        self._read_now: Callable[[int], bytes | None] | None = \
            self._direct.read_now if self._direct is not None else None
        #: Set while the read loop waits for the direct receiver to hand it something:
        #: ``_handed`` (bytes to read on from) or ``_handed_outcome`` (a receive's outcome).
        self._parked: asyncio.Future[None] | None = None
        self._handed: bytes | None = None
        self._handed_outcome: bool | Awaitable[bool] = False
        #: The loop, without ``asyncio.get_running_loop()``'s ``getpid`` per writer wake-up.
        self._loop = LoopRef()

    def _now_ms(self) -> int:
        return self._monotonic_ns() // 1_000_000

    def _open(self) -> bool:
        return self.protocol.state is not State.CLOSED

    def _wake_writer(self) -> None:
        # Once per loop pass at most: what the session queued meanwhile (receipts of a journal
        # group, say) goes out with one write, from a plain callback; waking the writer task
        # per receipt cost an Event, a future and a task step each (docs/performance.md).
        session = self.session
        if self._answering and session.pending_sends == 0 and self._writelines is not None:
            # The last receipt of the SENDs read: the MESSAGEs the same adds dispatched were
            # queued before it (``Dispatcher.entries_added``), so all of it goes now, in the pass
            # the adds completed, not a pass later behind the reads that pass polls (issue 22,
            # e2e latency at a modest rate; a connection with consumers waited for that pass).
            self._answering = False
            self._write_soon()
            return
        if self._write_soon_scheduled:
            return
        if self._writelines is not None and not self.protocol.outbound_bytes and self.protocol.state is not State.CLOSED:
            # Nothing queued (a receive's SENDs handed over, their receipts to come): no callback
            # and no loop pass of its own that would find nothing to write (issue 22, a pass per
            # receive at a modest rate). A simulated connection keeps its schedule (see below).
            return
        if session.pending_sends == 0 and not session.consumers and self._writelines is not None:
            # Nothing to batch it with: no other SEND of this connection is unanswered and no
            # consumer is dispatched to (a synchronous producer's receipt, a request's answer).
            # Written now, not after the rest of this loop pass (under load, a busy ledger's
            # answers and receipts: issue 22, latency isolation). Only where one write is one
            # ``writev`` (TCP): a simulated connection keeps its schedule (see ``_write_chunks``).
            self._write_soon()
            return
        self._write_soon_scheduled = True
        self._loop.get().call_soon(self._write_soon)

    def _write_soon(self) -> None:
        self._write_soon_scheduled = False
        flow = self._flow
        if flow is None or flow.writing_paused or self._draining or self.protocol.state is State.CLOSED:
            self._output.set()  # the writer task drains, closes, or serves a connection type without the flag
            return
        chunks = self.protocol.data_to_send()
        if not chunks:
            return
        try:
            self._write_chunks(chunks)
        except ClosedError:
            self._output.set()  # the writer task sees the closed connection and ends
            return
        if flow.writing_paused:  # now above the high-water mark
            self.session.set_transport_backlog(sum(len(c) for c in chunks))
            self._drain_wanted = True
            self._output.set()
            return
        if self.session.writable():
            self._wake_reader_writable()
            self.session.notify_writable()

    def _wake_reader_writable(self) -> None:
        writable, self._writable = self._writable, None
        if writable is not None:
            writable.set()

    def _write_chunks(self, chunks: list[Buffer]) -> None:
        """Everything queued since the last flush (receipts, dispatches, replies of one or more
        loop passes), in order, with one socket write: uvloop sends each ``write`` at once when
        its buffer is empty, so one ``write`` per frame cost one ``send`` system call each. A
        connection without ``writelines`` (the simulated network, where each write is one
        delivery) still gets one ``write`` per frame: joining them would shift every seeded
        simulation's schedule, and the seeds the soak found would no longer reproduce."""
        write = self._write
        if len(chunks) == 1 and write is not None:
            write(chunks[0])
        elif self._writelines is not None:
            self._writelines(chunks)
        else:
            for chunk in chunks:
                self.conn.write(chunk)

    def wake_writer(self) -> None:
        """Queued frames to write, or a close to carry out (the writer closes a CLOSED connection)."""
        self._output.set()

    async def run(self) -> None:
        writer = asyncio.get_running_loop().create_task(self._write_loop())
        ticker = asyncio.get_running_loop().create_task(self._tick_loop())
        try:
            await self._read_loop()
        finally:
            await self._flush_quietly()
            tasks = [writer, ticker] + ([self._linger] if self._linger is not None else [])
            for task in tasks:
                task.cancel()
            for task in tasks:
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
            await self.session.close()
            self.conn.close()
            if self.session.closed_for_credentials:
                self.server.expired_closed_count += 1

    async def _read_loop(self) -> None:
        bound = self._send_bound
        while self._open():
            while not self.session.writable() and self._open():
                if self._writable is None:
                    self._writable = asyncio.Event()
                self._output.set()
                await self._writable.wait()
                self._turn.used = 0  # waited: a later pass
            if self.session.pending_sends >= bound:
                self._reading_held = True
                await self.session.wait_send_room()
                self._turn.used = 0
            if self._direct is not None:
                data = await self._read_or_park()
                if data is None:  # the direct receiver handled receives and handed an outcome over
                    outcome, self._handed_outcome = self._handed_outcome, False
                    if outcome if isinstance(outcome, bool) else await outcome:
                        return
                    continue
            else:
                data = await self.conn.read(self._read_bytes)
                # A connection without direct reads (the simulated network's) gives each receive
                # a turn of its own, as before: its reads may wait, and its schedule stays the
                # one the seeded simulations were found on.
                self._turn.used = 0
            if not data:
                return
            if len(data) >= BROKER_READ_SLICE_BYTES or self._turn.spent():
                # A full slice (more may be buffered), or this pass's turn spent on earlier
                # receives while more was buffered: other connections first.
                await asyncio.sleep(0)
                self._turn.used = 0
            received = self._received(data)
            if received if isinstance(received, bool) else await received:
                return

    def _received(self, data: bytes) -> bool | Awaitable[bool]:
        """One read's bytes through the protocol to the session, whoever read them (the read
        loop or the direct receiver): True once the connection is to end, False to read on; an
        awaitable of that answer where the session must wait (``_receive_rest``)."""
        try:
            events = self.protocol.receive_data(data, self._now_ms())
        except Exception as error:  # malformed/oversized frame, protocol violation: drop this client
            log.info("closing connection from %s: %s", self.conn.peer, error)
            return True
        self._read_bytes = read_bytes_after(len(data), len(events))
        self._reading_held = False  # read again: the keep-alive counts from this data
        session = self.session
        if session.pending_sends + len(events) <= self._send_bound \
                and self._turn.fits(len(events)):
            # Within this pass's turn, with room for all of them (a light producer's receive: the
            # usual case). SENDs of one receive go as runs, handed over in this call unless one
            # must wait.
            started = session.start_handle_all(events)
            if not isinstance(started, bool):
                return self._receive_rest(started)
            if started:
                return True  # ConnectionTerminated
        else:
            return self._receive_rest(self._handle_within_bound(events))
        self._received_done()
        return False

    async def _receive_rest(self, handling: Awaitable[bool]) -> bool:
        """``_received`` once the session's ``handling`` of the events is done."""
        if await handling:
            return True
        self._received_done()
        return False

    def _received_done(self) -> None:
        self._answering = self._answering or self.session.pending_sends > 0
        if self.session.refusal is not None and self._linger is None:
            self._linger = asyncio.get_running_loop().create_task(self._close_refused())
        self._wake_writer()

    async def _read_or_park(self) -> bytes | None:
        """The next read of a connection with a direct receiver: buffered bytes at once; else the
        read loop waits (parked) while ``_receive_directly`` handles the receives that need no
        wait, until one needs the loop: the bytes it is handed (a full slice, EOF, a wait before
        reading), or None with the outcome of a receive in ``_handed_outcome``."""
        direct, read_now = self._direct, self._read_now
        assert direct is not None and read_now is not None
        data = read_now(self._read_bytes)
        if data is not None:
            return data
        parked = self._loop.get().create_future()
        self._parked = parked
        direct.set_receiver(self._receive_directly)
        try:
            await parked
        finally:
            self._parked = None
            direct.set_receiver(None)
        data, self._handed = self._handed, None
        return data

    def _receive_directly(self) -> None:
        """The transport has bytes (or EOF) for the parked read loop: handled here, a plain call,
        while no wait is needed (the usual receive of a producer at a modest rate: no future, no
        task step, no coroutine frame per message); the first one that needs the loop is handed
        to it (``_read_or_park``). The same checks and steps as the loop's own pass."""
        parked = self._parked
        direct, read_now = self._direct, self._read_now
        if parked is None or parked.done() or direct is None or read_now is None:
            return
        self._turn.used = 0  # the read loop parked in an earlier pass: a new turn
        try:
            while True:
                if not self._open() or not self.session.writable() or \
                        self.session.pending_sends >= self._send_bound:
                    break  # the loop waits first (or ends): nothing taken
                data = read_now(self._read_bytes)
                if data is None:
                    return  # everything received was handled: stay parked
                if not data or len(data) >= BROKER_READ_SLICE_BYTES or self._turn.spent():
                    self._handed = data  # EOF, or a full slice or a spent turn the loop yields behind first
                    break
                received = self._received(data)
                if received is not False:
                    self._handed_outcome = received
                    break
        except Exception as error:  # raised in the read loop, where its own pass would have raised it
            direct.set_receiver(None)
            parked.set_exception(error)
            return
        direct.set_receiver(None)
        parked.set_result(None)

    async def _handle_within_bound(self, events: list[Event]) -> bool:
        """``hand_over_within_bound`` for this connection (within the bound, in fair turns):
        reading is held while it waits for room."""
        return await hand_over_within_bound(self.session, events, self._send_bound, self._hold_reading, self._open,
                                            self._turn)

    def _hold_reading(self) -> None:
        self._reading_held = True
        self._wake_writer()  # what this receive answered so far goes out first

    async def _close_refused(self) -> None:
        """A refused connection that sends no request is closed after the linger bound."""
        await self.clock.sleep(self.server.service.config.auth_refused_linger_s)
        if self._open():
            self.session.connection.close("authentication failed")
            self.session.closed_for_credentials = True
            self._output.set()

    async def _write_loop(self) -> None:
        while True:
            await self._output.wait()
            self._output.clear()
            chunks = self.protocol.data_to_send()
            if chunks or self._drain_wanted:
                self._drain_wanted = False
                size = sum(len(c) for c in chunks)
                if size:
                    self.session.set_transport_backlog(size)
                self._draining = True
                try:
                    if chunks:
                        self._write_chunks(chunks)
                    await self.conn.drain()
                except ClosedError:
                    return
                finally:
                    self._draining = False
                self.session.set_transport_backlog(0)
            if self.session.writable():
                self._wake_reader_writable()
                self.session.notify_writable()
            if self.protocol.state is State.CLOSED and not self.protocol.outbound_bytes:
                self.conn.close()
                return

    async def _flush_quietly(self) -> None:
        with contextlib.suppress(ClosedError, Exception):
            chunks = self.protocol.data_to_send()
            if chunks:
                self._write_chunks(chunks)
            await asyncio.wait_for(self.conn.drain(), timeout=1.0)

    async def _tick_loop(self) -> None:
        while True:
            deadline = self.protocol.next_deadline_ms()
            if deadline is None:
                return
            delay_ms = max(0, deadline - self._now_ms())
            if self._reading_held:
                delay_ms = 1000  # held by us: no keep-alive verdict until a read comes through
            await self.clock.sleep(min(delay_ms, 1000) / 1000)
            if self._now_ms() < deadline or self._reading_held:
                continue
            for event in self.protocol.tick(self._now_ms()):
                if isinstance(event, ConnectionTerminated):
                    log.info("closing connection from %s: %s", self.conn.peer, event.reason)
                    self.conn.close()
                    return
            self._output.set()


class BrokerServer:
    """A running broker: ``port``, ``service_url``, ``close()``."""

    def __init__(self, service: BrokerService, network: Network, clock: Clock,
                 server_config: ServerConfig | None = None) -> None:
        self.service = service
        self.network = network
        self.clock = clock
        # CONNECTED.max_message_size and the frame bound follow the broker's max_message_size_bytes
        self.server_config = dataclasses.replace(server_config or ServerConfig(),
                                                 max_message_size_bytes=service.config.max_message_size_bytes)
        self._listener: Listener | None = None
        self._tls_listener: Listener | None = None
        self._reloader: asyncio.Task[None] | None = None
        #: Connections closed by the credential check (expired, refresh failed or unanswered, refused).
        self.expired_closed_count = 0
        # Insertion-ordered (dicts, not sets): connections are closed in the order they came, so a
        # simulated run does the same thing every time (a set iterates in the order of ids).
        self._loops: dict[_ConnectionLoop, None] = {}
        self._tasks: dict[asyncio.Task[None], None] = {}
        self._closed = False

    @property
    def port(self) -> int:
        if self._listener is None:
            raise ClosedError("broker is not listening")
        return self._listener.port

    @property
    def tls_port(self) -> int | None:
        return self._tls_listener.port if self._tls_listener is not None else None

    @property
    def service_url(self) -> str:
        return self.service.config.service_url

    def connection_config(self) -> ServerConfig:
        """A new connection's protocol config: CONNECT waits for the session to authenticate it."""
        config = self.server_config
        size_max = min(config.max_message_size_bytes, self.service.config.max_message_size_bytes)
        if self.service.authenticator is None and size_max == config.max_message_size_bytes:
            return config
        return dataclasses.replace(config, auto_accept_connect=self.service.authenticator is None,
                                   max_message_size_bytes=size_max)

    @property
    def connection_count(self) -> int:
        return len(self._loops)

    def connection_roles(self) -> list[str | None]:
        """The authenticated role of each open connection (None: authentication off). Tests and
        operators see who is connected."""
        return [loop.session.role for loop in self._loops]

    def connection_outbound_bytes(self) -> list[int]:
        """Bytes each connection has queued for its client and not yet drained to the socket.

        Call on the broker's event loop. What ``connection_outbound_bytes_high`` bounds (plus the
        one frame that crosses it); tests watch it to show a client that never reads is contained.
        """
        return [loop.session.outbound_bytes() for loop in self._loops]

    async def listen(self, host: str, port: int) -> None:
        self._listener = await self.network.listen(host, port, self._serve)

    async def listen_tls(self, host: str, port: int, network: Network) -> None:
        """The ``pulsar+ssl://`` listener: same sessions, over ``network``'s TLS."""
        self._tls_listener = await network.listen(host, port, self._serve)

    def start_reloading(self, credentials: Credentials | None, tls: Reloadable | None) -> None:
        """Re-read changed credential and certificate files, each at its configured interval."""
        config = self.service.config
        checks: list[tuple[float, Callable[[], object]]] = []
        if credentials is not None and credentials.authenticator is not None:
            checks.append((float(config.auth_refresh_check_interval_s), credentials.reload_if_changed))
            checks.append((float(config.auth_refresh_check_interval_s), self.check_credentials))
        if tls is not None:
            checks.append((float(config.tls_cert_refresh_check_interval_s), tls.reload_if_changed))
        if checks:
            self._reloader = asyncio.get_running_loop().create_task(self._reload_loop(checks), name="reload")

    def check_credentials(self) -> None:
        """Every connection's expiry check (``Session.check_credentials``); closed ones are dropped."""
        now_ms = self.clock.now_ms()
        for loop in list(self._loops):
            loop.session.check_credentials(now_ms)
            loop.wake_writer()

    def refreshed_credentials_count(self) -> int:
        """AUTH_RESPONSEs that renewed a connection's credentials, over the open connections."""
        return sum(loop.session.refreshed_count for loop in self._loops)

    async def _reload_loop(self, checks: list[tuple[float, Callable[[], object]]]) -> None:
        due_s = [interval for interval, _ in checks]
        elapsed_s = 0.0
        while True:
            step_s = max(0.0, min(due_s) - elapsed_s)
            await self.clock.sleep(step_s)
            elapsed_s += step_s
            for index, (interval, check) in enumerate(checks):
                if due_s[index] <= elapsed_s:
                    due_s[index] = elapsed_s + interval
                    try:
                        check()
                    except Exception:  # a reload must never stop the broker
                        log.exception("reloading files failed")

    async def _serve(self, conn: Connection) -> None:
        if self._closed or len(self._loops) >= BROKER_CONNECTIONS_COUNT_MAX:
            conn.close()
            return
        loop = _ConnectionLoop(self, conn)
        self._loops[loop] = None
        task = asyncio.current_task()
        if task is not None:
            self._tasks[task] = None
        try:
            await loop.run()
        except Exception:
            log.exception("connection from %s failed", conn.peer)
        finally:
            self._loops.pop(loop, None)
            if task is not None:
                self._tasks.pop(task, None)

    async def close(self) -> None:
        """Stop listening, drop every client connection, close every topic."""
        if self._closed:
            return
        self._closed = True
        if self._reloader is not None:
            self._reloader.cancel()
        for listener in (self._listener, self._tls_listener):
            if listener is not None:
                listener.close()
        for loop in list(self._loops):
            loop.conn.close()
        tasks = [t for t in self._tasks if t is not asyncio.current_task()]
        if tasks:  # closed sockets end their loops; cancel only what does not end by itself
            _, stuck = await asyncio.wait(tasks, timeout=CLOSE_GRACE_S)
            for task in stuck:
                task.cancel()
            for task in stuck:
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
        await self.service.close()


async def start_broker(
    config: BrokerConfig,
    *,
    clock: Clock,
    metadata: MetadataStore | None = None,
    ledger_manager: LedgerManager | None = None,
    managed_ledger_config: ManagedLedgerConfig | None = None,
    log_store: LogStore | None = None,
    network: Network,
    host: str = "127.0.0.1",
    port: int = 6650,
    server_config: ServerConfig | None = None,
    before_listen: Callable[[BrokerService], None] | None = None,
    offloader: LedgerOffloader | None = None,
    tls_port: int | None = None,
    tls_network: Network | None = None,
    tls: Reloadable | None = None,
    credentials: Credentials | None = None,
) -> BrokerServer:
    """Start a broker listening on ``host:port`` (0 picks a free port) and return it running.

    Storage: topics live in managed ledgers over ``ledger_manager`` with their metadata in
    ``metadata`` (both required then), unless a ``log_store`` is given (tests, ``MemoryLogStore``).
    ``config.advertised_port`` is replaced by the bound port when ``port`` is 0 or the configured
    advertised port is 0, so LOOKUP answers point at this listener. ``close()`` stops the broker
    and closes its topics (managed ledgers); the ledger manager and metadata stay the caller's.
    ``before_listen(service)`` runs before the first client can connect (a cluster broker installs
    its bundle ownership there). ``offloader``: the object store sealed ledgers are offloaded to
    (``runtime.lakehouse.open_offloader``); None: no tiered storage.

    With ``config.tls_enabled``, a ``tls_port`` (0 picks one) and a ``tls_network`` (the runtime's
    TLS sockets), a second listener serves ``pulsar+ssl://`` and LOOKUP answers carry its URL.
    ``credentials`` authenticate clients; they and ``tls`` are re-read when their files change
    (``runtime.broker_server.start_broker`` builds all three from the config's files).
    """
    if log_store is None:
        if ledger_manager is None or metadata is None:
            raise InvalidArgumentError("start_broker needs ledger_manager and metadata, or a log_store")
        factory = ManagedLedgerFactory(manager=ledger_manager, store=metadata, clock=clock,
                                       config=managed_ledger_config, offloader=offloader)
        log_store = ManagedLogStore(factory, metadata)
    service = BrokerService(config, log_store, metadata, clock=clock)
    service.authenticator = credentials.authenticator if credentials is not None else None
    if before_listen is not None:
        before_listen(service)
    server = BrokerServer(service, network, clock, server_config)
    await server.listen(host, port)
    if port == 0 or config.advertised_port == 0:
        service.config = dataclasses.replace(service.config, advertised_port=server.port)
    if config.tls_enabled and tls_port is not None:
        if tls_network is None:
            await server.close()
            raise InvalidArgumentError("a TLS port needs the runtime's TLS network")
        try:
            await server.listen_tls(host, tls_port, tls_network)
        except BaseException as exc:
            failed: BaseException | None = exc
        else:
            failed = None
        if failed is not None:  # closed after the handler: compiled, an except block never awaits
            await server.close()
            raise failed
        service.config = dataclasses.replace(service.config, advertised_port_tls=server.tls_port)
    server.start_reloading(credentials, tls if config.tls_enabled else None)
    return server
