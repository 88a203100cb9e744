"""Dispatchers and subscriptions over the in-memory log with recording fake channels (no sockets)."""

from __future__ import annotations

import asyncio

from magnetar.base.types import EARLIEST, Position
from magnetar.broker import BrokerConfig, Consumer, MemoryLogStore, SubType
from magnetar.broker.dispatcher import next_loop_pass
from magnetar.broker.dispatcher_key_shared import KEY_HASH_SLOTS, key_slot
from magnetar.broker.subscription import Subscription
from tests.broker.fakes import FakeChannel, append, entry, settle


async def _subscription(entries: list[bytes], config: BrokerConfig | None = None) -> tuple[Subscription, object]:
    store = MemoryLogStore()
    log = await store.open_log("persistent://public/default/t", create=True)
    for data in entries:
        await append(log, data)
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
        await sub.acknowledge(False, [(Position(1, 1), [])])
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
        sub.flow(a, 5)  # a takes the first five entries (one of each key), leaving them unacked
        await settle()
        assert [pos for _, pos, _ in channel.messages] == [(1, i) for i in range(5)]
        b = _consumer(2, SubType.KEY_SHARED, channel, "b")
        sub.add_consumer(b)
        sub.flow(b, 100)
        sub.flow(a, 100)
        await settle()
        # b gets nothing while a still holds unacked entries sent before b joined: a key that moved
        # to b could otherwise be processed by b before a is done with its earlier entries
        assert not [m for m in channel.messages if m[0] == 2]
        assert per_key_violations(channel.messages, keys) == []
        await sub.acknowledge(False, [(Position(1, i), []) for i in range(5)])
        await settle()
        owners: dict[str, set[int]] = {}
        for cid, (_, entry_id), _ in channel.messages:
            if entry_id >= 5:
                owners.setdefault(keys[entry_id], set()).add(cid)
        assert sorted(pos for _, pos, _ in channel.messages) == [(1, i) for i in range(20)]
        assert all(len(o) == 1 for o in owners.values())  # after the handover each key has one owner
        assert {cid for o in owners.values() for cid in o} == {1, 2}  # and both consumers own keys
        assert per_key_violations(channel.messages, keys) == []
        await sub.close(delete=False)

    asyncio.run(run())


def per_key_violations(messages: list[tuple[int, tuple[int, int], int]], keys: list[str]) -> list[str]:
    """Per-key order checker: a key's entries must reach consumers in log order (first deliveries)."""
    last: dict[str, int] = {}
    seen: set[tuple[int, int]] = set()
    out = []
    for _cid, pos, _count in messages:
        if pos in seen:
            continue
        seen.add(pos)
        key = keys[pos[1]]
        if pos[1] < last.get(key, -1):
            out.append(f"{key}: {pos} after entry {last[key]}")
        last[key] = max(last.get(key, -1), pos[1])
    return out


def test_per_key_checker_catches_an_overtake() -> None:  # negative control of the checker
    keys = ["a", "a", "b"]
    assert per_key_violations([(1, (1, 1), 0), (1, (1, 2), 0), (2, (1, 0), 0)], keys) == ["a: (1, 0) after entry 1"]


