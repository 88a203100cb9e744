"""Delayed delivery on Shared and Key_Shared dispatchers, driven by a manual clock: never before
``deliver_at_time``, in time order, immediate on Exclusive, bounded index with overflow rebuilt
from the log, rebuilt after a restart, and a 100,000-message run within the memory bound."""

from __future__ import annotations

import asyncio
import tracemalloc
from collections.abc import Sequence
from dataclasses import dataclass, field

from magnetar.base.limits import BROKER_DELAYED_INDEX_BYTES_MAX, BROKER_DELAYED_INDEX_ENTRIES_MAX
from magnetar.base.types import EARLIEST, Position
from magnetar.broker import BrokerConfig, Consumer, MemoryLogStore, SubType
from magnetar.broker.dispatcher import Dispatcher
from magnetar.broker.dispatcher_key_shared import KeySharedDispatcher, key_slot
from magnetar.broker.dispatcher_shared import SharedDispatcher
from magnetar.broker.dispatcher_single import SingleActiveDispatcher
from magnetar.broker.log import SubscriptionCursor, TopicLog
from magnetar.protocol.pulsar import headers_and_payload, pb
from tests.broker.fakes import FakeChannel, append
from tests.manual_clock import ManualClock, settle

T0 = ManualClock().now_ms()


@dataclass
class TimedChannel(FakeChannel):
    """Records when (clock ms) each message was sent, and which deliver_at it carried."""

    clock: ManualClock = field(default_factory=ManualClock)
    sent_at: list[tuple[tuple[int, int], int]] = field(default_factory=list)

    def send_message(self, consumer_id: int, ledger_id: int, entry_id: int, partition: int, data: bytes,
                     redelivery_count: int, ack_set: Sequence[int]) -> None:
        super().send_message(consumer_id, ledger_id, entry_id, partition, data, redelivery_count, ack_set)
        self.sent_at.append(((ledger_id, entry_id), self.clock.now_ms()))


def _entry(seq: int, deliver_at_ms: int | None = None, key: str = "") -> bytes:
    metadata = pb.MessageMetadata(producer_name="p", sequence_id=seq, publish_time=T0)
    if deliver_at_ms is not None:
        metadata.deliver_at_time = deliver_at_ms
    if key:
        metadata.partition_key = key
    return headers_and_payload(metadata, b"x")


async def _log(entries: list[bytes], store: MemoryLogStore | None = None) -> tuple[TopicLog, SubscriptionCursor]:
    store = store or MemoryLogStore()
    log = await store.open_log("persistent://public/default/d", create=True)
    for data in entries:
        await append(log, data)
    cursor = await log.open_cursor("s", durable=True, initial_mark_delete=EARLIEST)
    return log, cursor


def _start(kind: type[Dispatcher], log: TopicLog, cursor: SubscriptionCursor, clock: ManualClock,
           channel: TimedChannel, sub_type: SubType, permits: int = 1000, **kwargs: object) -> Dispatcher:
    if kind is SingleActiveDispatcher:
        dispatcher: Dispatcher = SingleActiveDispatcher(log, cursor, BrokerConfig(), -1, failover=False)
    else:
        dispatcher = kind(log, cursor, BrokerConfig(), -1, clock=clock, **kwargs)
    dispatcher.start()
    consumer = Consumer(1, "c", sub_type, channel)
    dispatcher.add_consumer(consumer)
    dispatcher.flow(consumer, permits)
    return dispatcher


async def _close(dispatcher: Dispatcher) -> None:
    assert dispatcher.last_error is None, dispatcher.last_error  # no pass of the loop failed
    await dispatcher.close()


def early_deliveries(channel: TimedChannel, deliver_at: dict[tuple[int, int], int]) -> list[tuple[int, int]]:
    """The checker: ids sent before their deliver_at_time."""
    return [pos for pos, at in channel.sent_at if at < deliver_at.get(pos, 0)]


def test_shared_delivers_each_delayed_message_at_its_time_in_time_order() -> None:
    async def run() -> None:
        clock = ManualClock()
        delays_ms = [300, 100, 200, None, 1]  # entry 3 is not delayed
        log, cursor = await _log([_entry(i, None if d is None else T0 + d) for i, d in enumerate(delays_ms)])
        deliver_at = {(1, i): T0 + d for i, d in enumerate(delays_ms) if d is not None}
        channel = TimedChannel(clock=clock)
        dispatcher = _start(SharedDispatcher, log, cursor, clock, channel, SubType.SHARED)
        await settle()
        assert [pos for pos, _ in channel.sent_at] == [(1, 3)]
        for step_ms in (1, 98, 1, 99, 1, 99, 1):
            await clock.advance(step_ms / 1000)
        assert [pos for pos, _ in channel.sent_at] == [(1, 3), (1, 4), (1, 1), (1, 2), (1, 0)]
        assert [at - T0 for _, at in channel.sent_at] == [0, 1, 100, 200, 300]
        assert early_deliveries(channel, deliver_at) == []
        await _close(dispatcher)

    asyncio.run(run())


