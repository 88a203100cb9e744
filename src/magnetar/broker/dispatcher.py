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
* Ordered groups: a policy may put entries into a *group* (Key_Shared: the key's hash slot; Shared:
  the chunks of one chunked message). Entries of one group are sent in log order: an entry is
  never sent while an earlier entry of its group waits in ``replay``. A policy with
  ``skip_blocked`` (Shared, Key_Shared) does not stall on an entry it cannot place: the entry is
  held in ``replay`` and the pass goes on with other groups, up to ``look_ahead_count_max`` held
  entries (Pulsar's keySharedLookAheadMsgInReplayThreshold); beyond it reading pauses. A policy
  without it (Exclusive, Failover) stops the pass at that entry (head-of-line).
* After ``reset`` (seek) or ``rewind`` nothing read before it is sent: ``_epoch`` discards reads
  that were in flight.
* Delayed delivery (``supports_delayed`` policies, with a clock): a new entry whose
  ``deliver_at_time`` is still ahead goes to ``delayed`` (``broker/delayed.py``) instead of a
  consumer; when due it joins the replay set. One timer (``Clock.sleep``) wakes the loop at the
  earliest deadline; nothing waits on the real clock.
* Markers (entries with ``marker_type``: replicated subscriptions' snapshots and updates) are never
  sent; the pass acknowledges them individually on the cursor, before any delay check (a marker is
  never held in the delayed index or in replay), so they never leave a hole that stalls the
  mark-delete position.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import logging
from collections.abc import Callable, Iterable, Sequence

from magnetar.base.clock import Clock
from magnetar.base.entry import Entry
from magnetar.base.errors import CorruptDataError
from magnetar.base.limits import (
    BROKER_DELAYED_INDEX_ENTRIES_MAX,
    BROKER_DELAYED_REBUILD_READ_COUNT,
    BROKER_DISPATCH_YIELD_ENTRIES_COUNT,
)
from magnetar.base.types import Position
from magnetar.broker.config import BrokerConfig
from magnetar.broker.consumer import Consumer
from magnetar.broker.delayed import DelayedDeliveryTracker, delayed_delivery_switch
from magnetar.broker.log import SubscriptionCursor, TopicLog
from magnetar.protocol.pulsar import pb, stored_entry_metadata

log = logging.getLogger(__name__)


async def next_loop_pass() -> None:
    """Return in a later event-loop pass: the callbacks ready now (other connections' reads, the
    journal's answers, receipts) run first. No time passes and no clock is involved (a test's
    manual clock need not move): a future the loop resolves in its next pass."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[None] = loop.create_future()
    loop.call_soon(_resolve, future)
    await future


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():  # not cancelled meanwhile
        future.set_result(None)


class Dispatcher:
    """Base class; subclasses define ``select`` and how consumers join, leave and ask for redelivery."""

    #: Hold an entry that cannot be placed and go on with other groups (see the module docstring).
    skip_blocked = False
    #: Honour deliver_at_time (Shared, Key_Shared); the others deliver at once, as Pulsar does.
    supports_delayed = False

    def __init__(self, topic_log: TopicLog, cursor: SubscriptionCursor, config: BrokerConfig,
                 partition_index: int, *, clock: Clock | None = None,
                 delayed_enabled: Callable[[], bool] | None = None,
                 delayed_index_entries_max: int = BROKER_DELAYED_INDEX_ENTRIES_MAX) -> None:
        self.log = topic_log
        self.clock = clock
        self.delayed: DelayedDeliveryTracker | None = (
            DelayedDeliveryTracker(delayed_index_entries_max) if clock is not None and self.supports_delayed else None)
        self._delayed_enabled = delayed_enabled or delayed_delivery_switch(config)
        self._timer: asyncio.Task[None] | None = None
        self._timer_deadline_ms = 0
        self.cursor = cursor
        self.config = config
        self.partition_index = partition_index
        self.consumers: list[Consumer] = []
        self.pending: dict[Position, Consumer] = {}
        self.replay: list[Position] = []  # sorted
        self.groups: dict[Position, object] = {}  # group of each pending or replayed entry that has one
        self.replay_groups: dict[object, int] = {}  # group -> how many of its entries wait in replay
        self.redelivery_counts: dict[Position, int] = {}
        self._marker_acks: list[Position] = []  # markers skipped by ``_send``, acknowledged after it
        self._read_past: Position | None = None  # the last entry ``_send`` read past (see there)
        self.read_position = cursor.mark_delete_position.next()
        self._epoch = 0
        self._wake = asyncio.Event()
        self._closed = False
        self._task: asyncio.Task[None] | None = None
        #: The task waits for a wake with nothing of its own in progress (no read, no yield):
        #: ``entries_added`` may then send new entries from the cache in the caller's pass.
        self._idle = False
        #: The log's synchronous cache read (``TopicLog.read_cached``), where it has one.
        self._read_cached: Callable[[Position, int], list[Entry] | None] | None = getattr(
            topic_log, "read_cached", None)
        #: Entries sent by ``entries_added`` in the pass their add completed, ever (tests, stats).
        self.sent_at_add_count = 0
        self.last_error: BaseException | None = None
        self.delivered_count = 0  # entries sent to consumers (MESSAGE frames), ever
        #: Told (messages, bytes) of every entry sent to a consumer (the subscription's out-rate).
        self.on_deliver: Callable[[int, int], None] | None = None

    # --- lifecycle ---------------------------------------------------------------------------

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(), name=f"dispatch:{self.cursor.name}")

    async def close(self) -> None:
        self._closed = True
        self._wake.set()
        self._cancel_timer()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    def wake(self) -> None:
        self._wake.set()

    def entries_added(self) -> None:
        """The log has new entries (an add completed). When the task is idle (waiting for a wake,
        no read or yield of its own under way), nothing waits in replay or the delayed index and
        the entries are in the log's cache, they are sent from here, in the pass their add
        completed: the MESSAGE is queued before the producer's receipt and leaves with it in one
        socket write, with no task wake-up (a future, a loop pass) in between. The same ``_send``
        as the task's pass decides, so ordering, permits, groups and redelivery are unchanged;
        anything it leaves (no permits, a held entry, a marker, more than one read) wakes the
        task as before."""
        if self._idle and not self._wake.is_set() and self._read_cached is not None and self._fast_path_open():
            try:
                self._send_cached(self._read_cached)
            except Exception as error:  # a bug must not reach the producer's receipt: the task retries
                self.last_error = error
                log.warning("dispatch on %s at add failed: %s", self.cursor.name, error)
                self.wake()
            return
        self.wake()

    def _fast_path_open(self) -> bool:
        delayed = self.delayed
        return (not self._closed and not self.replay and not self._marker_acks
                and (delayed is None or (not len(delayed) and not delayed.overflowing))
                and self.read_position <= self.log.last_position and self._may_dispatch())

    def _send_cached(self, read_cached: Callable[[Position, int], list[Entry] | None]) -> None:
        entries = read_cached(self.read_position, self.config.dispatch_read_count_max)
        if not entries:  # not (all) in the cache: the task reads them
            self.wake()
            return
        delivered = self.delivered_count
        self._send(entries, replay=False)
        self.sent_at_add_count += self.delivered_count - delivered
        delayed = self.delayed
        if (self._marker_acks or self.read_position <= self.log.last_position
                or (delayed is not None and len(delayed))):
            self.wake()  # markers to acknowledge, entries left, a delay timer to arm: the task's pass

    # --- policy hooks ---------------------------------------------------------------------------

    def select(self, entry: Entry, metadata: pb.MessageMetadata) -> Consumer | None:
        raise TypeError(f"{type(self).__name__} must define select()")

    def group_of(self, entry: Entry, metadata: pb.MessageMetadata) -> object | None:
        """The ordered group of an entry, or None if it may be sent in any order."""
        return None

    def group_ready(self, group: object) -> bool:
        """Cheap pre-check before reading a replayed entry of ``group``: could ``select`` place it?"""
        return True

    @property
    def look_ahead_count_max(self) -> int:
        return self.config.dispatch_look_ahead_count_max

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
        """Individual acks: the entries leave ``pending`` (one wake for all of them). The common
        case, no redelivery counts and no groups, is one dict pop per entry."""
        if self.redelivery_counts or self.groups:
            for position in positions:
                self._forget(position)
        else:
            pending = self.pending
            for position in positions:
                consumer = pending.pop(position, None)
                if consumer is not None:
                    consumer.pending_count -= 1
        self.wake()

    def acknowledged_cumulative(self, position: Position) -> None:
        for pending in [p for p in self.pending if p <= position]:
            self._forget(pending)
        index = bisect.bisect_right(self.replay, position)
        for replayed in self.replay[:index]:
            self.redelivery_counts.pop(replayed, None)
            self._replay_discard(replayed)
        self.wake()

    def reset(self, read_position: Position) -> None:
        """Seek: forget everything in flight and read from ``read_position``."""
        for consumer in self.consumers:
            consumer.pending_count = 0
        self.pending.clear()
        self._replay_clear()
        self.redelivery_counts.clear()
        if self.delayed is not None:
            self.delayed.clear()
            self._cancel_timer()
        self.read_position = read_position
        self._epoch += 1
        self.wake()

    def rewind(self, *, count: bool) -> None:
        """Send everything unacknowledged again, from just after the mark-delete position."""
        for position in list(self.pending):
            if count:
                self._count_redelivery(position)
            self._forget(position, keep_count=True)
        self._replay_clear()
        self.read_position = self.cursor.mark_delete_position.next()
        self._epoch += 1
        self.wake()

    # --- bookkeeping ----------------------------------------------------------------------------

    def _forget(self, position: Position, *, keep_count: bool = False) -> None:
        consumer = self.pending.pop(position, None)
        if consumer is not None:
            consumer.pending_count -= 1
        if not keep_count and self.redelivery_counts:
            self.redelivery_counts.pop(position, None)
        if self.groups and position in self.groups and not self._in_replay(position):
            del self.groups[position]

    def _in_replay(self, position: Position) -> bool:
        index = bisect.bisect_left(self.replay, position)
        return index < len(self.replay) and self.replay[index] == position

    def _replay_add(self, position: Position, group: object | None = None) -> None:
        """Put ``position`` in the replay set; its group is ``group`` or the one it was sent with."""
        index = bisect.bisect_left(self.replay, position)
        if index < len(self.replay) and self.replay[index] == position:
            return
        self.replay.insert(index, position)
        if group is not None:
            self.groups[position] = group
        group = self.groups.get(position)
        if group is not None:
            self.replay_groups[group] = self.replay_groups.get(group, 0) + 1

    def _replay_discard(self, position: Position) -> None:
        index = bisect.bisect_left(self.replay, position)
        if index == len(self.replay) or self.replay[index] != position:
            return
        del self.replay[index]
        group = self.groups.get(position)
        if group is not None:
            left = self.replay_groups[group] - 1
            if left:
                self.replay_groups[group] = left
            else:
                del self.replay_groups[group]
            if position not in self.pending:
                del self.groups[position]

    def _replay_clear(self) -> None:
        self.replay.clear()
        self.replay_groups.clear()
        for position in [p for p in self.groups if p not in self.pending]:
            del self.groups[position]

    def _count_redelivery(self, position: Position) -> None:
        counts = self.redelivery_counts
        counts[position] = counts.pop(position, 0) + 1
        while len(counts) > self.config.redelivery_tracker_count_max:
            del counts[next(iter(counts))]

    def _to_replay(self, position: Position, *, count: bool) -> None:
        if count:
            self._count_redelivery(position)
        self._replay_add(position)  # first, so that forgetting the pending entry keeps its group
        self._forget(position, keep_count=True)

    def _replay_pending_of(self, consumer: Consumer, *, count: bool) -> None:
        for position in [p for p, c in self.pending.items() if c is consumer]:
            self._to_replay(position, count=count)

    # --- the loop -------------------------------------------------------------------------------

    async def _run(self) -> None:
        while not self._closed:
            self._wake.clear()
            delivered = self.delivered_count
            try:
                progressed = await self.dispatch_once()
            except asyncio.CancelledError:
                raise
            except Exception as error:  # a failed read: wait for the next event and try again
                self.last_error = error
                log.warning("dispatch on %s failed: %s", self.cursor.name, error)
                progressed = False
            if not progressed:
                self._arm_timer()
                self._idle = True
                try:
                    await self._wake.wait()
                finally:
                    self._idle = False
            elif self.delivered_count - delivered >= BROKER_DISPATCH_YIELD_ENTRIES_COUNT:
                # A read from the cache does not suspend: without this, a consumer's permits over a
                # backlog (1,000 entries: ~7 ms compiled) went out in one callback of the loop.
                await next_loop_pass()

    def _may_dispatch(self) -> bool:
        if len(self.pending) >= self.config.pending_acks_per_subscription_max:
            return False
        return any(c.can_receive() for c in self.consumers)

    async def dispatch_once(self) -> bool:
        """One read-and-send pass; True if anything was sent, held or skipped (call again)."""
        if not self._may_dispatch():
            return False
        epoch = self._epoch
        if self.delayed is not None:
            self._release_due()
            if self.delayed.may_rebuild() and await self._rebuild_delayed(epoch):
                return True
        if self.replay:
            batch = self._replay_batch()
            if batch:
                entries, dropped = await self._read_replay(batch)
                if epoch != self._epoch:
                    return True
                if self._send(entries, replay=True) or dropped:
                    return True
            # What waits in replay cannot be placed now: a skipping policy looks further ahead.
            if not self.skip_blocked or len(self.replay) >= self.look_ahead_count_max:
                return False
        if self.read_position > self.log.last_position:
            return False
        entries = await self.log.read(self.read_position, self.config.dispatch_read_count_max)
        if epoch != self._epoch:
            return True
        if not entries:
            return False
        sent = self._send(entries, replay=False)
        if self._marker_acks:
            markers, self._marker_acks = self._marker_acks, []
            await self.cursor.delete(markers)
        return sent

    def _replay_batch(self) -> list[Position]:
        """Up to one read's worth of replayed positions, leaving out groups that cannot be placed."""
        out: list[Position] = []
        skipped: set[object] = set()
        for position in self.replay:
            group = self.groups.get(position)
            if group is not None and (group in skipped or not self.group_ready(group)):
                skipped.add(group)
                continue
            out.append(position)
            if len(out) >= self.config.dispatch_read_count_max:
                break
        return out

    async def _read_replay(self, positions: list[Position]) -> tuple[list[Entry], bool]:
        out: list[Entry] = []
        dropped = False
        for position in positions:
            found = await self.log.read(position, 1)
            if found and found[0].position == position:
                out.append(found[0])
            else:  # trimmed or never existed: nothing to redeliver
                self._replay_discard(position)
                dropped = True
        return out, dropped

    def _advance(self, entry: Entry, replay: bool) -> None:
        if replay:
            self._replay_discard(entry.position)
        else:
            self._read_past = entry.position  # ``_send`` moves ``read_position`` after it once

    def _hold(self, entry: Entry, group: object, replay: bool) -> bool:
        """Keep an entry that cannot be sent now for later; False if the look-ahead is full."""
        if replay:
            return True  # it stays where it is
        if len(self.replay) >= self.look_ahead_count_max:
            return False
        self._replay_add(entry.position, group)
        self._read_past = entry.position
        return True

    def _send(self, entries: list[Entry], *, replay: bool) -> bool:
        """Send what ``entries`` (read in log order) allow; True if anything was sent, held or
        skipped. ``read_position`` moves once, past the last entry read past (one ``Position``
        per pass instead of one per entry)."""
        try:
            return self._send_entries(entries, replay)
        finally:
            past, self._read_past = self._read_past, None
            if past is not None:
                self.read_position = past.next()

    def _send_entries(self, entries: list[Entry], replay: bool) -> bool:
        progressed = False
        blocked: set[object] = set()  # groups with an entry this pass could not send
        for entry in entries:
            if len(self.pending) >= self.config.pending_acks_per_subscription_max:
                break
            position = entry.position
            if self.cursor.is_acked(position) or (not replay and position in self.pending):
                self._advance(entry, replay)
                progressed = True
                continue
            try:
                metadata = stored_entry_metadata(entry.payload)
            except CorruptDataError as error:
                log.error("skipping unreadable entry %s on %s: %s", position, self.cursor.name, error)
                self._advance(entry, replay)
                progressed = True
                continue
            if metadata.marker_type:  # never delivered: acknowledged here, so it holds no position back
                self._marker_acks.append(position)
                self._advance(entry, replay)
                progressed = True
                continue
            if not replay and self._delay(position, metadata):
                self._advance(entry, replay)  # indexed, or left in the log for a rebuild
                progressed = True
                continue
            group = self.group_of(entry, metadata)
            if replay and group is not None and position not in self.groups:
                self._adopt_group(position, group)  # a due delayed entry joined replay without one
            if group is not None and (group in blocked or (not replay and group in self.replay_groups)):
                # An earlier entry of this group waits: sending this one would overtake it.
                if not self._hold(entry, group, replay):
                    break
                progressed = progressed or not replay
                continue
            consumer = self.select(entry, metadata)
            if consumer is None:
                if group is None or not self.skip_blocked:
                    break
                blocked.add(group)
                if not self._hold(entry, group, replay):
                    break
                progressed = progressed or not replay
                continue
            self._deliver(consumer, entry, metadata, group)
            self._advance(entry, replay)
            progressed = True
        return progressed

    def _deliver(self, consumer: Consumer, entry: Entry, metadata: pb.MessageMetadata,
                 group: object | None = None) -> None:
        position = entry.position
        if metadata.HasField("num_messages_in_batch"):
            count = max(1, metadata.num_messages_in_batch)
            ack_set: Sequence[int] = self.cursor.batch_ack_set(position, count) or ()
        else:
            count, ack_set = 1, ()
        redeliveries = self.redelivery_counts.get(position, 0) if self.redelivery_counts else 0
        consumer.channel.send_message(consumer.consumer_id, position.ledger_id, position.entry_id, self.partition_index,
                                      entry.payload, redeliveries, ack_set)
        consumer.permits -= count
        if self.on_deliver is not None:
            self.on_deliver(count, len(entry.payload))
        self.pending[position] = consumer
        consumer.pending_count += 1
        self.delivered_count += 1
        if group is not None:
            self.groups[position] = group

    # --- delayed delivery -----------------------------------------------------------------------

    def _delay(self, position: Position, metadata: pb.MessageMetadata) -> bool:
        """True if the entry is not due yet: it went to the delayed index (or overflowed)."""
        if self.delayed is None or self.clock is None or not metadata.HasField("deliver_at_time"):
            return False
        if metadata.deliver_at_time <= self.clock.now_ms() or not self._delayed_enabled():
            return False
        self.delayed.add(position, metadata.deliver_at_time)
        return True

    def _adopt_group(self, position: Position, group: object) -> None:
        """Count a replayed entry in its group, learnt only now that it was read."""
        self.groups[position] = group
        self.replay_groups[group] = self.replay_groups.get(group, 0) + 1

    def _release_due(self) -> None:
        """Due entries join the replay set, which stays within the look-ahead bound."""
        assert self.delayed is not None and self.clock is not None
        room = min(self.config.dispatch_read_count_max, self.look_ahead_count_max - len(self.replay))
        if room <= 0:
            return
        for position in self.delayed.pop_due(self.clock.now_ms(), room):
            self._replay_add(position)

    async def _rebuild_delayed(self, epoch: int) -> bool:
        """One bounded pass over entries left out of a full index (see ``broker/delayed.py``)."""
        tracker = self.delayed
        assert tracker is not None and tracker.overflow_from is not None
        entries = await self.log.read(tracker.overflow_from, BROKER_DELAYED_REBUILD_READ_COUNT)
        if epoch != self._epoch:
            return True
        resume: Position | None = None
        for entry in entries:
            position = entry.position
            if position >= self.read_position:
                resume = None
                break
            resume = position.next()
            if self.cursor.is_acked(position) or position in self.pending or self._in_replay(position):
                continue
            try:
                metadata = stored_entry_metadata(entry.payload)
            except CorruptDataError:
                continue
            if not metadata.HasField("deliver_at_time"):
                continue
            if not tracker.add_rebuilt(position, metadata.deliver_at_time):
                resume = position
                break
        if resume is not None and resume >= self.read_position:
            resume = None
        tracker.rebuild_done(resume)
        return True

    def _arm_timer(self) -> None:
        """Wake the loop at the earliest delayed deadline (nothing to do if none is ahead)."""
        tracker, clock = self.delayed, self.clock
        if tracker is None or clock is None or self._closed:
            return
        deadline = tracker.next_deliver_at_ms()
        if deadline is None or deadline <= clock.now_ms():
            return  # nothing ahead, or due already: permits and acks wake the loop
        if self._timer is not None and not self._timer.done() and self._timer_deadline_ms <= deadline:
            return
        self._cancel_timer()
        self._timer_deadline_ms = deadline
        self._timer = asyncio.get_running_loop().create_task(self._sleep_until(clock, deadline),
                                                             name=f"delayed:{self.cursor.name}")

    async def _sleep_until(self, clock: Clock, deadline_ms: int) -> None:
        await clock.sleep(max(0, deadline_ms - clock.now_ms()) / 1000)
        self.wake()

    def _cancel_timer(self) -> None:
        timer, self._timer = self._timer, None
        if timer is not None and not timer.done():
            timer.cancel()