def _keys_in_halves() -> tuple[str, str]:
    """A key hashing into the lower half of the slots and one into the upper half."""
    low = next(f"low{i}" for i in range(1000) if key_slot(f"low{i}".encode()) < KEY_HASH_SLOTS // 2)
    high = next(f"high{i}" for i in range(1000) if key_slot(f"high{i}".encode()) >= KEY_HASH_SLOTS // 2)
    return low, high


async def _sticky_pair(keys: list[str], config: BrokerConfig | None = None
                       ) -> tuple[Subscription, FakeChannel, Consumer, Consumer]:
    sub, _ = await _subscription([entry(key=k, sequence_id=i) for i, k in enumerate(keys)], config)
    channel = FakeChannel()
    half = KEY_HASH_SLOTS // 2
    a = Consumer(1, "a", SubType.KEY_SHARED, channel, hash_ranges=((0, half - 1),))
    b = Consumer(2, "b", SubType.KEY_SHARED, channel, hash_ranges=((half, KEY_HASH_SLOTS - 1),))
    sub.add_consumer(a)
    sub.add_consumer(b)
    return sub, channel, a, b


def test_key_shared_a_consumer_without_permits_does_not_stall_other_keys() -> None:
    async def run() -> None:
        low, high = _keys_in_halves()
        keys = [low if i % 2 == 0 else high for i in range(20)]  # low, high, low, high, ...
        sub, channel, a, b = await _sticky_pair(keys)
        sub.flow(a, 1)
        sub.flow(b, 100)
        await settle()
        assert [pos for cid, pos, _ in channel.messages if cid == 1] == [(1, 0)]
        # every entry of b's key went out although a's key is stalled in front of them
        assert [pos for cid, pos, _ in channel.messages if cid == 2] == [(1, i) for i in range(1, 20, 2)]
        assert sub.dispatcher is not None and len(sub.dispatcher.replay) == 9  # a's key, held
        log = sub.log
        for i in range(20, 24):  # new entries of the stalled key queue up behind the held ones
            keys.append(low)
            await append(log, entry(key=low, sequence_id=i))
            sub.notify_entries_added()
        await settle()
        assert [pos for cid, pos, _ in channel.messages if cid == 1] == [(1, 0)]
        sub.flow(a, 100)
        await settle()
        a_got = [pos[1] for cid, pos, _ in channel.messages if cid == 1]
        assert a_got == [i for i in range(24) if keys[i] == low]  # in log order, nothing overtaken
        assert per_key_violations(channel.messages, keys) == []
        await sub.close(delete=False)

    asyncio.run(run())


def test_key_shared_look_ahead_is_bounded() -> None:
    async def run() -> None:
        low, high = _keys_in_halves()
        keys = [low] * 5 + [high] * 5
        sub, channel, a, b = await _sticky_pair(keys, BrokerConfig(dispatch_look_ahead_count_max=3))
        sub.flow(b, 100)  # a has no permits at all
        await settle()
        assert sub.dispatcher is not None and len(sub.dispatcher.replay) == 3
        assert [m for m in channel.messages if m[0] == 2] == []  # b's entries lie beyond the look-ahead
        sub.flow(a, 100)
        await settle()
        assert [pos[1] for cid, pos, _ in channel.messages if cid == 1] == [0, 1, 2, 3, 4]
        assert [pos[1] for cid, pos, _ in channel.messages if cid == 2] == [5, 6, 7, 8, 9]
        await sub.close(delete=False)

    asyncio.run(run())


def test_key_shared_redelivered_entry_is_not_overtaken_by_later_entries_of_its_key() -> None:
    async def run() -> None:
        low, high = _keys_in_halves()
        keys = [low, low, high]
        sub, channel, a, b = await _sticky_pair(keys)
        sub.flow(a, 1)
        sub.flow(b, 10)
        await settle()
        sub.redeliver(a, [Position(1, 0)])  # a nacks entry 0 and has no permits: 0 and 1 wait
        await settle()
        assert [pos[1] for cid, pos, _ in channel.messages if cid == 1] == [0]
        sub.flow(a, 10)
        await settle()
        assert [(pos[1], count) for cid, pos, count in channel.messages if cid == 1] == [(0, 0), (0, 1), (1, 0)]
        await sub.close(delete=False)

    asyncio.run(run())


def test_key_shared_held_and_unacked_entries_of_a_leaving_consumer_go_to_the_next_in_order() -> None:
    async def run() -> None:
        keys = [f"k{i % 4}" for i in range(24)]
        sub, _ = await _subscription([entry(key=k, sequence_id=i) for i, k in enumerate(keys)])
        channel = FakeChannel()
        a, b = _consumer(1, SubType.KEY_SHARED, channel, "a"), _consumer(2, SubType.KEY_SHARED, channel, "b")
        sub.add_consumer(a)
        sub.add_consumer(b)
        sub.flow(a, 2)  # a stalls early: its keys' later entries are held
        sub.flow(b, 100)
        await settle()
        assert sub.dispatcher is not None and sub.dispatcher.replay
        await sub.remove_consumer(a)
        await settle()
        firsts = [m for m in channel.messages if m[0] == 2 or m[2] > 0]
        assert sorted({pos for _, pos, _ in channel.messages}) == [(1, i) for i in range(24)]
        assert per_key_violations([m for m in firsts if m[0] == 2], keys) == []
        assert not sub.dispatcher.replay and not sub.dispatcher.groups.keys() - sub.dispatcher.pending.keys()
        await sub.close(delete=False)

    asyncio.run(run())


def chunk_split(messages: list[tuple[int, tuple[int, int], int]], chunks: dict[int, str]) -> list[str]:
    """Checker: chunked messages whose chunks (entry id -> uuid) reached more than one consumer."""
    owners: dict[str, set[int]] = {}
    for cid, (_, entry_id), _ in messages:
        if entry_id in chunks:
            owners.setdefault(chunks[entry_id], set()).add(cid)
    return sorted(uuid for uuid, o in owners.items() if len(o) > 1)


def test_chunk_checker_catches_a_split_message() -> None:  # negative control of the checker
    assert chunk_split([(1, (1, 0), 0), (2, (1, 1), 0)], {0: "m", 1: "m"}) == ["m"]


def test_shared_sends_all_chunks_of_a_message_to_one_consumer() -> None:
    async def run() -> None:
        layout = [("m1", 0), None, ("m1", 1), None, ("m1", 2), None]  # chunks of m1 between plain entries
        sub, _ = await _subscription([entry(sequence_id=i, chunk=(c[0], c[1], 3) if c else None)
                                      for i, c in enumerate(layout)])
        chunks = {i: c[0] for i, c in enumerate(layout) if c}
        channel = FakeChannel()
        a, b = _consumer(1, SubType.SHARED, channel), _consumer(2, SubType.SHARED, channel)
        sub.add_consumer(a)
        sub.add_consumer(b)
        sub.flow(b, 100)
        sub.flow(a, 2)  # a takes chunk 0, later chunk 1, then runs out of permits before chunk 2
        await settle()
        assert [pos[1] for cid, pos, _ in channel.messages if cid == 1] == [0, 2]
        assert [pos[1] for cid, pos, _ in channel.messages if cid == 2] == [1, 3, 5]  # not stalled
        assert chunk_split(channel.messages, chunks) == []
        sub.flow(a, 1)
        await settle()
        assert [pos[1] for cid, pos, _ in channel.messages if cid == 1] == [0, 2, 4]
        assert chunk_split(channel.messages, chunks) == []
        await sub.close(delete=False)

    asyncio.run(run())


def test_shared_chunks_of_a_consumer_that_left_go_again_from_the_first() -> None:
    async def run() -> None:
        sub, log = await _subscription([entry(sequence_id=i, chunk=("m", i, 3)) for i in range(2)])
        channel = FakeChannel()
        a, b = _consumer(1, SubType.SHARED, channel), _consumer(2, SubType.SHARED, channel)
        sub.add_consumer(a)
        sub.flow(a, 10)
        await settle()
        sub.add_consumer(b)
        sub.flow(b, 10)
        await append(log, entry(sequence_id=2, chunk=("m", 2, 3)))
        await sub.remove_consumer(a)  # before the last chunk was written
        await settle()
        assert [pos[1] for cid, pos, _ in channel.messages if cid == 2] == [0, 1, 2]
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


async def _counts_seen_while_dispatching(config: BrokerConfig, entries: int) -> list[int]:
    """Messages sent, as seen by a task that runs once per loop pass while a consumer's permits
    go out over a backlog (stops once all are sent; bounded in passes)."""
    sub, _ = await _subscription([entry(sequence_id=i) for i in range(entries)], config)
    channel = FakeChannel()
    consumer = _consumer(1, SubType.EXCLUSIVE, channel)
    sub.add_consumer(consumer)
    await settle()
    seen: list[int] = []
    sub.flow(consumer, entries)
    for _ in range(200):
        await next_loop_pass()  # one loop pass: the dispatcher's steps run between these
        seen.append(len(channel.messages))
        if seen[-1] == entries:
            break
    await sub.close(delete=False)
    return seen


def test_a_backlog_goes_out_one_read_per_loop_turn() -> None:
    """A read from the log does not suspend: after a pass that sent a read's worth, the dispatcher
    gives the loop a pass before its next read (else the whole permit count went out in one
    callback). Negative control: with one read covering the backlog, nothing runs in between."""
    entries = 250
    seen = asyncio.run(_counts_seen_while_dispatching(BrokerConfig(dispatch_read_count_max=100), entries))
    assert seen[-1] == entries
    assert 100 in seen and 200 in seen, seen  # other callbacks ran after each read of 100
    seen = asyncio.run(_counts_seen_while_dispatching(BrokerConfig(dispatch_read_count_max=1000), entries))
    assert [count for count in seen if 0 < count < entries] == [], seen
