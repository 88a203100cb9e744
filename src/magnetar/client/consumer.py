"""Consumers: one per topic partition (``Consumer``), a merge over partitions (``MultiTopicConsumer``)
and the non-durable ``Reader``.

Sequence on one partition (shared/reference/pulsar_protocol.md section 4)::

    LOOKUP -> SUBSCRIBE(consumer_id, subType, initialPosition) -> SUCCESS -> FLOW(receiver_queue_size)
    MESSAGE ... (batches unpacked here) -> ACK (grouped) / REDELIVER_UNACKNOWLEDGED_MESSAGES
    SEEK -> (CLOSE_CONSUMER) SUCCESS;  UNSUBSCRIBE / CLOSE_CONSUMER -> SUCCESS

States (``_TRANSITIONS``): IDLE -> CONNECTING -> READY; READY -> CONNECTING (connection lost or
CLOSE_CONSUMER from the broker: resubscribe with the same consumer_id); -> CLOSING -> CLOSED;
a fatal error on reconnect -> FAILED.

Invariants:
* Permits: the broker is granted ``receiver_queue_size`` at (re)subscribe; every message the
  application dequeues, and every message the client drops (acked batch members, before the
  start id, undecodable), returns one permit; they are sent back in one FLOW once half the queue
  is owed. On every (re)subscribe the local queue of that consumer is cleared and permits reset.
* The receive queue is bounded by ``CLIENT_RECEIVE_QUEUE_HARD_COUNT_MAX``: a broker that ignores
  our permits that far gets its connection dropped.
* A batch entry is acked as the plain entry only once every member is acked, unless batch index
  acks are enabled (then partial acks carry ``ack_set``, 1 = still unacked).
* Cumulative acks are refused for Shared and Key_Shared; inside a batch, without batch index
  acks, a cumulative ack covers the entry before the batch (as the official client does).
* Individual acks are grouped for ``ack_group_time_ms`` or ``ack_group_max_count`` ids.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import Coroutine, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from magnetar.base.errors import (
    ClosedError,
    InvalidArgumentError,
    LimitExceededError,
    MagnetarError,
    OperationTimeoutError,
)
from magnetar.base.invariant import invariant
from magnetar.base.limits import (
    CLIENT_BATCH_TRACKER_COUNT_MAX,
    CLIENT_NACK_PENDING_COUNT_MAX,
    CLIENT_RECEIVE_QUEUE_HARD_COUNT_MAX,
    CLIENT_RECONNECT_ATTEMPTS_MAX,
    CLIENT_TIMER_TICK_MS,
)
from magnetar.client._handler import HANDLER_TRANSITIONS, HandlerState
from magnetar.client._util import Backoff, within
from magnetar.client.config import ConsumerConfig, SubscriptionType
from magnetar.client.connection import BrokerConnection, suppress_closed
from magnetar.client.errors import BrokerError
from magnetar.client.message import EARLIEST, LATEST, Message, MessageId
from magnetar.protocol.pulsar.batch import decode_entry, is_batch
from magnetar.protocol.pulsar.client_connection import (
    ActiveConsumerChange,
    ConsumerClosedByBroker,
    CorruptMessage,
    Event,
    MessageReceived,
)
from magnetar.protocol.pulsar.errors import CompressionError, FrameTooLargeError, MalformedFrameError
from magnetar.protocol.pulsar.generated import pulsar_api_pb2 as pb

if TYPE_CHECKING:
    from magnetar.client.client import PulsarClient

T = pb.BaseCommand
_STOP_CODES = frozenset({pb.TopicTerminatedError, pb.ConsumerBusy, pb.TopicNotFound, pb.SubscriptionNotFound})


State = HandlerState
# A refused UNSUBSCRIBE leaves the consumer attached: CLOSING -> READY.
_TRANSITIONS = {**HANDLER_TRANSITIONS, State.CLOSING: HANDLER_TRANSITIONS[State.CLOSING] | {State.READY}}


def ack_set_words(unacked: Iterable[int], size: int) -> list[int]:
    """The wire ``ack_set``: a little-endian bitset of ``size`` bits in signed 64-bit words, 1 = unacked."""
    words = [0] * ((size + 63) // 64)
    for index in unacked:
        words[index // 64] |= 1 << (index % 64)
    return [w - (1 << 64) if w >= 1 << 63 else w for w in words]


def ack_set_contains(words: list[int], index: int) -> bool:
    word = index // 64
    return word < len(words) and bool((words[word] & 0xFFFF_FFFF_FFFF_FFFF) >> (index % 64) & 1)


class ReceiveQueue:
    """Messages waiting for ``receive()``, possibly shared by the consumers of all partitions."""

    def __init__(self, clock_owner: PulsarClient) -> None:
        self._client = clock_owner
        self._items: deque[Message] = deque()
        self._nonempty = asyncio.Event()

    def __len__(self) -> int:
        return len(self._items)

    def put(self, messages: list[Message]) -> None:
        if len(self._items) + len(messages) > CLIENT_RECEIVE_QUEUE_HARD_COUNT_MAX:
            raise LimitExceededError("CLIENT_RECEIVE_QUEUE_HARD_COUNT_MAX", len(self._items) + len(messages),
                                CLIENT_RECEIVE_QUEUE_HARD_COUNT_MAX)
        self._items.extend(messages)
        if self._items:
            self._nonempty.set()

    def pop(self) -> Message | None:
        if not self._items:
            return None
        item = self._items.popleft()
        if not self._items:
            self._nonempty.clear()
        return item

    async def get(self, timeout_ms: int | None) -> Message:
        while True:
            item = self.pop()
            if item is not None:
                return item
            if timeout_ms is None:
                await self._nonempty.wait()
            else:
                await within(self._client.clock, timeout_ms / 1000, self._nonempty.wait(), "receive")

    def drop_from(self, consumer_key: int) -> int:
        """Remove the messages of one consumer (on its reconnect or seek); returns how many."""
        kept = deque(m for m in self._items if m.consumer_key != consumer_key)
        dropped = len(self._items) - len(kept)
        self._items = kept
        if not kept:
            self._nonempty.clear()
        return dropped

    def count_from(self, consumer_key: int) -> int:
        return sum(1 for m in self._items if m.consumer_key == consumer_key)


@dataclass(slots=True)
class _BatchTracker:
    size: int
    unacked: set[int]


class Consumer:
    """Receives from one topic (or one partition) on one subscription."""

    def __init__(self, client: PulsarClient, topic: str, partition: int, consumer_id: int, subscription: str,
                 config: ConsumerConfig, *, queue: ReceiveQueue | None = None, durable: bool = True,
                 start_message_id: MessageId | None = None, start_inclusive: bool = False,
                 consumer_name: str | None = None) -> None:
        config.validate()
        self._client = client
        self.topic = topic
        self.partition = partition
        self.consumer_id = consumer_id
        self.subscription = subscription
        self.config = config
        self.durable = durable
        self.consumer_name = consumer_name if consumer_name is not None else (
            config.consumer_name if config.consumer_name is not None else client.rng.randbytes(5).hex())
        self.state = State.IDLE
        self.queue = queue if queue is not None else ReceiveQueue(client)
        self.is_active: bool | None = None
        self._cnx: BrokerConnection | None = None
        self._start_id = start_message_id  # durable=False: where the reader starts / resumes
        self._start_inclusive = start_inclusive
        self._filter_id: MessageId | None = self._concrete(start_message_id)
        self._filter_inclusive = start_inclusive
        self.last_dequeued: MessageId | None = None
        self._owed_permits = 0
        self._batches: dict[tuple[int, int], _BatchTracker] = {}
        self._pending_acks: dict[tuple[int, int], list[int] | None] = {}
        self._pending_cumulative: MessageId | None = None
        self._nacks: dict[MessageId, int] = {}  # id -> redelivery deadline (monotonic ns)
        self._tasks: set[asyncio.Task[None]] = set()
        self._failure: BaseException | None = None

    @staticmethod
    def _concrete(msg_id: MessageId | None) -> MessageId | None:
        if msg_id is None or msg_id == EARLIEST or msg_id.entry == LATEST.entry:
            return None
        return msg_id

    def _move(self, target: State) -> None:
        invariant(target in _TRANSITIONS[self.state], f"consumer {self.consumer_id}: {self.state} -> {target}")
        self.state = target

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    # --- subscribing ---------------------------------------------------------------------

    async def start(self) -> None:
        self._move(State.CONNECTING)
        try:
            await self._client.retry_until_deadline(self._subscribe_once, f"subscribe to {self.topic}")
        except BaseException as error:
            self._failure = error
            self._move(State.FAILED)
            raise
        self._spawn(self._timer_loop())

    def _subscribe_command(self, request_id: int) -> pb.BaseCommand:
        body = pb.CommandSubscribe(
            topic=self.topic, subscription=self.subscription, subType=self.config.subscription_type.value,
            consumer_id=self.consumer_id, request_id=request_id, consumer_name=self.consumer_name,
            priority_level=self.config.priority_level, durable=self.durable, read_compacted=self.config.read_compacted,
            initialPosition=self.config.initial_position.value,
            replicate_subscription_state=self.config.replicate_subscription_state,
        )
        for key, value in self.config.properties.items():
            body.metadata.add(key=key, value=value)
        if not self.durable:
            start = self._resume_id()
            if start is not None:
                body.start_message_id.CopyFrom(start.to_pb())
        if self.config.subscription_type is SubscriptionType.KEY_SHARED:
            body.keySharedMeta.CopyFrom(pb.KeySharedMeta(keySharedMode=pb.AUTO_SPLIT))
        return T(type=T.SUBSCRIBE, subscribe=body)

    def _resume_id(self) -> MessageId | None:
        """A reader resumes after the last message handed to the application."""
        if self.last_dequeued is not None:
            return MessageId(self.last_dequeued.ledger_id, self.last_dequeued.entry_id)
        return self._start_id

    async def _subscribe_once(self) -> None:
        cnx = await self._client.connection_for(self.topic)
        request_id = cnx.new_request_id()
        # Clear before SUBSCRIBE: the broker may push MESSAGE right after SUCCESS.
        self._owed_permits = 0
        self.queue.drop_from(self.consumer_id)
        self._batches.clear()
        if not self.durable and self.last_dequeued is not None:
            self._filter_id, self._filter_inclusive = self.last_dequeued, False
        cnx.add_consumer(self.consumer_id, self)
        self._cnx = cnx
        try:
            await cnx.request(self._subscribe_command(request_id), request_id, "SUBSCRIBE")
        except BaseException:
            self._cnx = None
            cnx.remove_consumer(self.consumer_id, self)
            if cnx.is_ready:
                with suppress_closed():
                    cnx.send(T(type=T.CLOSE_CONSUMER, close_consumer=pb.CommandCloseConsumer(
                        consumer_id=self.consumer_id, request_id=cnx.new_request_id())))
            raise
        if self.state is not State.CONNECTING:  # closed while we were subscribing: undo on the broker
            cnx.remove_consumer(self.consumer_id, self)
            self._cnx = None
            with suppress_closed():
                cnx.send(T(type=T.CLOSE_CONSUMER, close_consumer=pb.CommandCloseConsumer(
                    consumer_id=self.consumer_id, request_id=cnx.new_request_id())))
            return
        self._move(State.READY)
        self._send_flow(self.config.receiver_queue_size)
        self._flush_acks()

    def on_connection_closed(self, connection: BrokerConnection) -> None:
        if connection is self._cnx:
            self._lost_connection()

    def _lost_connection(self) -> None:
        self._cnx = None
        if self.state is State.READY:
            self._move(State.CONNECTING)
            self.queue.drop_from(self.consumer_id)  # the broker redelivers whatever was unacked
            self._spawn(self._reconnect_loop())

    async def _reconnect_loop(self) -> None:
        backoff = Backoff(self._client.rng, max_ms=self._client.options.backoff_max_ms)
        for _attempt in range(CLIENT_RECONNECT_ATTEMPTS_MAX):
            await self._client.clock.sleep(backoff.next_s())
            if self.state is not State.CONNECTING:
                return
            try:
                await self._subscribe_once()
                return
            except BrokerError as error:
                if error.code in _STOP_CODES:
                    self._failure = error
                    self._move(State.FAILED)
                    return
            except MagnetarError:
                continue
        self._failure = LimitExceededError("CLIENT_RECONNECT_ATTEMPTS_MAX", CLIENT_RECONNECT_ATTEMPTS_MAX + 1,
                                      CLIENT_RECONNECT_ATTEMPTS_MAX)
        self._move(State.FAILED)

    # --- events from the connection ------------------------------------------------------

    def on_event(self, connection: BrokerConnection, event: Event) -> None:
        if connection is not self._cnx:
            return
        if isinstance(event, MessageReceived):
            try:
                self._on_message(connection, event)
            except LimitExceededError as error:
                connection.close(str(error))
        elif isinstance(event, CorruptMessage):
            self._send_validation_ack(connection, event.message_id, pb.CommandAck.ChecksumMismatch)
            self._return_permits(1)
        elif isinstance(event, ConsumerClosedByBroker):
            self._lost_connection()
        elif isinstance(event, ActiveConsumerChange):
            self.is_active = event.is_active

    def _send_validation_ack(self, connection: BrokerConnection, msg_id: pb.MessageIdData, error: int) -> None:
        ack = pb.CommandAck(consumer_id=self.consumer_id, ack_type=pb.CommandAck.Individual, validation_error=error)  # type: ignore[arg-type]
        ack.message_id.add(ledgerId=msg_id.ledgerId, entryId=msg_id.entryId)
        with suppress_closed():
            connection.send(T(type=T.ACK, ack=ack))

    def _on_message(self, connection: BrokerConnection, event: MessageReceived) -> None:
        metadata = event.message.metadata
        wire_id = event.command.message_id
        try:
            singles = decode_entry(metadata, event.message.payload)
        except (CompressionError, MalformedFrameError, FrameTooLargeError) as error:
            code = pb.CommandAck.DecompressionError if isinstance(error, CompressionError) else pb.CommandAck.BatchDeSerializeError
            self._send_validation_ack(connection, wire_id, code)
            self._return_permits(metadata.num_messages_in_batch if is_batch(metadata) else 1)
            return
        batched = is_batch(metadata)
        size = len(singles)
        base = MessageId.from_pb(wire_id, partition=self.partition)
        ack_set = list(event.command.ack_set)
        redelivery_count = event.command.redelivery_count
        out: list[Message] = []
        skipped = 0
        delivered: set[int] = set()
        for index, single in enumerate(singles):
            if batched:
                msg_id = MessageId(base.ledger_id, base.entry_id, index, self.partition, size)
                if ack_set and not ack_set_contains(ack_set, index):
                    skipped += 1
                    continue
            else:
                msg_id = MessageId(base.ledger_id, base.entry_id, -1, self.partition, 0)
            if self._before_start(msg_id):
                skipped += 1
                continue
            delivered.add(index)
            out.append(self._message(msg_id, metadata, single.metadata, single.payload, redelivery_count))
        if batched and delivered:
            if len(self._batches) >= CLIENT_BATCH_TRACKER_COUNT_MAX:
                raise LimitExceededError("CLIENT_BATCH_TRACKER_COUNT_MAX", len(self._batches) + 1, CLIENT_BATCH_TRACKER_COUNT_MAX)
            self._batches[base.entry] = _BatchTracker(size, delivered)
        if out:
            self._filter_id = None  # the start position has been passed
        self.queue.put(out)
        if skipped:
            self._return_permits(skipped)

    def _before_start(self, msg_id: MessageId) -> bool:
        """Whether ``msg_id`` precedes the start position (after a seek, or a reader's start)."""
        start = self._filter_id
        if start is None:
            return False
        if msg_id.entry != start.entry:
            return msg_id.entry < start.entry
        if start.batch_index < 0 or msg_id.batch_index < 0 or msg_id.batch_index == start.batch_index:
            return not self._filter_inclusive
        return msg_id.batch_index < start.batch_index

    def _message(self, msg_id: MessageId, metadata: pb.MessageMetadata, single: pb.SingleMessageMetadata | None,
                 payload: bytes, redelivery_count: int) -> Message:
        source: pb.MessageMetadata | pb.SingleMessageMetadata = single if single is not None else metadata
        key = source.partition_key if source.HasField("partition_key") else None
        event_time = source.event_time if source.HasField("event_time") and source.event_time else None
        ordering_key = source.ordering_key if source.HasField("ordering_key") else None
        sequence_id = single.sequence_id if single is not None and single.HasField("sequence_id") else (
            metadata.sequence_id + (msg_id.batch_index if msg_id.batch_index > 0 else 0))
        return Message(
            topic=self.topic, message_id=msg_id, payload=payload, key=key,
            properties={kv.key: kv.value for kv in source.properties}, publish_time_ms=metadata.publish_time,
            event_time_ms=event_time, producer_name=metadata.producer_name, sequence_id=sequence_id,
            redelivery_count=redelivery_count, ordering_key=ordering_key, consumer_key=self.consumer_id,
        )

    # --- permits -------------------------------------------------------------------------

    def _send_flow(self, permits: int) -> None:
        cnx = self._cnx
        if permits <= 0 or cnx is None or self.state is not State.READY:
            return
        with suppress_closed():
            cnx.send(T(type=T.FLOW, flow=pb.CommandFlow(consumer_id=self.consumer_id, messagePermits=permits)))

    def _return_permits(self, count: int) -> None:
        self._owed_permits += count
        if self._owed_permits >= max(1, self.config.receiver_queue_size // 2):
            owed, self._owed_permits = self._owed_permits, 0
            self._send_flow(owed)

    def on_dequeued(self, message: Message) -> None:
        """Called when the application takes ``message`` from the queue."""
        self.last_dequeued = message.message_id
        self._return_permits(1)

    # --- receiving -----------------------------------------------------------------------

    async def receive(self, timeout_ms: int | None = None) -> Message:
        """The next message; raises ``OperationTimeoutError`` after ``timeout_ms`` (None: wait forever)."""
        self._check_usable()
        message = await self.queue.get(timeout_ms)
        self.on_dequeued(message)
        return message

    def _check_usable(self) -> None:
        if self.state is State.FAILED:
            raise ClosedError(f"consumer on {self.topic} failed: {self._failure}")
        if self.state in (State.CLOSING, State.CLOSED):
            raise ClosedError(f"consumer on {self.topic}/{self.subscription} is closed")

    # --- acknowledging -------------------------------------------------------------------

    def acknowledge(self, message: Message | MessageId) -> None:
        """Acknowledge one message (grouped; sent within ``ack_group_time_ms``)."""
        self._check_usable()
        msg_id = message.message_id if isinstance(message, Message) else message
        self._nacks.pop(msg_id, None)
        entry = msg_id.entry
        tracker = self._batches.get(entry) if msg_id.batch_index >= 0 else None
        if tracker is not None:
            tracker.unacked.discard(msg_id.batch_index)
            if tracker.unacked:
                if self.config.batch_index_ack_enabled:
                    self._queue_ack(entry, ack_set_words(tracker.unacked, tracker.size))
                return
            del self._batches[entry]
        self._queue_ack(entry, None)

    def _queue_ack(self, entry: tuple[int, int], ack_set: list[int] | None) -> None:
        self._pending_acks[entry] = ack_set
        if len(self._pending_acks) >= self.config.ack_group_max_count or self.config.ack_group_time_ms == 0:
            self._flush_acks()

    def acknowledge_cumulative(self, message: Message | MessageId) -> None:
        """Acknowledge everything up to and including ``message`` (not for Shared/Key_Shared)."""
        self._check_usable()
        if self.config.subscription_type.individual_ack_only:
            raise InvalidArgumentError(f"cumulative ack is not allowed on a {self.config.subscription_type.name} subscription")
        msg_id = message.message_id if isinstance(message, Message) else message
        target = msg_id
        partial_batch = msg_id.batch_index >= 0 and msg_id.batch_size > 0 and msg_id.batch_index < msg_id.batch_size - 1
        if partial_batch and not self.config.batch_index_ack_enabled:
            if msg_id.entry_id == 0:
                return  # nothing before the batch in this ledger to cover yet
            target = MessageId(msg_id.ledger_id, msg_id.entry_id - 1, -1, msg_id.partition)
        for entry in [e for e in self._batches if e <= msg_id.entry]:
            if entry < msg_id.entry or target.entry == msg_id.entry:
                del self._batches[entry]
        for nacked in [m for m in self._nacks if m.entry <= msg_id.entry]:
            del self._nacks[nacked]
        if self._pending_cumulative is None or target > self._pending_cumulative:
            self._pending_cumulative = target
        if self.config.ack_group_time_ms == 0:
            self._flush_acks()

    def _flush_acks(self) -> None:
        cnx = self._cnx
        if cnx is None or self.state is not State.READY:
            return
        if self._pending_cumulative is not None:
            target = self._pending_cumulative
            ack = pb.CommandAck(consumer_id=self.consumer_id, ack_type=pb.CommandAck.Cumulative)
            wire = ack.message_id.add(ledgerId=target.to_pb().ledgerId, entryId=target.to_pb().entryId)
            if target.batch_index >= 0 and target.batch_size and target.batch_index < target.batch_size - 1:
                wire.ack_set.extend(ack_set_words(range(target.batch_index + 1, target.batch_size), target.batch_size))
            with suppress_closed():
                cnx.send(T(type=T.ACK, ack=ack))
                self._pending_cumulative = None
        if self._pending_acks:
            ack = pb.CommandAck(consumer_id=self.consumer_id, ack_type=pb.CommandAck.Individual)
            for (ledger_id, entry_id), ack_set in self._pending_acks.items():
                wire_id = MessageId(ledger_id, entry_id).to_pb()
                if ack_set is not None:
                    wire_id.ack_set.extend(ack_set)
                ack.message_id.append(wire_id)
            with suppress_closed():
                cnx.send(T(type=T.ACK, ack=ack))
                self._pending_acks.clear()

    async def flush_acks(self) -> None:
        """Send grouped acks now (and wait for transport room)."""
        self._flush_acks()
        cnx = self._cnx
        if cnx is not None and cnx.is_ready:
            with suppress_closed():
                await cnx.drain()

    # --- negative acks and redelivery ----------------------------------------------------

    def negative_acknowledge(self, message: Message | MessageId) -> None:
        """Ask for redelivery after ``negative_ack_redelivery_delay_ms``."""
        self._check_usable()
        msg_id = message.message_id if isinstance(message, Message) else message
        if len(self._nacks) >= CLIENT_NACK_PENDING_COUNT_MAX:
            raise LimitExceededError("CLIENT_NACK_PENDING_COUNT_MAX", len(self._nacks) + 1, CLIENT_NACK_PENDING_COUNT_MAX)
        delay_ns = self.config.negative_ack_redelivery_delay_ms * 1_000_000
        self._nacks[msg_id] = self._client.clock.monotonic_ns() + delay_ns
        if delay_ns == 0:
            self._redeliver_due()

    def _redeliver_due(self) -> None:
        cnx = self._cnx
        if not self._nacks or cnx is None or self.state is not State.READY:
            return
        now_ns = self._client.clock.monotonic_ns()
        due = [msg_id for msg_id, deadline in self._nacks.items() if deadline <= now_ns]
        if not due:
            return
        for msg_id in due:
            del self._nacks[msg_id]
        body = pb.CommandRedeliverUnacknowledgedMessages(consumer_id=self.consumer_id)
        if self.config.subscription_type.individual_ack_only:
            for entry in sorted({m.entry for m in due}):
                body.message_ids.append(MessageId(*entry).to_pb())
                self._batches.pop(entry, None)
        with suppress_closed():
            cnx.send(T(type=T.REDELIVER_UNACKNOWLEDGED_MESSAGES, redeliverUnacknowledgedMessages=body))

    def redeliver_unacknowledged(self) -> None:
        """Ask the broker to redeliver every unacknowledged message of this consumer."""
        self._check_usable()
        cnx = self._cnx
        if cnx is None or self.state is not State.READY:
            return
        body = pb.CommandRedeliverUnacknowledgedMessages(consumer_id=self.consumer_id)
        with suppress_closed():
            cnx.send(T(type=T.REDELIVER_UNACKNOWLEDGED_MESSAGES, redeliverUnacknowledgedMessages=body))

    async def _timer_loop(self) -> None:
        tick_s = CLIENT_TIMER_TICK_MS / 1000
        last_ack_flush_ns = self._client.clock.monotonic_ns()
        while self.state not in (State.CLOSED, State.FAILED):
            await self._client.clock.sleep(tick_s)
            now_ns = self._client.clock.monotonic_ns()
            if now_ns - last_ack_flush_ns >= self.config.ack_group_time_ms * 1_000_000:
                self._flush_acks()
                last_ack_flush_ns = now_ns
            self._redeliver_due()

    # --- requests ------------------------------------------------------------------------

    async def _request(self, command: pb.BaseCommand, request_id: int, what: str, cnx: BrokerConnection) -> object:
        response = await cnx.request(command, request_id, what)
        return response.body

    def _ready_connection(self) -> BrokerConnection:
        self._check_usable()
        cnx = self._cnx
        if cnx is None or self.state is not State.READY:
            raise ClosedError(f"consumer on {self.topic} is reconnecting")
        return cnx

    async def _with_ready_connection(self) -> BrokerConnection:
        """The current connection, waiting (up to the operation timeout) while reconnecting."""
        deadline_ns = self._client.clock.monotonic_ns() + self._client.options.operation_timeout_ms * 1_000_000
        tick_s = CLIENT_TIMER_TICK_MS / 1000
        while True:
            self._check_usable()
            if self._cnx is not None and self.state is State.READY:
                return self._cnx
            if self._client.clock.monotonic_ns() >= deadline_ns:
                raise OperationTimeoutError(f"consumer on {self.topic} did not reconnect in time")
            await self._client.clock.sleep(tick_s)

    async def seek(self, target: MessageId | int) -> None:
        """Move the subscription to a message id (the next message is the one after it) or to
        the first message published at or after a timestamp in ms."""
        cnx = await self._with_ready_connection()
        request_id = cnx.new_request_id()
        body = pb.CommandSeek(consumer_id=self.consumer_id, request_id=request_id)
        if isinstance(target, MessageId):
            body.message_id.CopyFrom(target.to_pb())
        else:
            if target < 0:
                raise InvalidArgumentError(f"seek timestamp must be >= 0, got {target}")
            body.message_publish_time = target
        await self._request(T(type=T.SEEK, seek=body), request_id, "SEEK", cnx)
        # Messages received before the seek are from the old position.
        dropped = self.queue.drop_from(self.consumer_id)
        self._batches.clear()
        self._pending_acks.clear()
        self._pending_cumulative = None
        self._nacks.clear()
        if isinstance(target, MessageId):
            self._filter_id, self._filter_inclusive = self._concrete(target), False
            if not self.durable:
                self._start_id, self.last_dequeued = target, None
        else:
            self._filter_id = None
            if not self.durable:
                self.last_dequeued = None
        if self._cnx is cnx and self.state is State.READY:
            self._return_permits(dropped)

    async def get_last_message_id(self) -> tuple[MessageId, MessageId | None]:
        """(last message id of the topic, this subscription's mark-delete position if known)."""
        cnx = await self._with_ready_connection()
        request_id = cnx.new_request_id()
        body = pb.CommandGetLastMessageId(consumer_id=self.consumer_id, request_id=request_id)
        response = await self._request(T(type=T.GET_LAST_MESSAGE_ID, getLastMessageId=body), request_id,
                                       "GET_LAST_MESSAGE_ID", cnx)
        assert isinstance(response, pb.CommandGetLastMessageIdResponse)
        last = MessageId.from_pb(response.last_message_id, partition=self.partition)
        mark = (MessageId.from_pb(response.consumer_mark_delete_position, partition=self.partition)
                if response.HasField("consumer_mark_delete_position") else None)
        return last, mark

    async def has_message_available(self) -> bool:
        if self.queue.count_from(self.consumer_id):
            return True
        last, mark_delete = await self.get_last_message_id()
        if last.ledger_id < 0 or last.entry_id < 0:
            return False
        reference = self.last_dequeued
        if reference is not None:
            return _after(last, reference)
        start = self._start_id
        if start is None or start == EARLIEST:
            if self.durable:
                return mark_delete is None or _after(last, mark_delete)
            return True
        if start.entry == LATEST.entry:
            return mark_delete is not None and _after(last, mark_delete)
        return _after(last, start) or (self._start_inclusive and last.entry == start.entry)

    async def unsubscribe(self) -> None:
        cnx = await self._with_ready_connection()
        self._flush_acks()
        self._move(State.CLOSING)
        request_id = cnx.new_request_id()
        body = pb.CommandUnsubscribe(consumer_id=self.consumer_id, request_id=request_id)
        try:
            await self._request(T(type=T.UNSUBSCRIBE, unsubscribe=body), request_id, "UNSUBSCRIBE", cnx)
        except BaseException:
            if self.state is State.CLOSING:
                self._move(State.READY if self._cnx is cnx and cnx.is_ready else State.FAILED)
            raise
        self._finish_close(cnx)

    async def close(self) -> None:
        if self.state in (State.CLOSED, State.CLOSING):
            return
        if self.state is State.FAILED:
            self._finish_close(None)
            return
        cnx = self._cnx if self.state is State.READY else None
        self._flush_acks()
        self._move(State.CLOSING)
        if cnx is not None and cnx.is_ready:
            request_id = cnx.new_request_id()
            body = pb.CommandCloseConsumer(consumer_id=self.consumer_id, request_id=request_id)
            with contextlib.suppress(MagnetarError):
                await self._request(T(type=T.CLOSE_CONSUMER, close_consumer=body), request_id, "CLOSE_CONSUMER", cnx)
        self._finish_close(cnx)

    def _finish_close(self, cnx: BrokerConnection | None) -> None:
        if cnx is not None:
            cnx.remove_consumer(self.consumer_id, self)
        self._cnx = None
        self.queue.drop_from(self.consumer_id)
        self._move(State.CLOSED)
        for task in list(self._tasks):
            task.cancel()


def _after(last: MessageId, reference: MessageId) -> bool:
    """Whether ``last`` (from GET_LAST_MESSAGE_ID) lies after ``reference``."""
    if last.entry != reference.entry:
        return last.entry > reference.entry
    if last.batch_index < 0:
        # The broker did not say which member is last: anything after ``reference`` in its batch.
        return reference.batch_index >= 0 and reference.batch_index < reference.batch_size - 1
    return last.batch_index > reference.batch_index


class MultiTopicConsumer:
    """One subscription over all partitions of a partitioned topic, merged into one queue."""

    def __init__(self, topic: str, queue: ReceiveQueue, consumers: list[Consumer]) -> None:
        self.topic = topic
        self.queue = queue
        self.consumers = consumers
        self._by_id = {c.consumer_id: c for c in consumers}

    def _owner(self, message: Message | MessageId) -> Consumer:
        if isinstance(message, Message):
            return self._by_id[message.consumer_key]
        for consumer in self.consumers:
            if consumer.partition == message.partition:
                return consumer
        raise InvalidArgumentError(f"message id {message} names no partition of {self.topic}")

    async def receive(self, timeout_ms: int | None = None) -> Message:
        for consumer in self.consumers:
            consumer._check_usable()
        message = await self.queue.get(timeout_ms)
        self._by_id[message.consumer_key].on_dequeued(message)
        return message

    def acknowledge(self, message: Message | MessageId) -> None:
        self._owner(message).acknowledge(message)

    def acknowledge_cumulative(self, message: Message | MessageId) -> None:
        self._owner(message).acknowledge_cumulative(message)

    def negative_acknowledge(self, message: Message | MessageId) -> None:
        self._owner(message).negative_acknowledge(message)

    def redeliver_unacknowledged(self) -> None:
        for consumer in self.consumers:
            consumer.redeliver_unacknowledged()

    async def flush_acks(self) -> None:
        await asyncio.gather(*(c.flush_acks() for c in self.consumers))

    async def seek(self, target: MessageId | int) -> None:
        await asyncio.gather(*(c.seek(target) for c in self.consumers))

    async def unsubscribe(self) -> None:
        await asyncio.gather(*(c.unsubscribe() for c in self.consumers))

    async def close(self) -> None:
        await asyncio.gather(*(c.close() for c in self.consumers))


class Reader:
    """Reads a topic from a position on a non-durable subscription (``reader-<10 hex>``)."""

    def __init__(self, consumer: Consumer) -> None:
        self._consumer = consumer

    @property
    def topic(self) -> str:
        return self._consumer.topic

    @property
    def subscription(self) -> str:
        return self._consumer.subscription

    async def read_next(self, timeout_ms: int | None = None) -> Message:
        message = await self._consumer.receive(timeout_ms)
        # A reader acks cumulatively on its own so a broker can trim behind it.
        self._consumer.acknowledge_cumulative(message)
        return message

    async def has_message_available(self) -> bool:
        return await self._consumer.has_message_available()

    async def seek(self, target: MessageId | int) -> None:
        await self._consumer.seek(target)

    async def close(self) -> None:
        await self._consumer.close()
