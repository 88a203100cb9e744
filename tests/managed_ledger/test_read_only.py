"""Read-only managed ledgers: a broker that does not own a topic reads it from the bookies.

Each test builds an owner (``ManagedLedger``) and a read-only view over a second ledger client
whose transport and manager count what they are asked to do, so a test can show that the reader
never writes, fences, recovers or creates anything.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from magnetar.base.errors import NotFoundError
from magnetar.base.limits import READ_ONLY_FEED_BYTES_MAX
from magnetar.base.rng import SeededRng
from magnetar.base.types import BookieId, Position
from magnetar.ledger.config import LedgerClientConfig
from magnetar.ledger.manager import LedgerManager
from magnetar.ledger.placement import RandomPlacement
from magnetar.managed_ledger import ManagedLedger, ManagedLedgerFencedError
from magnetar.managed_ledger.entry_reader import CacheBudget
from magnetar.managed_ledger.offload import OffloadStatus, offloaded
from magnetar.managed_ledger.offload_memory import MemoryOffloader
from magnetar.managed_ledger.read_only import (
    FeedUpdate,
    ReadOnlyManagedLedger,
    follow_managed_ledger,
    fresh_entries,
)
from magnetar.managed_ledger.read_only_cursors import (
    HolderProbe,
    LockRecord,
    read_only_cursors,
    read_only_holders,
)
from magnetar.protocol.bookie.codec import EncodedEntry
from tests.ledger.fakes import FakeTransport
from tests.managed_ledger.harness import TOPIC, World, config, make_world, until


class CountingTransport(FakeTransport):
    """The fake bookies, with every request counted by kind (fencing ones apart)."""

    def __init__(self, world: World) -> None:
        super().__init__(world.bookies)
        self.counts: dict[str, int] = {}

    def _count(self, kind: str) -> None:
        self.counts[kind] = self.counts.get(kind, 0) + 1

    async def add(self, bookie: BookieId, entry: EncodedEntry, *, recovery: bool, master_key: bytes) -> None:
        self._count("add")
        await super().add(bookie, entry, recovery=recovery, master_key=master_key)

    async def read(self, bookie: BookieId, ledger_id: int, entry_id: int, *, fence: bool, master_key: bytes) -> EncodedEntry:
        self._count("fencing_read" if fence else "read")
        return await super().read(bookie, ledger_id, entry_id, fence=fence, master_key=master_key)

    async def read_last_entry(self, bookie: BookieId, ledger_id: int, *, fence: bool, master_key: bytes) -> Any:
        self._count("fencing_read" if fence else "read_lac")
        return await super().read_last_entry(bookie, ledger_id, fence=fence, master_key=master_key)

    async def write_lac(self, bookie: BookieId, ledger_id: int, lac: int, *, master_key: bytes) -> None:
        self._count("write_lac")
        await super().write_lac(bookie, ledger_id, lac, master_key=master_key)


class CountingManager(LedgerManager):
    """Records every call that would write: create, recover (fence), open with recovery, delete."""

    writes: list[str]

    async def create_ledger(self, *args: Any, **kwargs: Any) -> Any:
        self.writes.append("create_ledger")
        return await super().create_ledger(*args, **kwargs)

    async def recover_ledger(self, *args: Any, **kwargs: Any) -> Any:
        self.writes.append("recover_ledger")
        return await super().recover_ledger(*args, **kwargs)

    async def open_ledger(self, *args: Any, **kwargs: Any) -> Any:
        self.writes.append("open_ledger")
        return await super().open_ledger(*args, **kwargs)

    async def delete_ledger(self, *args: Any, **kwargs: Any) -> Any:
        self.writes.append("delete_ledger")
        return await super().delete_ledger(*args, **kwargs)


class InProcessFeed:
    """The owner's notifications, in process (a real broker carries them over HTTP)."""

    def __init__(self, owner: ManagedLedger) -> None:
        self.owner = owner

    def follow(self, topic: str, after: Position) -> AsyncIterator[FeedUpdate]:
        return follow_managed_ledger(self.owner, after)

    def owner_url(self, topic: str) -> str | None:
        return "pulsar://owner:6650"

    async def find_owner_url(self, topic: str) -> str | None:
        return "pulsar://owner:6650"


class PositionsOnlyFeed(InProcessFeed):
    """The owner's notifications without the entries (as when its cache no longer has them)."""

    async def follow(self, topic: str, after: Position) -> AsyncIterator[FeedUpdate]:  # type: ignore[override]
        async for update in follow_managed_ledger(self.owner, after):
            yield FeedUpdate(update.position, update.position.entry_id + 1)


