"""``SimNetwork``: one simulated network for a whole world; each node sees it as a ``Network``.

Model:

* A host is a node name; ``listen(host, port)`` serves on the calling node whatever ``host`` it
  names (a node only listens on its own interfaces). ``port=0`` picks a free port.
* A connection is two ``SimConnection`` ends and two one-way links. A write becomes one message
  (sometimes split in two, so readers meet partial frames) delivered after a latency drawn from
  the seeded ``Rng``; a link never reorders (a message is delivered no earlier than the one
  before it), like TCP.
* Faults: ``partition(a, b)`` (both ways or one way) and ``clog(node)`` hold messages on the
  affected links (nothing is lost, nothing arrives) until ``heal``/``unclog``; connecting across
  them fails with ``ConnectionError`` after ``connect_timeout_ms``. ``drop(a, b)`` breaks the
  connections between two nodes: both ends see EOF on read and ``ClosedError`` on write/drain,
  and data in flight is lost. ``crash_node`` (used by the world) breaks the crashed node's ends
  and closes its listeners; its peers see EOF once the links carry the news (held by partitions
  like any message).
* Backpressure: bytes written and not yet read by the peer are bounded by
  ``link_queue_bytes_max``; ``drain()`` waits below it, and a writer that never drains gets
  ``LimitExceededError`` at twice the bound.
"""

from __future__ import annotations

import asyncio
import contextvars
import enum
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from magnetar.base.errors import ClosedError, InvalidArgumentError, LimitExceededError
from magnetar.base.invariant import invariant
from magnetar.base.io import ConnectionHandler
from magnetar.base.limits import (
    SIM_CONNECTIONS_PER_NODE_MAX,
    SIM_LINK_QUEUE_BYTES_MAX,
    SIM_LISTENERS_PER_NODE_MAX,
)
from magnetar.base.rng import Rng
from magnetar.sim.errors import SimCrashError
from magnetar.sim.incarnation import check_alive
from magnetar.sim.loop import SimLoop

TraceFn = Callable[[str, str, str], None]
EPHEMERAL_PORT_MIN = 40_000
_LOCAL_HOSTS = ("", "0.0.0.0", "127.0.0.1", "localhost", "::")


@dataclass(frozen=True, slots=True)
class SimNetworkConfig:
    latency_us_min: int = 100
    latency_us_max: int = 3_000
    fragment_probability: float = 0.1
    connect_timeout_ms: int = 1_000
    link_queue_bytes_max: int = SIM_LINK_QUEUE_BYTES_MAX


class ConnState(enum.Enum):
    OPEN = "open"
    PEER_CLOSED = "peer-closed"  # the peer closed: buffered bytes, then EOF
    CLOSED = "closed"  # this end was closed
    BROKEN = "broken"  # the connection broke (drop, crash): buffered bytes, then EOF


_TRANSITIONS: dict[ConnState, frozenset[ConnState]] = {
    ConnState.OPEN: frozenset({ConnState.PEER_CLOSED, ConnState.CLOSED, ConnState.BROKEN}),
    ConnState.PEER_CLOSED: frozenset({ConnState.CLOSED, ConnState.BROKEN}),
    ConnState.BROKEN: frozenset({ConnState.CLOSED}),
    ConnState.CLOSED: frozenset(),
}


class _Fin:
    """The end-of-stream marker a link carries after the last data of a closing end."""


_FIN = _Fin()


class _Link:
    """One direction of a connection: FIFO messages with delivery times, held while blocked."""

    def __init__(self, network: SimNetwork, src: str, dst: str, receiver: SimConnection) -> None:
        self._network = network
        self.src = src
        self.dst = dst
        self._receiver = receiver
        self._queue: deque[tuple[int, bytes | _Fin]] = deque()
        self._last_deliver_ns = 0
        self._timer: asyncio.TimerHandle | None = None

    def send(self, item: bytes | _Fin) -> None:
        now = self._network.loop.now_ns
        deliver_ns = max(now + self._network.latency_ns(), self._last_deliver_ns)
        self._last_deliver_ns = deliver_ns
        self._queue.append((deliver_ns, item))
        self.pump()

    def pump(self) -> None:
        if self._timer is not None or not self._queue or self._network.blocked(self.src, self.dst):
            return
        when = self._queue[0][0] / 1_000_000_000
        self._timer = self._network.loop.call_at(when, self._deliver)

    def _deliver(self) -> None:
        self._timer = None
        if self._network.blocked(self.src, self.dst) or not self._queue:
            return  # held until heal/unclog pumps again
        _when, item = self._queue.popleft()
        self._receiver._receive(item)
        self.pump()

    def clear(self) -> int:
        dropped = sum(len(item) for _when, item in self._queue if isinstance(item, bytes))
        self._queue.clear()
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        return dropped


