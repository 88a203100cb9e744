"""PRODUCER, SUBSCRIBE and lookups are answered from their own tasks: one connection keeps reading
while a creation waits on metadata, with the ordering Pulsar gives (broker/requests.py).

A topic-load hook (``BrokerService.topic_load_hooks``, the seam replication uses) holds the load
of the topics named ``held-*`` until the test opens the gate; nothing waits on time. Each wait is
bounded (``_BOUND_S``): handled in line, as before, the first PRODUCER would hold ``handle``
until the gate opened, and ``test_a_creation_waiting_on_metadata_does_not_hold_the_connection``
fails (the negative control runs the same steps with the PRODUCER handled in line).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest

from magnetar.broker.session import Session
from magnetar.broker.topic import Topic
from magnetar.protocol.pulsar import ServerConnection, State, encode_command, pb
from magnetar.protocol.pulsar.frames import make_command
from tests.admin.harness import AdminWorld
from tests.broker.test_closed_producer_sends import _send
from tests.broker.test_session_authorization import _connected, _replies

T = pb.BaseCommand
HELD = "persistent://public/default/held-1"
FREE = "persistent://public/default/free-1"
_BOUND_S = 10.0  # a failure bound only: every step here completes without time passing


class _Gate:
    """Holds the load of ``held-*`` topics until ``open()``; counts loads waiting."""

    def __init__(self) -> None:
        self.opened = asyncio.Event()
        self.waiting = 0

    async def hook(self, topic: Topic) -> None:
        if topic.name.local_name.startswith("held-"):
            self.waiting += 1
            await self.opened.wait()


async def _world_and_session() -> tuple[AdminWorld, _Gate, ServerConnection, Session]:
    world = await AdminWorld().start()
    gate = _Gate()
    world.service.topic_load_hooks.append(gate.hook)
    conn = _connected()
    return world, gate, conn, Session(world.service, conn, lambda: None)


async def _feed(session: Session, conn: ServerConnection, data: bytes) -> None:
    for event in conn.receive_data(data, 0):
        await asyncio.wait_for(session.handle(event), _BOUND_S)


def _producer(topic: str, producer_id: int, request_id: int) -> bytes:
    return encode_command(make_command(T.PRODUCER, pb.CommandProducer(
        topic=topic, producer_id=producer_id, request_id=request_id, producer_name=f"p{producer_id}")))


def _subscribe(topic: str, consumer_id: int, request_id: int, *, durable: bool) -> bytes:
    return encode_command(make_command(T.SUBSCRIBE, pb.CommandSubscribe(
        topic=topic, subscription="s", subType=pb.CommandSubscribe.Exclusive, consumer_id=consumer_id,
        request_id=request_id, durable=durable)))


async def _wait_for(condition: Callable[[], bool]) -> None:
    async def poll() -> None:
        while not condition():
            await asyncio.sleep(0)  # other tasks run; no time passes
    await asyncio.wait_for(poll(), _BOUND_S)


def _run(scenario: Callable[[AdminWorld, _Gate, ServerConnection, Session], Awaitable[None]]) -> None:
    async def main() -> None:
        world, gate, conn, session = await _world_and_session()
        try:
            await scenario(world, gate, conn, session)
        finally:
            gate.opened.set()
            await session.close()
            await asyncio.wait_for(session.requests.settled(), _BOUND_S)
            await world.close()
    asyncio.run(main())


def test_a_creation_waiting_on_metadata_does_not_hold_the_connection() -> None:
    async def scenario(world: AdminWorld, gate: _Gate, conn: ServerConnection, session: Session) -> None:
        await _feed(session, conn, _producer(HELD, 1, 1))  # returns while the load is held
        await _wait_for(lambda: gate.waiting == 1)
        await _feed(session, conn, _producer(FREE, 2, 2))  # a second creation on the same connection
        await _wait_for(lambda: 2 in session.producers)
        replies = _replies(conn)
        assert [(r.type, r.producer_success.request_id) for r in replies] == [(T.PRODUCER_SUCCESS, 2)]
        assert 1 not in session.producers
        gate.opened.set()
        await session.requests.settled()
        assert [(r.type, r.producer_success.request_id) for r in _replies(conn)] == [(T.PRODUCER_SUCCESS, 1)]
        assert session.producers[1].topic.name.local_name == "held-1"
    _run(scenario)


def test_negative_control_a_producer_handled_in_line_holds_the_connection() -> None:
    """The same first step with PRODUCER handled in line (as before): ``handle`` does not return."""
    async def scenario(world: AdminWorld, gate: _Gate, conn: ServerConnection, session: Session) -> None:
        body = pb.CommandProducer(topic=HELD, producer_id=1, request_id=1, producer_name="p1")
        session.requests.producers[1] = 1  # recorded as pending, as the concurrent path does first
        in_line = asyncio.ensure_future(session._producer(body))
        await _wait_for(lambda: gate.waiting == 1)
        assert not in_line.done()  # held at the gate: the connection's next command would wait too
        gate.opened.set()
        await asyncio.wait_for(in_line, _BOUND_S)
    _run(scenario)


def test_a_duplicate_producer_id_while_pending_is_refused_service_not_ready() -> None:
    async def scenario(world: AdminWorld, gate: _Gate, conn: ServerConnection, session: Session) -> None:
        await _feed(session, conn, _producer(HELD, 1, 1))
        await _feed(session, conn, _producer(HELD, 1, 2))  # the client retried after its timeout
        (refused,) = _replies(conn)
        assert refused.type == T.ERROR and refused.error.request_id == 2
        assert refused.error.error == pb.ServiceNotReady
        gate.opened.set()
        await session.requests.settled()
        assert [(r.type, r.producer_success.request_id) for r in _replies(conn)] == [(T.PRODUCER_SUCCESS, 1)]
    _run(scenario)


def test_close_producer_while_pending_abandons_the_creation() -> None:
    async def scenario(world: AdminWorld, gate: _Gate, conn: ServerConnection, session: Session) -> None:
        await _feed(session, conn, _producer(HELD, 1, 1))
        await _feed(session, conn, encode_command(make_command(
            T.CLOSE_PRODUCER, pb.CommandCloseProducer(producer_id=1, request_id=2))))
        (closed,) = _replies(conn)
        assert closed.type == T.SUCCESS and closed.success.request_id == 2
        gate.opened.set()
        await session.requests.settled()
        assert _replies(conn) == []  # no answer to the abandoned PRODUCER, as Java's broker
        assert 1 not in session.producers
        topic = world.service.topics[HELD]
        assert not topic.producers
        await _feed(session, conn, _producer(HELD, 1, 3))  # the id is free again
        await session.requests.settled()
        assert [(r.type, r.producer_success.request_id) for r in _replies(conn)] == [(T.PRODUCER_SUCCESS, 3)]
        assert len(topic.producers) == 1
    _run(scenario)


def test_a_closed_connection_abandons_pending_creations() -> None:
    async def scenario(world: AdminWorld, gate: _Gate, conn: ServerConnection, session: Session) -> None:
        await _feed(session, conn, _producer(HELD, 1, 1))
        await _feed(session, conn, _subscribe(HELD, 2, 2, durable=True))
        await session.close()
        gate.opened.set()
        await session.requests.settled()
        topic = world.service.topics[HELD]
        assert not topic.producers and session.producers == {} and session.consumers == {}
        assert all(not s.consumers for s in topic.subscriptions.values())
    _run(scenario)


def test_a_send_for_a_pending_producer_closes_the_connection() -> None:
    """Java: "the producer is not ready"; the client sends nothing before PRODUCER_SUCCESS."""
    async def scenario(world: AdminWorld, gate: _Gate, conn: ServerConnection, session: Session) -> None:
        await _feed(session, conn, _producer(HELD, 1, 1))
        await _feed(session, conn, _send(1, 0))
        assert conn.state is State.CLOSED
    _run(scenario)


@pytest.mark.parametrize("durable", [True, False])
def test_close_consumer_while_subscribing_abandons_the_consumer(durable: bool) -> None:
    async def scenario(world: AdminWorld, gate: _Gate, conn: ServerConnection, session: Session) -> None:
        await _feed(session, conn, _subscribe(HELD, 7, 1, durable=durable))
        await _feed(session, conn, encode_command(make_command(
            T.CLOSE_CONSUMER, pb.CommandCloseConsumer(consumer_id=7, request_id=2))))
        (closed,) = _replies(conn)
        assert closed.type == T.SUCCESS and closed.success.request_id == 2
        gate.opened.set()
        await session.requests.settled()
        assert _replies(conn) == [] and session.consumers == {}
        subscriptions = world.service.topics[HELD].subscriptions
        # a durable subscription stays (what the client asked for); a non-durable one goes with
        # its last consumer
        assert ("s" in subscriptions) is durable
        assert all(not s.consumers for s in subscriptions.values())
    _run(scenario)


def test_lookups_answer_while_a_creation_waits() -> None:
    async def scenario(world: AdminWorld, gate: _Gate, conn: ServerConnection, session: Session) -> None:
        await _feed(session, conn, _producer(HELD, 1, 1))
        await _feed(session, conn, encode_command(make_command(T.PARTITIONED_METADATA, pb.CommandPartitionedTopicMetadata(
            topic=FREE, request_id=2))))
        await _wait_for(lambda: bool(conn.outbound_bytes))
        (answer,) = _replies(conn)
        assert answer.type == T.PARTITIONED_METADATA_RESPONSE and answer.partitionMetadataResponse.request_id == 2
    _run(scenario)