async def reader(world: World, owner: ManagedLedger | None, *, holder: str = "pulsar://ro-1:6650",
                 feed: bool = True, with_entries: bool = True, offloaded: MemoryOffloader | None = None,
                 probe: HolderProbe | None = None, cache_budget: CacheBudget | None = None,
                 ) -> tuple[ReadOnlyManagedLedger, CountingTransport, CountingManager]:
    transport = CountingTransport(world)
    manager = CountingManager(store=world.ledger_store, transport=transport, directory=world.directory,
                              placement=RandomPlacement(SeededRng(99)), clock=world.clock,
                              config=LedgerClientConfig(speculative_read_timeout_ms=100))
    manager.writes = []
    store = await world.metadata.connect()
    path = f"/managed-ledgers/{TOPIC}"
    ml = await ReadOnlyManagedLedger.open(
        "persistent://public/default/t1", TOPIC, path, manager=manager, store=store, clock=world.clock,
        config=config(), feed=None if not feed or owner is None else
        InProcessFeed(owner) if with_entries else PositionsOnlyFeed(owner), holder=holder, offloaded=offloaded,
        holder_http=holder.replace("pulsar://", "http://"), probe=probe, cache_budget=cache_budget)
    return ml, transport, manager


def assert_never_wrote(transport: CountingTransport, manager: CountingManager) -> None:
    assert manager.writes == []
    assert transport.counts.get("add", 0) == 0
    assert transport.counts.get("fencing_read", 0) == 0
    assert transport.counts.get("write_lac", 0) == 0


async def test_reads_follow_the_owner_across_rollovers_without_writing_or_fencing() -> None:
    world = make_world()
    owner = await (await world.broker(config(max_entries_per_ledger=3))).open(TOPIC)
    first = [await owner.add_entry(f"m{i}".encode()) for i in range(4)]  # a rollover after 3
    ro, transport, manager = await reader(world, owner)
    await until(lambda: ro.last_confirmed_entry == first[-1])  # the feed tops up the bookies' LAC
    seen = [e.position for e in await ro.read_entries(Position(-1, -1), 100)]
    assert seen == first
    woken: list[Position] = []
    ro.on_entries_added(lambda: woken.append(ro.last_confirmed_entry))
    later = [await owner.add_entry(f"n{i}".encode()) for i in range(5)]  # two more rollovers
    await until(lambda: ro.last_confirmed_entry == later[-1])
    assert woken and woken[-1] == later[-1]
    entries = await ro.read_entries(first[-1].next(), 100)
    assert [e.position for e in entries] == later
    assert [e.payload for e in entries] == [f"n{i}".encode() for i in range(5)]
    assert_never_wrote(transport, manager)
    assert transport.counts.get("read", 0) > 0
    await ro.close()
    await owner.close()


async def test_the_newest_entry_is_readable_at_once_not_one_behind() -> None:
    """Bookies learn a LAC only with the next entry; the owner's notification makes the newest
    entry readable at once (no later entry, no explicit LAC)."""
    world = make_world()
    owner = await (await world.broker(config())).open(TOPIC)
    ro, transport, manager = await reader(world, owner)
    position = await owner.add_entry(b"only")
    await until(lambda: ro.last_confirmed_entry == position)
    assert [e.payload for e in await ro.read_entries(position, 10)] == [b"only"]
    assert_never_wrote(transport, manager)
    await ro.close()
    await owner.close()


async def test_without_the_owner_the_view_comes_from_the_record_and_a_non_fencing_lac_read() -> None:
    world = make_world()
    owner = await (await world.broker(config())).open(TOPIC)
    positions = [await owner.add_entry(f"m{i}".encode()) for i in range(3)]
    ro, transport, manager = await reader(world, owner, feed=False)
    # The bookies know the LAC up to the entry before the last (carried by the next entry).
    assert ro.last_confirmed_entry >= positions[-2]
    assert transport.counts.get("read_lac", 0) > 0
    assert_never_wrote(transport, manager)
    # A new owner recovers the ledger and starts another: the watch delivers the whole log.
    new_owner = await (await world.broker(config())).open(TOPIC)
    await until(lambda: ro.last_confirmed_entry == positions[-1])
    assert [e.position for e in await ro.read_entries(Position(-1, -1), 10)] == positions
    assert_never_wrote(transport, manager)
    await ro.close()
    await new_owner.close()


