"""Our client against the fake broker on a simulated network with virtual time.

Every wait is bounded by virtual time (receive timeouts, operation timeouts), so a hang fails
fast and a test run takes real milliseconds even when it spans virtual minutes.
"""

from __future__ import annotations

import asyncio

import pytest

from magnetar.base.errors import ClosedError, InvalidArgumentError, OperationTimeoutError
from magnetar.client import (
    EARLIEST,
    LATEST,
    BrokerError,
    ClientOptions,
    Compression,
    InitialPosition,
    MessageId,
    MultiTopicConsumer,
    PartitionedProducer,
    SubscriptionType,
    TopicNotFoundError,
    key_partition,
)
from magnetar.protocol.pulsar import commands, decode_entry, decode_frame, payload_frame_parts, pb
from tests.client.conftest import sim_run
from tests.client.fake_broker import FakeBroker

TOPIC = "persistent://public/default/t1"
EARLY = InitialPosition.EARLIEST


def test_produce_then_consume_round_trip() -> None:
    async def body(broker, client, _net):
        consumer = await client.subscribe("t1", "sub", initial_position=EARLY)
        producer = await client.create_producer("t1")
        ids = [await producer.send(f"m{i}".encode(), key=f"k{i}", properties={"p": str(i)}, event_time_ms=1000 + i)
               for i in range(5)]
        got = [await consumer.receive(timeout_ms=5000) for _ in range(5)]
        for m in got:
            consumer.acknowledge(m)
        await consumer.flush_acks()
        await producer.close()
        return ids, got, producer.producer_name, broker

    ids, got, name, broker = sim_run(body)
    assert ids == [MessageId(7, i) for i in range(5)]
    assert [m.payload for m in got] == [f"m{i}".encode() for i in range(5)]
    assert [m.key for m in got] == [f"k{i}" for i in range(5)]
    assert got[2].properties == {"p": "2"}
    assert got[3].event_time_ms == 1003
    assert all(m.producer_name == name == "fake-0" for m in got)
    assert [m.sequence_id for m in got] == list(range(5))
    assert broker.topics[TOPIC].subs["sub"].mark_delete() == 4
    # The golden command sequence of a producer and a consumer on one connection.
    assert broker.received[:6] == ["PARTITIONED_METADATA", "LOOKUP", "SUBSCRIBE", "FLOW", "PARTITIONED_METADATA",
                                   "LOOKUP"]
    assert broker.received[6:8] == ["PRODUCER", "SEND"]
    assert "CLOSE_PRODUCER" in broker.received
    sub = broker.subscribes[0]
    assert sub.subType == pb.CommandSubscribe.Exclusive and sub.durable and not sub.HasField("start_message_id")
    assert len(sub.consumer_name) == 10
    produced = broker.producers_seen[0]
    assert not produced.HasField("producer_name") and produced.epoch == 0 and not produced.user_provided_producer_name


def test_receive_times_out_on_virtual_time() -> None:
    async def body(_broker, client, _net):
        consumer = await client.subscribe("t1", "sub")
        loop = asyncio.get_running_loop()
        start = loop.time()
        with pytest.raises(OperationTimeoutError):
            await consumer.receive(timeout_ms=2500)
        return loop.time() - start

    elapsed = sim_run(body)
    assert 2.5 <= elapsed < 2.6


