"""Every registered fault point is reached on the one path production runs.

``faults.observe(True)`` arms every point with ``pass`` (count the hit, go on: the same code as
unarmed, since no path depends on the arming) and records the points that fire. The scenarios
below drive the layers through their ordinary operations and faults: the simulated ledger crash
matrix (real bookie cores and servers, the real ledger client; writer, bookie and recovery
points), a managed ledger that rolls over and flushes a cursor, a broker producer's receipts, the
embedded metadata store, AutoRecovery re-replicating a lost bookie's copies, two compactions
of one topic, and a ledger offloaded whose bookie copy is then deleted. The set of
registered points never reached must be empty: a point no test reaches is a point whose crash
nobody checks. Negative control: a point registered for this test that no code calls is the
one reported.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from magnetar import faults
from magnetar.base.types import TopicName
from magnetar.broker import BrokerConfig, MemoryLogStore
from magnetar.broker.compaction import CompactionStatus
from magnetar.broker.producer import AccessMode, Producer
from magnetar.broker.topic import Topic
from magnetar.faults import FaultPoint, points
from magnetar.metadata import EmbeddedMetadataServer
from magnetar.protocol.pulsar import SendCommand
from magnetar.runtime.bookie import BookieServer
from magnetar.runtime.clock import SystemClock
from magnetar.runtime.kv import RocksKeyValueStore
from magnetar.sim import SimWorld
from magnetar.sim.scenarios.ledger_matrix import FAULTS, MatrixOptions, run_matrix
from tests.admin.harness import AdminWorld, run_world
from tests.broker.fakes import FakeChannel, settle
from tests.broker.test_compaction import T as COMPACTED_TOPIC
from tests.broker.test_compaction import keyed
from tests.ledger import test_autorecovery as autorecovery
from tests.managed_ledger import test_offload as offload
from tests.managed_ledger.harness import TOPIC, config, make_world

PHANTOM = "test.registered_but_never_called"


@pytest.fixture
def observing(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setitem(faults.REGISTRY, PHANTOM, FaultPoint(PHANTOM, "T0", "the negative control: no code calls it"))
    faults.observe(True)
    try:
        yield
    finally:
        faults.observe(False)
        faults.disarm_all()


def _ledger_matrix() -> None:
    for index, fault in enumerate(FAULTS):
        verdict = run_matrix(SimWorld(index), MatrixOptions(3, 3, 2, fault=fault, entries_count=24), BookieServer)
        assert verdict.ok, verdict.text()


async def _managed_ledger() -> None:
    world = make_world()
    ml = await (await world.broker(config(max_entries_per_ledger=3, rollover_time_s_min=0))).open(TOPIC)
    positions = [await ml.add_entry(b"m%d" % i) for i in range(8)]  # two rollovers
    cursor = await ml.open_cursor("sub", initial_position=ml.first_position)
    await cursor.mark_delete(positions[4])  # flushed to the cursor's ledger
    await ml.close()


async def _broker_receipts() -> None:
    log = await MemoryLogStore().open_log("persistent://public/default/reach", create=True)
    topic = Topic(TopicName.parse("persistent://public/default/reach"), log, BrokerConfig())
    channel = FakeChannel()
    producer = Producer(topic, 0, "p", channel, AccessMode.SHARED, 10)
    await producer.send(SendCommand(producer_id=0, sequence_id=0), b"payload")
    await settle()
    assert [seq for _, seq, _, _ in channel.receipts] == [0]


async def _embedded_metadata(directory: Path) -> None:
    server = await EmbeddedMetadataServer.open(RocksKeyValueStore(str(directory)), SystemClock())
    try:
        store = await server.connect()
        await store.create("/reach", b"value")
    finally:
        await server.close()


def _compaction() -> None:
    """Two compactions of one topic: the second records its ledger and deletes the first's."""

    async def body(world: AdminWorld) -> None:
        topic = await world.service.get_topic(TopicName.parse(COMPACTED_TOPIC), create=True)
        for round_ in range(2):
            await topic.publish(keyed("k", b"v%d" % round_))
            await topic.compaction.start()
            assert topic.compaction.status is CompactionStatus.SUCCESS

    run_world(body)


def test_every_registered_fault_point_is_reached(observing: None, tmp_path: Path) -> None:
    _ledger_matrix()
    asyncio.run(_managed_ledger())
    asyncio.run(_broker_receipts())
    asyncio.run(_embedded_metadata(tmp_path / "meta"))
    asyncio.run(autorecovery.test_lost_bookie_is_marked_and_its_copies_restored_on_a_new_bookie())
    _compaction()
    asyncio.run(offload.test_offload_then_delete_bookie_copies_reads_every_entry_back())
    # Only the control is left: every point the code names fired at least once.
    assert faults.never_reached() == [PHANTOM]
    assert faults.reached() == frozenset(faults.REGISTRY) - {PHANTOM}


def test_observing_changes_no_path_and_stops_cleanly(observing: None) -> None:
    """Observed points stay unarmed for everything else (``armed()`` is empty), an arming in
    between is reported and recorded, and ``disarm_all`` keeps the record."""
    assert faults.armed() == {}
    faults.arm("bookie.after_reply", "error")

    async def hit() -> None:
        with pytest.raises(faults.InjectedFaultError):
            await faults.point("bookie.after_reply")
        await faults.point("broker.after_receipt")

    asyncio.run(hit())
    faults.disarm_all()
    assert {"bookie.after_reply", "broker.after_receipt"} <= faults.reached()
    faults.observe(False)
    assert faults.armed() == {} and not points._armed  # unarmed again: one lookup per point
