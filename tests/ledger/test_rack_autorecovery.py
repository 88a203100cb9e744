"""AutoRecovery keeps the rack rule: a whole rack killed, every acknowledged entry stays readable,
and the copies come back on racks the write set does not use yet (the rack-aware replacement);
a random replacement is the negative control that can break the rule."""

from __future__ import annotations

from magnetar.base.rng import SeededRng
from magnetar.ledger.autorecovery import ReplicationOutcome, ReplicationWorker
from magnetar.ledger.directory import MetadataBookieDirectory
from magnetar.ledger.ledger_metadata import LedgerMetadata
from magnetar.ledger.manager import LedgerManager
from magnetar.ledger.metadata_adapter import MetadataStoreAdapter
from magnetar.ledger.metadata_ops import LedgerMetadataStore
from magnetar.ledger.placement import PlacementPolicy, RandomPlacement
from magnetar.ledger.quorum import write_set
from magnetar.ledger.rack_placement import RackAwarePlacement
from magnetar.ledger.racks import BookieRack, RackedBookieDirectory, read_racks, region_of, set_rack
from tests.ledger.test_autorecovery import AR_CONFIG, CONFIG, World, ids, make_world, missing_copies

#: 4 racks: r0 {b0, b1}, r1 {b2, b3}, r2 {b4, b5}, r3 {b6}.
RACK_OF = {0: "/r0", 1: "/r0", 2: "/r1", 3: "/r1", 4: "/r2", 5: "/r2", 6: "/r3"}


async def racked_world() -> World:
    world = await make_world(7, registered=7)
    for index, bookie in enumerate(ids(world)):
        await set_rack(world.admin, str(bookie), BookieRack(RACK_OF[index]))
    return world


def rack_aware(world: World, seed: int) -> tuple[RackedBookieDirectory, RackAwarePlacement]:
    directory = RackedBookieDirectory(MetadataBookieDirectory(world.admin), world.admin)
    return directory, RackAwarePlacement(SeededRng(seed), directory)


async def write_set_racks(world: World, meta: LedgerMetadata) -> list[int]:
    config, _ = await read_racks(world.admin)
    out = []
    for fragment in meta.fragments:
        for entry in range(meta.ensemble_size):
            members = [fragment.ensemble[i] for i in write_set(entry, meta.ensemble_size, meta.write_quorum_size)]
            out.append(len({config.rack_of(b) for b in members}))
    return out


def worker_with(world: World, store: object, directory: object, placement: PlacementPolicy) -> ReplicationWorker:
    return ReplicationWorker(store, ledgers=LedgerMetadataStore(MetadataStoreAdapter(store)),  # type: ignore[arg-type]
                             transport=world.transport, directory=directory,  # type: ignore[arg-type]
                             placement=placement, clock=world.clock, config=AR_CONFIG, ledger_config=CONFIG,
                             owner="worker-racks")


async def kill_rack_and_recover(seed: int, *, aware: bool) -> list[int]:
    world = await racked_world()
    directory, placement = rack_aware(world, 1)
    manager = LedgerManager(store=world.ledgers, transport=world.transport, directory=directory,
                            placement=placement, clock=world.clock, config=CONFIG)
    handle = await manager.create_ledger(3, 3, 2)
    for i in range(10):
        await handle.add_entry(b"r%d" % i)
    meta = await handle.close()
    assert await write_set_racks(world, meta) == [3, 3, 3]
    victim_rack = RACK_OF[ids(world).index(meta.fragments[0].ensemble[0])]
    for index, bookie in enumerate(ids(world)):
        if RACK_OF[index] == victim_rack:
            await world.kill(bookie)
    reader = await world.manager(seed=2).open_ledger(meta.ledger_id)  # a whole rack gone: all readable
    assert [e.payload for e in await reader.read_entries(0, 9)] == [b"r%d" % i for i in range(10)]
    await world.auditor(await world.session()).audit()
    store = await world.session()
    if aware:
        worker_dir, worker_placement = rack_aware_on(world, store, seed)
        worker = worker_with(world, store, worker_dir, worker_placement)
    else:
        worker = worker_with(world, store, MetadataBookieDirectory(store), RandomPlacement(SeededRng(seed)))
    assert await worker.replicate(meta.ledger_id) is ReplicationOutcome.REPLICATED
    after = (await world.ledgers.read(meta.ledger_id)).metadata
    assert missing_copies(world, after, 9) == []
    return await write_set_racks(world, after)


