"""A new entry goes to its consumer in the loop pass its add completed (issue 22, e2e latency):
``Dispatcher.entries_added`` sends it from the log's cache when the dispatcher's task is idle,
with the same ``_send`` as the task's pass, and wakes the task for everything else. In-memory
log, recording fake channel, no sockets; one loop pass is ``next_loop_pass`` (no time passes)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from magnetar.base.entry import Entry
from magnetar.base.types import EARLIEST, Position
from magnetar.broker import BrokerConfig, Consumer, MemoryLogStore, SubType
from magnetar.broker.dispatcher import next_loop_pass
from magnetar.broker.subscription import Subscription
from tests.broker.fakes import FakeChannel, append, entry, settle
from tests.broker.test_dispatchers import _keys_in_halves, _sticky_pair


class _NoCacheLog:
    """A log without ``read_cached`` (reads only through ``read``): the path before this change."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner

    def __getattr__(self, name: str) -> Any:
        if name == "read_cached":
            raise AttributeError(name)
        return getattr(self._inner, name)

    @property
    def last_position(self) -> Position:
        return self._inner.last_position  # type: ignore[no-any-return]

    async def read(self, start: Position, count_max: int) -> list[Entry]:
        return await self._inner.read(start, count_max)  # type: ignore[no-any-return]


async def _exclusive(*, cached: bool = True, entries: Sequence[bytes] = ()) -> tuple[Subscription, Any, FakeChannel,
                                                                                      Consumer]:
    log = await MemoryLogStore().open_log("persistent://public/default/t", create=True)
    for data in entries:
        await append(log, data)
    cursor = await log.open_cursor("s", durable=True, initial_mark_delete=EARLIEST)
    sub = Subscription("s", log if cached else _NoCacheLog(log), cursor, BrokerConfig(), -1, lambda _s: None)
    channel = FakeChannel()
    consumer = Consumer(1, "c", SubType.EXCLUSIVE, channel)
    sub.add_consumer(consumer)
    return sub, log, channel, consumer


def test_a_new_entry_is_sent_in_the_call_that_tells_of_its_add() -> None:
    async def run() -> None:
        sub, log, channel, consumer = await _exclusive(entries=[entry(sequence_id=0)])
        sub.flow(consumer, 10)
        await settle()  # the backlog goes through the task; then it waits, idle
        assert [pos for _, pos, _ in channel.messages] == [(1, 0)]
        for i in (1, 2):
            await append(log, entry(sequence_id=i))
            sub.notify_entries_added()  # the topic's call when the add completed
            # Sent before this call returned: no loop pass, no task wake-up in between.
            assert [pos for _, pos, _ in channel.messages] == [(1, e) for e in range(i + 1)]
        dispatcher = sub.dispatcher
        assert dispatcher is not None and dispatcher.sent_at_add_count == 2
        assert consumer.permits == 7 and len(dispatcher.pending) == 3
        await next_loop_pass()
        assert len(channel.messages) == 3  # nothing sent twice by the task
        await sub.close(delete=False)

    asyncio.run(run())


def test_control_without_a_cache_read_the_task_sends_it_a_pass_later() -> None:
    # Negative control: the same steps over a log without ``read_cached`` send nothing from
    # the call; the task's wake-up does, in a later pass (so the check above can fail).
    async def run() -> None:
        sub, log, channel, consumer = await _exclusive(cached=False, entries=[entry(sequence_id=0)])
        sub.flow(consumer, 10)
        await settle()
        await append(log, entry(sequence_id=1))
        sub.notify_entries_added()
        assert [pos for _, pos, _ in channel.messages] == [(1, 0)]
        await settle()
        assert [pos for _, pos, _ in channel.messages] == [(1, 0), (1, 1)]
        assert sub.dispatcher is not None and sub.dispatcher.sent_at_add_count == 0
        await sub.close(delete=False)

    asyncio.run(run())


