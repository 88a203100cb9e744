"""Bundle ownership over the memory metadata store: two brokers, each a ``BrokerService`` with a
``BundleOwnership`` on its own session (``control.ownership``)."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import pytest

from magnetar.base.types import EARLIEST, TopicName
from magnetar.broker import BrokerConfig, MemoryLogStore
from magnetar.broker.consumer import Consumer, SubType
from magnetar.broker.errors import BrokerError
from magnetar.broker.producer import AccessMode, Producer
from magnetar.broker.service import BrokerService
from magnetar.catalog.lookup import LookupAnswer, LookupKind
from magnetar.catalog.resources import ClusterData
from magnetar.control.bundles import BundleRange, NamespaceBundles, local_policies_path
from magnetar.control.ownership import BundleOwnership, OwnerData, OwnershipState, owner_path
from magnetar.metadata import MemoryMetadataServer
from magnetar.metadata._local import LocalClient
from magnetar.metadata.errors import MetadataUnavailableError
from magnetar.protocol.pulsar import pb
from magnetar.runtime.clock import SystemClock
from tests.broker.fakes import FakeChannel, entry
from tests.manual_clock import ManualClock

NS = "public/default"
URL_A = "pulsar://127.0.0.1:1"
URL_B = "pulsar://127.0.0.1:2"


@dataclass
class Channel(FakeChannel):
    closed_producers: list[int] = field(default_factory=list)

    def send_close_producer(self, producer_id: int) -> None:
        self.closed_producers.append(producer_id)


class Node:
    def __init__(self, store: LocalClient, port: int, logs: MemoryLogStore) -> None:
        self.store = store
        self.service = BrokerService(BrokerConfig(advertised_port=port), logs, store)
        self.ownership = BundleOwnership(store, self.service, broker_id=f"127.0.0.1:{port}",
                                         http_url=f"http://127.0.0.1:{port + 1000}")
        self.ownership.install()

    async def lookup(self, topic: str, authoritative: bool = False) -> LookupAnswer:
        return await self.service.lookup.lookup(TopicName.parse(topic), authoritative)

    async def publish_load(self) -> None:
        await self.ownership.loads.publish(self.ownership.load_report(0))


def topics_in_distinct_bundles() -> list[str]:
    """One topic name per default bundle of public/default, in bundle order."""
    bundles = NamespaceBundles.equal(NS, 4)
    found: dict[BundleRange, str] = {}
    for i in range(1000):
        name = f"t{i}"
        found.setdefault(bundles.find(TopicName.parse(name)), name)
    return [found[b] for b in bundles.ranges]


def run(body: Callable[[Node, Node, MemoryMetadataServer], Awaitable[Any]]) -> Any:
    async def main() -> Any:
        server = MemoryMetadataServer(SystemClock())
        logs = MemoryLogStore()
        a = Node(await server.connect(10_000), 1, logs)
        b = Node(await server.connect(10_000), 2, logs)
        # public/default exists, as a standalone or cluster bootstrap makes it
        assert a.service.resources is not None
        await a.service.resources.bootstrap(a.service.config.cluster_name, ClusterData())
        try:
            return await asyncio.wait_for(body(a, b, server), 20)
        finally:
            for node in (a, b):
                await node.service.close()
                await node.ownership.close()
                await node.store.close()

    return asyncio.run(main())


def connect(url: str) -> LookupAnswer:
    return LookupAnswer(LookupKind.CONNECT, url, True)


def test_first_lookup_takes_the_bundle_and_others_redirect_to_the_owner() -> None:
    async def body(a: Node, b: Node, _: MemoryMetadataServer) -> None:
        topic = topics_in_distinct_bundles()[0]
        assert await a.lookup(topic) == connect(URL_A)
        assert await b.lookup(topic) == LookupAnswer(LookupKind.REDIRECT, URL_A, False)
        assert await a.lookup(topic) == connect(URL_A)
        owner = await a.store.get(owner_path(NS, BundleRange(0, 0x4000_0000)))
        assert owner is not None and OwnerData.decode(owner.value).native_url == URL_A
        stored = await a.store.get(local_policies_path(NS))
        assert stored is not None and len(NamespaceBundles.decode(NS, stored.value).ranges) == 4

    run(body)


def test_a_free_bundle_goes_to_the_least_loaded_broker_unless_the_lookup_is_authoritative() -> None:
    async def body(a: Node, b: Node, _: MemoryMetadataServer) -> None:
        t0, t1, t2, t3 = topics_in_distinct_bundles()
        assert await a.lookup(t0) == connect(URL_A)
        await a.publish_load()  # A: 1 bundle
        assert await b.lookup(t1, authoritative=True) == connect(URL_B)
        assert await b.lookup(t2, authoritative=True) == connect(URL_B)
        await b.publish_load()  # B: 2 bundles
        # B is busier: it sends the client to A, authoritatively; A then takes the bundle.
        assert await b.lookup(t3) == LookupAnswer(LookupKind.REDIRECT, URL_A, True)
        assert await a.lookup(t3, authoritative=True) == connect(URL_A)
        assert sorted(o.range.name for o in a.ownership.owned()) == [
            "0x00000000_0x40000000", "0xc0000000_0xffffffff"]

    run(body)


def test_a_broker_loads_only_topics_of_bundles_it_owns() -> None:
    async def body(a: Node, b: Node, _: MemoryMetadataServer) -> None:
        topic = TopicName.parse(topics_in_distinct_bundles()[0])
        await a.lookup(str(topic))
        await a.service.get_topic(topic, create=True)
        with pytest.raises(BrokerError) as raised:
            await b.service.get_topic(topic, create=True)
        assert raised.value.code == pb.ServiceNotReady

    run(body)


async def attach_clients(node: Node, topic_name: str) -> Channel:
    channel = Channel()
    topic = await node.service.get_topic(TopicName.parse(topic_name), create=True)
    producer = Producer(topic, 7, "p", channel, AccessMode.SHARED, 10)
    topic.add_producer(producer, 1, lambda *_: None)
    subscription = await topic.subscription("s", durable=True, initial_mark_delete=EARLIEST)
    subscription.add_consumer(Consumer(9, "c", SubType.EXCLUSIVE, channel))
    return channel


def test_an_owner_whose_session_expires_stops_serving_at_once_and_another_takes_over() -> None:
    async def body(a: Node, b: Node, server: MemoryMetadataServer) -> None:
        topic = topics_in_distinct_bundles()[1]
        assert await a.lookup(topic) == connect(URL_A)
        channel = await attach_clients(a, topic)
        await server.expire_session(a.store.session.session_id)
        # Synchronously, in the session callback: the topic is out and the clients were told.
        assert a.ownership.session_lost.is_set()
        assert a.ownership.state is OwnershipState.SESSION_LOST
        assert str(TopicName.parse(topic)) not in a.service.topics
        assert channel.closed_producers == [7] and channel.closed_consumers == [9]
        assert a.ownership.owned() == []
        with pytest.raises(BrokerError):
            await a.lookup(topic)
        assert await b.lookup(topic) == connect(URL_B)
        await b.service.get_topic(TopicName.parse(topic), create=True)

    run(body)


def test_unload_closes_the_topics_then_frees_the_bundle() -> None:
    async def body(a: Node, b: Node, _: MemoryMetadataServer) -> None:
        topic = topics_in_distinct_bundles()[2]
        await a.lookup(topic)
        channel = await attach_clients(a, topic)
        await a.ownership.unload(NS, "0x80000000_0xc0000000")
        assert channel.closed_producers == [7] and channel.closed_consumers == [9]
        assert a.service.topics == {} and a.ownership.owned() == []
        assert await b.lookup(topic, authoritative=True) == connect(URL_B)
        with pytest.raises(KeyError):
            await a.ownership.unload(NS, "0x80000000_0xc0000000")  # not owned any more

    run(body)


def test_split_keeps_both_halves_and_the_loaded_topics_on_the_owner() -> None:
    async def body(a: Node, b: Node, _: MemoryMetadataServer) -> None:
        topic = topics_in_distinct_bundles()[3]
        await a.lookup(topic)
        channel = await attach_clients(a, topic)
        low, high = await a.ownership.split(NS, "0xc0000000_0xffffffff")
        assert (low.name, high.name) == ("0xc0000000_0xdfffffff", "0xdfffffff_0xffffffff")  # as Pulsar
        assert sorted(o.range for o in a.ownership.owned()) == [low, high]
        assert str(TopicName.parse(topic)) in a.service.topics and channel.closed_producers == []
        assert a.ownership.serves(TopicName.parse(topic))
        assert not await a.store.exists(owner_path(NS, BundleRange(0xC000_0000, 0xFFFF_FFFF)))
        await asyncio.sleep(0.05)  # B's watch drops its cached boundaries
        assert len((await b.ownership.bundles_of(NS)).ranges) == 5
        assert await b.lookup(topic) == LookupAnswer(LookupKind.REDIRECT, URL_A, False)

    run(body)


def test_admin_reads_of_bundles_do_not_wait_for_the_watch() -> None:
    """A split on A is seen by an admin read on B before B's watch event arrives (the CI flake:
    ``GET .../bundles`` on the other broker answered 4 right after a split)."""
    async def body(a: Node, b: Node, server: MemoryMetadataServer) -> None:
        topic = topics_in_distinct_bundles()[3]
        before = await b.ownership.bundles_of(NS)
        await a.lookup(topic)
        await a.ownership.split(NS, "0xc0000000_0xffffffff")
        b.ownership._bundles[NS] = before  # the watch event not delivered yet
        assert len((await b.ownership.bundles_of(NS)).ranges) == 4  # the cached view (control)
        assert len((await b.ownership.current_bundles(NS)).ranges) == 5

    run(body)


def test_a_restarted_broker_replaces_the_ownership_node_of_its_previous_life() -> None:
    async def body(a: Node, b: Node, server: MemoryMetadataServer) -> None:
        topic = topics_in_distinct_bundles()[0]
        old_life = await server.connect(10_000)
        bundle = BundleRange(0, 0x4000_0000)
        await a.ownership.bundles_of(NS)
        await old_life.create(owner_path(NS, bundle), OwnerData(URL_A, "").encode(), ephemeral=True)
        assert await b.lookup(topic) == LookupAnswer(LookupKind.REDIRECT, URL_A, False)
        assert await a.lookup(topic) == connect(URL_A)
        assert a.ownership.serves(TopicName.parse(topic))
        await old_life.close()

    run(body)


def test_the_load_report_follows_ownership_at_once_and_rates_over_the_interval() -> None:
    async def body(a: Node, b: Node, _: MemoryMetadataServer) -> None:
        clock = ManualClock()
        task = asyncio.get_running_loop().create_task(
            a.ownership.run_load_reports(clock, lambda: 3, interval_ms=1_000))
        try:
            await clock.advance(0.2)
            first = await b.ownership.loads.all()
            assert [(r.pulsar_service_url, r.bundles, r.connections) for r in first] == [(URL_A, (), 3)]
            topic = topics_in_distinct_bundles()[0]
            await a.lookup(topic)  # an owned bundle more: republished within one check, not one interval
            await clock.advance(0.2)
            (report,) = await b.ownership.loads.all()
            assert report.bundles == ("public/default/0x00000000_0x40000000",)
            loaded = await a.service.get_topic(TopicName.parse(topic), create=True)
            for i in range(10):
                await loaded.publish(entry(sequence_id=i))
            await clock.advance(1.0)
            (report,) = await b.ownership.loads.all()
            assert report.topics == 1 and report.msg_rate_in == pytest.approx(10 / 1.4, rel=0.01)
        finally:
            task.cancel()

    run(body)


def test_a_lookup_the_metadata_store_cannot_answer_is_service_not_ready() -> None:
    async def body(a: Node, b: Node, server: MemoryMetadataServer) -> None:
        async def unavailable(path: str) -> None:
            raise MetadataUnavailableError(f"ZooKeeper unavailable ({path})")

        a.store.get = unavailable  # type: ignore[method-assign]
        with pytest.raises(BrokerError) as raised:
            await a.lookup(topics_in_distinct_bundles()[0])
        assert raised.value.code == pb.ServiceNotReady

    run(body)


def test_a_redirect_names_the_owners_listener() -> None:
    async def body(a: Node, b: Node, _: MemoryMetadataServer) -> None:
        for node, host in ((a, "a.example"), (b, "b.example")):
            port = node.service.config.advertised_port
            node.service.config = dataclasses.replace(
                node.service.config,
                advertised_listeners=f"internal:pulsar://127.0.0.1:{port},external:pulsar://{host}:{port}")
        topic = topics_in_distinct_bundles()[0]
        assert await a.lookup(topic) == connect(URL_A)
        answer = await b.lookup(topic)
        assert answer.kind is LookupKind.REDIRECT and answer.url == URL_A
        assert b.service.listener_urls("external", answer) == ("pulsar://a.example:1", None)
        assert b.service.listener_urls("", answer) == (URL_A, None)
        with pytest.raises(BrokerError) as refused:
            b.service.listener_urls("nope", answer)
        assert refused.value.code == pb.ServiceNotReady
        assert a.service.listener_urls("external", await a.lookup(topic)) == ("pulsar://a.example:1", None)

    run(body)