async def test_a_read_only_cursor_is_persisted_in_metadata_only_and_moves_between_brokers() -> None:
    world = make_world()
    owner = await (await world.broker(config())).open(TOPIC)
    positions = [await owner.add_entry(f"m{i}".encode()) for i in range(6)]
    ro1, transport, manager = await reader(world, owner, holder="pulsar://ro-1:6650")
    cursor = await ro1.open_cursor("sub", initial_position=owner.first_position)
    await cursor.mark_delete(positions[1])
    await cursor.delete([positions[3]])
    await cursor.delete_batch_indexes(positions[4], {0, 2}, 4)
    assert cursor.cursor_ledger_id == -1
    store = await world.metadata.connect()
    stored = await read_only_cursors(store, TOPIC)
    assert stored["sub"].mark_delete.entry_id == positions[1].entry_id
    assert stored["sub"].cursor_ledger_id == -1
    assert await read_only_holders(store, TOPIC) == {"sub": "pulsar://ro-1:6650"}
    # A second read-only broker is refused while the first serves the subscription.
    ro2, transport2, manager2 = await reader(world, owner, holder="pulsar://ro-2:6650")
    with pytest.raises(ManagedLedgerFencedError, match="ro-1"):
        await ro2.open_cursor("sub")
    await ro1.close()  # a consumer moves: the first broker lets go
    moved = await ro2.open_cursor("sub")
    assert moved.mark_delete_position == positions[1]
    assert moved.is_deleted(positions[3]) and not moved.is_deleted(positions[2])
    assert moved.batch_acked_indexes(positions[4]) == frozenset({0, 2})
    assert await read_only_holders(store, TOPIC) == {"sub": "pulsar://ro-2:6650"}
    # The owner's own cursor list is untouched: it would otherwise take the cursor over.
    assert "sub" not in owner.cursors
    for t, m in ((transport, manager), (transport2, manager2)):
        assert_never_wrote(t, m)
    await ro2.close()
    await owner.close()


async def test_a_lock_left_by_a_dead_broker_goes_with_its_session() -> None:
    world = make_world()
    owner = await (await world.broker(config())).open(TOPIC)
    await owner.add_entry(b"x")
    ro1, _, _ = await reader(world, owner, holder="pulsar://ro-1:6650")
    await ro1.open_cursor("sub")
    await ro1.store.close()  # the process died: its session ends, its ephemeral lock with it
    ro2, _, _ = await reader(world, owner, holder="pulsar://ro-2:6650")
    assert (await ro2.open_cursor("sub")).name == "sub"
    await ro2.close()
    await owner.close()


async def test_the_owner_keeps_what_read_only_cursors_have_not_consumed() -> None:
    world = make_world()
    owner = await (await world.broker(config(max_entries_per_ledger=2, retention_time_s=0,
                                             retention_size_bytes=0))).open(TOPIC)
    own = await owner.open_cursor("own", initial_position=owner.first_position)
    p = [await owner.add_entry(b"x" * 10) for _ in range(8)]
    ro, transport, manager = await reader(world, owner)
    lagging = await ro.open_cursor("lagging", initial_position=owner.first_position)
    await lagging.mark_delete(p[2])
    await own.mark_delete(p[-1])
    deleted = await owner.trim_consumed_ledgers()
    assert deleted == [p[0].ledger_id]  # the read-only cursor holds the second ledger
    await lagging.mark_delete(p[4])
    assert await owner.trim_consumed_ledgers() == [p[2].ledger_id]
    # Negative control: once the read-only subscription is gone, the owner deletes what it held.
    await ro.delete_cursor("lagging")
    assert await owner.trim_consumed_ledgers() == [p[4].ledger_id]  # the current one stays
    assert_never_wrote(transport, manager)
    await ro.close()
    await owner.close()