@pytest.mark.parametrize("codec", list(Compression))
def test_batches_with_compression_round_trip(codec: Compression) -> None:
    async def body(broker, client, _net):
        producer = await client.create_producer("t1", batching_enabled=True, batch_max_messages=4,
                                                batch_max_delay_ms=60_000, compression=codec)
        futures = [await producer.send_async(f"{codec.name}-{i}".encode() * 20, key="k", properties={"i": str(i)})
                   for i in range(8)]
        ids = await asyncio.gather(*futures)
        consumer = await client.subscribe("t1", "sub", initial_position=EARLY)
        got = [await consumer.receive(timeout_ms=5000) for _ in range(8)]
        return ids, got, broker.topics[TOPIC].entries

    ids, got, entries = sim_run(body)
    assert ids == [MessageId(7, i // 4, i % 4, -1, 4) for i in range(8)]
    assert len(entries) == 2
    for entry in entries:
        assert entry.metadata.num_messages_in_batch == 4
        assert entry.metadata.sequence_id == entry.index * 4
        assert (entry.metadata.compression == codec.value) and (
            codec is Compression.NONE or entry.metadata.uncompressed_size > 0)
    assert [m.payload for m in got] == [f"{codec.name}-{i}".encode() * 20 for i in range(8)]
    assert [m.message_id for m in got] == ids
    assert [m.properties for m in got] == [{"i": str(i)} for i in range(8)]
    assert [m.sequence_id for m in got] == list(range(8))


def test_batch_is_flushed_after_its_delay() -> None:
    async def body(_broker, client, _net):
        producer = await client.create_producer("t1", batching_enabled=True, batch_max_delay_ms=50)
        loop = asyncio.get_running_loop()
        start = loop.time()
        msg_id = await producer.send(b"x")
        return msg_id, loop.time() - start

    msg_id, elapsed = sim_run(body)
    assert msg_id == MessageId(7, 0, 0, -1, 1)
    assert 0.05 <= elapsed < 0.1


def _acks(broker: FakeBroker) -> list[tuple[int, list[tuple[int, list[int]]]]]:
    return [(a.ack_type, [(m.entryId, list(m.ack_set)) for m in a.message_id]) for a in broker.acks]


def test_batch_members_are_acked_as_one_entry_once_all_are_acked() -> None:
    async def body(broker, client, _net):
        producer = await client.create_producer("t1", batching_enabled=True, batch_max_messages=3)
        await asyncio.gather(*[await producer.send_async(b"m") for _ in range(3)])
        consumer = await client.subscribe("t1", "sub", initial_position=EARLY, ack_group_time_ms=0)
        got = [await consumer.receive(timeout_ms=5000) for _ in range(3)]
        consumer.acknowledge(got[0])
        consumer.acknowledge(got[2])
        before = list(broker.acks)
        consumer.acknowledge(got[1])
        await consumer.flush_acks()
        await asyncio.sleep(0.01)
        return before, _acks(broker)

    before, acks = sim_run(body)
    assert before == []
    assert acks == [(pb.CommandAck.Individual, [(0, [])])]


def test_batch_index_ack_sends_ack_set() -> None:
    async def body(broker, client, _net):
        producer = await client.create_producer("t1", batching_enabled=True, batch_max_messages=3)
        await asyncio.gather(*[await producer.send_async(b"m") for _ in range(3)])
        consumer = await client.subscribe("t1", "sub", initial_position=EARLY, batch_index_ack_enabled=True,
                                          ack_group_time_ms=0)
        got = [await consumer.receive(timeout_ms=5000) for _ in range(3)]
        consumer.acknowledge(got[0])
        await consumer.flush_acks()
        await asyncio.sleep(0.01)
        return _acks(broker)

    assert sim_run(body) == [(pb.CommandAck.Individual, [(0, [0b110])])]


def test_cumulative_ack_inside_a_batch_covers_the_previous_entry() -> None:
    async def body(broker, client, _net):
        producer = await client.create_producer("t1")
        await producer.send(b"single")
        batched = await client.create_producer("t1", batching_enabled=True, batch_max_messages=3)
        await asyncio.gather(*[await batched.send_async(b"m") for _ in range(3)])
        consumer = await client.subscribe("t1", "sub", initial_position=EARLY, ack_group_time_ms=0)
        got = [await consumer.receive(timeout_ms=5000) for _ in range(4)]
        consumer.acknowledge_cumulative(got[2])  # member 1 of the batch in entry 1
        consumer.acknowledge_cumulative(got[3])  # the batch's last member: the whole entry
        await asyncio.sleep(0.01)
        return _acks(broker)

    assert sim_run(body) == [(pb.CommandAck.Cumulative, [(0, [])]), (pb.CommandAck.Cumulative, [(1, [])])]


def test_cumulative_ack_is_refused_on_shared_subscriptions() -> None:
    async def body(_broker, client, _net):
        producer = await client.create_producer("t1")
        await producer.send(b"x")
        consumer = await client.subscribe("t1", "sub", initial_position=EARLY, subscription_type=SubscriptionType.SHARED)
        message = await consumer.receive(timeout_ms=5000)
        with pytest.raises(InvalidArgumentError):
            consumer.acknowledge_cumulative(message)

    sim_run(body)


def test_flow_permits_start_full_and_refill_at_half() -> None:
    async def body(broker, client, _net):
        producer = await client.create_producer("t1")
        for i in range(10):
            await producer.send(str(i).encode())
        consumer = await client.subscribe("t1", "sub", initial_position=EARLY, receiver_queue_size=4)
        got = [await consumer.receive(timeout_ms=5000) for _ in range(10)]
        flows = [c for c in broker.received if c == "FLOW"]
        return [m.payload for m in got], len(flows)

    payloads, flows = sim_run(body)
    assert payloads == [str(i).encode() for i in range(10)]
    # FLOW(4) at subscribe, then FLOW(2) after every 2 receives: 4 + 2 * 3 >= 10 messages.
    assert flows >= 4


def test_partitioned_producer_routes_keys_by_murmur3_and_consumer_reads_all() -> None:
    async def body(broker, client, _net):
        broker.partitions[TOPIC] = 3
        consumer = await client.subscribe("t1", "sub", initial_position=EARLY)
        producer = await client.create_producer("t1")
        assert isinstance(producer, PartitionedProducer) and isinstance(consumer, MultiTopicConsumer)
        keyed = {k: await producer.send(k.encode(), key=k) for k in ("a", "b", "c", "d", "e")}
        spread = [await producer.send(b"rr") for _ in range(6)]
        got = [await consumer.receive(timeout_ms=5000) for _ in range(11)]
        for message in got:
            consumer.acknowledge(message)
        await consumer.flush_acks()
        await asyncio.sleep(0.2)
        return keyed, spread, got, broker

    keyed, spread, got, broker = sim_run(body)
    for key, msg_id in keyed.items():
        assert msg_id.partition == key_partition(key, 3)
    assert sorted(m.partition for m in spread) == [0, 0, 1, 1, 2, 2]
    assert len(got) == 11 and {m.topic for m in got} == {f"{TOPIC}-partition-{i}" for i in range(3)}
    for i in range(3):
        topic = broker.topics[f"{TOPIC}-partition-{i}"]
        assert topic.subs["sub"].mark_delete() == len(topic.entries) - 1
    names = {s.consumer_name for s in broker.subscribes}
    assert len(names) == 1  # one name on every partition, as the official client does


def test_shared_subscription_splits_messages_between_consumers() -> None:
    async def body(_broker, client, _net):
        shared = SubscriptionType.SHARED
        c1 = await client.subscribe("t1", "sub", initial_position=EARLY, subscription_type=shared, receiver_queue_size=2)
        c2 = await client.subscribe("t1", "sub", initial_position=EARLY, subscription_type=shared, receiver_queue_size=2)
        producer = await client.create_producer("t1")
        for i in range(4):
            await producer.send(str(i).encode())
        first = [await c1.receive(timeout_ms=5000) for _ in range(2)]
        second = [await c2.receive(timeout_ms=5000) for _ in range(2)]
        return sorted(m.payload for m in first + second)

    assert sim_run(body) == [b"0", b"1", b"2", b"3"]


def test_second_exclusive_consumer_fails_at_once_with_consumer_busy() -> None:
    async def body(_broker, client, _net):
        await client.subscribe("t1", "sub")
        loop = asyncio.get_running_loop()
        start = loop.time()
        with pytest.raises(BrokerError) as info:
            await client.subscribe("t1", "sub")
        return info.value.code, loop.time() - start

    code, elapsed = sim_run(body)
    assert code == pb.ConsumerBusy
    assert elapsed < 1.0  # fatal: no retries


@pytest.mark.parametrize("kind", [SubscriptionType.SHARED, SubscriptionType.EXCLUSIVE])
def test_negative_ack_redelivers_after_the_delay(kind: SubscriptionType) -> None:
    async def body(broker, client, _net):
        producer = await client.create_producer("t1")
        await producer.send(b"a")
        await producer.send(b"b")
        consumer = await client.subscribe("t1", "sub", initial_position=EARLY, subscription_type=kind,
                                          negative_ack_redelivery_delay_ms=1000)
        first = await consumer.receive(timeout_ms=5000)
        second = await consumer.receive(timeout_ms=5000)
        consumer.acknowledge(second)
        loop = asyncio.get_running_loop()
        start = loop.time()
        consumer.negative_acknowledge(first)
        again = await consumer.receive(timeout_ms=5000)
        return again, loop.time() - start, broker.redelivers

    again, elapsed, redelivers = sim_run(body)
    assert again.payload == b"a" and again.redelivery_count == 1
    assert 1.0 <= elapsed < 1.5
    ids = [m.entryId for m in redelivers[0].message_ids]
    assert ids == ([0] if kind is SubscriptionType.SHARED else [])


def test_redeliver_unacknowledged_sends_empty_list() -> None:
    async def body(broker, client, _net):
        producer = await client.create_producer("t1")
        await producer.send(b"a")
        consumer = await client.subscribe("t1", "sub", initial_position=EARLY)
        await consumer.receive(timeout_ms=5000)
        consumer.redeliver_unacknowledged()
        again = await consumer.receive(timeout_ms=5000)
        return again, broker.redelivers

    again, redelivers = sim_run(body)
    assert again.payload == b"a" and again.redelivery_count == 1
    assert len(redelivers) == 1 and list(redelivers[0].message_ids) == []


def test_seek_by_message_id_and_by_timestamp() -> None:
    async def body(broker, client, _net):
        producer = await client.create_producer("t1")
        ids = []
        for i in range(5):
            ids.append(await producer.send(str(i).encode()))
            await asyncio.sleep(1)  # distinct publish times, one virtual second apart
        consumer = await client.subscribe("t1", "sub", initial_position=EARLY)
        for _ in range(5):
            consumer.acknowledge(await consumer.receive(timeout_ms=5000))
        await consumer.seek(ids[1])
        after_id = await consumer.receive(timeout_ms=5000)
        publish_time = broker.topics[TOPIC].entries[3].metadata.publish_time
        await consumer.seek(publish_time)
        after_ts = await consumer.receive(timeout_ms=5000)
        await consumer.seek(EARLIEST)
        after_earliest = await consumer.receive(timeout_ms=5000)
        return after_id.payload, after_ts.payload, after_earliest.payload

    # seek(id) positions the broker at id and the client drops id itself (the official behaviour).
    assert sim_run(body) == (b"2", b"3", b"0")


def test_reader_from_earliest_and_has_message_available() -> None:
    async def body(broker, client, _net):
        producer = await client.create_producer("t1")
        for i in range(3):
            await producer.send(str(i).encode())
        reader = await client.create_reader("t1", EARLIEST)
        available = [await reader.has_message_available()]
        got = []
        while await reader.has_message_available():
            got.append((await reader.read_next(timeout_ms=5000)).payload)
        available.append(await reader.has_message_available())
        await producer.send(b"3")
        available.append(await reader.has_message_available())
        got.append((await reader.read_next(timeout_ms=5000)).payload)
        sub = broker.subscribes[-1]
        await reader.close()
        return got, available, sub, reader.subscription, broker.topics[TOPIC].subs

    got, available, sub, name, subs = sim_run(body)
    assert got == [b"0", b"1", b"2", b"3"]
    assert available == [True, False, True]
    assert not sub.durable and sub.consumer_name == "" and sub.start_message_id.ledgerId == 0xFFFF_FFFF_FFFF_FFFF
    assert name.startswith("reader-") and len(name) == len("reader-") + 10
    assert name not in subs  # a non-durable subscription goes away with its reader


def test_reader_from_message_id_is_exclusive_unless_inclusive() -> None:
    async def body(_broker, client, _net):
        producer = await client.create_producer("t1")
        ids = [await producer.send(str(i).encode()) for i in range(4)]
        exclusive = await client.create_reader("t1", ids[1])
        inclusive = await client.create_reader("t1", ids[1], inclusive=True)
        latest = await client.create_reader("t1", LATEST)
        first_latest = await latest.has_message_available()
        await producer.send(b"4")
        return ((await exclusive.read_next(timeout_ms=5000)).payload,
                (await inclusive.read_next(timeout_ms=5000)).payload,
                first_latest, (await latest.read_next(timeout_ms=5000)).payload)

    assert sim_run(body) == (b"2", b"1", False, b"4")


def test_producer_resends_pending_after_reconnect_and_dedup_drops_duplicates() -> None:
    async def body(broker, client, _net):
        producer = await client.create_producer("t1")
        broker.drop_after_sends = 3  # the third SEND's receipt (and later ones) are lost with the connection
        futures = [await producer.send_async(str(i).encode()) for i in range(10)]
        ids = await asyncio.gather(*futures)
        return ids, broker

    ids, broker = sim_run(body)
    entries = broker.topics[TOPIC].entries
    assert [e.metadata.sequence_id for e in entries] == list(range(10))  # no duplicate stored
    assert [e.stored[-1:] for e in entries] == [str(i).encode() for i in range(10)]
    assert [p.epoch for p in broker.producers_seen] == [0, 1]
    assert broker.producers_seen[1].producer_name == "fake-0"
    # The resent message that the broker had already stored is answered as a duplicate.
    assert ids[2] == MessageId(-1, -1) and ids[3] == MessageId(7, 3)
    assert broker.connections_accepted == 2


def test_consumer_resubscribes_after_a_dropped_connection_and_gets_unacked_again() -> None:
    async def body(broker, client, _net):
        producer = await client.create_producer("t1")
        for i in range(3):
            await producer.send(str(i).encode())
        consumer = await client.subscribe("t1", "sub", initial_position=EARLY, ack_group_time_ms=0)
        first = await consumer.receive(timeout_ms=5000)
        consumer.acknowledge(first)
        await asyncio.sleep(0.01)
        broker.drop_connections()
        await producer.send(b"3")
        got = []
        while b"3" not in [m.payload for m in got]:
            got.append(await consumer.receive(timeout_ms=5000))
        return got, broker.subscribes

    got, subscribes = sim_run(body)
    payloads = [m.payload for m in got]
    # Messages in flight when the connection dropped may arrive first; the unacked ones come
    # again after the resubscribe (redelivered), the acked one never does.
    assert b"0" not in payloads
    redelivered = [m.payload for m in got if m.redelivery_count > 0]
    assert redelivered == [b"1", b"2"]
    assert len(subscribes) == 2 and subscribes[0].consumer_id == subscribes[1].consumer_id
    assert subscribes[0].consumer_name == subscribes[1].consumer_name


def test_lookup_follows_redirects_to_the_owner() -> None:
    async def body(broker, client, net):
        owner = await FakeBroker(net.view("owner"), host="owner", port=6650).start()
        broker.redirect_to = owner.url
        producer = await client.create_producer("t1")
        await producer.send(b"x")
        return broker.topics, owner.topics, len(client.pool)

    front_topics, owner_topics, connections = sim_run(body)
    assert TOPIC not in front_topics
    assert len(owner_topics[TOPIC].entries) == 1
    assert connections == 2


def test_lookup_retries_service_not_ready_with_backoff() -> None:
    async def body(broker, client, _net):
        broker.lookup_failures = 3
        loop = asyncio.get_running_loop()
        start = loop.time()
        producer = await client.create_producer("t1")
        await producer.send(b"x")
        return loop.time() - start

    elapsed = sim_run(body)
    assert 0.6 < elapsed < 1.5  # 100 + 200 + 400 ms of backoff (+-10 %)


def test_topic_not_found_fails_at_once() -> None:
    async def body(broker, client, _net):
        broker.topic_not_found.add(TOPIC)
        with pytest.raises(TopicNotFoundError):
            await client.create_producer("t1")

    sim_run(body)


def test_unanswered_subscribe_times_out_after_the_operation_timeout() -> None:
    async def body(broker, client, _net):
        broker.silent_types.add(pb.BaseCommand.SUBSCRIBE)
        loop = asyncio.get_running_loop()
        start = loop.time()
        with pytest.raises(OperationTimeoutError):
            await client.subscribe("t1", "sub")
        elapsed = loop.time() - start
        await asyncio.sleep(0.1)  # let the CLOSE_CONSUMER cross the simulated network
        return elapsed, broker.received

    elapsed, received = sim_run(body, options=ClientOptions(operation_timeout_ms=3000))
    assert 2.9 <= elapsed <= 3.5
    assert "CLOSE_CONSUMER" in received  # the abandoned creation is closed on the broker


def test_pending_table_applies_backpressure() -> None:
    async def body(broker, client, _net):
        producer = await client.create_producer("t1", max_pending_messages=2)
        broker.hold_receipts = True
        futures = [await producer.send_async(b"a"), await producer.send_async(b"b")]
        third = asyncio.ensure_future(producer.send_async(b"c"))
        await asyncio.sleep(1)
        blocked = not third.done() and producer.pending_count == 2
        broker.release_receipts()
        futures.append(await third)
        ids = await asyncio.gather(*futures)
        return blocked, ids

    blocked, ids = sim_run(body)
    assert blocked
    assert ids == [MessageId(7, i) for i in range(3)]


def test_send_timeout_fails_unreceipted_messages() -> None:
    async def body(broker, client, _net):
        producer = await client.create_producer("t1", send_timeout_ms=1000)
        broker.hold_receipts = True
        with pytest.raises(OperationTimeoutError):
            await producer.send(b"a")
        return producer.pending_count

    assert sim_run(body) == 0


def test_keep_alive_keeps_an_idle_connection_open() -> None:
    async def body(broker, client, _net):
        producer = await client.create_producer("t1")
        connection = await client.pool.get(broker.url)
        await asyncio.sleep(125)  # four keep-alive intervals of virtual time: PING/PONG keep it
        await producer.send(b"x")
        return connection.is_ready, broker.connections_accepted

    assert sim_run(body) == (True, 1)


def test_keep_alive_closes_a_silent_connection_and_the_producer_reconnects() -> None:
    async def body(broker, client, net):
        producer = await client.create_producer("t1")
        connection = await client.pool.get(broker.url)
        net.clog("broker")  # nothing crosses in either direction: our PING goes unanswered
        await asyncio.sleep(65)
        reason = connection.close_reason
        net.unclog("broker")
        msg_id = await producer.send(b"x")
        return reason, msg_id, broker.connections_accepted

    reason, msg_id, connections = sim_run(body)
    assert reason == "keep-alive timeout"
    assert msg_id == MessageId(7, 0) and connections == 2


def test_unsubscribe_and_closed_objects_refuse_use() -> None:
    async def body(broker, client, _net):
        consumer = await client.subscribe("t1", "sub")
        await consumer.unsubscribe()
        with pytest.raises(ClosedError):
            await consumer.receive(timeout_ms=10)
        producer = await client.create_producer("t1")
        await producer.close()
        with pytest.raises(ClosedError):
            await producer.send(b"x")
        return broker.topics[TOPIC].subs, broker.received

    subs, received = sim_run(body)
    assert "sub" not in subs
    assert "UNSUBSCRIBE" in received and received[-1] == "CLOSE_PRODUCER"


def test_our_batches_decode_like_the_official_clients() -> None:
    """The broker-side decoder (the code path that reads the official client's batches) reads ours."""

    async def body(broker, client, _net):
        producer = await client.create_producer("t1", batching_enabled=True, batch_max_messages=3,
                                                compression=Compression.LZ4)
        await asyncio.gather(*[await producer.send_async(f"m{i}".encode(), key="k") for i in range(3)])
        return broker.topics[TOPIC].entries[0]

    entry = sim_run(body)
    # Rebuild a MESSAGE frame around the stored bytes and decode it like a consumer would.
    header, stored = payload_frame_parts(commands.message(0, commands.message_id(7, 0)), entry.stored)
    frame = decode_frame(memoryview(header + stored))
    assert frame.message is not None and frame.message.checksum is not None
    singles = decode_entry(frame.message.metadata, frame.message.payload)
    assert [s.payload for s in singles] == [b"m0", b"m1", b"m2"]
    assert [s.metadata.sequence_id for s in singles] == [0, 1, 2]
    assert all(s.metadata.partition_key == "k" for s in singles)
    assert frame.message.metadata.compression == pb.LZ4
    assert frame.message.metadata.partition_key == "k"
