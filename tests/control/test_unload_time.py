"""How long a bundle unload takes (issue 24: 195-206 s per unload on a saturated owner), in
virtual time: one broker over managed ledgers on fake bookies and a metadata store that answer after
``RTT_S``, each topic with dedup, a few durable subscriptions with unflushed acks. The unload must cost a few
round trips whatever the number of topics and subscriptions, and must not wait past
``namespace_bundle_unloading_timeout_ms`` for a close that hangs."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

from magnetar import sim
from magnetar.base.types import EARLIEST, TopicName
from magnetar.broker import BrokerConfig
from magnetar.broker.managed_log import ManagedLogStore
from magnetar.broker.service import BrokerService
from magnetar.catalog.lookup import LookupAnswer, LookupKind
from magnetar.catalog.resources import ClusterData
from magnetar.control.bundles import BundleRange, NamespaceBundles
from magnetar.control.ownership import ASSIGNED_RELEASE_WAIT_MS, BundleOwnership, owner_path
from magnetar.faults import breaks
from magnetar.managed_ledger import ManagedLedgerConfig, MLState
from tests.admin.harness import message
from tests.ledger.fakes import FakeTransport
from tests.managed_ledger.harness import World, make_world

NS = "public/default"
WHOLE = BundleRange(0, 0xFFFF_FFFF)
RTT_S = 0.010  # one bookie round trip (virtual)


class SlowTransport(FakeTransport):
    """Every bookie request answers after one round trip."""

    async def _run(self, bookie, op, entry_id, call):  # type: ignore[no-untyped-def]
        await asyncio.sleep(RTT_S)  # virtual time (simulated clock/loop): no real wait
        return await super()._run(bookie, op, entry_id, call)


class SlowStore:
    """A metadata store whose reads and writes answer after one round trip (a cursor's close is
    a metadata CAS alone since issue 24: it sends nothing to a bookie)."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._inner, name)
        if name not in ("get", "put", "delete", "children"):
            return attr

        async def slow(*args: Any, **kwargs: Any) -> Any:
            await asyncio.sleep(RTT_S)  # virtual time (simulated clock/loop): no real wait
            return await attr(*args, **kwargs)

        return slow


async def _owner(world: World, config: BrokerConfig, bundles_count: int = 1) -> tuple[BrokerService, BundleOwnership]:
    world.transport = SlowTransport(world.bookies)
    connect = world.metadata.connect

    async def slow_connect(*args: Any, **kwargs: Any) -> Any:
        return SlowStore(await connect(*args, **kwargs))

    world.metadata.connect = slow_connect  # type: ignore[method-assign]
    # Acks stay unpersisted until the close (the flush timer never fires in the test's span).
    factory = await world.broker(ManagedLedgerConfig(cursor_flush_interval_ms=3_600_000))
    store = await world.metadata.connect()
    service = BrokerService(config, ManagedLogStore(factory, store), store, clock=world.clock)
    assert service.resources is not None
    await service.resources.bootstrap("standalone", ClusterData())
    ownership = BundleOwnership(store, service, broker_id="127.0.0.1:1", http_url="http://127.0.0.1:2",
                                bundles_count=bundles_count)
    ownership.install()
    return service, ownership


async def _load(service: BrokerService, ownership: BundleOwnership, topics: int, subscriptions: int) -> None:
    for i in range(topics):
        name = TopicName.parse(f"persistent://{NS}/t{i}")
        await ownership.lookup(name, authoritative=True)
        topic = await service.get_topic(name, create=True)
        subs = [await topic.subscription(f"s{k}", durable=True, initial_mark_delete=EARLIEST)
                for k in range(subscriptions)]
        for seq in range(2):
            await topic.publish(message(sequence_id=seq))
        for sub in subs:
            await sub.acknowledge_up_to(topic.log.last_position)


def measure_unload(topics: int, subscriptions: int, config: BrokerConfig | None = None) -> float:
    """Virtual seconds one ``unload`` of the bundle holding ``topics`` topics takes."""
    async def main() -> float:
        world = make_world()
        service, ownership = await _owner(world, config or BrokerConfig(deduplication=True))
        await _load(service, ownership, topics, subscriptions)
        loop = asyncio.get_running_loop()
        started = loop.time()
        await ownership.unload(NS, WHOLE.name)
        took = loop.time() - started
        assert service.topics == {} and ownership.owned() == []
        assert await ownership.store.get(owner_path(NS, WHOLE)) is None
        await ownership.close()
        await service.close()
        return took

    return sim.run(main(), steps_max=5_000_000)


def test_an_unload_costs_a_few_round_trips_whatever_the_topics_and_subscriptions() -> None:
    one = measure_unload(topics=1, subscriptions=1)
    many = measure_unload(topics=40, subscriptions=6)
    assert one <= 6 * RTT_S, one
    assert many <= one + 2 * RTT_S, (one, many)


def test_negative_control_a_serial_close_is_caught() -> None:
    """``Break.SERIAL_CLOSE``: topic parts and cursors closed one after another, as before issue
    24's fix."""
    concurrent = measure_unload(topics=4, subscriptions=6)
    breaks.enable(breaks.Break.SERIAL_CLOSE)
    try:
        serial = measure_unload(topics=4, subscriptions=6)
    finally:
        breaks.disable_all()
    assert serial >= concurrent + 5 * RTT_S, (concurrent, serial)


