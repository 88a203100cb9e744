"""How the client reacts to what a broker may push or answer: CLOSE_PRODUCER/CLOSE_CONSUMER,
ACTIVE_CONSUMER_CHANGE, SEND_ERROR, corrupt MESSAGE frames; plus determinism and a negative
control for the resend test (without broker dedup the resend shows up as a duplicate)."""

from __future__ import annotations

import asyncio

import pytest

from magnetar.client import BrokerError, InitialPosition, MessageId, SubscriptionType
from magnetar.client import __all__ as client_api
from magnetar.protocol.pulsar import commands, pb
from tests.client.conftest import sim_run
from tests.client.fake_broker import FakeBroker

TOPIC = "persistent://public/default/t1"
EARLY = InitialPosition.EARLIEST


def _push(broker: FakeBroker, command: pb.BaseCommand) -> None:
    for session in broker.sessions:
        session.conn.send_command(command)
    broker._flush_all()


def test_close_producer_from_the_broker_makes_the_producer_reconnect() -> None:
    async def body(broker, client, _net):
        producer = await client.create_producer("t1")
        await producer.send(b"a")
        _push(broker, commands.close_producer(producer.producer_id))
        await asyncio.sleep(0.05)  # let the CLOSE_PRODUCER arrive before the next SEND
        msg_id = await producer.send(b"b")
        return msg_id, [p.epoch for p in broker.producers_seen]

    msg_id, epochs = sim_run(body)
    assert msg_id == MessageId(7, 1)
    assert epochs == [0, 1]


def test_close_consumer_from_the_broker_resubscribes_and_active_change_is_recorded() -> None:
    async def body(broker, client, _net):
        consumer = await client.subscribe("t1", "sub", subscription_type=SubscriptionType.FAILOVER)
        _push(broker, commands.active_consumer_change(consumer.consumer_id, False))
        await asyncio.sleep(0.05)
        inactive = consumer.is_active
        session = broker.sessions[0]
        session.consumers.pop(consumer.consumer_id)
        broker.topics[TOPIC].subs["sub"].consumers.clear()
        _push(broker, commands.close_consumer(consumer.consumer_id))
        producer = await client.create_producer("t1")
        await producer.send(b"after")
        message = await consumer.receive(timeout_ms=5000)
        return inactive, message.payload, len(broker.subscribes)

    assert sim_run(body) == (False, b"after", 2)


def test_send_error_other_than_checksum_drops_the_connection_and_resends() -> None:
    async def body(broker, client, _net):
        producer = await client.create_producer("t1")
        broker.hold_receipts = True
        future = await producer.send_async(b"x")
        await asyncio.sleep(0.05)
        broker.held.clear()
        broker.hold_receipts = False
        _push(broker, commands.send_error(producer.producer_id, 0, pb.PersistenceError, "disk"))
        msg_id = await future
        return msg_id, broker.connections_accepted

    msg_id, connections = sim_run(body)
    assert msg_id == MessageId(-1, -1)  # the resend was a duplicate of the stored entry
    assert connections == 2


def test_checksum_send_error_fails_only_that_message() -> None:
    async def body(broker, client, _net):
        producer = await client.create_producer("t1")
        broker.hold_receipts = True
        future = await producer.send_async(b"x")
        await asyncio.sleep(0.05)
        broker.held.clear()
        broker.hold_receipts = False
        _push(broker, commands.send_error(producer.producer_id, 0, pb.ChecksumError, "bad crc"))
        with pytest.raises(BrokerError) as info:
            await future
        after = await producer.send(b"y")
        return info.value.code, after, broker.connections_accepted

    code, after, connections = sim_run(body)
    assert code == pb.ChecksumError and after == MessageId(7, 1) and connections == 1


def test_corrupt_message_is_acked_with_a_validation_error_and_skipped() -> None:
    async def body(broker, client, _net):
        producer = await client.create_producer("t1")
        await producer.send(b"good-0")
        await producer.send(b"good-1")
        entry = broker.topics[TOPIC].entries[0]
        corrupted = bytearray(entry.stored)
        corrupted[-1] ^= 0xFF
        entry.stored = bytes(corrupted)
        consumer = await client.subscribe("t1", "sub", initial_position=EARLY)
        message = await consumer.receive(timeout_ms=5000)
        await asyncio.sleep(0.05)
        return message.payload, [a.validation_error for a in broker.acks if a.HasField("validation_error")]

    payload, errors = sim_run(body)
    assert payload == b"good-1"
    assert errors == [pb.CommandAck.ChecksumMismatch]


def test_resend_without_broker_dedup_stores_a_duplicate() -> None:
    """Negative control for the dedup test in test_end_to_end: the resend really happens."""

    async def body(broker, client, _net):
        producer = await client.create_producer("t1")
        broker.drop_after_sends = 3
        futures = [await producer.send_async(str(i).encode()) for i in range(5)]
        await asyncio.gather(*futures)
        return [e.metadata.sequence_id for e in broker.topics[TOPIC].entries]

    sequence_ids = sim_run(body, dedup=False)
    assert sorted(set(sequence_ids)) == list(range(5))
    assert len(sequence_ids) > 5  # the message whose receipt was lost is stored twice


def test_key_shared_subscribe_carries_key_shared_meta() -> None:
    async def body(broker, client, _net):
        await client.subscribe("t1", "sub", subscription_type=SubscriptionType.KEY_SHARED)
        return broker.subscribes[0]

    sub = sim_run(body)
    assert sub.subType == pb.CommandSubscribe.Key_Shared and sub.HasField("keySharedMeta")


def test_a_seed_replays_the_same_run() -> None:
    async def body(broker, client, _net):
        producer = await client.create_producer("t1", batching_enabled=True, batch_max_delay_ms=3)
        consumer = await client.subscribe("t1", "sub", initial_position=EARLY)
        broker.drop_after_sends = 2
        futures = [await producer.send_async(str(i).encode()) for i in range(6)]
        ids = await asyncio.gather(*futures)
        got = [(await consumer.receive(timeout_ms=5000)).message_id for _ in range(6)]
        return ids, got, list(broker.received), asyncio.get_running_loop().time()

    assert sim_run(body, seed=7) == sim_run(body, seed=7)


def test_public_api_is_pinned() -> None:
    assert sorted(client_api) == sorted([
        "EARLIEST", "LATEST", "BrokerError", "ClientError", "ClientOptions", "Compression", "ConnectError",
        "ConnectionLostError", "Consumer", "ConsumerConfig", "InitialPosition", "TopicLookupError", "Message", "MessageId",
        "MultiTopicConsumer", "PartitionedProducer", "Producer", "ProducerConfig", "PulsarClient", "Reader",
        "SubscriptionType", "TopicNotFoundError", "full_topic_name", "key_partition", "murmur3_32", "partition_name",
    ])


def test_close_is_bounded_when_receipts_never_come() -> None:
    from magnetar.base.errors import ClosedError
    from magnetar.client import ClientOptions

    async def body(broker, client, _net):
        producer = await client.create_producer("t1", send_timeout_ms=0)
        broker.hold_receipts = True
        future = await producer.send_async(b"x")
        loop = asyncio.get_running_loop()
        start = loop.time()
        await producer.close()
        with pytest.raises(ClosedError):
            await future
        return loop.time() - start

    elapsed = sim_run(body, options=ClientOptions(operation_timeout_ms=2000))
    assert 2.0 <= elapsed < 3.0