async def test_a_reader_whose_data_retention_removed_skips_forward_with_a_count() -> None:
    world = make_world()
    owner = await (await world.broker(config(max_entries_per_ledger=2, retention_time_s=0,
                                             retention_size_bytes=0))).open(TOPIC)
    own = await owner.open_cursor("own", initial_position=owner.first_position)
    p = [await owner.add_entry(f"m{i}".encode()) for i in range(6)]
    ro, transport, manager = await reader(world, owner)
    lagging = ro.new_non_durable_cursor(Position(-1, -1))  # a reader: holds nothing back
    assert [e.position for e in await lagging.read_entries(1)] == [p[0]]
    await own.mark_delete(p[3])
    assert await owner.trim_consumed_ledgers() == [p[0].ledger_id, p[2].ledger_id]
    await until(lambda: ro.ledger_ids and ro.ledger_ids[0] == p[4].ledger_id)
    assert ro.entries_skipped > 0
    assert lagging.mark_delete_position >= Position(p[4].ledger_id, -1)
    # It reads on from the first entry kept, no error.
    assert [e.position for e in await lagging.read_entries(10)] == p[4:]
    assert_never_wrote(transport, manager)
    await ro.close()
    await owner.close()


async def test_fresh_entries_come_with_the_owners_notification_not_from_the_bookies() -> None:
    world = make_world()
    owner = await (await world.broker(config())).open(TOPIC)
    ro, transport, manager = await reader(world, owner)
    positions = [await owner.add_entry(f"m{i}".encode()) for i in range(5)]
    await until(lambda: ro.last_confirmed_entry == positions[-1])
    before = transport.counts.get("read", 0)
    reads = await asyncio.gather(*(ro.read_entries(positions[0], 10) for _ in range(50)))
    assert all([e.payload for e in r] == [f"m{i}".encode() for i in range(5)] for r in reads)
    assert transport.counts.get("read", 0) - before == 0  # the negative control: the next test
    assert_never_wrote(transport, manager)
    await ro.close()
    await owner.close()


async def test_subscriptions_reading_the_same_fresh_entries_share_one_bookie_read() -> None:
    world = make_world()
    owner = await (await world.broker(config())).open(TOPIC)
    ro, transport, manager = await reader(world, owner, with_entries=False)
    positions = [await owner.add_entry(f"m{i}".encode()) for i in range(5)]
    await until(lambda: ro.last_confirmed_entry == positions[-1])
    before = transport.counts.get("read", 0)
    reads = await asyncio.gather(*(ro.read_entries(positions[0], 10) for _ in range(50)))
    assert all([e.payload for e in r] == [f"m{i}".encode() for i in range(5)] for r in reads)
    assert transport.counts.get("read", 0) - before == 5  # one per entry, not one per subscription
    assert_never_wrote(transport, manager)
    await ro.close()
    await owner.close()


async def test_the_owners_backlog_counts_read_only_subscriptions() -> None:
    """Backlog quotas apply to read-only subscriptions: the owner's topic backlog (what a producer
    quota is checked against) includes them; without them it would be 0 here."""
    from magnetar.base.types import TopicName
    from magnetar.catalog.policies import BacklogQuota, Policies
    from tests.admin.harness import managed_broker

    world = make_world()
    service = await managed_broker(world, config())
    assert service.resources is not None

    def quota(policies: Policies) -> None:  # a quota to check against (the pass reads the positions then)
        policies.backlog_quota_map = {"destination_storage": BacklogQuota(limit_size=1 << 30)}

    await service.resources.update_policies("public/default", quota)
    topic = await service.get_topic(TopicName.parse(f"persistent://{TOPIC.replace('/persistent/', '/')}"),
                                    create=True)
    owner = topic.log.managed_ledger  # type: ignore[attr-defined]
    positions = [await owner.add_entry(b"x" * 100) for _ in range(5)]
    first = positions[0]
    assert topic.backlog_bytes() == 0  # no subscription anywhere: nothing is backlog
    ro, _, _ = await reader(world, owner)
    lagging = await ro.open_cursor("lagging", initial_position=first)
    await lagging.flush()
    await service.check_policies()
    assert owner.read_only_holds == [first]
    assert topic.backlog_bytes() > 0
    await ro.close()
    await service.close()


async def test_deleting_the_topic_removes_read_only_subscriptions_and_readers_stop() -> None:
    world = make_world()
    owner = await (await world.broker(config())).open(TOPIC)
    await owner.add_entry(b"x")
    ro, _, _ = await reader(world, owner)
    cursor = await ro.open_cursor("sub")
    await ro.release_cursor("sub")  # its consumer left: persisted and unlocked
    assert cursor.state.value == "closed"
    store = await world.metadata.connect()
    assert set(await read_only_cursors(store, TOPIC)) == {"sub"}
    await owner.delete()
    assert await read_only_cursors(store, TOPIC) == {}
    await until(lambda: ro.state.value == "closed")  # the record is gone: the view stops


