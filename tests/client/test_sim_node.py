"""Our client against the real broker and bookie nodes on the simulated world (``sim_node``)."""

from __future__ import annotations

from magnetar.base.errors import OperationTimeoutError
from magnetar.client import InitialPosition, MessageId, ProducerConfig, PulsarClient, SubscriptionType
from magnetar.sim import SimWorld
from tests.client.sim_node import real_run

EARLY = InitialPosition.EARLIEST


def test_round_trip_through_a_real_broker_and_bookie() -> None:
    async def body(client: PulsarClient, _world: SimWorld) -> tuple[list[MessageId], list[bytes]]:
        consumer = await client.subscribe("t1", "sub", initial_position=EARLY)
        producer = await client.create_producer("t1")
        ids = [await producer.send(f"m{i}".encode(), key=f"k{i}") for i in range(5)]
        got = [await consumer.receive(timeout_ms=5_000) for _ in range(5)]
        for message in got:
            consumer.acknowledge(message)
        return ids, [m.payload for m in got]

    ids, payloads = real_run(body)
    assert payloads == [f"m{i}".encode() for i in range(5)]
    assert [i.entry_id for i in ids] == list(range(5)) and len({i.ledger_id for i in ids}) == 1


def test_a_deduplicating_producer_survives_a_broker_crash_without_duplicates() -> None:
    async def body(client: PulsarClient, world: SimWorld) -> list[str]:
        producer = await client.create_producer("t2", ProducerConfig(producer_name="p", send_timeout_ms=0))
        for seq in range(10):
            if seq == 5:
                world.crash("broker0", "test: kill the broker mid-stream")
                world.restart("broker0")
            await producer.send(f"v{seq}".encode(), sequence_id=seq)
        reader = await client.create_reader("t2")
        values = []
        while await reader.has_message_available():
            values.append((await reader.read_next(timeout_ms=5_000)).value())
        return values

    assert real_run(body) == [f"v{i}" for i in range(10)]


def test_shared_subscription_spreads_over_two_consumers_and_loses_nothing() -> None:
    async def body(client: PulsarClient, _world: SimWorld) -> tuple[set[str], int]:
        first = await client.subscribe("t3", "s", subscription_type=SubscriptionType.SHARED, initial_position=EARLY,
                                       receiver_queue_size=2)
        second = await client.subscribe("t3", "s", subscription_type=SubscriptionType.SHARED,
                                        initial_position=EARLY, receiver_queue_size=2)
        producer = await client.create_producer("t3")
        for i in range(8):
            await producer.send(f"m{i}".encode())
        got: set[str] = set()
        counts = [0, 0]
        while len(got) < 8:
            for index, consumer in enumerate((first, second)):
                try:
                    message = await consumer.receive(timeout_ms=200)
                except OperationTimeoutError:  # this consumer has nothing now: try the other
                    continue
                counts[index] += 1
                got.add(message.value())
                consumer.acknowledge(message)
        return got, min(counts)

    got, fewest = real_run(body)
    assert got == {f"m{i}" for i in range(8)}
    assert fewest > 0