def test_negative_control_with_delayed_delivery_off_the_checker_sees_early_messages() -> None:
    async def run() -> None:
        clock = ManualClock()
        log, cursor = await _log([_entry(0, T0 + 500)])
        channel = TimedChannel(clock=clock)
        dispatcher = _start(SharedDispatcher, log, cursor, clock, channel, SubType.SHARED, delayed_enabled=lambda: False)
        await settle()
        assert early_deliveries(channel, {(1, 0): T0 + 500}) == [(1, 0)]
        await _close(dispatcher)

    asyncio.run(run())


def test_exclusive_delivers_delayed_messages_at_once_as_pulsar_does() -> None:
    async def run() -> None:
        clock = ManualClock()
        log, cursor = await _log([_entry(0, T0 + 10_000), _entry(1)])
        channel = TimedChannel(clock=clock)
        dispatcher = _start(SingleActiveDispatcher, log, cursor, clock, channel, SubType.EXCLUSIVE)
        await settle()
        assert [pos for pos, _ in channel.sent_at] == [(1, 0), (1, 1)]
        await _close(dispatcher)

    asyncio.run(run())


def test_key_shared_delays_too_and_other_keys_go_on() -> None:
    async def run() -> None:
        clock = ManualClock()
        log, cursor = await _log([_entry(0, T0 + 50, key="a"), _entry(1, key="a"), _entry(2, key="b")])
        channel = TimedChannel(clock=clock)
        dispatcher = _start(KeySharedDispatcher, log, cursor, clock, channel, SubType.KEY_SHARED)
        await settle()
        assert [pos for pos, _ in channel.sent_at] == [(1, 1), (1, 2)]
        await clock.advance(0.049)
        assert len(channel.sent_at) == 2
        await clock.advance(0.001)
        assert channel.sent_at[-1] == ((1, 0), T0 + 50)
        await _close(dispatcher)

    asyncio.run(run())


def test_due_entries_that_cannot_be_placed_stay_within_the_look_ahead_bound() -> None:
    """Key_Shared: 30 due entries of a key whose consumer has no permits wait; the replay set never
    holds more than dispatch_look_ahead_count_max (5) of them; the rest stay in the index."""

    async def run() -> None:
        clock = ManualClock()
        log, cursor = await _log([_entry(i, T0 + 10, key="a") for i in range(30)])
        config = BrokerConfig(dispatch_look_ahead_count_max=5)
        dispatcher = KeySharedDispatcher(log, cursor, config, -1, clock=clock)
        dispatcher.start()
        channel = TimedChannel(clock=clock)
        blocked, free = Consumer(1, "blocked", SubType.KEY_SHARED, channel), Consumer(2, "free", SubType.KEY_SHARED,
                                                                                       channel)
        dispatcher.add_consumer(blocked)
        dispatcher.add_consumer(free)
        dispatcher.flow(blocked, 1)  # enough to read everything into the index
        await settle()
        assert dispatcher.delayed is not None and len(dispatcher.delayed) == 30
        owner = dispatcher.owner(key_slot(b"a"))
        other = free if owner is blocked else blocked
        owner.permits, other.permits = 0, 100
        await clock.advance(0.02)
        assert len(dispatcher.replay) <= 5 and len(dispatcher.delayed) >= 25 and channel.sent_at == []
        dispatcher.flow(owner, 100)
        await settle()
        assert len(channel.sent_at) == 30
        await _close(dispatcher)

    asyncio.run(run())


def test_seek_forgets_the_index() -> None:
    async def run() -> None:
        clock = ManualClock()
        log, cursor = await _log([_entry(0, T0 + 50)])
        channel = TimedChannel(clock=clock)
        dispatcher = _start(SharedDispatcher, log, cursor, clock, channel, SubType.SHARED)
        await settle()
        assert dispatcher.delayed is not None and len(dispatcher.delayed) == 1
        dispatcher.reset(Position(1, 1))  # seek past it
        await clock.advance(0.1)
        assert channel.sent_at == [] and len(dispatcher.delayed) == 0
        await _close(dispatcher)

    asyncio.run(run())