async def test_a_consumer_arriving_while_the_subscription_is_being_released_gets_it() -> None:
    import asyncio

    world = make_world()
    owner = await (await world.broker(config())).open(TOPIC)
    positions = [await owner.add_entry(b"x") for _ in range(3)]
    ro, _, _ = await reader(world, owner)
    cursor = await ro.open_cursor("sub", initial_position=positions[0])
    await cursor.mark_delete(positions[1])
    releasing = asyncio.ensure_future(ro.release_cursor("sub"))
    await until(lambda: "sub" in ro._releasing)  # the release has started (persisting, then unlocking)
    again = await ro.open_cursor("sub")  # not refused as busy by our own lock
    await releasing
    assert again is not cursor and again.mark_delete_position == positions[1]
    await ro.close()
    await owner.close()


async def test_offloaded_ledgers_whose_bookie_copy_is_gone_are_read_from_the_tiered_store() -> None:
    world = make_world()
    store = MemoryOffloader()
    factory = await world.broker(config(max_entries_per_ledger=3))
    factory.offloader = store
    owner = await factory.open(TOPIC)
    owner.offload.set_policy(-1, 0)  # bookie copies deleted at once
    written = {}
    for i in range(10):
        written[await owner.add_entry(f"m{i}".encode())] = f"m{i}".encode()
    following, _, _ = await reader(world, owner, with_entries=False, offloaded=store)  # opened before
    owner.offload.start()
    assert await owner.offload.wait() is OffloadStatus.SUCCESS
    sealed = owner.ledger_ids[:-1]
    assert all(offloaded(i) for i in owner.ledger_infos()[:-1])
    assert not set(sealed) & set(await owner.manager.list_ledgers())  # only the tiered copy is left
    # A broker that opens the topic now, and one that followed the record while it was offloaded.
    fresh, transport, manager = await reader(world, owner, offloaded=store)
    await until(lambda: all(i.offload is not None and i.offload.bookie_deleted
                            for i in following.ledger_infos()[:-1]))
    await until(lambda: fresh.last_confirmed_entry == following.last_confirmed_entry == max(written))
    reads_before = store.reads_count
    stored_before = (dict(store.files), {k: dict(v) for k, v in store.manifest.items()})
    for ro in (fresh, following):
        assert {e.position: e.payload for e in await ro.read_entries(Position(-1, -1), 100)} == written
        cursor = await ro.open_cursor("from-start", initial_position=ro.first_position)
        assert [e.payload for e in await cursor.read_entries(100)] == list(written.values())
        await ro.close()
    assert store.reads_count > reads_before
    assert (dict(store.files), store.manifest) == stored_before  # read only: no file or manifest entry changed
    assert_never_wrote(transport, manager)
    # The negative control: without the tiered store the entries are gone (a clear error, no loop).
    blind, _, _ = await reader(world, owner)
    with pytest.raises(NotFoundError):
        await blind.read_entries(Position(-1, -1), 100)
    await blind.close()
    await owner.close()


class Brokers:
    """``HolderProbe`` over the read-only brokers of a test: a broker's HTTP URL maps to the
    managed ledger it runs now; a URL mapped to None is a process that is gone (refused)."""

    def __init__(self) -> None:
        self.at: dict[str, ReadOnlyManagedLedger | None] = {}
        self.asked = 0

    async def still_serves(self, lock: LockRecord, topic: str, subscription: str) -> bool:
        self.asked += 1
        running = self.at.get(lock.http, "unknown")
        if running == "unknown":
            return True  # no answer: it may still serve (the lock waits for its session)
        return running is not None and running.serves(subscription)