class SimConnection:
    """One end of a simulated connection (``Connection``)."""

    def __init__(self, network: SimNetwork, node: str, local: str, peer: str) -> None:
        self._network = network
        self.node = node
        self.local = local
        self._peer = peer
        self.state = ConnState.OPEN
        self._inbox = bytearray()
        self._readable = asyncio.Event()
        self._writable = asyncio.Event()
        self._writable.set()
        self._unread_by_peer_bytes = 0
        self._other: SimConnection | None = None
        self._out: _Link | None = None

    def _attach(self, other: SimConnection, out: _Link) -> None:
        self._other = other
        self._out = out

    def _move(self, new: ConnState) -> None:
        invariant(new in _TRANSITIONS[self.state], f"connection {self.local}: {self.state.value} -> {new.value}")
        self.state = new
        self._readable.set()
        self._writable.set()

    # --- Connection ---------------------------------------------------------------------------
    @property
    def peer(self) -> str:
        return self._peer

    async def read(self, max_bytes: int) -> bytes:
        if max_bytes <= 0:
            raise InvalidArgumentError(f"max_bytes must be positive, got {max_bytes}")
        while True:
            check_alive()
            if self.state is ConnState.CLOSED:
                return b""
            if self._inbox:
                data = bytes(self._inbox[:max_bytes])
                del self._inbox[:max_bytes]
                if self._other is not None:
                    self._other._peer_read(len(data))
                return data
            if self.state is not ConnState.OPEN:
                return b""
            self._readable.clear()
            await self._readable.wait()

    def write(self, data: bytes | bytearray | memoryview) -> None:
        check_alive()
        if self.state in (ConnState.CLOSED, ConnState.BROKEN):
            raise ClosedError(f"connection {self.local} -> {self._peer} is {self.state.value}")
        if self.state is ConnState.PEER_CLOSED or not data:
            return  # nobody will read it; a real socket would get a reset later
        limit = self._network.config.link_queue_bytes_max
        if self._unread_by_peer_bytes + len(data) > 2 * limit:
            raise LimitExceededError("SIM_LINK_QUEUE_BYTES_MAX (writer ignores drain)", self._unread_by_peer_bytes, limit)
        self._unread_by_peer_bytes += len(data)
        if self._unread_by_peer_bytes >= limit:
            self._writable.clear()
        invariant(self._out is not None, "connection end not attached")
        assert self._out is not None
        payload = bytes(data)
        if len(payload) > 1 and self._network.rng.random() < self._network.config.fragment_probability:
            cut = self._network.rng.randint(1, len(payload) - 1)
            self._out.send(payload[:cut])
            self._out.send(payload[cut:])
        else:
            self._out.send(payload)

    async def drain(self) -> None:
        while True:
            check_alive()
            if self.state in (ConnState.CLOSED, ConnState.BROKEN):
                raise ClosedError(f"connection {self.local} -> {self._peer} is {self.state.value}")
            if self.state is ConnState.PEER_CLOSED or self._writable.is_set():
                return
            await self._writable.wait()

    def is_closing(self) -> bool:
        return self.state in (ConnState.CLOSED, ConnState.BROKEN)

    def close(self) -> None:
        if self.state is ConnState.CLOSED:
            return
        was_open = self.state in (ConnState.OPEN, ConnState.PEER_CLOSED)
        self._move(ConnState.CLOSED)
        self._inbox.clear()
        if was_open and self._out is not None:
            self._out.send(_FIN)
        self._network._forget(self)

    # --- driven by links and faults -----------------------------------------------------------
    def _receive(self, item: bytes | _Fin) -> None:
        if isinstance(item, _Fin):
            if self.state is ConnState.OPEN:
                self._move(ConnState.PEER_CLOSED)
            return
        if self.state in (ConnState.OPEN, ConnState.PEER_CLOSED):
            self._inbox += item
            self._readable.set()
        elif self._other is not None:
            self._other._peer_read(len(item))  # discarded on arrival: frees the sender's window

    def _peer_read(self, count: int) -> None:
        self._unread_by_peer_bytes = max(0, self._unread_by_peer_bytes - count)
        if self._unread_by_peer_bytes < self._network.config.link_queue_bytes_max:
            self._writable.set()

    def _break(self, *, tell_peer: bool) -> None:
        if self.state in (ConnState.CLOSED, ConnState.BROKEN):
            return
        self._move(ConnState.BROKEN)
        self._unread_by_peer_bytes = 0
        if tell_peer and self._out is not None:
            self._out.send(_FIN)
        self._network._forget(self)


