"""Producers: one per topic partition (``Producer``) and a router over partitions (``PartitionedProducer``).

Sequence on one partition (shared/reference/pulsar_protocol.md section 4)::

    LOOKUP -> PRODUCER(producer_id, epoch) -> PRODUCER_SUCCESS(name, last_sequence_id)
    SEND(seq) ... -> SEND_RECEIPT(seq, ledger:entry)   (pipelined, receipts in SEND order)
    CLOSE_PRODUCER -> SUCCESS

States (``_TRANSITIONS``): IDLE -> CONNECTING -> READY; READY -> CONNECTING (connection lost or
CLOSE_PRODUCER from the broker); any live state -> CLOSING -> CLOSED; a fatal broker error -> FAILED.

Invariants:
* At most ``max_pending_messages`` messages are sent and not receipted (or sitting in the open
  batch); ``send`` waits for room (backpressure) instead of growing the table.
* Receipts are matched strictly FIFO against the pending queue, as the official client does: a
  receipt below the head is stale and ignored, one above the head's last sequence id means the
  stream is out of step and the connection is dropped (everything pending is then resent).
* After a reconnect every pending message is resent in order with its original sequence id and
  metadata, so a broker deduplicating by (producer_name, sequence_id) drops the duplicates.
* Sequence ids never go backwards: after PRODUCER_SUCCESS the next id is
  ``max(next, last_sequence_id + 1)`` (the official client's re-base can reuse id 0; ours cannot).
* A batch is encoded exactly as the official client encodes it: outer metadata with the first
  message's sequence id and ``num_messages_in_batch``, per-message ``SingleMessageMetadata`` with
  its own sequence id, whole-batch compression with ``uncompressed_size``.
"""

from __future__ import annotations

import asyncio
import contextlib
import struct
from collections import deque
from collections.abc import Coroutine, Mapping
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
from magnetar.base.limits import CLIENT_RECONNECT_ATTEMPTS_MAX, CLIENT_TIMER_TICK_MS, PULSAR_MESSAGE_BYTES_MAX
from magnetar.client._handler import HANDLER_TRANSITIONS, HandlerState
from magnetar.client._util import Backoff, within
from magnetar.client.config import ProducerConfig
from magnetar.client.connection import BrokerConnection, suppress_closed
from magnetar.client.errors import BrokerError, is_retryable
from magnetar.client.message import MessageId
from magnetar.client.topic import key_partition
from magnetar.protocol.pulsar.batch import encode_entry
from magnetar.protocol.pulsar.client_connection import Event, ProducerClosedByBroker, SendError, SendReceipt
from magnetar.protocol.pulsar.generated import pulsar_api_pb2 as pb

if TYPE_CHECKING:
    from magnetar.client.client import PulsarClient

T = pb.BaseCommand
_U32 = struct.Struct(">I")
_STOP_CODES = frozenset({pb.ProducerFenced, pb.TopicTerminatedError})


State = HandlerState
_TRANSITIONS = HANDLER_TRANSITIONS


@dataclass(slots=True)
class _OpSend:
    """One SEND in flight: a single message or a whole batch."""

    sequence_id: int
    count: int
    is_batch: bool
    body: bytes  # [metadata_size][metadata][payload]; the checksum block is added per connection
    futures: list[asyncio.Future[MessageId]]
    deadline_ns: int

    @property
    def last_sequence_id(self) -> int:
        return self.sequence_id + self.count - 1

    def command(self, producer_id: int) -> pb.BaseCommand:
        send = pb.CommandSend(producer_id=producer_id, sequence_id=self.sequence_id)
        if self.is_batch:
            send.num_messages = self.count
        return T(type=T.SEND, send=send)


@dataclass(slots=True)
class _Queued:
    single: pb.SingleMessageMetadata
    payload: bytes
    future: asyncio.Future[MessageId]


def _frame_body(metadata: pb.MessageMetadata, payload: bytes) -> bytes:
    encoded = bytes(metadata.SerializeToString())
    return _U32.pack(len(encoded)) + encoded + payload


