"""Dispatch of a subscription's entries to its consumers: the part every subscription type shares.

A dispatcher reads the log from ``read_position`` (or the replay set first), asks its policy
(``select``) which consumer gets each entry, and sends it as a MESSAGE. It tracks what was sent and
not yet acknowledged (``pending``, bounded by ``pending_acks_per_subscription_max``), what must be
sent again (``replay``) and how often each position was redelivered (``redelivery counts``,
bounded by ``redelivery_tracker_count_max``; the oldest is forgotten first).

Invariants:
* An entry is sent only to a consumer with permits > 0 on a writable connection; its message count
  is taken from the consumer's permits (permits may go negative by one batch, as in Pulsar).
* Entries the cursor already counts as acknowledged are never sent.
* Within one policy decision order is log order; a policy that cannot place an entry stops the
  pass there (head-of-line), so per-key order holds for Key_Shared.
* After ``reset`` (seek) or ``rewind`` nothing read before it is sent: ``_epoch`` discards reads
  that were in flight.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import logging
from collections.abc import Iterable, Sequence

from magnetar.base.errors import CorruptData
from magnetar.base.types import Position
from magnetar.broker.config import BrokerConfig
from magnetar.broker.consumer import Consumer
from magnetar.broker.entry import entry_message_count, entry_metadata
from magnetar.broker.log import Entry, SubscriptionCursor, TopicLog
from magnetar.protocol.pulsar import commands, pb

log = logging.getLogger(__name__)


class Dispatcher:
    """Base class; subclasses define ``select`` and how consumers join, leave and ask for redelivery."""

    def __init__(self, topic_log: TopicLog, cursor: SubscriptionCursor, config: BrokerConfig,
                 partition_index: int) -> None:
        self.log = topic_log
        self.cursor = cursor
        self.config = config
        self.partition_index = partition_index
        self.consumers: list[Consumer] = []
        self.pending: dict[Position, Consumer] = {}
        self.replay: list[Position] = []  # sorted
        self.redelivery_counts: dict[Position, int] = {}
        self.read_position = cursor.mark_delete_position.next()
        self._epoch = 0
        self._wake = asyncio.Event()
        self._closed = False
        self._task: asyncio.Task[None] | None = None
        self.last_error: BaseException | None = None

    # --- lifecycle ---------------------------------------------------------------------------

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(), name=f"dispatch:{self.cursor.name}")

    async def close(self) -> None:
        self._closed = True
        self._wake.set()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    def wake(self) -> None:
        self._wake.set()

    # --- policy hooks ---------------------------------------------------------------------------

    def select(self, entry: Entry, metadata: pb.MessageMetadata) -> Consumer | None:
        raise TypeError(f"{type(self).__name__} must define select()")

    def add_consumer(self, consumer: Consumer) -> None:
        self.consumers.append(consumer)
        self.wake()

    def remove_consumer(self, consumer: Consumer) -> None:
        """The consumer left: what it had not acknowledged is sent again to others."""
        if consumer in self.consumers:
            self.consumers.remove(consumer)
        self._replay_pending_of(consumer, count=False)
        self.wake()

    def redeliver(self, consumer: Consumer, positions: Sequence[Position] | None) -> None:
        """REDELIVER_UNACKNOWLEDGED_MESSAGES: the listed (or all) pending entries of ``consumer``."""
        if positions:
            for position in positions:
                if self.pending.get(position) is consumer:
                    self._to_replay(position, count=True)
        else:
            self._replay_pending_of(consumer, count=True)
        self.wake()

    # --- flow and acks --------------------------------------------------------------------------

    def flow(self, consumer: Consumer, permits: int) -> None:
        consumer.add_permits(permits)
        self.wake()

    def acknowledged(self, positions: Iterable[Position]) -> None:
        for position in positions:
            self._forget(position)
        self.wake()

    def acknowledged_cumulative(self, position: Position) -> None:
        for pending in [p for p in self.pending if p <= position]:
            self._forget(pending)
        index = bisect.bisect_right(self.replay, position)
        for replayed in self.replay[:index]:
            self.redelivery_counts.pop(replayed, None)
        del self.replay[:index]
        self.wake()

    def reset(self, read_position: Position) -> None:
        """Seek: forget everything in flight and read from ``read_position``."""
        for consumer in self.consumers:
            consumer.pending_count = 0
        self.pending.clear()
        self.replay.clear()
        self.redelivery_counts.clear()
        self.read_position = read_position
        self._epoch += 1
        self.wake()

    def rewind(self, *, count: bool) -> None:
        """Send everything unacknowledged again, from just after the mark-delete position."""
        for position in list(self.pending):
            if count:
                self._count_redelivery(position)
            self._forget(position, keep_count=True)
        self.replay.clear()
        self.read_position = self.cursor.mark_delete_position.next()
        self._epoch += 1
        self.wake()

    # --- bookkeeping ----------------------------------------------------------------------------

    def _forget(self, position: Position, *, keep_count: bool = False) -> None:
        consumer = self.pending.pop(position, None)
        if consumer is not None:
            consumer.pending_count -= 1
        if not keep_count:
            self.redelivery_counts.pop(position, None)

    def _count_redelivery(self, position: Position) -> None:
        counts = self.redelivery_counts
        counts[position] = counts.pop(position, 0) + 1
        while len(counts) > self.config.redelivery_tracker_count_max:
            del counts[next(iter(counts))]

    def _to_replay(self, position: Position, *, count: bool) -> None:
        if count:
            self._count_redelivery(position)
        self._forget(position, keep_count=True)
        index = bisect.bisect_left(self.replay, position)
        if index == len(self.replay) or self.replay[index] != position:
            self.replay.insert(index, position)

    def _replay_pending_of(self, consumer: Consumer, *, count: bool) -> None:
        for position in [p for p, c in self.pending.items() if c is consumer]:
            self._to_replay(position, count=count)

    # --- the loop -------------------------------------------------------------------------------

    async def _run(self) -> None:
        while not self._closed:
            self._wake.clear()
            try:
                progressed = await self.dispatch_once()
            except asyncio.CancelledError:
                raise
            except Exception as error:  # a failed read: wait for the next event and try again
                self.last_error = error
                log.warning("dispatch on %s failed: %s", self.cursor.name, error)
                progressed = False
            if not progressed:
                await self._wake.wait()

    def _may_dispatch(self) -> bool:
        if len(self.pending) >= self.config.pending_acks_per_subscription_max:
            return False
        return any(c.can_receive() for c in self.consumers)

    async def dispatch_once(self) -> bool:
        """One read-and-send pass; True if anything was sent or skipped (call again)."""
        if not self._may_dispatch():
            return False
        epoch = self._epoch
        if self.replay:
            entries = await self._read_replay(self.replay[: self.config.dispatch_read_count_max])
            if epoch != self._epoch:
                return True
            return self._send(entries, replay=True)
        if self.read_position > self.log.last_position:
            return False
        entries = await self.log.read(self.read_position, self.config.dispatch_read_count_max)
        if epoch != self._epoch:
            return True
        if not entries:
            return False
        return self._send(entries, replay=False)

    async def _read_replay(self, positions: list[Position]) -> list[Entry]:
        out: list[Entry] = []
        for position in positions:
            found = await self.log.read(position, 1)
            if found and found[0].position == position:
                out.append(found[0])
            else:  # trimmed or never existed: nothing to redeliver
                self._drop_replay(position)
        return out

    def _drop_replay(self, position: Position) -> None:
        index = bisect.bisect_left(self.replay, position)
        if index < len(self.replay) and self.replay[index] == position:
            del self.replay[index]

    def _advance(self, entry: Entry, replay: bool) -> None:
        if replay:
            self._drop_replay(entry.position)
        else:
            self.read_position = entry.position.next()

    def _send(self, entries: list[Entry], *, replay: bool) -> bool:
        progressed = False
        for entry in entries:
            if len(self.pending) >= self.config.pending_acks_per_subscription_max:
                break
            position = entry.position
            if self.cursor.is_acked(position) or (not replay and position in self.pending):
                self._advance(entry, replay)
                progressed = True
                continue
            try:
                metadata = entry_metadata(entry.data)
            except CorruptData as error:
                log.error("skipping unreadable entry %s on %s: %s", position, self.cursor.name, error)
                self._advance(entry, replay)
                progressed = True
                continue
            consumer = self.select(entry, metadata)
            if consumer is None:
                break
            self._deliver(consumer, entry, metadata)
            self._advance(entry, replay)
            progressed = True
        return progressed

    def _deliver(self, consumer: Consumer, entry: Entry, metadata: pb.MessageMetadata) -> None:
        position = entry.position
        msg_id = commands.message_id(position.ledger_id, position.entry_id, partition=self.partition_index)
        count = entry_message_count(metadata)
        ack_set = (self.cursor.batch_ack_set(position, count) if metadata.HasField("num_messages_in_batch") else None) or ()
        consumer.channel.send_message(
            consumer.consumer_id, msg_id, entry.data, self.redelivery_counts.get(position, 0), ack_set,
        )
        consumer.permits -= count
        self.pending[position] = consumer
        consumer.pending_count += 1
