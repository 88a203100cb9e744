"""One geo-replicator: a local topic's entries, sent to the same topic in one remote cluster.

Protocol (``shared/reference/geo_replication.md`` section 1):

* A durable cursor ``pulsar.repl.<remote>`` on the local topic, opened (at the topic's end when new)
  before the topic admits a producer, so no entry of the topic escapes it. Its backlog is the
  replication backlog; it holds the ledgers back until they were sent.
* A producer named ``pulsar.repl.<local>--><remote>`` on the remote cluster's owner of the same topic
  (partition ``N`` to partition ``N``), made with our asyncio client over the remote's
  ``brokerServiceUrl`` with the cluster's configured credentials; no send timeout, at most
  ``REPLICATION_PRODUCER_QUEUE_COUNT_MAX`` entries in flight.
* Each entry read: markers, entries with ``replicated_from`` and entries whose ``replicate_to``
  leaves the remote out are acknowledged at once (individually); the others are sent as they are
  stored (same metadata and payload, a batch stays one batch) plus ``replicated_from = <local>``
  and the property ``__MSG_PROP_REPL_SOURCE_POSITION = "<ledger>:<entry>"``. An entry is
  acknowledged on the cursor only once the remote has receipted it (persisted, or answered as a
  duplicate of what it persisted). Receipts come in send order, so acknowledgements are cumulative
  up to the oldest entry still in flight (individual only for skipped entries after it).
* The remote deduplicates by source position (``broker/replicated.py``), so after any failure the
  replicator simply starts again from its cursor: a restart, a failover of the topic to another
  broker or a kill in the middle of a batch resends what was not acknowledged, and the remote
  drops what it already has. Nothing is lost (the cursor only moves on receipts) and nothing is
  stored twice.
* A failed remote producer (connection lost for good, remote down, bad credentials) is closed and
  made again after a backoff of 100 ms doubling to 60 s; the read position goes back to the
  cursor's first unacknowledged entry.

States (``_TRANSITIONS``): STARTING -> CONNECTING -> CONNECTED -> CONNECTING ... ; any -> STOPPED.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from magnetar.base.clock import Clock
from magnetar.base.errors import MagnetarError
from magnetar.base.invariant import invariant
from magnetar.base.limits import (
    REPLICATION_BACKOFF_INITIAL_MS,
    REPLICATION_BACKOFF_MAX_MS,
    REPLICATION_CHECK_INTERVAL_MS,
    REPLICATION_PRODUCER_QUEUE_COUNT_MAX,
    REPLICATION_READ_COUNT_MAX,
)
from magnetar.base.types import Position
from magnetar.broker.dedup import REPLICATION_CURSOR_PREFIX
from magnetar.broker.log import Entry, SubscriptionCursor
from magnetar.broker.metrics import LatencyHistogram, RateMeter
from magnetar.broker.replicated import REPL_SOURCE_POSITION_PROPERTY, replicator_producer_name
from magnetar.broker.topic import Topic
from magnetar.client.message import MessageId
from magnetar.client.producer import Producer
from magnetar.protocol.pulsar import pb
from magnetar.protocol.pulsar.stored import split_stored_entry
from magnetar.replication.policy import should_replicate

log = logging.getLogger(__name__)

#: Makes the remote producer for a topic name and producer name (the service's remote clients).
ProducerFactory = Callable[[str, str], Awaitable[Producer]]
#: Told every entry read, in log order, before it is filtered (the replicated-subscriptions controller).
EntryObserver = Callable[[Position, pb.MessageMetadata, memoryview], Awaitable[None]]


def cursor_name(remote: str) -> str:
    return f"{REPLICATION_CURSOR_PREFIX}{remote}"


class ReplicatorState(enum.Enum):
    STARTING = "starting"
    CONNECTING = "connecting"
    CONNECTED = "connected"
    STOPPED = "stopped"


_TRANSITIONS = {
    (ReplicatorState.STARTING, ReplicatorState.CONNECTING),
    (ReplicatorState.CONNECTING, ReplicatorState.CONNECTED),
    (ReplicatorState.CONNECTED, ReplicatorState.CONNECTING),
    (ReplicatorState.CONNECTING, ReplicatorState.CONNECTING),
    *((state, ReplicatorState.STOPPED) for state in ReplicatorState),
}


class ProducerLostError(MagnetarError):
    """The remote producer failed; the replicator makes a new one."""


@dataclass(slots=True)
class _InFlight:
    position: Position
    publish_time_ms: int
    size_bytes: int
    future: asyncio.Future[MessageId]


class Replicator:
    def __init__(self, topic: Topic, local: str, remote: str, make_producer: ProducerFactory, clock: Clock,
                 observer: EntryObserver | None = None) -> None:
        self.topic = topic
        self._observer = observer
        self.local = local
        self.remote = remote
        self.producer_name = replicator_producer_name(local, remote)
        self._make_producer = make_producer
        self._clock = clock
        self._cursor: SubscriptionCursor | None = None
        self._producer: Producer | None = None
        self._task: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()
        self._in_flight: deque[_InFlight] = deque()
        self._acked: list[Position] = []  # receipted or skipped since the last flush
        self._ack_upto: Position | None = None  # acknowledged cumulatively at the next flush
        self._ack_single: list[Position] = []  # acknowledged individually at the next flush
        self._read_position: Position | None = None
        self.state = ReplicatorState.STARTING
        self.last_error = ""
        self.connected_since_ms = 0
        self._was_connected = False  # at the last ``sample``
        self.reconnects = 0
        self.sent = RateMeter()  # entries receipted by the remote: msgRateOut, msgThroughputOut
        self.read = RateMeter()  # entries read from the cursor to be sent: msgRateIn
        self.lag = LatencyHistogram()  # publish (here) -> receipt (remote), per replicated entry
        self.duplicates_answered = 0

    # --- lifecycle -------------------------------------------------------------------------

    def _move(self, new: ReplicatorState) -> None:
        invariant((self.state, new) in _TRANSITIONS, f"replicator state {self.state} -> {new}")
        self.state = new

    @property
    def stopped(self) -> bool:
        return self.state is ReplicatorState.STOPPED

    @property
    def cursor(self) -> SubscriptionCursor | None:
        return self._cursor

    async def open_cursor(self) -> None:
        """Open (or create, at the topic's end) the replication cursor; call before ``start``."""
        self._cursor = await self.topic.log.open_cursor(cursor_name(self.remote), durable=True,
                                                        initial_mark_delete=self.topic.log.last_position)

    def start(self) -> None:
        invariant(self._cursor is not None, "open_cursor before start")
        self.topic.entry_listeners.append(self._wake.set)
        self._task = asyncio.get_running_loop().create_task(self._run(), name=f"replicator:{self.topic.name}->{self.remote}")

    async def stop(self, *, delete_cursor: bool = False) -> None:
        """Stop sending (what is in flight stays unacknowledged and is sent again next time);
        ``delete_cursor`` when the remote left the topic's replication clusters."""
        if self.state is ReplicatorState.STOPPED:
            return
        self._move(ReplicatorState.STOPPED)
        with contextlib.suppress(ValueError):
            self.topic.entry_listeners.remove(self._wake.set)
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        await self._close_producer()
        with contextlib.suppress(Exception):
            await self._flush_acks()
        if delete_cursor and self._cursor is not None:
            await self.topic.log.delete_cursor(self._cursor.name)

    # --- the loop --------------------------------------------------------------------------

    async def _run(self) -> None:
        delay_ms = REPLICATION_BACKOFF_INITIAL_MS
        while self.state is not ReplicatorState.STOPPED:
            self._move(ReplicatorState.CONNECTING)
            try:
                self._producer = await self._make_producer(str(self.topic.name), self.producer_name)
                self._move(ReplicatorState.CONNECTED)
                self.connected_since_ms = self._clock.now_ms()
                self._was_connected = True
                self.last_error = ""
                delay_ms = REPLICATION_BACKOFF_INITIAL_MS
                await self._pump()
            except asyncio.CancelledError:
                raise
            except Exception as error:  # remote down, refused, producer failed: back off, start again
                self.last_error = f"{type(error).__name__}: {error}"
                log.warning("replicator %s -> %s: %s; retrying in %d ms", self.topic.name, self.remote,
                            self.last_error, delay_ms)
            if self.stopped:
                return
            if self.state is ReplicatorState.CONNECTED:
                self._move(ReplicatorState.CONNECTING)
            await self._close_producer()
            self.reconnects += 1
            await self._clock.sleep(delay_ms / 1000)
            delay_ms = min(REPLICATION_BACKOFF_MAX_MS, delay_ms * 2)

    async def _close_producer(self) -> None:
        producer, self._producer = self._producer, None
        self._split_acks()  # while the failed sends still mark where cumulative acks must stop
        self._in_flight.clear()  # their entries stay unacknowledged: resent from the cursor
        self._read_position = None
        if producer is not None:
            with contextlib.suppress(Exception):
                await producer.close()

    async def _pump(self) -> None:
        cursor = self._cursor
        assert cursor is not None
        self._read_position = cursor.mark_delete_position.next()
        while self.state is ReplicatorState.CONNECTED:
            self._settle_receipts()
            await self._flush_acks()
            room = REPLICATION_PRODUCER_QUEUE_COUNT_MAX - len(self._in_flight)
            position = self._read_position
            if room > 0 and position <= self.topic.log.last_position:
                entries = await self.topic.log.read(position, min(room, REPLICATION_READ_COUNT_MAX))
                if entries:
                    await self._send_all(entries)
                    continue
            self._wake.clear()
            if self._has_news():
                continue
            await self._wait_for_news()

    def _has_news(self) -> bool:
        head = self._in_flight[0] if self._in_flight else None
        room = len(self._in_flight) < REPLICATION_PRODUCER_QUEUE_COUNT_MAX
        readable = self._read_position is not None and self._read_position <= self.topic.log.last_position
        return bool(self._acked) or (head is not None and head.future.done()) or (room and readable)

    async def _wait_for_news(self) -> None:
        """Until an entry is appended, a receipt arrives, or a check interval passed."""
        waiter = asyncio.ensure_future(self._wake.wait())
        timer = asyncio.ensure_future(self._clock.sleep(REPLICATION_CHECK_INTERVAL_MS / 1000))
        try:
            await asyncio.wait({waiter, timer}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            waiter.cancel()
            timer.cancel()

    async def _send_all(self, entries: list[Entry]) -> None:
        cursor = self._cursor
        producer = self._producer
        assert cursor is not None and producer is not None
        for entry in entries:
            self._read_position = entry.position.next()
            if cursor.is_acked(entry.position):
                continue  # acknowledged individually before a restart
            metadata, payload = split_stored_entry(entry.data)
            if self._observer is not None:
                await self._observer(entry.position, metadata, payload)
            if not should_replicate(metadata, self.remote):
                self._acked.append(entry.position)
                continue
            metadata.replicated_from = self.local
            metadata.properties.add(key=REPL_SOURCE_POSITION_PROPERTY,
                                    value=f"{entry.position.ledger_id}:{entry.position.entry_id}")
            self.read.record(1, len(entry.data))
            future = await producer.send_entry_async(metadata, bytes(payload))
            future.add_done_callback(self._receipted)
            self._in_flight.append(_InFlight(entry.position, metadata.publish_time, len(entry.data), future))

    def _receipted(self, future: asyncio.Future[MessageId]) -> None:
        self._wake.set()

    def _settle_receipts(self) -> None:
        """Take the receipted head of the in-flight queue; a failed send means the producer failed."""
        now_ms = self._clock.now_ms()
        while self._in_flight and self._in_flight[0].future.done():
            op = self._in_flight.popleft()
            error = op.future.exception()
            if error is not None:
                raise ProducerLostError(f"send to {self.remote} failed: {error}")
            if op.future.result().ledger_id < 0:
                self.duplicates_answered += 1
            lag_ms = max(0.0, float(now_ms - op.publish_time_ms))
            self.lag.observe(lag_ms)
            self.sent.record(1, op.size_bytes)
            self._acked.append(op.position)

    def _split_acks(self) -> None:
        """Move ``_acked`` to cumulative (before the oldest entry in flight: everything up to there
        was receipted or skipped, in read order) or individual (after it)."""
        head = self._in_flight[0].position if self._in_flight else None
        for position in self._acked:
            if head is None or position < head:
                self._ack_upto = position if self._ack_upto is None else max(self._ack_upto, position)
            else:
                self._ack_single.append(position)
        self._acked = []

    async def _flush_acks(self) -> None:
        self._split_acks()
        cursor = self._cursor
        if cursor is None:
            return
        upto, self._ack_upto = self._ack_upto, None
        single, self._ack_single = self._ack_single, []
        if upto is not None:
            await cursor.mark_delete(upto)
        single = [p for p in single if upto is None or p > upto]
        if single:
            await cursor.delete(single)

    # --- observability ---------------------------------------------------------------------

    def sample(self, now_ns: int) -> None:
        """Rates, and the remote producer's own reconnects (it resends what is pending by itself):
        ``outboundConnectedSince`` and ``lastError`` follow them, at the sampling interval."""
        self.sent.sample(now_ns)
        self.read.sample(now_ns)
        connected = self.connected
        if connected and not self._was_connected:
            self.connected_since_ms = self._clock.now_ms()
            self.last_error = ""
        elif not connected and self._was_connected and self.state is ReplicatorState.CONNECTED:
            self.last_error = "connection to the remote lost; reconnecting"
        self._was_connected = connected

    @property
    def connected(self) -> bool:
        producer = self._producer
        return self.state is ReplicatorState.CONNECTED and producer is not None and producer.state.name == "READY"

    def backlog_entries(self) -> int:
        return self._cursor.backlog_entries() if self._cursor is not None else 0

    def delay_s(self) -> float:
        """Age of the oldest entry sent and not yet receipted (0 when nothing waits)."""
        if self._in_flight:
            return max(0.0, (self._clock.now_ms() - self._in_flight[0].publish_time_ms) / 1000)
        return 0.0

    def stats(self) -> dict[str, Any]:
        """Pulsar's ``ReplicatorStats`` for this remote."""
        return {
            "msgRateIn": self.read.msg_rate,
            "msgThroughputIn": self.read.byte_rate,
            "msgRateOut": self.sent.msg_rate,
            "msgThroughputOut": self.sent.byte_rate,
            "msgOutCounter": self.sent.msg_count,
            "replicationBacklog": self.backlog_entries(),
            "connected": self.connected,
            "replicationDelayInSeconds": self.delay_s(),
            "inboundConnectedSince": "",
            "outboundConnection": self.producer_name,
            "outboundConnectedSince": str(self.connected_since_ms) if self.connected else "",
            "replicationLagMsSum": self.lag.sum_ms,
            "duplicatesAnswered": self.duplicates_answered,
            "reconnects": self.reconnects,
            "lastError": self.last_error,
            "state": self.state.value,
        }
