"""Dispatchers and subscriptions over the in-memory log with recording fake channels (no sockets)."""

from __future__ import annotations

import asyncio

from magnetar.base.types import EARLIEST, Position
from magnetar.broker import BrokerConfig, Consumer, MemoryLogStore, SubType
from magnetar.broker.subscription import Subscription
from magnetar.protocol.pulsar import pb
from tests.broker.fakes import FakeChannel, entry, settle


async def _subscription(entries: list[bytes], config: BrokerConfig | None = None) -> tuple[Subscription, object]:
    store = MemoryLogStore()
    log = await store.open_log("persistent://public/default/t", create=True)
    for data in entries:
        await log.append(data)
    cursor = await log.open_cursor("s", durable=True, initial_mark_delete=EARLIEST)
    return Subscription("s", log, cursor, config or BrokerConfig(), -1, lambda _s: None), log


def _consumer(cid: int, sub_type: SubType, channel: FakeChannel, name: str = "") -> Consumer:
    return Consumer(cid, name or f"c{cid}", sub_type, channel)


def test_shared_round_robin_respects_permits() -> None:
    async def run() -> None:
        sub, _ = await _subscription([entry(sequence_id=i) for i in range(10)])
        channel = FakeChannel()
        a, b = _consumer(1, SubType.SHARED, channel), _consumer(2, SubType.SHARED, channel)
        sub.add_consumer(a)
        sub.add_consumer(b)
        sub.flow(a, 3)
        sub.flow(b, 2)
        await settle()
        by_consumer = [cid for cid, _, _ in channel.messages]
        assert by_consumer.count(1) == 3 and by_consumer.count(2) == 2
        assert [pos for _, pos, _ in channel.messages] == [(1, i) for i in range(5)]  # log order
        assert a.permits == 0 and b.permits == 0
        await sub.close(delete=False)

    asyncio.run(run())


def test_batch_entry_costs_its_message_count_in_permits() -> None:
    async def run() -> None:
        sub, _ = await _subscription([entry(batch=4), entry(batch=4)])
        channel = FakeChannel()
        c = _consumer(1, SubType.EXCLUSIVE, channel)
        sub.add_consumer(c)
        sub.flow(c, 4)
        await settle()
        assert len(channel.messages) == 1 and c.permits == 0
        await sub.close(delete=False)

    asyncio.run(run())


def test_nothing_is_sent_to_an_unwritable_connection() -> None:
    async def run() -> None:
        sub, _ = await _subscription([entry(sequence_id=i) for i in range(3)])
        channel = FakeChannel(can_write=False)
        c = _consumer(1, SubType.EXCLUSIVE, channel)
        sub.add_consumer(c)
        sub.flow(c, 10)
        await settle()
        assert channel.messages == []
        channel.can_write = True
        assert sub.dispatcher is not None
        sub.dispatcher.wake()
        await settle()
        assert len(channel.messages) == 3
        await sub.close(delete=False)

    asyncio.run(run())


def test_exclusive_redeliver_all_rewinds_and_counts() -> None:
    async def run() -> None:
        sub, _ = await _subscription([entry(sequence_id=i) for i in range(3)])
        channel = FakeChannel()
        c = _consumer(1, SubType.EXCLUSIVE, channel)
        sub.add_consumer(c)
        sub.flow(c, 10)
        await settle()
        ack = pb.CommandAck(consumer_id=1, ack_type=pb.CommandAck.Individual)
        await sub.acknowledge(ack, [(Position(1, 1), [])])
        sub.redeliver(c, [])
        await settle()
        again = channel.messages[3:]
        assert [(pos, count) for _, pos, count in again] == [((1, 0), 1), ((1, 2), 1)]  # acked 1:1 skipped
        await sub.close(delete=False)

    asyncio.run(run())


def test_shared_consumer_leaving_gives_its_unacked_to_the_other() -> None:
    async def run() -> None:
        sub, _ = await _subscription([entry(sequence_id=i) for i in range(4)])
        channel = FakeChannel()
        a, b = _consumer(1, SubType.SHARED, channel), _consumer(2, SubType.SHARED, channel)
        sub.add_consumer(a)
        sub.flow(a, 4)
        await settle()
        sub.add_consumer(b)
        await sub.remove_consumer(a)
        sub.flow(b, 10)
        await settle()
        assert sorted(pos for cid, pos, _ in channel.messages if cid == 2) == [(1, i) for i in range(4)]
        await sub.close(delete=False)

    asyncio.run(run())


def test_failover_announces_the_active_consumer() -> None:
    async def run() -> None:
        sub, _ = await _subscription([])
        channel = FakeChannel()
        a, b = _consumer(1, SubType.FAILOVER, channel, "a"), _consumer(2, SubType.FAILOVER, channel, "b")
        sub.add_consumer(a)
        sub.add_consumer(b)
        await sub.remove_consumer(a)
        assert channel.active_changes == [(1, True), (2, False), (2, True)]
        await sub.close(delete=False)

    asyncio.run(run())


def test_key_shared_routes_keys_stickily_and_holds_a_new_consumer_back() -> None:
    async def run() -> None:
        keys = [f"k{i % 5}" for i in range(20)]
        sub, _log = await _subscription([entry(key=k, sequence_id=i) for i, k in enumerate(keys)])
        channel = FakeChannel()
        a = _consumer(1, SubType.KEY_SHARED, channel, "a")
        sub.add_consumer(a)
        sub.flow(a, 5)  # a takes the first five entries (if all its keys), leaving them unacked
        await settle()
        b = _consumer(2, SubType.KEY_SHARED, channel, "b")
        sub.add_consumer(b)
        sub.flow(b, 100)
        sub.flow(a, 100)
        await settle()
        assert sub.dispatcher is not None
        joined_at = Position(1, 5)
        # b gets nothing at or after where it joined while a still holds unacked earlier entries
        assert all(pos < (joined_at.ledger_id, joined_at.entry_id) for cid, pos, _ in channel.messages if cid == 2)
        ack = pb.CommandAck(consumer_id=1, ack_type=pb.CommandAck.Individual)
        await sub.acknowledge(ack, [(Position(1, i), []) for i in range(5)])
        await settle()
        owners: dict[str, set[int]] = {}
        for cid, (_, entry_id), _ in channel.messages:
            if entry_id >= 5:
                owners.setdefault(keys[entry_id], set()).add(cid)
        assert len(channel.messages) == 20
        assert all(len(o) == 1 for o in owners.values())  # after the handover each key has one owner
        assert {cid for o in owners.values() for cid in o} == {1, 2}  # and both consumers own keys
        await sub.close(delete=False)

    asyncio.run(run())


def test_seek_sends_close_consumer_and_moves_the_cursor() -> None:
    async def run() -> None:
        sub, _ = await _subscription([entry(sequence_id=i) for i in range(5)])
        channel = FakeChannel()
        c = _consumer(1, SubType.EXCLUSIVE, channel)
        sub.add_consumer(c)
        sub.flow(c, 10)
        await settle()
        detached = await sub.reset(Position(1, 2))
        assert detached == [c] and channel.closed_consumers == [1]
        assert sub.cursor.mark_delete_position == Position(1, 2)
        c2 = _consumer(1, SubType.EXCLUSIVE, channel)
        sub.add_consumer(c2)
        sub.flow(c2, 10)
        await settle()
        assert [pos for _, pos, _ in channel.messages[5:]] == [(1, 3), (1, 4)]
        await sub.close(delete=False)

    asyncio.run(run())
