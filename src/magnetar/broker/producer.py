"""A producer: accepts SENDs, persists them through its topic and answers in SEND order.

Each SEND becomes a ``_PendingSend`` in a FIFO bounded by ``pending_sends_per_producer_max``
(``send`` waits for room: the connection stops reading, which is the backpressure). Appends are
started in SEND order and may complete in any order; receipts are released strictly from the head
of the FIFO, so SEND_RECEIPT / SEND_ERROR for one producer always follow SEND order, which the
official client requires. A SEND with a bad checksum takes its place in the FIFO with a ChecksumError.

Persist before acknowledging: a receipt is sent only after the topic's append returned, i.e. after
the entry is durable. Deduplication (``topic.dedup``, a ``MessageDeduplication``): a SEND whose
sequence id that producer name already persisted is answered with a (-1,-1) receipt, as Java does;
one whose id is still being appended (a resend after a reconnect racing the original) waits for
that append and is then judged again. The 4.2.0 client's sequence-id re-base (fact sheet §4,
quirk c16; ``_reused_after_rebase``) makes a reconnected producer send new messages under ids it
has just resent in the same session: those are stored, not answered as duplicates. Fault points
``broker.after_persist_before_receipt`` and ``broker.after_receipt`` bracket the receipt.

States: ACTIVE -> CLOSED (client close, fencing, connection loss); receipts of a closed producer
are dropped (its client is gone or will resend after reconnecting).
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Protocol

from magnetar import faults
from magnetar.base.fifo import fifo_advance
from magnetar.base.invariant import invariant
from magnetar.base.lazy_event import LazyEvent
from magnetar.base.types import Position
from magnetar.broker.dedup import DedupAppend, DedupStatus, MessageDeduplication
from magnetar.broker.errors import BrokerError, to_broker_error
from magnetar.broker.metrics import RateMeter
from magnetar.broker.replicated import is_replicator_producer
from magnetar.faults import breaks
from magnetar.protocol.pulsar import SendCommand, pb

if TYPE_CHECKING:
    from magnetar.broker.topic import PublishCallback, Topic

#: One SEND of a run: (command, data or None for a bad checksum, records_sequence, replicated source).
SendItem = tuple[SendCommand, bytes | None, bool, tuple[str, int] | None]

log = logging.getLogger(__name__)

DUPLICATE = Position(-1, -1)  # Java answers a deduplicated SEND with message id (-1, -1)


class ProducerChannel(Protocol):
    def send_receipt(self, producer_id: int, sequence_id: int, ledger_id: int, entry_id: int,
                     highest_sequence_id: int | None) -> None: ...

    def send_send_error(self, producer_id: int, sequence_id: int, code: int, message: str) -> None: ...

    def send_close_producer(self, producer_id: int) -> None: ...

    def is_open(self) -> bool: ...


class AccessMode(enum.IntEnum):
    SHARED = pb.Shared
    EXCLUSIVE = pb.Exclusive
    WAIT_FOR_EXCLUSIVE = pb.WaitForExclusive
    EXCLUSIVE_WITH_FENCING = pb.ExclusiveWithFencing


class ProducerState(enum.Enum):
    ACTIVE = "active"
    CLOSED = "closed"


_TRANSITIONS = {(ProducerState.ACTIVE, ProducerState.CLOSED), (ProducerState.CLOSED, ProducerState.CLOSED)}


class _PendingSend:
    """One SEND in the producer's FIFO, and the topic's callback for its append: the topic calls
    the op itself (``__call__``), no ``functools.partial`` per message. A plain class (compiled,
    a dataclass's ``__init__`` runs interpreted; docs/performance.md, session 13)."""

    __slots__ = ("append", "dedup", "error", "highest_sequence_id", "position", "producer", "records_sequence",
                 "sequence_id")

    def __init__(self, producer: Producer, sequence_id: int, highest_sequence_id: int,
                 records_sequence: bool = True) -> None:
        self.producer = producer
        self.sequence_id = sequence_id
        self.highest_sequence_id = highest_sequence_id
        self.records_sequence = records_sequence
        self.position: Position | None = None
        self.error: BrokerError | None = None
        #: Set when the SEND is appended: the deduplication that registered it, and its entry there.
        self.dedup: MessageDeduplication | None = None
        self.append: DedupAppend | None = None

    @property
    def done(self) -> bool:
        return self.position is not None or self.error is not None

    def __call__(self, position: Position | None, error: BaseException | None) -> None:
        """The topic's answer for this SEND's append (a ``PublishCallback``)."""
        self.producer._persisted(self, position, error)


#: A queued SEND whose duplicate check waits for an append in flight, with what deciding it takes:
#: ``(op, dedup, key, first, highest, records_sequence, data, count)`` (``Producer._queue_send``).
_Undecided = tuple[_PendingSend, MessageDeduplication, str, int, int, bool, bytes, int]


class Producer:
    def __init__(self, topic: Topic, producer_id: int, name: str, channel: ProducerChannel,
                 access_mode: AccessMode, pending_max: int, connection_key: object = None) -> None:
        self.topic = topic
        self.producer_id = producer_id
        self.name = name
        self.channel = channel
        self.access_mode = access_mode
        self.connection_key = connection_key
        self.schema_version: bytes | None = None  # the registered schema it produces with, if any
        #: A geo-replicator's producer (``pulsar.repl.A-->B``): its SENDs are deduplicated by
        #: source position (``broker/replicated.py``), not by sequence id.
        self.replicator = is_replicator_producer(name)
        #: The topic epoch it asked for (PRODUCER.topic_epoch), then the one it holds once admitted
        #: as an exclusive producer; None for a shared producer.
        self.topic_epoch: int | None = None
        # The SENDs awaiting their answer, in order: ``_pending[_pending_head:]`` (base/fifo.py:
        # an empty deque is ~760 bytes per idle producer, an empty list 56).
        self._pending: list[_PendingSend] = []
        self._pending_head = 0
        self._pending_max = pending_max
        self._dropped: RateMeter | None = None  # ``dropped``, made on first use (non-persistent topics)
        #: Called once per SEND taken off the FIFO (answered, or dropped once closed): the
        #: connection's count of unanswered SENDs.
        self.on_answered: Callable[[], None] | None = None
        #: Set when a SEND leaves the full FIFO; made only while the send path waits for room
        #: (``_send_rest``): no call per answered SEND (base/lazy_event.py).
        self._room: LazyEvent | None = None
        self._answering = False  # a receipt is between its two fault-point gates
        self._flush_loop = False  # ``_flush`` is on the stack (a gate passed inline)
        self._state = ProducerState.ACTIVE
        #: The PRODUCER command's ``epoch``: 0 on the client's first attempt, one more on each reconnect.
        self.epoch = 0
        # Sequence-id re-base detection (``_reused_after_rebase``): what PRODUCER_SUCCESS reported,
        # the highest id of a whole message this session sent, and, once the client is seen to have
        # re-based, the end of the ids its new messages reuse.
        self._reported_last_sequence_id = -1
        self._session_highest_sequence_id = -1
        self._rebase_reuse_end: int | None = None
        # The gates' continuations, bound once (not a bound method made per receipt, twice).
        self._receipt_then: Callable[[BaseException | None, _PendingSend], None] = self._receipt
        self._receipted_then: Callable[[BaseException | None], None] = self._receipted

    @property
    def state(self) -> ProducerState:
        return self._state

    @property
    def pending_count(self) -> int:
        return len(self._pending) - self._pending_head

    def report_last_sequence_id(self) -> int:
        """PRODUCER_SUCCESS.last_sequence_id for this producer (the highest id persisted for its
        name, -1 if none or deduplication is off), remembered for ``_reused_after_rebase``."""
        self._reported_last_sequence_id = self.topic.last_sequence_id(self.name)
        return self._reported_last_sequence_id

    def close(self) -> None:
        invariant((self._state, ProducerState.CLOSED) in _TRANSITIONS, "producer state table")
        self._state = ProducerState.CLOSED
        self._wake_room()

    async def send(self, command: SendCommand, data: bytes | None, *, records_sequence: bool = True,
                   source: tuple[str, int] | None = None) -> None:
        """``send_run`` of one SEND."""
        await self.send_run(((command, data, records_sequence, source),))

    async def send_run(self, sends: Sequence[SendItem]) -> None:
        """``start_send_run`` awaited to its end."""
        rest = self.start_send_run(sends)
        if rest is not None:
            await rest

    def start_send_run(self, sends: Sequence[SendItem]) -> Awaitable[None] | None:
        """Queue SENDs of this producer in order (the run one receive brought): each
        ``(command, data, records_sequence, source)`` takes its place in the FIFO, and the ones to
        store go to the topic as one run (``Topic.start_publish_run``).

        Runs synchronously as far as no SEND has to wait: None once the whole run was handed over
        (the usual case: no coroutine frame per run). At the first SEND that must wait (the FIFO
        full, a duplicate check behind an append in flight), the rest of the run (that SEND on,
        with the run gathered so far) is returned as an awaitable the caller must await before
        it hands this producer anything else: it hands the gathered run to the topic first, so
        order and progress hold, then waits and goes on (``_send_rest``). Each SEND is queued
        and judged by the one step ``_queue_send`` (its duplicate check asked once), whichever
        of the two took it.

        ``data`` None: the SEND failed its checksum. ``source``: (source cluster, source position)
        of a replicator's SEND; it is deduplicated by that position in ``topic.repl_dedup``
        instead of by sequence id.

        The chunks of one chunked message share a sequence id: only the last one
        (``records_sequence``) is checked for a duplicate and records the sequence id as persisted;
        earlier chunks are always stored (a resent message's extra chunks never complete it again).
        """
        run: list[tuple[bytes, PublishCallback, int]] = []
        index, count = 0, len(sends)
        while index < count:
            if self._fifo_full():
                return self._send_rest(sends, index, run, None)
            behind = self._queue_send(sends[index], run)
            index += 1
            if behind is not None:
                return self._send_rest(sends, index, run, behind)
        return self.topic.start_publish_run(run) if run else None  # refusals come back through the callbacks

    def _fifo_full(self) -> bool:
        return len(self._pending) - self._pending_head >= self._pending_max and self._state is ProducerState.ACTIVE

    async def _send_rest(self, sends: Sequence[SendItem], index: int, run: list[tuple[bytes, PublishCallback, int]],
                         behind: _Undecided | None) -> None:
        """``start_send_run`` from ``sends[index]`` on, waiting where it must; ``run``: the
        entries gathered before it, not yet handed to the topic; ``behind``: the SEND just
        queued whose duplicate check waits for an append in flight (None: none)."""
        while True:
            if behind is not None:  # behind an append in flight: maybe one of this run
                if run:
                    await self._publish(run)
                    run = []
                op, dedup, key, first, highest, records_sequence, data, count = behind
                if await self._is_duplicate(dedup, key, first):
                    op.position = DUPLICATE
                    self._flush()
                else:
                    self._append(op, dedup, key, highest, records_sequence, data, count, run)
            if index == len(sends):
                break
            if self._fifo_full():
                if run:
                    await self._publish(run)
                    run = []
                while self._fifo_full():
                    if self._room is None:
                        self._room = LazyEvent()
                    await self._room.wait()
            behind = self._queue_send(sends[index], run)
            index += 1
        if run:
            await self._publish(run)

    async def _publish(self, run: list[tuple[bytes, PublishCallback, int]]) -> None:
        rest = self.topic.start_publish_run(run)
        if rest is not None:
            await rest

    def _queue_send(self, send: SendItem, run: list[tuple[bytes, PublishCallback, int]]) -> _Undecided | None:
        """Put ``send`` in its place in the FIFO and judge it: answered at once (a bad checksum,
        a duplicate), or its entry added to ``run``. A SEND whose duplicate check is behind an
        append in flight is returned undecided, with what deciding it takes (the caller waits
        for that append, then answers it or ``_append``s it)."""
        command, data, records_sequence, source = send
        first = command.sequence_id
        count = 1 if command.num_messages is None else command.num_messages
        highest = first + max(count, 1) - 1 if command.highest_sequence_id is None else command.highest_sequence_id
        op = _PendingSend(self, first, highest, records_sequence)
        chunk = command.is_chunk
        self._pending.append(op)
        dedup, key = (self.topic.repl_dedup, source[0]) if source is not None else (self.topic.dedup, self.name)
        if source is not None:  # each source entry (a chunk too) is one position: always checked
            first = highest = source[1]
            chunk, records_sequence = False, True
        if data is None:
            op.error = BrokerError(pb.ChecksumError, "checksum mismatch")
            self._flush()
            return None
        if (not chunk or records_sequence) and not (  # a last chunk counts
                source is None and self.epoch and self._reused_after_rebase(first, highest)):
            status = dedup.check(key, first)
            if status is DedupStatus.UNKNOWN:
                return op, dedup, key, first, highest, records_sequence, data, count
            if status is DedupStatus.DUPLICATE:
                op.position = DUPLICATE
                self._flush()
                return None
        self._append(op, dedup, key, highest, records_sequence, data, count, run)
        return None

    @staticmethod
    def _append(op: _PendingSend, dedup: MessageDeduplication, key: str, highest: int, records_sequence: bool,
                data: bytes, count: int, run: list[tuple[bytes, PublishCallback, int]]) -> None:
        """Register ``op``'s append with its deduplication and add its entry to ``run``."""
        op.dedup = dedup
        op.append = dedup.begin(key, highest, records_sequence=records_sequence)
        run.append((data, op, max(count, 1)))

    @property
    def dropped(self) -> RateMeter:
        """Messages not published because the connection's in-flight bound for non-persistent
        messages was reached (``drop``): Pulsar's publisher ``msgDropRate``. Made on first use: a
        persistent topic's producer never drops (one object less per idle producer; issue 22)."""
        if self._dropped is None:
            self._dropped = RateMeter()
        return self._dropped

    def drop(self, command: SendCommand, size_bytes: int) -> None:
        """Answer a SEND without publishing it (a non-persistent topic over the connection's
        in-flight bound, as Pulsar does): a (-1,-1) receipt in its place in the FIFO, counted."""
        first = command.sequence_id
        count = 1 if command.num_messages is None else command.num_messages
        highest = first + max(count, 1) - 1 if command.highest_sequence_id is None else command.highest_sequence_id
        op = _PendingSend(self, first, highest, False)
        op.position = DUPLICATE
        self._pending.append(op)
        self.dropped.record(max(count, 1), size_bytes)
        self._flush()

    def _reused_after_rebase(self, first: int, highest: int) -> bool:
        """Whether a whole message (not a chunk before the last) of this session is a *new* message
        sent under an id the client already used in this session, so not a duplicate.

        The 4.2.0 client, reconnecting before its first receipt, re-bases its sequence generator on
        PRODUCER_SUCCESS.last_sequence_id L (next id L+1), *after* numbering the messages it still
        holds and resends: if one of those had an id above L (it was not persisted before the
        reconnect), its next new message reuses L+1, and the ones after it the following ids.
        Answered as duplicates they would be acknowledged with (-1,-1) and lost (docs/elastic.md,
        "2 values lost"). The client resends everything pending before any new message and never
        sends one message twice in a session, so on a reconnected session (``epoch`` > 0) the first
        whole message with id L+1 at or below the highest id this session already sent is that
        re-base; from then on, ids up to that highest one are new messages (called only on a
        reconnected session, so a first session costs nothing). Ids of a first session,
        and of a session whose ids only ever grow, are judged by deduplication as before (an
        application that sends one id twice on a fresh producer still has the second dropped)."""
        reuse_end = self._rebase_reuse_end
        if (reuse_end is None and first == self._reported_last_sequence_id + 1
                and first <= self._session_highest_sequence_id and not breaks.active(breaks.Break.NO_REBASE_CHECK)):
            reuse_end = self._rebase_reuse_end = self._session_highest_sequence_id
            log.info("producer %s on %s re-based its sequence ids on last_sequence_id %d: ids %d..%d of "
                     "this session are new messages", self.name, self.topic.name,
                     self._reported_last_sequence_id, first, reuse_end)
        if highest > self._session_highest_sequence_id:
            self._session_highest_sequence_id = highest
        return reuse_end is not None and first <= reuse_end

    @staticmethod
    async def _is_duplicate(dedup: MessageDeduplication, key: str, sequence_id: int) -> bool:
        status = dedup.check(key, sequence_id)
        while status is DedupStatus.UNKNOWN:  # each wait ends when one in-flight append ends
            await dedup.wait_in_flight(key, sequence_id)
            status = dedup.check(key, sequence_id)
        return status is DedupStatus.DUPLICATE

    def _persisted(self, op: _PendingSend, position: Position | None, error: BaseException | None) -> None:
        """The topic's answer for ``op``: record it, then answer what is done at the FIFO's head."""
        op.position = position
        if error is not None:
            op.error = to_broker_error(error)
        dedup, append = op.dedup, op.append
        invariant(dedup is not None and append is not None, "an appended send is registered with dedup")
        assert dedup is not None and append is not None
        dedup.finish(append, position)
        self._flush()

    def _flush(self) -> None:
        """Answer the done SENDs at the head of the FIFO, in order. A receipt passes the gates
        ``broker.after_persist_before_receipt`` and ``broker.after_receipt`` (``faults.gate1``, ``gate0``;
        unarmed, each continuation is called natively: ``faults.unarmed``, the same point, order
        and continuation): while one holds it, every later answer waits too."""
        self._flush_loop = True
        try:
            while not self._answering and self._pending and self._pending[self._pending_head].done:
                op = self._pending[self._pending_head]
                self._pending_head = fifo_advance(self._pending, self._pending_head)
                if self._room is not None:
                    self._wake_room()
                if self.on_answered is not None:
                    self.on_answered()
                if self._state is not ProducerState.ACTIVE or not self.channel.is_open():
                    continue
                if op.error is not None:
                    self._answer_now(op)
                    continue
                self._answering = True
                if faults.unarmed("broker.after_persist_before_receipt"):
                    # The gate's continuation (``_receipt(None, op)``), called natively
                    # (``faults.unarmed``); its checks were made just above, nothing ran between.
                    self._answer_now(op)
                    self._after_receipt()
                else:
                    faults.gate1("broker.after_persist_before_receipt", self._receipt_then, op)
        finally:
            self._flush_loop = False

    def _wake_room(self) -> None:
        room, self._room = self._room, None
        if room is not None:
            room.set()

    def _receipt(self, error: BaseException | None, op: _PendingSend) -> None:
        # An ``error`` at the gate loses the receipt (the client's send times out and it resends).
        if error is None and self._state is ProducerState.ACTIVE and self.channel.is_open():
            self._answer_now(op)
        self._after_receipt()

    def _after_receipt(self) -> None:
        if faults.unarmed("broker.after_receipt"):
            self._receipted(None)  # the gate's continuation, called natively
        else:
            faults.gate0("broker.after_receipt", self._receipted_then)

    def _receipted(self, _error: BaseException | None) -> None:
        self._answering = False
        if not self._flush_loop:  # a gate held the receipt: carry on with the next answers
            self._flush()

    def _answer_now(self, op: _PendingSend) -> None:
        if op.error is not None:
            self.channel.send_send_error(self.producer_id, op.sequence_id, op.error.code, op.error.message)
            return
        position = op.position
        invariant(position is not None, "a done send has a position or an error")
        assert position is not None
        self.channel.send_receipt(self.producer_id, op.sequence_id, position.ledger_id, position.entry_id,
                                  op.highest_sequence_id)