class SimListener:
    """A listening port of a node (``Listener``)."""

    def __init__(self, network: SimNetwork, node: str, port: int, handler: ConnectionHandler,
                 context: contextvars.Context) -> None:
        self._network = network
        self.node = node
        self._port = port
        self.handler = handler
        self.context = context
        self.closed = False

    @property
    def port(self) -> int:
        return self._port

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self._network._listeners.pop((self.node, self._port), None)


class SimNodeNetwork:
    """A node's view of the network (``Network``)."""

    def __init__(self, network: SimNetwork, node: str) -> None:
        self._network = network
        self.node = node

    async def connect(self, host: str, port: int) -> SimConnection:
        return await self._network._connect(self.node, host, port)

    async def listen(self, host: str, port: int, handler: ConnectionHandler) -> SimListener:
        check_alive()
        if host not in _LOCAL_HOSTS and host != self.node:
            raise InvalidArgumentError(f"node {self.node} cannot listen on host {host!r}")
        return self._network._listen(self.node, port, handler)


class SimNetwork:
    """The network of one world. Fault controls take node names."""

    def __init__(self, loop: SimLoop, rng: Rng, config: SimNetworkConfig | None = None,
                 trace: TraceFn | None = None) -> None:
        self.loop = loop
        self.rng = rng
        self.config = config or SimNetworkConfig()
        self._trace = trace or (lambda _node, _kind, _detail: None)
        self._listeners: dict[tuple[str, int], SimListener] = {}
        self._ends: dict[str, list[SimConnection]] = {}
        self._links: list[_Link] = []
        self._next_port: dict[str, int] = {}
        self._cut: dict[tuple[str, str], None] = {}  # directed (src, dst) pairs that are partitioned
        self._clogged: dict[str, None] = {}

    def view(self, node: str) -> SimNodeNetwork:
        return SimNodeNetwork(self, node)

    # --- fault controls -----------------------------------------------------------------------
    def partition(self, a: str, b: str, *, symmetric: bool = True) -> None:
        """Stop traffic from ``a`` to ``b`` (and back, if ``symmetric``) until ``heal``."""
        self._cut[(a, b)] = None
        if symmetric:
            self._cut[(b, a)] = None
        self._trace("net", "partition", f"{a} {'<->' if symmetric else '->'} {b}")

    def heal(self, a: str | None = None, b: str | None = None) -> None:
        """Undo partitions between ``a`` and ``b`` (both ways), or every partition."""
        if a is None or b is None:
            self._cut.clear()
            self._trace("net", "heal", "all")
        else:
            self._cut.pop((a, b), None)
            self._cut.pop((b, a), None)
            self._trace("net", "heal", f"{a} <-> {b}")
        self._pump_all()

    def clog(self, node: str) -> None:
        """Hold every message to and from ``node`` until ``unclog``."""
        self._clogged[node] = None
        self._trace("net", "clog", node)

    def unclog(self, node: str) -> None:
        self._clogged.pop(node, None)
        self._trace("net", "unclog", node)
        self._pump_all()

    def drop(self, a: str, b: str | None = None) -> int:
        """Break every connection between ``a`` and ``b`` (or every connection of ``a``)."""
        count = 0
        for end in list(self._ends.get(a, [])):
            other = end._other
            if other is None or (b is not None and other.node != b):
                continue
            self._clear_links_of(end)
            end._break(tell_peer=False)
            other._break(tell_peer=False)
            count += 1
        self._trace("net", "drop", f"{a} <-> {b or '*'}: {count} connections")
        return count

    def crash_node(self, node: str) -> None:
        """The node's process died: its listeners close, its ends break, peers get EOF."""
        for key in [key for key in self._listeners if key[0] == node]:
            self._listeners.pop(key).closed = True
        for end in list(self._ends.get(node, [])):
            if end._other is not None:
                # Data on its way to the dead process is lost; what it sent still arrives.
                for link in self._links:
                    if link.dst == node and link._receiver is end:
                        link.clear()
            end._break(tell_peer=True)

    def blocked(self, src: str, dst: str) -> bool:
        return (src, dst) in self._cut or src in self._clogged or dst in self._clogged

    def connection_count(self, node: str) -> int:
        return len(self._ends.get(node, []))

    # --- internals ----------------------------------------------------------------------------
    def latency_ns(self) -> int:
        low, high = self.config.latency_us_min, self.config.latency_us_max
        return 1_000 * (low if high <= low else self.rng.randint(low, high))

    def _pump_all(self) -> None:
        for link in self._links:
            link.pump()

    def _clear_links_of(self, end: SimConnection) -> None:
        for link in self._links:
            if link._receiver is end or link._receiver is end._other:
                link.clear()

    def _forget(self, end: SimConnection) -> None:
        ends = self._ends.get(end.node, [])
        if end in ends:
            ends.remove(end)
        other = end._other
        if other is None or other.state in (ConnState.CLOSED, ConnState.BROKEN):
            # Both ends are done: the links carry nothing anybody will read.
            keep: list[_Link] = []
            for link in self._links:
                if link._receiver is end or link._receiver is other:
                    link.clear()
                else:
                    keep.append(link)
            self._links = keep

    def _port_for(self, node: str, port: int) -> int:
        if port != 0:
            return port
        next_port = self._next_port.get(node, EPHEMERAL_PORT_MIN)
        while (node, next_port) in self._listeners:
            next_port += 1
        self._next_port[node] = next_port + 1
        return next_port

    def _listen(self, node: str, port: int, handler: ConnectionHandler) -> SimListener:
        if sum(1 for key in self._listeners if key[0] == node) >= SIM_LISTENERS_PER_NODE_MAX:
            raise LimitExceededError("SIM_LISTENERS_PER_NODE_MAX", SIM_LISTENERS_PER_NODE_MAX + 1,
                                SIM_LISTENERS_PER_NODE_MAX)
        port = self._port_for(node, port)
        if (node, port) in self._listeners:
            raise OSError(98, f"address {node}:{port} already in use")
        listener = SimListener(self, node, port, handler, contextvars.copy_context())
        self._listeners[(node, port)] = listener
        self._trace(node, "listen", f"port {port}")
        return listener

    async def _connect(self, node: str, host: str, port: int) -> SimConnection:
        check_alive()
        if host in _LOCAL_HOSTS:
            host = node
        if len(self._ends.get(node, [])) >= SIM_CONNECTIONS_PER_NODE_MAX:
            raise ConnectionError(f"{node}: too many connections (SIM_CONNECTIONS_PER_NODE_MAX)")
        if self.blocked(node, host) or self.blocked(host, node):
            await asyncio.sleep(self.config.connect_timeout_ms / 1000)
            check_alive()
            self._trace(node, "connect-timeout", f"{host}:{port}")
            raise ConnectionError(f"connect to {host}:{port} timed out")
        await asyncio.sleep(self.latency_ns() / 1e9)
        check_alive()
        listener = self._listeners.get((host, port))
        if listener is None or self.blocked(node, host):
            await asyncio.sleep(self.latency_ns() / 1e9)
            check_alive()
            self._trace(node, "connect-refused", f"{host}:{port}")
            raise ConnectionRefusedError(f"connect to {host}:{port} refused")
        local_port = self._port_for(node, 0)
        client = SimConnection(self, node, f"{node}:{local_port}", f"{host}:{port}")
        server = SimConnection(self, host, f"{host}:{port}", f"{node}:{local_port}")
        to_server = _Link(self, node, host, server)
        to_client = _Link(self, host, node, client)
        client._attach(server, to_server)
        server._attach(client, to_client)
        self._links += [to_server, to_client]
        self._ends.setdefault(node, []).append(client)
        self._ends.setdefault(host, []).append(server)
        self._trace(node, "connect", f"{node}:{local_port} -> {host}:{port}")
        self.loop.create_task(_serve(listener, server), context=listener.context.copy())
        await asyncio.sleep(self.latency_ns() / 1e9)
        check_alive()
        return client


async def _serve(listener: SimListener, connection: SimConnection) -> None:
    """Run the listener's handler in the listening node's context, then close the connection."""
    try:
        await listener.handler(connection)
    except (SimCrashError, asyncio.CancelledError):
        raise
    except Exception as exc:
        # As asyncio.start_server does, a failing handler is reported, not propagated.
        listener._network._trace(listener.node, "handler-error", f"{type(exc).__name__}: {exc}")
    finally:
        connection.close()
