"""Replicated subscriptions between two in-process clusters (in-memory topics, a manual clock, the
replicators' reading played by ``_Link``): snapshot rounds, convergence when idle, individual acks."""

from __future__ import annotations

import asyncio

from magnetar.base.types import EARLIEST, Position, TopicName
from magnetar.broker import BrokerConfig, MemoryLogStore
from magnetar.broker.replicated import REPL_SOURCE_POSITION_PROPERTY, mark_replicated_subscription
from magnetar.broker.subscription import Subscription
from magnetar.broker.topic import Topic
from magnetar.protocol.pulsar import headers_and_payload, pb
from magnetar.protocol.pulsar.stored import split_stored_entry
from magnetar.replication.policy import should_replicate
from magnetar.replication.subscriptions import SubscriptionsController
from tests.manual_clock import ManualClock, settle

TOPIC = "persistent://public/default/rs"


class _Link:
    """What the replicator of ``source`` toward ``remote`` does with each entry: tell the
    controller, then copy what should go (``replicated_from`` + source position)."""

    def __init__(self, source: Topic, controller: SubscriptionsController, remote: Topic, local: str,
                 remote_name: str) -> None:
        self.source, self.controller, self.remote = source, controller, remote
        self.local, self.remote_name = local, remote_name
        self.next = EARLIEST.next()

    async def pump(self) -> int:
        moved = 0
        for entry in await self.source.log.read(self.next, 10_000):
            self.next = entry.position.next()
            metadata, payload = split_stored_entry(entry.payload)
            await self.controller.observe(entry.position, metadata, payload)
            if should_replicate(metadata, self.remote_name):
                metadata.replicated_from = self.local
                metadata.properties.add(key=REPL_SOURCE_POSITION_PROPERTY,
                                        value=f"{entry.position.ledger_id}:{entry.position.entry_id}")
                await self.remote.publish(headers_and_payload(metadata, bytes(payload)))
                moved += 1
        return moved


class _World:
    def __init__(self) -> None:
        self.clock = ManualClock()
        self.topics: dict[str, Topic] = {}
        self.controllers: dict[str, SubscriptionsController] = {}
        self.links: list[_Link] = []

    async def start(self) -> _World:
        for name in ("A", "B"):
            log = await MemoryLogStore().open_log(TOPIC, create=True)
            self.topics[name] = Topic(TopicName.parse(TOPIC), log, BrokerConfig(), clock=self.clock)
        for name, other in (("A", "B"), ("B", "A")):
            self.controllers[name] = SubscriptionsController(
                self.topics[name], name, remotes=lambda other=other: [other], connected=lambda: True, clock=self.clock)
        for name, other in (("A", "B"), ("B", "A")):
            self.links.append(_Link(self.topics[name], self.controllers[name], self.topics[other], name, other))
        return self

    async def replicate(self) -> None:
        """Run both replicators until nothing moves."""
        while sum([await link.pump() for link in self.links]):
            pass
        await settle()

    async def tick(self) -> None:
        """One controller tick everywhere, then replication until quiet (markers travel)."""
        for controller in self.controllers.values():
            await controller.tick()
        await self.replicate()

    async def settle_rounds(self, ticks_max: int = 20) -> int:
        """Tick until a tick writes nothing anywhere (no round, no update); returns the ticks."""
        for ticks in range(1, ticks_max + 1):
            before = [t.log.last_position for t in self.topics.values()]
            await self.tick()
            if [t.log.last_position for t in self.topics.values()] == before:
                return ticks
        raise AssertionError(f"still writing markers after {ticks_max} ticks")

    async def subscription(self, cluster: str) -> Subscription:
        subscription = await self.topics[cluster].subscription("sub", durable=True, initial_mark_delete=EARLIEST)
        await mark_replicated_subscription(subscription.cursor)
        return subscription


async def _ack(subscription: Subscription, positions: list[Position]) -> None:
    await subscription.acknowledge(pb.CommandAck(ack_type=pb.CommandAck.Individual), [(p, []) for p in positions])


def _data(seq: int) -> bytes:
    return headers_and_payload(pb.MessageMetadata(producer_name="p", sequence_id=seq, publish_time=1), b"x")


def _unacked_data(subscription: Subscription, topic: Topic, entries: list[tuple[Position, bool]]) -> list[Position]:
    return [p for p, marker in entries if not marker and not subscription.cursor.is_acked(p)]


async def _entries(topic: Topic) -> list[tuple[Position, bool]]:
    return [(e.position, split_stored_entry(e.payload)[0].marker_type != 0) for e in await topic.log.read(EARLIEST, 10_000)]


def test_idle_convergence_carries_holes_and_markers_never_count() -> None:
    async def run() -> None:
        world = await _World().start()
        a_topic, b_topic = world.topics["A"], world.topics["B"]
        a_sub = await world.subscription("A")
        produced = [await a_topic.publish(_data(i)) for i in range(20)]
        await world.replicate()
        holes = {produced[3], produced[13]}
        await _ack(a_sub, [p for p in produced if p not in holes])
        ticks = await world.settle_rounds()  # no new data: rounds still run (idle convergence)
        assert ticks <= 6
        b_sub = b_topic.subscriptions["sub"]  # created by the first update, at the earliest position
        a_left = _unacked_data(a_sub, a_topic, await _entries(a_topic))
        b_entries = await _entries(b_topic)
        b_left = _unacked_data(b_sub, b_topic, b_entries)
        assert a_left == sorted(holes)
        assert len(b_left) == 2  # the copies of the same two messages, nothing else
        assert a_sub.cursor.backlog_entries() == b_sub.cursor.backlog_entries() == 2  # markers acked
        assert world.controllers["A"].snapshots_completed >= 1
        # the consumer acknowledges the holes: both subscriptions drain completely
        await _ack(a_sub, sorted(holes))
        await world.settle_rounds()
        assert a_sub.cursor.backlog_entries() == b_sub.cursor.backlog_entries() == 0

    asyncio.run(run())


def test_without_ticks_nothing_moves_in_the_remote() -> None:
    """The control: acknowledgements in A reach B only through the controller's markers."""

    async def run() -> None:
        world = await _World().start()
        a_sub = await world.subscription("A")
        produced = [await world.topics["A"].publish(_data(i)) for i in range(5)]
        await world.replicate()
        await _ack(a_sub, produced)
        await world.replicate()
        assert "sub" not in world.topics["B"].subscriptions

    asyncio.run(run())
