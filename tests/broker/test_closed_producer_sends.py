"""A SEND still in flight for a producer the broker has just closed (CLOSE_PRODUCER: its topic was
unloaded or moved) is dropped, and the connection stays open for every other producer, consumer
and lookup on it (Pulsar's ``recentlyClosedProducers``). Issue 24: closing the connection instead
disconnected all 300 topics of the elastic test's client whenever a bundle moved. The client
resends the dropped message to the topic's next owner (no receipt came); dedup keeps it once.

Negative control: a SEND for a producer id this connection never had still closes it.
"""

from __future__ import annotations

import asyncio

from magnetar.broker.session import Session
from magnetar.protocol.pulsar import ServerConnection, State, encode_command, pb
from magnetar.protocol.pulsar.frames import encode_payload_command, make_command
from tests.admin.harness import AdminWorld
from tests.broker.test_session_authorization import _connected, _replies

T = pb.BaseCommand
TOPIC = "persistent://public/default/moving"


def _send(producer_id: int, sequence_id: int) -> bytes:
    metadata = pb.MessageMetadata(producer_name="p", sequence_id=sequence_id, publish_time=1)
    command = make_command(T.SEND, pb.CommandSend(producer_id=producer_id, sequence_id=sequence_id))
    return encode_payload_command(command, metadata, b"x")


async def _feed(session: Session, conn: ServerConnection, data: bytes) -> None:
    for event in conn.receive_data(data, 0):
        await session.handle(event)
    await session.requests.settled()  # PRODUCER answers from its own task


async def _after_close(producer_id_of_send: int) -> tuple[State, list[pb.BaseCommand]]:
    world = await AdminWorld().start()
    try:
        conn = _connected()
        session = Session(world.service, conn, lambda: None)
        body = pb.CommandProducer(topic=TOPIC, producer_id=1, request_id=1, producer_name="p")
        await _feed(session, conn, encode_command(make_command(T.PRODUCER, body)))
        assert [r.type for r in _replies(conn)] == [T.PRODUCER_SUCCESS]
        session.send_close_producer(1)  # what an unload does to each producer of the bundle
        await _feed(session, conn, _send(producer_id_of_send, 0))
        state, replies = conn.state, _replies(conn)
        await session.close()
        return state, replies
    finally:
        await world.close()


def test_a_send_for_a_producer_the_broker_closed_is_dropped_and_the_connection_stays() -> None:
    state, replies = asyncio.run(_after_close(1))
    assert state is State.CONNECTED
    assert [r.type for r in replies] == [T.CLOSE_PRODUCER]  # no receipt, no error


def test_negative_control_a_send_for_an_unknown_producer_still_closes_the_connection() -> None:
    state, _ = asyncio.run(_after_close(99))
    assert state is State.CLOSED


def test_a_producer_created_again_with_the_same_id_sends_normally() -> None:
    async def main() -> list[pb.BaseCommand]:
        world = await AdminWorld().start()
        try:
            conn = _connected()
            session = Session(world.service, conn, lambda: None)
            body = pb.CommandProducer(topic=TOPIC, producer_id=1, request_id=1, producer_name="p")
            await _feed(session, conn, encode_command(make_command(T.PRODUCER, body)))
            session.send_close_producer(1)  # the topic keeps the old "p" here: the new one is "p2"
            body = pb.CommandProducer(topic=TOPIC, producer_id=1, request_id=2, producer_name="p2")
            await _feed(session, conn, encode_command(make_command(T.PRODUCER, body)))
            await _feed(session, conn, _send(1, 0))
            for _ in range(100):
                await asyncio.sleep(0)  # the receipt follows the append (in-memory log, no time passes)
            replies = _replies(conn)
            await session.close()
            return replies
        finally:
            await world.close()

    replies = asyncio.run(main())
    assert [r.type for r in replies] == [T.PRODUCER_SUCCESS, T.CLOSE_PRODUCER, T.PRODUCER_SUCCESS, T.SEND_RECEIPT]