def test_an_unload_releases_the_bundle_after_the_timeout_and_the_close_goes_on() -> None:
    async def main() -> None:
        world = make_world()
        config = BrokerConfig(deduplication=True, namespace_bundle_unloading_timeout_ms=2_000)
        service, ownership = await _owner(world, config)
        await _load(service, ownership, topics=3, subscriptions=1)
        topics = list(service.topics.values())
        held = [world.transport.rule(b, "add") for b in world.bookies]
        # One more message per topic, its add held: the managed ledgers' closes wait for it.
        adds = [asyncio.ensure_future(t.publish(message(sequence_id=2))) for t in topics]
        await asyncio.sleep(RTT_S)  # virtual time (simulated clock/loop): the adds reach the bookies
        loop = asyncio.get_running_loop()
        started = loop.time()
        await ownership.unload(NS, WHOLE.name)
        took = loop.time() - started
        assert 1.999 <= took < 2.0 + 10 * RTT_S, took
        assert ownership.owned() == [] and await ownership.store.get(owner_path(NS, WHOLE)) is None
        for rule in held:
            rule.release()
        assert all(t.log.managed_ledger.state is not MLState.CLOSED for t in topics)  # type: ignore[attr-defined]
        await ownership.close()  # waits for the closes the unload stopped waiting for
        await asyncio.gather(*adds, return_exceptions=True)
        assert all(t.log.managed_ledger.state is MLState.CLOSED for t in topics)  # type: ignore[attr-defined]
        await service.close()

    sim.run(main(), steps_max=5_000_000)


def measure_acquisitions(bundles: int) -> float:
    """Virtual seconds for concurrent authoritative lookups of one topic in each of ``bundles``
    free bundles (a move wave arriving at its target): each acquisition costs a few metadata
    round trips; distinct bundles must not wait for one another."""
    async def main() -> float:
        world = make_world()
        service, ownership = await _owner(world, BrokerConfig(), bundles_count=bundles)
        names = topics_in_distinct_bundles(bundles)
        loop = asyncio.get_running_loop()
        started = loop.time()
        answers = await asyncio.gather(*(ownership.lookup(n, authoritative=True) for n in names))
        took = loop.time() - started
        assert all(a.url == ownership.service_url for a in answers) and len(ownership.owned()) == bundles
        await ownership.close()
        await service.close()
        return took

    return sim.run(main(), steps_max=5_000_000)


def topics_in_distinct_bundles(count: int) -> list[TopicName]:
    bundles = NamespaceBundles.equal(NS, count)
    found: dict[BundleRange, TopicName] = {}
    for i in range(10_000):
        name = TopicName.parse(f"persistent://{NS}/b{i}")
        found.setdefault(bundles.find(name), name)
        if len(found) == count:
            break
    return list(found.values())


def test_bundles_of_a_move_wave_are_acquired_concurrently() -> None:
    one = measure_acquisitions(1)
    many = measure_acquisitions(8)
    assert many <= one + 2 * RTT_S, (one, many)


def test_negative_control_one_acquisition_at_a_time_is_caught(monkeypatch: Any) -> None:
    one_lock = asyncio.Lock()

    @contextlib.asynccontextmanager
    async def global_lock(self: BundleOwnership, key: str) -> AsyncIterator[None]:
        async with one_lock:
            yield

    concurrent = measure_acquisitions(8)
    monkeypatch.setattr(BundleOwnership, "_bundle_lock", global_lock)
    serial = measure_acquisitions(8)
    assert serial >= concurrent + 6 * RTT_S, (concurrent, serial)


TARGET = "pulsar://127.0.0.1:7"


def measure_lookup_after_move(remember: bool = True, after_s: float = 0.0) -> tuple[float, LookupAnswer]:
    """Virtual seconds a lookup on the previous owner takes right after (or ``after_s`` after) it
    let a bundle go toward the load balancer's target, and its answer."""
    async def main() -> tuple[float, LookupAnswer]:
        world = make_world()
        service, ownership = await _owner(world, BrokerConfig())
        if not remember:
            ownership._remember_move = lambda owned: None  # type: ignore[method-assign]
        await _load(service, ownership, topics=2, subscriptions=1)
        await ownership.unload(NS, WHOLE.name, target=TARGET)
        await asyncio.sleep(after_s)  # virtual time (simulated clock/loop): no real wait
        loop = asyncio.get_running_loop()
        started = loop.time()
        answer = await ownership.lookup(TopicName.parse(f"persistent://{NS}/t0"), authoritative=False)
        took = loop.time() - started
        await ownership.close()
        await service.close()
        return took, answer

    return sim.run(main(), steps_max=5_000_000)


def test_the_previous_owner_redirects_to_the_target_at_once_after_letting_go() -> None:
    took, answer = measure_lookup_after_move()
    assert (answer.kind, answer.url, answer.authoritative) == (LookupKind.REDIRECT, TARGET, True)
    assert took < RTT_S, took  # no metadata read


def test_negative_control_without_the_remembered_move_a_lookup_reads_the_store() -> None:
    took, _ = measure_lookup_after_move(remember=False)
    assert took >= 2 * RTT_S, took


def test_the_remembered_move_expires_after_the_assigned_release_wait() -> None:
    took, _answer = measure_lookup_after_move(after_s=ASSIGNED_RELEASE_WAIT_MS / 1000 + 1)
    assert took >= 2 * RTT_S, took  # the normal path again: owner node, load reports