class Producer:
    """Publishes to one topic (or one partition of a partitioned topic)."""

    def __init__(self, client: PulsarClient, topic: str, partition: int, producer_id: int,
                 config: ProducerConfig) -> None:
        config.validate()
        self._client = client
        self.topic = topic
        self.partition = partition
        self.producer_id = producer_id
        self.config = config
        self.state = State.IDLE
        self.producer_name: str | None = config.producer_name
        self._epoch = 0
        self._cnx: BrokerConnection | None = None
        self._pending: deque[_OpSend] = deque()
        self._room = asyncio.Semaphore(config.max_pending_messages)
        self._next_sequence_id = config.initial_sequence_id + 1 if config.initial_sequence_id is not None else 0
        self._sent_any = config.initial_sequence_id is not None
        self._batch: list[_Queued] = []
        self._batch_bytes = 0
        self._batch_generation = 0
        self._tasks: set[asyncio.Task[None]] = set()
        self._reconnecting: asyncio.Task[None] | None = None
        self._failure: BaseException | None = None
        self._ready = asyncio.Event()

    # --- state ---------------------------------------------------------------------------

    def _move(self, target: State) -> None:
        invariant(target in _TRANSITIONS[self.state], f"producer {self.producer_id}: {self.state} -> {target}")
        self.state = target
        if target is State.READY:
            self._ready.set()
        else:
            self._ready.clear()

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    @property
    def pending_count(self) -> int:
        return sum(op.count for op in self._pending) + len(self._batch)

    # --- connecting ----------------------------------------------------------------------

    async def start(self) -> None:
        """Create the producer on its broker, retrying until the operation deadline."""
        self._move(State.CONNECTING)
        try:
            await self._client.retry_until_deadline(self._connect_once, f"create producer on {self.topic}")
        except BaseException as error:
            self._fail(error)
            raise
        self._spawn(self._timer_loop())

    async def _connect_once(self) -> None:
        cnx = await self._client.connection_for(self.topic)
        request_id = cnx.new_request_id()
        body = pb.CommandProducer(
            topic=self.topic, producer_id=self.producer_id, request_id=request_id, epoch=self._epoch,
            encrypted=False, user_provided_producer_name=self.config.producer_name is not None,
            producer_access_mode=pb.Shared,
        )
        if self.producer_name is not None:
            body.producer_name = self.producer_name
        for key, value in self.config.properties.items():
            body.metadata.add(key=key, value=value)
        self._epoch += 1
        cnx.add_producer(self.producer_id, self)
        try:
            response = await cnx.request(T(type=T.PRODUCER, producer=body), request_id, "PRODUCER")
        except BaseException:
            cnx.remove_producer(self.producer_id, self)
            if cnx.is_ready:  # the official client closes a producer whose creation it gave up on
                with suppress_closed():
                    cnx.send(T(type=T.CLOSE_PRODUCER, close_producer=pb.CommandCloseProducer(
                        producer_id=self.producer_id, request_id=cnx.new_request_id())))
            raise
        success = response.body
        assert isinstance(success, pb.CommandProducerSuccess)
        if self.state is not State.CONNECTING:  # closed while we were connecting: undo on the broker
            cnx.remove_producer(self.producer_id, self)
            with suppress_closed():
                cnx.send(T(type=T.CLOSE_PRODUCER, close_producer=pb.CommandCloseProducer(
                    producer_id=self.producer_id, request_id=cnx.new_request_id())))
            return
        self.producer_name = success.producer_name
        if not self._sent_any and success.last_sequence_id >= 0:
            self._next_sequence_id = max(self._next_sequence_id, success.last_sequence_id + 1)
        self._cnx = cnx
        self._move(State.READY)
        for op in self._pending:  # resend in order, same sequence ids and bytes
            cnx.send_message(op.command(self.producer_id), op.body)

    def on_connection_closed(self, connection: BrokerConnection) -> None:
        if connection is self._cnx:
            self._lost_connection()

    def _lost_connection(self) -> None:
        self._cnx = None
        if self.state is State.READY:
            self._move(State.CONNECTING)
            self._reconnecting = self._spawn(self._reconnect_loop())

    async def _reconnect_loop(self) -> None:
        backoff = Backoff(self._client.rng, max_ms=self._client.options.backoff_max_ms)
        for _attempt in range(CLIENT_RECONNECT_ATTEMPTS_MAX):
            await self._client.clock.sleep(backoff.next_s())
            if self.state is not State.CONNECTING:
                return
            try:
                await self._connect_once()
                return
            except BrokerError as error:
                if error.code in _STOP_CODES:
                    self._fail(error)
                    return
            except MagnetarError:
                continue
        self._fail(LimitExceededError("CLIENT_RECONNECT_ATTEMPTS_MAX", CLIENT_RECONNECT_ATTEMPTS_MAX + 1,
                                 CLIENT_RECONNECT_ATTEMPTS_MAX))

    def _fail(self, error: BaseException) -> None:
        """Stop for good: fail everything pending and queued."""
        self._failure = error
        if self.state not in (State.CLOSED, State.FAILED):
            self._move(State.FAILED)
        self._fail_all(error)

    def _fail_all(self, error: BaseException) -> None:
        futures = [f for op in self._pending for f in op.futures] + [q.future for q in self._batch]
        self._pending.clear()
        self._batch.clear()
        self._batch_bytes = 0
        for future in futures:
            self._settle(future, error=error)

    def _settle(self, future: asyncio.Future[MessageId], *, result: MessageId | None = None,
                error: BaseException | None = None) -> None:
        if future.done():
            return
        self._room.release()
        if error is not None:
            future.set_exception(error)
        else:
            assert result is not None
            future.set_result(result)

    # --- events from the connection ------------------------------------------------------

    def on_event(self, connection: BrokerConnection, event: Event) -> None:
        if connection is not self._cnx:
            return
        if isinstance(event, SendReceipt):
            self._on_receipt(connection, event)
        elif isinstance(event, SendError):
            if event.error == pb.ChecksumError and self._pending and self._pending[0].sequence_id == event.sequence_id:
                op = self._pending.popleft()
                for future in op.futures:
                    self._settle(future, error=BrokerError(event.error, event.message))
            else:  # the official client drops the connection and resends everything
                connection.close(f"SEND_ERROR {event.error}: {event.message}")
        elif isinstance(event, ProducerClosedByBroker):
            self._lost_connection()

    def _on_receipt(self, connection: BrokerConnection, receipt: SendReceipt) -> None:
        if not self._pending:
            return
        head = self._pending[0]
        if receipt.sequence_id < head.sequence_id:
            return  # stale: for a message that timed out or was already receipted
        if receipt.sequence_id > head.last_sequence_id:
            connection.close(f"receipt for sequence {receipt.sequence_id} ahead of pending {head.sequence_id}")
            return
        self._pending.popleft()
        ledger_id = receipt.message_id.ledgerId
        entry_id = receipt.message_id.entryId
        base = MessageId.from_pb(pb.MessageIdData(ledgerId=ledger_id, entryId=entry_id), partition=self.partition)
        for index, future in enumerate(head.futures):
            if head.is_batch:
                msg_id = MessageId(base.ledger_id, base.entry_id, index, self.partition, head.count)
            else:
                msg_id = base
            self._settle(future, result=msg_id)

    # --- sending -------------------------------------------------------------------------

    async def send(self, payload: bytes, *, key: str | None = None, properties: Mapping[str, str] | None = None,
                   event_time_ms: int | None = None, sequence_id: int | None = None,
                   ordering_key: bytes | None = None) -> MessageId:
        """Publish one message and wait for the broker's receipt."""
        future = await self.send_async(payload, key=key, properties=properties, event_time_ms=event_time_ms,
                                       sequence_id=sequence_id, ordering_key=ordering_key)
        return await future

    async def send_async(self, payload: bytes, *, key: str | None = None,
                         properties: Mapping[str, str] | None = None, event_time_ms: int | None = None,
                         sequence_id: int | None = None, ordering_key: bytes | None = None,
                         ) -> asyncio.Future[MessageId]:
        """Queue one message; returns once there is room, with a future for its ``MessageId``."""
        self._check_open()
        await self._room.acquire()
        try:
            self._check_open()
        except BaseException:
            self._room.release()
            raise
        future: asyncio.Future[MessageId] = asyncio.get_running_loop().create_future()
        if sequence_id is None:
            sequence_id = self._next_sequence_id
        elif sequence_id < 0:
            self._room.release()
            raise InvalidArgumentError(f"sequence_id must be >= 0, got {sequence_id}")
        self._next_sequence_id = max(self._next_sequence_id, sequence_id + 1)
        self._sent_any = True
        single = pb.SingleMessageMetadata(sequence_id=sequence_id)
        for name, value in (properties or {}).items():
            single.properties.add(key=name, value=value)
        if key is not None:
            single.partition_key = key
        if event_time_ms is not None:
            single.event_time = event_time_ms
        if ordering_key is not None:
            single.ordering_key = ordering_key
        queued = _Queued(single, bytes(payload), future)
        if self.config.batching_enabled:
            self._add_to_batch(queued)
        else:
            try:
                self._dispatch_op(self._single_op(queued))
            except BaseException:
                self._room.release()
                raise
        cnx = self._cnx
        if cnx is not None and cnx.is_ready:
            with suppress_closed():
                await cnx.drain()
        return future

    async def send_entry_async(self, metadata: pb.MessageMetadata, payload: bytes) -> asyncio.Future[MessageId]:
        """Queue one already-encoded entry (a geo-replicator forwarding a stored entry): ``metadata``
        and ``payload`` are sent as given (producer name, sequence id, batch and compression fields
        included); the SEND itself carries this producer's next sequence id. One future per entry."""
        self._check_open()
        await self._room.acquire()
        try:
            self._check_open()
            count = max(1, metadata.num_messages_in_batch) if metadata.HasField("num_messages_in_batch") else 1
            future: asyncio.Future[MessageId] = asyncio.get_running_loop().create_future()
            sequence_id = self._next_sequence_id
            self._next_sequence_id += count
            self._sent_any = True
            body = _frame_body(metadata, payload)
            self._check_size(len(body))
            self._dispatch_op(_OpSend(sequence_id, count, metadata.HasField("num_messages_in_batch"), body,
                                      [future], self._deadline_ns()))
        except BaseException:
            self._room.release()
            raise
        cnx = self._cnx
        if cnx is not None and cnx.is_ready:
            with suppress_closed():
                await cnx.drain()
        return future

    def _check_open(self) -> None:
        if self.state is State.FAILED:
            raise ClosedError(f"producer {self.producer_name} on {self.topic} failed: {self._failure}")
        if self.state in (State.CLOSING, State.CLOSED):
            raise ClosedError(f"producer {self.producer_name} on {self.topic} is closed")

    def _outer_metadata(self, sequence_id: int) -> pb.MessageMetadata:
        return pb.MessageMetadata(producer_name=self.producer_name or "", sequence_id=sequence_id,
                                  publish_time=self._client.clock.now_ms())

    def _max_message_bytes(self) -> int:
        cnx = self._cnx
        return cnx.max_message_size_bytes if cnx is not None and cnx.is_ready else PULSAR_MESSAGE_BYTES_MAX

    def _deadline_ns(self) -> int:
        timeout_ms = self.config.send_timeout_ms
        return self._client.clock.monotonic_ns() + timeout_ms * 1_000_000 if timeout_ms else 0

    def _single_op(self, queued: _Queued) -> _OpSend:
        single = queued.single
        metadata = self._outer_metadata(single.sequence_id)
        metadata.properties.extend(single.properties)
        if single.HasField("partition_key"):
            metadata.partition_key = single.partition_key
        if single.HasField("event_time"):
            metadata.event_time = single.event_time
        if single.HasField("ordering_key"):
            metadata.ordering_key = single.ordering_key
        metadata, payload = encode_entry(metadata, payload=queued.payload, codec=self.config.compression.value)
        body = _frame_body(metadata, payload)
        self._check_size(len(body))
        return _OpSend(single.sequence_id, 1, False, body, [queued.future], self._deadline_ns())

    def _check_size(self, size: int) -> None:
        limit = self._max_message_bytes()
        if size > limit:
            raise LimitExceededError("max_message_size", size, limit)

    def _dispatch_op(self, op: _OpSend) -> None:
        self._pending.append(op)
        cnx = self._cnx
        if self.state is State.READY and cnx is not None:
            cnx.send_message(op.command(self.producer_id), op.body)

    # --- batching ------------------------------------------------------------------------

    def _add_to_batch(self, queued: _Queued) -> None:
        size = len(queued.payload)
        if self._batch and self._batch_bytes + size > self.config.batch_max_bytes:
            self._flush_batch()
        self._batch.append(queued)
        self._batch_bytes += size
        if len(self._batch) >= self.config.batch_max_messages or self._batch_bytes >= self.config.batch_max_bytes:
            self._flush_batch()
        elif len(self._batch) == 1:
            self._spawn(self._flush_after_delay(self._batch_generation))

    async def _flush_after_delay(self, generation: int) -> None:
        await self._client.clock.sleep(self.config.batch_max_delay_ms / 1000)
        if generation == self._batch_generation and self._batch:
            self._flush_batch()

    def _flush_batch(self) -> None:
        batch, self._batch = self._batch, []
        self._batch_bytes = 0
        self._batch_generation += 1
        if not batch:
            return
        first = batch[0].single
        metadata = self._outer_metadata(first.sequence_id)
        if first.HasField("partition_key"):
            metadata.partition_key = first.partition_key
        if first.HasField("ordering_key"):
            metadata.ordering_key = first.ordering_key
        metadata, payload = encode_entry(metadata, messages=[(q.single, q.payload) for q in batch],
                                         codec=self.config.compression.value)
        body = _frame_body(metadata, payload)
        futures = [q.future for q in batch]
        try:
            self._check_size(len(body))
        except LimitExceededError as error:
            for future in futures:
                self._settle(future, error=error)
            return
        # Sequence ids of a batch must be consecutive for FIFO receipt matching; explicit ids that
        # are not are sent as separate SENDs.
        consecutive = all(q.single.sequence_id == first.sequence_id + i for i, q in enumerate(batch))
        if not consecutive:
            for queued in batch:
                self._dispatch_op(self._single_op(queued))
            return
        self._dispatch_op(_OpSend(first.sequence_id, len(batch), True, body, futures, self._deadline_ns()))

    async def flush(self) -> None:
        """Send the open batch and wait until everything sent so far is receipted (or failed)."""
        self._flush_batch()
        futures = [f for op in self._pending for f in op.futures]
        if futures:
            # asyncio.wait, not gather: a cancelled flush must not cancel the messages' futures.
            await asyncio.wait(futures)

    # --- timers --------------------------------------------------------------------------

    async def _timer_loop(self) -> None:
        tick_s = CLIENT_TIMER_TICK_MS / 1000
        while self.state not in (State.CLOSED, State.FAILED):
            await self._client.clock.sleep(tick_s)
            if not self.config.send_timeout_ms:
                continue
            now_ns = self._client.clock.monotonic_ns()
            while self._pending and self._pending[0].deadline_ns <= now_ns:
                op = self._pending.popleft()
                for future in op.futures:
                    self._settle(future, error=OperationTimeoutError(
                        f"message {op.sequence_id} on {self.topic} not receipted within {self.config.send_timeout_ms} ms"))

    # --- closing -------------------------------------------------------------------------

    async def close(self) -> None:
        """Flush, wait for receipts (bounded by the send timeout), and close on the broker."""
        if self.state in (State.CLOSED, State.CLOSING):
            return
        if self.state is not State.FAILED:
            # Bounded even with send_timeout_ms=0 and a broker that never comes back.
            timeout_s = self._client.options.operation_timeout_ms / 1000
            with contextlib.suppress(MagnetarError):
                await within(self._client.clock, timeout_s, self.flush(), "flush before close")
        if self.state is State.FAILED:
            self._move(State.CLOSED)
        else:
            self._move(State.CLOSING)
            cnx = self._cnx
            if cnx is not None and cnx.is_ready:
                request_id = cnx.new_request_id()
                body = pb.CommandCloseProducer(producer_id=self.producer_id, request_id=request_id)
                try:
                    await cnx.request(T(type=T.CLOSE_PRODUCER, close_producer=body), request_id, "CLOSE_PRODUCER")
                except MagnetarError as error:
                    if not is_retryable(error) and not isinstance(error, OperationTimeoutError):
                        raise
                finally:
                    cnx.remove_producer(self.producer_id, self)
            self._cnx = None
            self._move(State.CLOSED)
        self._fail_all(ClosedError(f"producer on {self.topic} closed"))
        for task in list(self._tasks):
            task.cancel()


