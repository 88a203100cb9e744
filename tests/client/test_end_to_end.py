"""Our client against the fake broker on a simulated network with virtual time."""

from __future__ import annotations

from magnetar.client import MessageId
from tests.client.conftest import sim_run

TOPIC = "persistent://public/default/t1"


def test_produce_then_consume_round_trip() -> None:
    async def body(broker, client, _net):
        consumer = await client.subscribe("t1", "sub", initial_position=__import__("magnetar.client", fromlist=["InitialPosition"]).InitialPosition.EARLIEST)
        producer = await client.create_producer("t1")
        ids = [await producer.send(f"m{i}".encode(), key=f"k{i}", properties={"p": str(i)}, event_time_ms=1000 + i)
               for i in range(5)]
        got = [await consumer.receive(timeout_ms=5000) for _ in range(5)]
        for m in got:
            consumer.acknowledge(m)
        await consumer.flush_acks()
        return ids, got, producer.producer_name

    ids, got, name = sim_run(body)
    assert ids == [MessageId(7, i) for i in range(5)]
    assert [m.payload for m in got] == [f"m{i}".encode() for i in range(5)]
    assert [m.key for m in got] == [f"k{i}" for i in range(5)]
    assert got[2].properties == {"p": "2"}
    assert got[3].event_time_ms == 1003
    assert all(m.producer_name == name == "fake-0" for m in got)
    assert [m.sequence_id for m in got] == list(range(5))