async def test_a_subscription_is_taken_over_at_once_only_from_a_broker_shown_not_to_serve_it() -> None:
    world = make_world()
    owner = await (await world.broker(config())).open(TOPIC)
    positions = [await owner.add_entry(f"m{i}".encode()) for i in range(4)]
    brokers = Brokers()
    ro1, _, _ = await reader(world, owner, holder="pulsar://ro-1:6650", probe=brokers)
    ro2, transport, manager = await reader(world, owner, holder="pulsar://ro-2:6650", probe=brokers)
    brokers.at = {"http://ro-1:6650": ro1, "http://ro-2:6650": ro2}
    cursor = await ro1.open_cursor("sub", initial_position=owner.first_position)
    await cursor.mark_delete(positions[1])
    await cursor.flush()
    # Alive and serving, or silent: refused (the negative controls).
    with pytest.raises(ManagedLedgerFencedError, match="ro-1"):
        await ro2.open_cursor("sub")
    del brokers.at["http://ro-1:6650"]
    with pytest.raises(ManagedLedgerFencedError, match="ro-1"):
        await ro2.open_cursor("sub")
    assert ro2.takeovers == 0
    # Its process is gone (kill -9), its metadata session not yet expired: taken over at once,
    # from the persisted position.
    brokers.at["http://ro-1:6650"] = None
    moved = await ro2.open_cursor("sub")
    assert moved.mark_delete_position == positions[1]
    assert ro2.takeovers == 1
    store = await world.metadata.connect()
    assert await read_only_holders(store, TOPIC) == {"sub": "pulsar://ro-2:6650"}
    # A restarted broker (same address, nothing open) does not serve it either: taken back.
    ro1_again, _, _ = await reader(world, owner, holder="pulsar://ro-1:6650", probe=brokers)
    brokers.at["http://ro-1:6650"] = ro1_again
    brokers.at["http://ro-2:6650"] = None  # and the second is gone in turn
    back = await ro1_again.open_cursor("sub")
    assert back.mark_delete_position == positions[1] and ro1_again.takeovers == 1
    assert_never_wrote(transport, manager)
    for ml in (ro1_again, ro2, ro1):
        await ml.close()
    await owner.close()


async def test_fresh_entries_stay_within_the_brokers_cache_budget() -> None:
    """Every entry the owner sends along is cached, read or not: the broker-wide budget bounds it."""
    world = make_world()
    owner = await (await world.broker(config())).open(TOPIC)
    budget = CacheBudget(bytes_max=100)
    ro, _, _ = await reader(world, owner, cache_budget=budget)
    other, _, _ = await reader(world, owner, cache_budget=budget)  # a second topic of the broker
    written = [f"{i:03d}".encode() * 10 for i in range(20)]
    positions = [await owner.add_entry(data) for data in written]
    await until(lambda: ro.last_confirmed_entry == other.last_confirmed_entry == positions[-1])
    assert 0 < budget.bytes <= 100
    assert [e.payload for e in await ro.read_entries(Position(-1, -1), 100)] == written  # the rest from bookies
    await ro.close()
    await other.close()
    assert budget.bytes == 0
    await owner.close()


class LookupFeed(InProcessFeed):
    """A feed that knows the owner only once it was looked up (as over HTTP)."""

    def __init__(self, owner: ManagedLedger) -> None:
        super().__init__(owner)
        self.known: str | None = None

    def owner_url(self, topic: str) -> str | None:
        return self.known

    async def find_owner_url(self, topic: str) -> str | None:
        self.known = "pulsar://owner:6650"
        return self.known


async def test_a_producer_refused_as_soon_as_the_topic_opens_is_told_the_owners_url() -> None:
    from magnetar.broker.errors import BrokerError
    from magnetar.broker.read_only import ReadOnlyLogStore

    world = make_world()
    owner = await (await world.broker(config())).open(TOPIC)
    await owner.add_entry(b"x")
    other, _, manager = await reader(world, None)
    await other.close()
    feed = LookupFeed(owner)
    logs = ReadOnlyLogStore(manager=manager, metadata=await world.metadata.connect(), clock=world.clock,
                            feed=feed, holder=lambda: "pulsar://ro-1:6650")
    assert feed.owner_url(TOPIC) is None  # nothing followed yet: only the lookup at open names it
    log = await logs.open_log("persistent://public/default/t1", create=False)
    with pytest.raises(BrokerError, match="publish through its owner pulsar://owner:6650"):
        log.refuse_producer()
    await log.read_only_ledger.close()
    await owner.close()


async def test_an_update_carries_at_most_the_newest_entries_within_the_byte_bound() -> None:
    world = make_world()
    owner = await (await world.broker(config())).open(TOPIC)
    big = [bytes([i]) * (READ_ONLY_FEED_BYTES_MAX * 2 // 5) for i in range(3)]  # 1.2 bounds together
    positions = [await owner.add_entry(data) for data in big]
    start = Position(positions[0].ledger_id, -1)
    update = fresh_entries(owner, start, positions[-1])
    assert update.position == positions[-1]
    assert (update.first_entry_id, update.payloads) == (positions[1].entry_id, tuple(big[1:]))  # oldest dropped
    small = fresh_entries(owner, positions[1], positions[-1])
    assert (small.first_entry_id, small.payloads) == (positions[2].entry_id, (big[2],))
    await owner.close()