def rack_aware_on(world: World, store: object, seed: int) -> tuple[RackedBookieDirectory, RackAwarePlacement]:
    directory = RackedBookieDirectory(MetadataBookieDirectory(store), store)  # type: ignore[arg-type]
    return directory, RackAwarePlacement(SeededRng(seed), directory)


async def test_autorecovery_restores_copies_on_racks_the_write_set_does_not_use() -> None:
    for seed in range(8):
        assert await kill_rack_and_recover(seed, aware=True) == [3, 3, 3]


async def test_negative_control_a_random_replacement_can_put_two_copies_on_one_rack() -> None:
    spans = [await kill_rack_and_recover(seed, aware=False) for seed in range(8)]
    assert any(min(s) < 3 for s in spans), spans


#: 3 regions of 2 racks: a {r0: b0, r1: b1}, b {r2: b2, r3: b3}, c {r4: b4, b6; r5: b5}.
REGION_OF = {0: "/a/r0", 1: "/a/r1", 2: "/b/r2", 3: "/b/r3", 4: "/c/r4", 5: "/c/r5", 6: "/c/r4"}


async def write_set_regions(world: World, meta: LedgerMetadata) -> list[int]:
    config, _ = await read_racks(world.admin)
    out = []
    for fragment in meta.fragments:
        for entry in range(meta.ensemble_size):
            members = [fragment.ensemble[i] for i in write_set(entry, meta.ensemble_size, meta.write_quorum_size)]
            out.append(len({region_of(config.rack_of(b) or "") for b in members}))
    return out


async def kill_rack_and_recover_across_regions(seed: int, *, aware: bool) -> list[int]:
    """(3,3,2) over 3 regions; the rack of the first copy killed; AutoRecovery replaces it.
    Returns the regions each write set spans afterwards."""
    world = await make_world(7, registered=7)
    for index, bookie in enumerate(ids(world)):
        await set_rack(world.admin, str(bookie), BookieRack(REGION_OF[index]))
    directory, placement = rack_aware(world, seed)
    manager = LedgerManager(store=world.ledgers, transport=world.transport, directory=directory,
                            placement=placement, clock=world.clock, config=CONFIG)
    handle = await manager.create_ledger(3, 3, 2)
    for i in range(6):
        await handle.add_entry(b"g%d" % i)
    meta = await handle.close()
    assert await write_set_regions(world, meta) == [3, 3, 3]
    victim = REGION_OF[ids(world).index(meta.fragments[0].ensemble[0])]
    for index, bookie in enumerate(ids(world)):
        if REGION_OF[index] == victim:
            await world.kill(bookie)
    await world.auditor(await world.session()).audit()
    store = await world.session()
    if aware:
        worker_dir, worker_placement = rack_aware_on(world, store, seed)
        worker = worker_with(world, store, worker_dir, worker_placement)
    else:
        worker = worker_with(world, store, MetadataBookieDirectory(store), RandomPlacement(SeededRng(seed)))
    assert await worker.replicate(meta.ledger_id) is ReplicationOutcome.REPLICATED
    after = (await world.ledgers.read(meta.ledger_id)).metadata
    assert missing_copies(world, after, 5) == []
    return await write_set_regions(world, after)


async def test_autorecovery_keeps_every_write_set_across_three_regions_when_a_rack_dies() -> None:
    """The dead rack's region still has a live rack: the copy comes back there, not in a region
    the write set already uses (a rack-only choice could take any fresh rack)."""
    for seed in range(8):
        assert await kill_rack_and_recover_across_regions(seed, aware=True) == [3, 3, 3]


async def test_negative_control_a_random_replacement_can_put_two_copies_in_one_region() -> None:
    spans = [await kill_rack_and_recover_across_regions(seed, aware=False) for seed in range(8)]
    assert any(min(s) < 3 for s in spans), spans
