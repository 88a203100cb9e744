"""AutoRecovery over fakes: the auditor (election, grace delay, failover) marks ledgers that lost a
bookie; replication workers copy the missing entries to a live bookie outside the fragment's
ensemble, CAS the ensemble and remove the marker; an open ledger's tail is fenced only after its
grace period; a worker that dies mid-copy or before its CAS is simply redone.

The world: the in-memory metadata store on the manual clock (real watches, sessions, ephemeral
nodes and ``MetadataLock``), ``FakeBookie``s registered under ``/ledgers/available`` each with
its own session (a killed bookie crashes and its session closes), the real ledger client.
The checker ``missing_copies`` (every entry on Qw live bookies of its write set) has negative
controls: it reports the loss right after a kill, and after a worker that skips the copy.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

import pytest

from magnetar import faults
from magnetar.base.errors import FencedError, InvalidArgumentError
from magnetar.base.rng import SeededRng
from magnetar.base.types import BookieId
from magnetar.ledger.autorecovery import (
    Auditor,
    AuditorState,
    AutoRecoveryConfig,
    ReplicationOutcome,
    ReplicationWorker,
)
from magnetar.ledger.config import LedgerClientConfig
from magnetar.ledger.directory import AVAILABLE_PATH, MetadataBookieDirectory
from magnetar.ledger.ledger_metadata import LedgerMetadata, LedgerState
from magnetar.ledger.manager import LedgerManager
from magnetar.ledger.metadata_adapter import MetadataStoreAdapter
from magnetar.ledger.metadata_ops import LedgerMetadataStore
from magnetar.ledger.placement import RandomPlacement
from magnetar.ledger.quorum import write_set
from magnetar.ledger.underreplication import AUDITOR_PATH, Marker, UnderReplicationMarkers
from magnetar.metadata.api import MetadataStore
from magnetar.metadata.memory import MemoryMetadataServer
from tests.ledger.fakes import FakeBookie, FakeTransport
from tests.manual_clock import ManualClock, settle

CONFIG = LedgerClientConfig(speculative_read_timeout_ms=100, add_timeout_ms=1_000, read_timeout_ms=1_000,
                            recovery_fence_timeout_ms=1_000)
AR_CONFIG = AutoRecoveryConfig(lost_bookie_recovery_delay_ms=0, open_ledger_grace_ms=30_000,
                               rereplication_batch_count_max=4, worker_poll_interval_ms=1_000)


@dataclass
class World:
    clock: ManualClock
    server: MemoryMetadataServer
    admin: MetadataStore
    bookies: dict[BookieId, FakeBookie]
    transport: FakeTransport
    sessions: dict[BookieId, MetadataStore] = field(default_factory=dict)
    stores: list[MetadataStore] = field(default_factory=list)

    @property
    def ledgers(self) -> LedgerMetadataStore:
        return LedgerMetadataStore(MetadataStoreAdapter(self.admin))

    async def register(self, bookie: BookieId) -> None:
        session = await self.server.connect()
        await session.create(f"{AVAILABLE_PATH}/{bookie}", b"{}", ephemeral=True)
        self.sessions[bookie] = session
        self.bookies[bookie].restart()

    async def kill(self, bookie: BookieId) -> None:
        self.bookies[bookie].crash()
        await self.sessions.pop(bookie).close()

    async def session(self) -> MetadataStore:
        store = await self.server.connect()
        self.stores.append(store)
        return store

    def manager(self, seed: int = 1) -> LedgerManager:
        return LedgerManager(store=self.ledgers, transport=self.transport, directory=MetadataBookieDirectory(self.admin),
                             placement=RandomPlacement(SeededRng(seed)), clock=self.clock, config=CONFIG)

    def auditor(self, store: MetadataStore, owner: str = "auditor-1",
                config: AutoRecoveryConfig = AR_CONFIG) -> Auditor:
        return Auditor(store, ledgers=LedgerMetadataStore(MetadataStoreAdapter(store)), clock=self.clock,
                       config=config, owner=owner)

    def worker(self, store: MetadataStore, owner: str = "worker-1", seed: int = 7,
               cls: type[ReplicationWorker] = ReplicationWorker) -> ReplicationWorker:
        return cls(store, ledgers=LedgerMetadataStore(MetadataStoreAdapter(store)), transport=self.transport,
                   directory=MetadataBookieDirectory(store), placement=RandomPlacement(SeededRng(seed)),
                   clock=self.clock, config=AR_CONFIG, ledger_config=CONFIG, owner=owner)


async def make_world(bookie_count: int, registered: int) -> World:
    clock = ManualClock()
    server = MemoryMetadataServer(clock)
    ids = [BookieId("127.0.0.1", 3181 + i) for i in range(bookie_count)]
    bookies = {b: FakeBookie(b, alive=False) for b in ids}
    world = World(clock, server, await server.connect(), bookies, FakeTransport(bookies))
    for bookie in ids[:registered]:
        await world.register(bookie)
    return world


def ids(world: World) -> list[BookieId]:
    return list(world.bookies)


def missing_copies(world: World, meta: LedgerMetadata, last_entry_id: int) -> list[str]:
    """Checker: every entry 0..last must be on every live bookie of its write set."""
    problems = []
    for entry_id in range(last_entry_id + 1):
        ensemble = meta.ensemble_for(entry_id)
        for slot in write_set(entry_id, meta.ensemble_size, meta.write_quorum_size):
            fake = world.bookies[ensemble[slot]]
            if not fake.alive or fake.has(meta.ledger_id, entry_id) is None:
                problems.append(f"entry {entry_id} missing on {ensemble[slot]}")
    return problems


async def write_closed_ledger(world: World, count: int) -> LedgerMetadata:
    handle = await world.manager().create_ledger(3, 3, 2)
    for i in range(count):
        await handle.add_entry(b"e%d" % i)
    return await handle.close()


async def test_lost_bookie_is_marked_and_its_copies_restored_on_a_new_bookie() -> None:
    world = await make_world(5, registered=3)
    meta = await write_closed_ledger(world, 10)
    await world.register(ids(world)[3])  # added bookies need no rebalance: they only become targets
    victim = meta.fragments[0].ensemble[1]
    await world.kill(victim)
    assert missing_copies(world, meta, 9), "negative control: the checker sees the lost copies"

    auditor = world.auditor(await world.session())
    await auditor.audit()
    markers = UnderReplicationMarkers(world.admin)
    assert await markers.ledger_ids() == [meta.ledger_id]
    found = await markers.get(meta.ledger_id)
    assert found is not None and found.marker.lost == frozenset({victim})

    worker = world.worker(await world.session())
    assert await worker.replicate(meta.ledger_id) is ReplicationOutcome.REPLICATED
    after = (await world.ledgers.read(meta.ledger_id)).metadata
    assert victim not in after.bookies() and ids(world)[3] in after.bookies()
    assert after.state is LedgerState.CLOSED and after.last_entry_id == 9
    assert missing_copies(world, after, 9) == []
    assert await markers.ledger_ids() == []
    assert worker.entries_copied_count == 10 and worker.fragments_replaced_count == 1
    reader = await world.manager(seed=2).open_ledger(meta.ledger_id)
    assert [e.payload for e in await reader.read_entries(0, 9)] == [b"e%d" % i for i in range(10)]


async def test_only_the_lost_bookies_write_sets_are_copied_for_e_greater_than_qw() -> None:
    world = await make_world(5, registered=4)
    handle = await world.manager().create_ledger(4, 2, 2)
    for i in range(12):
        await handle.add_entry(b"x%d" % i)
    meta = await handle.close()
    victim = meta.fragments[0].ensemble[0]
    await world.register(ids(world)[4])
    await world.kill(victim)
    await world.auditor(await world.session()).audit()
    worker = world.worker(await world.session())
    assert await worker.replicate(meta.ledger_id) is ReplicationOutcome.REPLICATED
    # slot 0 is in the write sets of entries 0, 3, 4, 7, 8, 11 (E=4, Qw=2): 6 of 12
    assert worker.entries_copied_count == 6
    assert missing_copies(world, (await world.ledgers.read(meta.ledger_id)).metadata, 11) == []


async def test_grace_delay_runs_on_the_clock_and_a_returning_bookie_is_not_lost() -> None:
    world = await make_world(4, registered=4)
    meta = await write_closed_ledger(world, 3)
    victim = meta.fragments[0].ensemble[0]
    auditor = world.auditor(await world.session(), config=AutoRecoveryConfig(lost_bookie_recovery_delay_ms=5_000))
    markers = UnderReplicationMarkers(world.admin)
    await world.kill(victim)
    assert await auditor.audit() == pytest.approx(5.0)
    assert await markers.ledger_ids() == []
    await world.clock.advance(2.0)
    await world.register(victim)  # back within the delay (e.g. a restart): nothing to do
    await auditor.audit()
    assert auditor.missing_since_ns == {}
    await world.kill(victim)
    await auditor.audit()
    await world.clock.advance(4.9)
    assert await auditor.audit() == pytest.approx(0.1)
    assert await markers.ledger_ids() == []
    await world.clock.advance(0.1)
    await auditor.audit()
    assert await markers.ledger_ids() == [meta.ledger_id]


async def test_open_ledger_tail_is_fenced_only_after_the_grace_period() -> None:
    world = await make_world(4, registered=4)
    handle = await world.manager().create_ledger(3, 3, 2)
    for i in range(5):
        await handle.add_entry(b"o%d" % i)
    victim = handle.ensemble[2]
    await world.kill(victim)  # the writer is idle: it does not notice
    await world.auditor(await world.session()).audit()
    worker = world.worker(await world.session())
    assert await worker.replicate(handle.ledger_id) is ReplicationOutcome.DEFERRED
    assert (await world.ledgers.read(handle.ledger_id)).metadata.state is LedgerState.OPEN
    assert await worker.run_once() == {}  # deferred until the grace period ends
    await world.clock.advance(30.0)
    assert await worker.run_once() == {handle.ledger_id: ReplicationOutcome.REPLICATED}
    after = (await world.ledgers.read(handle.ledger_id)).metadata
    assert after.state is LedgerState.CLOSED and after.last_entry_id == 4
    assert victim not in after.bookies() and missing_copies(world, after, 4) == []
    with pytest.raises(FencedError):
        await handle.add_entry(b"too late")


async def test_writer_keeps_writing_while_an_earlier_fragment_is_re_replicated() -> None:
    world = await make_world(5, registered=4)
    handle = await world.manager().create_ledger(3, 3, 2)
    for i in range(5):
        await handle.add_entry(b"w%d" % i)
    victim = handle.ensemble[0]
    await world.kill(victim)
    for i in range(5, 10):  # the writer replaces the dead bookie itself: a new fragment from 5
        await handle.add_entry(b"w%d" % i)
    assert victim not in handle.ensemble
    await world.register(ids(world)[4])
    await world.auditor(await world.session()).audit()
    worker = world.worker(await world.session())
    assert await worker.replicate(handle.ledger_id) is ReplicationOutcome.REPLICATED
    mid = (await world.ledgers.read(handle.ledger_id)).metadata
    assert mid.state is LedgerState.OPEN and victim not in mid.bookies()
    await handle.add_entry(b"w10")  # not fenced: only the closed fragment was touched
    closed = await handle.close()  # the writer's close CAS re-reads the re-replicated record
    assert closed.last_entry_id == 10 and victim not in closed.bookies()
    assert missing_copies(world, closed, 10) == []


async def test_auditor_failover_hands_the_lock_to_the_next_candidate_which_audits() -> None:
    world = await make_world(4, registered=4)
    meta = await write_closed_ledger(world, 4)
    first_store, second_store = await world.session(), await world.session()
    first, second = world.auditor(first_store, "a1"), world.auditor(second_store, "a2")
    tasks = [asyncio.ensure_future(first.run()), asyncio.ensure_future(second.run())]
    await settle()
    assert (first.state, second.state) == (AuditorState.LEADING, AuditorState.CAMPAIGNING)
    assert (await world.admin.get(AUDITOR_PATH)) is not None
    await first_store.close()  # the leader's session ends: its ephemeral lock goes
    await settle()
    assert (first.state, second.state) == (AuditorState.STOPPED, AuditorState.LEADING)
    await world.kill(meta.fragments[0].ensemble[0])  # the watch on /ledgers/available wakes it
    await settle()
    assert meta.ledger_id in second.marked
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


async def test_running_auditor_and_worker_restore_copies_without_being_called() -> None:
    world = await make_world(4, registered=4)
    meta = await write_closed_ledger(world, 6)
    auditor = world.auditor(await world.session())
    worker = world.worker(await world.session())
    tasks = [asyncio.ensure_future(auditor.run()), asyncio.ensure_future(worker.run())]
    await settle()
    victim = meta.fragments[0].ensemble[1]
    await world.kill(victim)
    await settle(400)
    after = (await world.ledgers.read(meta.ledger_id)).metadata
    assert victim not in after.bookies() and missing_copies(world, after, 5) == []
    assert await UnderReplicationMarkers(world.admin).ledger_ids() == []
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


async def test_worker_dying_mid_copy_is_redone_by_another_worker() -> None:
    world = await make_world(4, registered=4)
    meta = await write_closed_ledger(world, 8)
    spare = next(b for b in ids(world) if b not in meta.fragments[0].ensemble)
    victim = meta.fragments[0].ensemble[0]
    await world.kill(victim)
    await world.auditor(await world.session()).audit()
    held = world.transport.rule(spare, "recovery_add", entry_id=5)
    first_store = await world.session()
    first = asyncio.ensure_future(world.worker(first_store, "w1").replicate(meta.ledger_id))
    await settle()
    assert held.hits == 1 and not first.done()
    second = world.worker(await world.session(), "w2")
    assert await second.replicate(meta.ledger_id) is ReplicationOutcome.BUSY  # the lock is held
    first.cancel()  # the worker process dies ...
    await first_store.close()  # ... and its session with it: the lock node goes
    held.release()
    assert await second.replicate(meta.ledger_id) is ReplicationOutcome.REPLICATED
    after = (await world.ledgers.read(meta.ledger_id)).metadata
    assert after.fragments[0].ensemble == tuple(spare if b == victim else b for b in meta.fragments[0].ensemble)
    assert missing_copies(world, after, 7) == []


async def test_worker_dying_after_copy_before_cas_is_redone() -> None:
    world = await make_world(4, registered=4)
    meta = await write_closed_ledger(world, 4)
    await world.kill(meta.fragments[0].ensemble[2])
    await world.auditor(await world.session()).audit()
    faults.arm("autorecovery.after_copy", "hang")
    first_store = await world.session()
    first = asyncio.ensure_future(world.worker(first_store, "w1").replicate(meta.ledger_id))
    await settle()
    assert faults.hits("autorecovery.after_copy") == 1
    first.cancel()
    await first_store.close()
    faults.disarm_all()
    assert (await world.ledgers.read(meta.ledger_id)).metadata == meta  # nothing changed yet
    assert await world.worker(await world.session(), "w2").replicate(meta.ledger_id) is ReplicationOutcome.REPLICATED
    assert missing_copies(world, (await world.ledgers.read(meta.ledger_id)).metadata, 3) == []


class _NoCopyWorker(ReplicationWorker):
    """Negative control: changes the ensemble without copying anything."""

    async def _copy(self, *args: object, **kwargs: object) -> None:
        return None


async def test_negative_control_a_worker_that_skips_the_copy_is_caught() -> None:
    world = await make_world(4, registered=4)
    meta = await write_closed_ledger(world, 4)
    await world.kill(meta.fragments[0].ensemble[0])
    await world.auditor(await world.session()).audit()
    worker = world.worker(await world.session(), cls=_NoCopyWorker)
    assert await worker.replicate(meta.ledger_id) is ReplicationOutcome.REPLICATED
    assert len(missing_copies(world, (await world.ledgers.read(meta.ledger_id)).metadata, 3)) == 4


async def test_no_spare_bookie_fails_and_keeps_the_marker_for_a_later_round() -> None:
    world = await make_world(4, registered=3)
    meta = await write_closed_ledger(world, 3)
    await world.kill(meta.fragments[0].ensemble[0])
    await world.auditor(await world.session()).audit()
    worker = world.worker(await world.session())
    assert await worker.replicate(meta.ledger_id) is ReplicationOutcome.FAILED
    assert await UnderReplicationMarkers(world.admin).ledger_ids() == [meta.ledger_id]
    await world.register(ids(world)[3])
    assert await worker.run_once() == {meta.ledger_id: ReplicationOutcome.REPLICATED}


async def test_marker_round_trip_and_config_bounds() -> None:
    marker = Marker(frozenset({BookieId("127.0.0.1", 1), BookieId("127.0.0.1", 2)}), 42)
    assert Marker.decode(marker.encode()) == marker
    with pytest.raises(InvalidArgumentError):
        AutoRecoveryConfig(rereplication_batch_count_max=0)
    with pytest.raises(InvalidArgumentError):
        AutoRecoveryConfig(lost_bookie_recovery_delay_ms=-1)