def test_a_full_index_leaves_entries_in_the_log_and_rebuilds_them_in_time() -> None:
    """Index bound 10, 60 delayed entries (deadlines out of order) plus 20 plain ones: the plain
    ones go at once, the index never holds more than 10, every delayed one arrives at its time."""

    async def run() -> None:
        clock = ManualClock()
        entries, deliver_at = [], {}
        for i in range(80):
            if i % 4 == 3:
                entries.append(_entry(i))
                continue
            at = T0 + 10 + (i * 37) % 200
            entries.append(_entry(i, at))
            deliver_at[(1, i)] = at
        log, cursor = await _log(entries)
        channel = TimedChannel(clock=clock)
        dispatcher = _start(SharedDispatcher, log, cursor, clock, channel, SubType.SHARED,
                            delayed_index_entries_max=10)
        await settle()
        tracker = dispatcher.delayed
        assert tracker is not None
        assert [pos for pos, _ in channel.sent_at] == [(1, i) for i in range(3, 80, 4)]
        assert len(tracker) == 10 and tracker.overflowing
        largest = 0
        for _ in range(250):
            await clock.advance(0.001)
            largest = max(largest, len(tracker))
        assert largest <= 10
        assert sorted(pos for pos, _ in channel.sent_at) == [(1, i) for i in range(80)]
        assert early_deliveries(channel, deliver_at) == []
        assert tracker.overflowed_count > 0 and not tracker.overflowing
        await _close(dispatcher)

    asyncio.run(run())


def test_after_a_restart_the_unacknowledged_delayed_entries_are_indexed_again() -> None:
    async def run() -> None:
        clock = ManualClock()
        store = MemoryLogStore()
        log, cursor = await _log([_entry(0, T0 + 100), _entry(1, T0 + 200), _entry(2)], store)
        channel = TimedChannel(clock=clock)
        first = _start(SharedDispatcher, log, cursor, clock, channel, SubType.SHARED)
        await clock.advance(0.1)
        assert [pos for pos, _ in channel.sent_at] == [(1, 2), (1, 0)]
        await cursor.delete([Position(1, 2), Position(1, 0)])
        await first.close()  # a broker restart: the index is gone
        again = await store.open_log("persistent://public/default/d", create=False)
        cursor2 = await again.open_cursor("s", durable=True, initial_mark_delete=EARLIEST)
        channel2 = TimedChannel(clock=clock)
        second = _start(SharedDispatcher, again, cursor2, clock, channel2, SubType.SHARED)
        await settle()
        assert channel2.sent_at == []
        await clock.advance(0.1)
        assert channel2.sent_at == [((1, 1), T0 + 200)]
        await _close(second)

    asyncio.run(run())


def test_100k_delayed_messages_stay_within_the_index_memory_bound() -> None:
    """100,000 delayed messages (shuffled deadlines 1..100,000 ms ahead) read by one Shared
    subscription: the index's live memory (tracemalloc: what broker/delayed.py allocated and still
    holds) stays below BROKER_DELAYED_INDEX_BYTES_MAX; then the first 200 ms come due, in time."""
    count = 100_000
    assert count <= BROKER_DELAYED_INDEX_ENTRIES_MAX

    def deadline(entry_id: int) -> int:
        return T0 + 1 + (entry_id * 7919) % count

    async def run() -> tuple[int, int, list[tuple[tuple[int, int], int]]]:
        clock = ManualClock()
        store = MemoryLogStore()
        log = await store.open_log("persistent://public/default/d", create=True)
        for i in range(count):
            await append(log, _entry(i, deadline(i)))
        cursor = await log.open_cursor("s", durable=True, initial_mark_delete=EARLIEST)
        channel = TimedChannel(clock=clock)
        tracemalloc.start()
        try:
            dispatcher = _start(SharedDispatcher, log, cursor, clock, channel, SubType.SHARED)
            for _ in range(count):  # bounded: one read of 100 entries per round at least
                if dispatcher.read_position > log.last_position:
                    break
                await settle(20)
            indexed = len(dispatcher.delayed or ())
            snapshot = tracemalloc.take_snapshot()
        finally:
            tracemalloc.stop()
        index_bytes = sum(s.size for s in snapshot.filter_traces(
            [tracemalloc.Filter(True, "*broker/delayed.py")]).statistics("filename"))
        for _ in range(200):
            await clock.advance(0.001)
        await _close(dispatcher)
        return indexed, index_bytes, channel.sent_at

    indexed, index_bytes, sent_at = asyncio.run(run())
    print(f"delayed index: {indexed} entries, {index_bytes} bytes ({index_bytes / indexed:.1f} B/entry), "
          f"bound {BROKER_DELAYED_INDEX_BYTES_MAX}")
    assert indexed == count
    assert index_bytes < BROKER_DELAYED_INDEX_BYTES_MAX
    assert len(sent_at) == 200
    assert [at for (_, entry_id), at in sent_at] == [deadline(entry_id) for (_, entry_id), _ in sent_at]
    assert [at for _, at in sent_at] == sorted(at for _, at in sent_at)
