"""The load balancer's leader over the memory metadata store: election, shedding through the
owners' commands and the preallocated assignment, splits, and a new leader after the old one's
session ends (``control.leader``)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from magnetar.base.types import TopicName
from magnetar.broker import BrokerConfig, MemoryLogStore
from magnetar.broker.service import BrokerService
from magnetar.catalog.lookup import LookupAnswer, LookupKind
from magnetar.control.balancer import BalancerSettings, DecisionKind
from magnetar.control.bundles import BundleRange
from magnetar.control.leader import (
    COMMANDS_ROOT,
    DECISIONS_PATH,
    IN_FLIGHT_MS_MAX,
    BundleCommands,
    LoadBalancerLeader,
    read_decisions,
    read_leader,
)
from magnetar.control.ownership import Assignment, BundleOwnership, assignment_path
from magnetar.metadata import MemoryMetadataServer
from magnetar.metadata._local import LocalClient
from magnetar.node.broker_generation import bootstrap_cluster
from magnetar.runtime.clock import SystemClock
from tests.manual_clock import ManualClock, settle

NS = "public/default"
SETTINGS = BalancerSettings(grace_period_ms=60_000, bundle_topics_max=3, namespace_bundles_max=16,
                            history_rounds_min=1, hit_count_threshold=0)


class Node:
    def __init__(self, store: LocalClient, port: int, logs: MemoryLogStore, clock: ManualClock) -> None:
        self.store = store
        self.url = f"pulsar://127.0.0.1:{port}"
        self.service = BrokerService(BrokerConfig(advertised_port=port), logs, store)
        self.ownership = BundleOwnership(store, self.service, broker_id=f"127.0.0.1:{port}",
                                         http_url=f"http://127.0.0.1:{port + 1000}")
        self.ownership.install()
        self.leader = LoadBalancerLeader(store, self.ownership, clock, SETTINGS, interval_ms=1000,
                                         broker_id=f"127.0.0.1:{port}", web_url=f"http://127.0.0.1:{port + 1000}")
        self.commands = BundleCommands(store, self.ownership, clock, poll_ms=1000)

    async def lookup(self, topic: str, authoritative: bool = False) -> LookupAnswer:
        return await self.service.lookup.lookup(TopicName.parse(topic), authoritative)

    async def publish_load(self, now_ms: int) -> None:
        await self.ownership.loads.publish(self.ownership.load_report(0, now_ms=now_ms))


def run(body: Callable[[list[Node], MemoryMetadataServer, ManualClock], Awaitable[Any]]) -> Any:
    async def main() -> Any:
        server = MemoryMetadataServer(SystemClock())
        logs = MemoryLogStore()
        clock = ManualClock()
        nodes = [Node(await server.connect(10_000), port, logs, clock) for port in (1, 2, 3)]
        # public/default exists as on a started cluster (topics are only created in namespaces that exist)
        await bootstrap_cluster(nodes[0].service, web_url=nodes[0].ownership.http_url)
        try:
            return await asyncio.wait_for(body(nodes, server, clock), 20)
        finally:
            for node in nodes:
                await node.service.close()
                await node.ownership.close()
                await node.store.close()

    return asyncio.run(main())


async def load_topics(node: Node, count: int) -> list[str]:
    names = [f"persistent://{NS}/t{i}" for i in range(count)]
    for name in names:
        assert (await node.lookup(name, authoritative=True)).kind is LookupKind.CONNECT
        await node.service.get_topic(TopicName.parse(name), create=True)
    return names


def test_one_leader_at_a_time_and_a_new_one_when_it_dies() -> None:
    async def body(nodes: list[Node], server: MemoryMetadataServer, clock: ManualClock) -> None:
        tasks = [asyncio.get_running_loop().create_task(n.leader.run()) for n in nodes]
        await asyncio.wait_for(asyncio.wait([asyncio.ensure_future(n.leader.elected.wait()) for n in nodes],
                                            return_when=asyncio.FIRST_COMPLETED), 5)
        await settle()
        leaders = [n for n in nodes if n.leader.is_leader]
        assert len(leaders) == 1
        first = leaders[0]
        data = await read_leader(nodes[0].store)
        assert data is not None and data.service_url == first.ownership.http_url
        await server.expire_session(first.store.session.session_id)  # as a kill -9 after the timeout
        others = [n for n in nodes if n is not first]
        await asyncio.wait_for(asyncio.wait([asyncio.ensure_future(n.leader.elected.wait()) for n in others],
                                            return_when=asyncio.FIRST_COMPLETED), 5)
        await settle()
        assert [n.leader.is_leader for n in others].count(True) == 1 and not first.leader.is_leader
        data = await read_leader(others[0].store)
        assert data is not None and data.service_url != first.ownership.http_url
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    run(body)


def test_the_leader_moves_bundles_to_new_brokers_through_their_owners() -> None:
    async def body(nodes: list[Node], _: MemoryMetadataServer, clock: ManualClock) -> None:
        a, b, c = nodes
        topics = await load_topics(a, 12)
        assert len(a.ownership.owned()) == 4
        for node in nodes:
            await node.publish_load(clock.now_ms())
        settings = BalancerSettings(split_enabled=False, grace_period_ms=60_000, history_rounds_min=1,
                                    hit_count_threshold=0)
        leader = LoadBalancerLeader(a.store, a.ownership, clock, settings, interval_ms=1000,
                                    broker_id="127.0.0.1:1", web_url="http://127.0.0.1:1001")
        decisions = await leader.run_once()
        assert decisions and all(d.kind is DecisionKind.UNLOAD and d.source == a.url for d in decisions)
        targets = {d.target for d in decisions}
        assert targets <= {b.url, c.url}
        # Nothing moved yet: only the owner moves its bundles, when it carries out the command.
        assert len(a.ownership.owned()) == 4
        assert await a.commands.run_once() == len(decisions)
        assert len(a.ownership.owned()) == 4 - len(decisions)
        bundles = await a.ownership.bundles_of(NS)
        for d in decisions:
            namespace, _, name = d.bundle.rpartition("/")
            moved_topic = next(t for t in topics if bundles.find(TopicName.parse(t)) == BundleRange.parse(name))
            # A lookup on the old owner sends the client to the chosen broker, which acquires it.
            answer = await a.lookup(moved_topic)
            assert answer == LookupAnswer(LookupKind.REDIRECT, d.target or "", True)
            target = b if d.target == b.url else c
            assert (await target.lookup(moved_topic, authoritative=True)).kind is LookupKind.CONNECT
            assert not await a.store.exists(assignment_path(namespace, BundleRange.parse(name)))
        recorded = await read_decisions(a.store)
        assert [r["bundle"] for r in recorded] == [d.bundle for d in decisions]
        assert all(r["reason"] for r in recorded)
        # Too soon to decide again: reports from the touched brokers are older than the round.
        assert await leader.run_once() == []


def test_bundles_in_flight_count_on_their_target_until_it_reports_them() -> None:
    """Between the owner's release and the target's acquisition a bundle is in no report; the
    leader counts it on its target, or the next round would shed the same load again."""
    async def body(nodes: list[Node], _: MemoryMetadataServer, clock: ManualClock) -> None:
        a, b, c = nodes
        await load_topics(a, 12)
        for node in nodes:
            await node.publish_load(clock.now_ms())
        # A wide threshold (1.9x) so that the first round stops with the source still busiest.
        settings = BalancerSettings(split_enabled=False, grace_period_ms=60_000, threshold_percent=90,
                                    history_rounds_min=1, hit_count_threshold=0)
        leader = LoadBalancerLeader(a.store, a.ownership, clock, settings, interval_ms=1000,
                                    broker_id="127.0.0.1:1", web_url="")
        first = await leader.run_once()
        assert first
        await a.commands.run_once()  # released; no client looked up yet, so nobody holds them
        await clock.advance(1)
        for node in nodes:
            await node.publish_load(clock.now_ms())
        assert await leader.run_once() == []
        # Control: a leader that does not know of the moves sees the targets empty and sheds more.
        control = LoadBalancerLeader(a.store, a.ownership, clock, settings, interval_ms=1000,
                                     broker_id="127.0.0.1:1", web_url="")
        assert await control.run_once()
        # The targets take their bundles (clients looked up); the moves settle after two intervals.
        bundles = await a.ownership.bundles_of(NS)
        for d in first:
            target = b if d.target == b.url else c
            name = d.bundle.rpartition("/")[2]
            topic = next(f"persistent://{NS}/t{i}" for i in range(12)
                         if bundles.find(TopicName.parse(f"persistent://{NS}/t{i}")).name == name)
            assert (await target.lookup(topic, authoritative=True)).kind is LookupKind.CONNECT
        for step in range(3):
            await clock.advance(1)
            for node in nodes:
                await node.publish_load(clock.now_ms())
            again = await leader.run_once()
            settling = {d.bundle for d in first} & set(leader._in_flight)
            assert bool(settling) == (step < 2)
            assert step == 2 or again == []  # nothing shed while the wave settles

    run(body)

    run(body)


def test_a_move_whose_command_the_owner_has_not_carried_out_is_not_decided_again() -> None:
    """A busy owner carries out its unload commands one after another, seconds each: while a
    command waits, its move stays in flight past ``IN_FLIGHT_MS_MAX`` and the grace period, so
    the leader does not decide the same bundle again toward another target. Control: once the
    command is gone without being carried out (lost), the leader gives up and decides again."""
    async def body(nodes: list[Node], _: MemoryMetadataServer, clock: ManualClock) -> None:
        a, _b, _c = nodes
        await load_topics(a, 12)
        for node in nodes:
            await node.publish_load(clock.now_ms())
        settings = BalancerSettings(split_enabled=False, grace_period_ms=1000, history_rounds_min=1,
                                    hit_count_threshold=0)
        leader = LoadBalancerLeader(a.store, a.ownership, clock, settings, interval_ms=1000,
                                    broker_id="127.0.0.1:1", web_url="")
        first = await leader.run_once()
        assert first and all(d.kind is DecisionKind.UNLOAD for d in first)
        moved = {d.bundle for d in first}
        for _ in range(3):  # the owner is slow: its commands wait past every timeout
            await clock.advance((IN_FLIGHT_MS_MAX + 10_000) / 1000)
            for node in nodes:
                await node.publish_load(clock.now_ms())
            assert await leader.run_once() == []
            assert moved <= set(leader._in_flight)
        assert len(a.ownership.owned()) == 4
        # Control: the commands vanish without being carried out; after the timeout, decided again.
        commands = f"{COMMANDS_ROOT}/127.0.0.1:1"
        for child in await a.store.children(commands):
            await a.store.delete(f"{commands}/{child}")
        again: list[Any] = []
        for _ in range(3):
            await clock.advance((IN_FLIGHT_MS_MAX + 10_000) / 1000)
            for node in nodes:
                await node.publish_load(clock.now_ms())
            again += await leader.run_once()
        assert {d.bundle for d in again} & moved

    run(body)


def test_a_new_leader_keeps_the_grace_period_of_moves_decided_before() -> None:
    async def body(nodes: list[Node], _: MemoryMetadataServer, clock: ManualClock) -> None:
        a, b, _c = nodes
        await load_topics(a, 12)
        for node in nodes:
            await node.publish_load(clock.now_ms())
        settings = BalancerSettings(split_enabled=False, grace_period_ms=60_000, history_rounds_min=1,
                                    hit_count_threshold=0)
        first_ms = clock.now_ms()
        first = LoadBalancerLeader(a.store, a.ownership, clock, settings, interval_ms=1000,
                                   broker_id="127.0.0.1:1", web_url="")
        decided = await first.run_once()
        moved = {d.bundle for d in decided}
        assert moved
        # The unloads never happened (owner did not act): a second leader must not move them again.
        second = LoadBalancerLeader(b.store, b.ownership, clock, settings, interval_ms=1000,
                                    broker_id="127.0.0.1:2", web_url="")
        await second._learn_history()
        # ... and remembers where each moved bundle was, so it does not send one back there.
        assert second.balancer_state.left == {d.bundle: {d.source: first_ms} for d in decided}
        await clock.advance(1)
        for node in nodes:
            await node.publish_load(clock.now_ms())
        again = await second.run_once()
        assert not {d.bundle for d in again} & moved
        control = LoadBalancerLeader(b.store, b.ownership, clock, settings, interval_ms=1000,
                                     broker_id="127.0.0.1:2", web_url="")  # without the history
        assert {d.bundle for d in await control.run_once()} & moved

    run(body)


def test_a_hot_bundle_splits_on_its_owner_and_its_halves_can_move() -> None:
    async def body(nodes: list[Node], _: MemoryMetadataServer, clock: ManualClock) -> None:
        a = nodes[0]
        await load_topics(a, 16)
        for node in nodes:
            await node.publish_load(clock.now_ms())
        leader = LoadBalancerLeader(a.store, a.ownership, clock,
                                    BalancerSettings(shedding_enabled=False, bundle_topics_max=3,
                                                     namespace_bundles_max=6),
                                    interval_ms=1000, broker_id="127.0.0.1:1", web_url="")
        decisions = await leader.run_once()
        assert len(decisions) == 2 and all(d.kind is DecisionKind.SPLIT for d in decisions)  # 4 -> 6 bundles max
        await a.commands.run_once()
        assert len(a.ownership.owned()) == 6 and len(a.service.topics) == 16
        assert len((await a.ownership.current_bundles(NS)).ranges) == 6
        stored = json.loads((await a.store.get(DECISIONS_PATH)).value)  # type: ignore[union-attr]
        assert all("loadBalancerNamespaceBundleMaxTopics" in d["reason"] for d in stored["decisions"])
        halves = {o.key for o in a.ownership.owned()} - {d.bundle for d in decisions}
        await clock.advance(1)
        for node in nodes:
            await node.publish_load(clock.now_ms())
        shed = LoadBalancerLeader(a.store, a.ownership, clock,
                                  BalancerSettings(split_enabled=False, history_rounds_min=1, hit_count_threshold=0),
                                  interval_ms=1000, broker_id="127.0.0.1:1", web_url="")
        moves = await shed.run_once()
        assert moves and {d.bundle for d in moves} <= halves
        assert {d.target for d in moves} == {nodes[1].url, nodes[2].url}  # the halves spread out

    run(body)


def test_admin_leader_broker_load_report_decisions_and_racks_info() -> None:
    from magnetar.admin import AdminContext, build_admin_app
    from tests.admin.harness import asgi_call

    async def body(nodes: list[Node], _: MemoryMetadataServer, clock: ManualClock) -> None:
        a, b, _c = nodes
        app = build_admin_app(AdminContext(b.service, cluster="c", service_url=b.ownership.http_url))
        assert (await asgi_call(app, "GET", "/brokers/leaderBroker")).status == 404
        task = asyncio.get_running_loop().create_task(a.leader.run())
        await asyncio.wait_for(a.leader.elected.wait(), 5)
        reply = await asgi_call(app, "GET", "/brokers/leaderBroker")
        assert reply.status == 200 and reply.json() == {"serviceUrl": "http://127.0.0.1:1001",
                                                          "brokerId": "127.0.0.1:1"}
        await load_topics(b, 3)
        report = (await asgi_call(app, "GET", "/broker-stats/load-report")).json()
        assert report["pulsarServiceUrl"] == b.url and report["numTopics"] == 3
        assert sum(s["topics"] for s in report["lastStats"].values()) == 3 and "cpu" in report
        decisions = (await asgi_call(app, "GET", "/broker-stats/load-balancer/decisions")).json()
        assert decisions["leader"] == "127.0.0.1:1" and isinstance(decisions["decisions"], list)
        # racks-info, Pulsar's shape
        assert (await asgi_call(app, "GET", "/bookies/racks-info")).json() == {}
        assert (await asgi_call(app, "POST", "/bookies/racks-info/127.0.0.1:3181",
                                {"rack": "/region-a/rack-1", "hostname": "h"})).status == 204
        assert (await asgi_call(app, "GET", "/bookies/racks-info")).json() == {
            "default": {"127.0.0.1:3181": {"rack": "/region-a/rack-1", "hostname": "h", "region": "region-a"}}}
        # A rack and a region given apart are stored as Pulsar's /region/rack; the region is shown.
        assert (await asgi_call(app, "POST", "/bookies/racks-info/127.0.0.1:3182",
                                {"rack": "rack-2", "region": "region-b"})).status == 204
        assert (await asgi_call(app, "GET", "/bookies/racks-info/127.0.0.1:3182")).json() == {
            "rack": "/region-b/rack-2", "hostname": "", "region": "region-b"}
        stored = json.loads((await b.store.get("/bookies")).value)  # type: ignore[union-attr]
        assert stored["default"]["127.0.0.1:3182"] == {"rack": "/region-b/rack-2", "hostname": ""}
        assert (await asgi_call(app, "POST", "/bookies/racks-info/127.0.0.1:3182",
                                {"rack": "/region-a/rack-2", "region": "region-b"})).status == 412
        assert (await asgi_call(app, "GET", "/bookies/racks-info/127.0.0.1:3181")).json()["rack"] == "/region-a/rack-1"
        assert (await asgi_call(app, "POST", "/bookies/racks-info/127.0.0.1:3181", {"rack": ""})).status == 412
        assert (await asgi_call(app, "POST", "/bookies/racks-info/not-a-bookie", {"rack": "/r"})).status == 412
        assert (await asgi_call(app, "DELETE", "/bookies/racks-info/127.0.0.1:3181")).status == 204
        assert (await asgi_call(app, "GET", "/bookies/racks-info/127.0.0.1:3181")).status == 404
        assert (await asgi_call(app, "DELETE", "/bookies/racks-info/127.0.0.1:3181")).status == 404
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)

    run(body)


def test_a_lookup_on_the_assigned_broker_waits_for_the_owner_to_let_go() -> None:
    async def body(nodes: list[Node], _: MemoryMetadataServer, clock: ManualClock) -> None:
        a, b, _c = nodes
        (topic,) = await load_topics(a, 1)
        bundle = (await a.ownership.bundles_of(NS)).find(TopicName.parse(topic))
        # Control: without an assignment, the other broker redirects to the owner at once.
        assert await b.lookup(topic, authoritative=True) == LookupAnswer(LookupKind.REDIRECT, a.url, False)
        await a.store.put(assignment_path(NS, bundle), Assignment(b.url, a.url, "test").encode(), -1)
        waiting = asyncio.get_running_loop().create_task(b.lookup(topic, authoritative=True))
        await settle()
        assert not waiting.done()  # held while A still owns the bundle
        await a.ownership.unload(NS, bundle.name, target=b.url)
        assert await asyncio.wait_for(waiting, 5) == LookupAnswer(LookupKind.CONNECT, b.url, True)
        assert not await a.store.exists(assignment_path(NS, bundle))  # placed: assignment done
        await settle()
        assert str(TopicName.parse(topic)) in b.service.topics  # loaded at once, before any client asked

    run(body)


def test_while_a_bundle_unloads_toward_a_target_lookups_are_sent_there() -> None:
    from magnetar.broker.errors import BrokerError
    from magnetar.control.ownership import BundleState

    async def body(nodes: list[Node], _: MemoryMetadataServer, clock: ManualClock) -> None:
        a, b, _c = nodes
        (topic,) = await load_topics(a, 1)
        (owned,) = a.ownership.owned()
        owned.move(BundleState.UNLOADING)  # as ``unload`` leaves it while the topics close
        with pytest.raises(BrokerError):  # control: an unload with no target answers "retry"
            await a.lookup(topic)
        owned.moving_to = b.url
        assert await a.lookup(topic) == LookupAnswer(LookupKind.REDIRECT, b.url, True)

    run(body)


class _GatedOwnership:
    """An owner whose unloads wait until the test lets them go, recording starts and ends."""

    class _Loads:
        broker_id = "127.0.0.1:9"

    def __init__(self) -> None:
        self.loads = self._Loads()
        self.events: list[tuple[str, str]] = []
        self.release = asyncio.Event()
        self.started = asyncio.Condition()

    def owns(self, namespace: str, bundle: str) -> bool:
        return True

    async def unload(self, namespace: str, bundle: str, target: str | None = None) -> None:
        async with self.started:
            self.events.append(("start", bundle))
            self.started.notify_all()
        await self.release.wait()
        self.events.append(("end", bundle))


def test_commands_of_distinct_bundles_run_concurrently_and_one_bundles_in_order() -> None:
    """Three unloads of distinct bundles are all under way before any ends (a busy owner no
    longer closes one bundle after another); two commands for one bundle run one after the other."""
    async def body(nodes: list[Node], _: MemoryMetadataServer, clock: ManualClock) -> None:
        owner = _GatedOwnership()
        commands = BundleCommands(nodes[0].store, owner, clock, poll_ms=1000)  # type: ignore[arg-type]
        bundles = ["0x00000000_0x40000000", "0x40000000_0x80000000", "0x80000000_0xc0000000",
                   "0x00000000_0x40000000"]
        for bundle in bundles:
            command = {"op": "unload", "bundle": f"{NS}/{bundle}", "target": None, "reason": "test", "time": 0}
            await nodes[0].store.create(f"{commands.path}/cmd-", json.dumps(command).encode(), sequential=True)
        run = asyncio.ensure_future(commands.run_once())
        async with owner.started:
            await asyncio.wait_for(owner.started.wait_for(lambda: len(owner.events) >= 3), 5)
        assert sorted(b for kind, b in owner.events) == sorted(bundles[:3])  # all three at once
        owner.release.set()
        assert await run == 4
        first = owner.events.index(("end", bundles[0]))
        second_start = [i for i, e in enumerate(owner.events) if e == ("start", bundles[0])][1]
        assert first < second_start  # the same bundle's commands in order
        assert await nodes[0].store.children(commands.path) == []

    run(body)