class PartitionedProducer:
    """Routes messages over the partitions of a partitioned topic.

    Keyed messages go to ``key_partition(key, n)`` (Murmur3-32, see ``topic``); others round
    robin from a random start (``ProducerConfig.round_robin``) or to partition 0.
    """

    def __init__(self, topic: str, producers: list[Producer], start_index: int, round_robin: bool) -> None:
        invariant(len(producers) > 0, "a partitioned producer has partitions")
        self.topic = topic
        self.producers = producers
        self._next = start_index % len(producers)
        self._round_robin = round_robin

    def choose_partition(self, key: str | None) -> int:
        if key is not None:
            return key_partition(key, len(self.producers))
        if not self._round_robin:
            return 0
        index = self._next
        self._next = (self._next + 1) % len(self.producers)
        return index

    async def send(self, payload: bytes, *, key: str | None = None, properties: Mapping[str, str] | None = None,
                   event_time_ms: int | None = None, sequence_id: int | None = None,
                   ordering_key: bytes | None = None) -> MessageId:
        producer = self.producers[self.choose_partition(key)]
        return await producer.send(payload, key=key, properties=properties, event_time_ms=event_time_ms,
                                   sequence_id=sequence_id, ordering_key=ordering_key)

    async def send_async(self, payload: bytes, *, key: str | None = None,
                         properties: Mapping[str, str] | None = None, event_time_ms: int | None = None,
                         sequence_id: int | None = None, ordering_key: bytes | None = None,
                         ) -> asyncio.Future[MessageId]:
        producer = self.producers[self.choose_partition(key)]
        return await producer.send_async(payload, key=key, properties=properties, event_time_ms=event_time_ms,
                                         sequence_id=sequence_id, ordering_key=ordering_key)

    async def flush(self) -> None:
        await asyncio.gather(*(p.flush() for p in self.producers))

    async def close(self) -> None:
        await asyncio.gather(*(p.close() for p in self.producers))