def test_without_permits_nothing_is_sent_at_add_and_a_flow_sends_it_in_order() -> None:
    async def run() -> None:
        sub, log, channel, consumer = await _exclusive()
        sub.flow(consumer, 1)
        await settle()
        await append(log, entry(sequence_id=0))
        sub.notify_entries_added()
        await append(log, entry(sequence_id=1))
        sub.notify_entries_added()  # no permits left: the task is woken instead
        await settle()
        assert [pos for _, pos, _ in channel.messages] == [(1, 0)]
        sub.flow(consumer, 5)
        await settle()
        assert [pos for _, pos, _ in channel.messages] == [(1, 0), (1, 1)]
        await sub.close(delete=False)

    asyncio.run(run())


def test_a_redelivery_waiting_for_the_task_goes_before_a_new_entry() -> None:
    async def run() -> None:
        sub, log, channel, consumer = await _exclusive(entries=[entry(sequence_id=i) for i in range(2)])
        sub.flow(consumer, 10)
        await settle()
        assert sub.dispatcher is not None
        await append(log, entry(sequence_id=2))  # stored; its completion is told below
        sub.dispatcher.redeliver(consumer, None)  # wakes the task: replay holds 0 and 1
        sub.notify_entries_added()  # the task is due: not sent from here
        assert [pos for _, pos, _ in channel.messages] == [(1, 0), (1, 1)]
        await settle()
        assert [(pos, redeliveries) for _, pos, redeliveries in channel.messages] == [
            ((1, 0), 0), ((1, 1), 0), ((1, 0), 1), ((1, 1), 1), ((1, 2), 0)]
        await sub.close(delete=False)

    asyncio.run(run())


def test_key_shared_a_held_key_is_not_overtaken_by_its_new_entry() -> None:
    async def run() -> None:
        low, high = _keys_in_halves()
        sub, channel, a, b = await _sticky_pair([low, high])
        sub.flow(b, 100)  # a (the low key's consumer) has no permits: its entry is held in replay
        await settle()
        dispatcher = sub.dispatcher
        assert dispatcher is not None and dispatcher.replay == [Position(1, 0)]
        log = sub.log
        await append(log, entry(key=low, sequence_id=2))
        sub.notify_entries_added()
        await append(log, entry(key=high, sequence_id=3))
        sub.notify_entries_added()
        await settle()
        assert [pos for cid, pos, _ in channel.messages if cid == 2] == [(1, 1), (1, 3)]
        sub.flow(a, 10)
        await settle()
        assert [pos for cid, pos, _ in channel.messages if cid == 1] == [(1, 0), (1, 2)]  # in key order
        await sub.close(delete=False)

    asyncio.run(run())


def test_shared_consumers_share_entries_sent_at_add_round_robin() -> None:
    async def run() -> None:
        log = await MemoryLogStore().open_log("persistent://public/default/t", create=True)
        cursor = await log.open_cursor("s", durable=True, initial_mark_delete=EARLIEST)
        sub = Subscription("s", log, cursor, BrokerConfig(), -1, lambda _s: None)
        channel = FakeChannel()
        a, b = Consumer(1, "a", SubType.SHARED, channel), Consumer(2, "b", SubType.SHARED, channel)
        sub.add_consumer(a)
        sub.add_consumer(b)
        sub.flow(a, 2)
        sub.flow(b, 2)
        await settle()
        for i in range(5):
            await append(log, entry(sequence_id=i))
            sub.notify_entries_added()
        assert sorted(cid for cid, _, _ in channel.messages) == [1, 1, 2, 2]  # permits hold
        assert [pos for _, pos, _ in channel.messages] == [(1, i) for i in range(4)]
        assert sub.dispatcher is not None and sub.dispatcher.sent_at_add_count == 4
        sub.flow(a, 1)
        await settle()
        assert [pos for _, pos, _ in channel.messages][-1] == (1, 4)
        await sub.close(delete=False)

    asyncio.run(run())
