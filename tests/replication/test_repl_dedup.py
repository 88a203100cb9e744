"""The receiving broker's replication dedup by source position: resends dropped, recovered from the
log after a crash (no snapshot needed), off under the ``no-repl-dedup`` negative control."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from magnetar.base.types import EARLIEST, TopicName
from magnetar.broker import BrokerConfig, MemoryLogStore
from magnetar.broker.producer import AccessMode, Producer
from magnetar.broker.replicated import (
    REPL_SOURCE_POSITION_PROPERTY,
    replicated_source,
    replicator_producer_name,
)
from magnetar.broker.topic import Topic
from magnetar.faults import breaks
from magnetar.protocol.pulsar import SendCommand, headers_and_payload, pb, stored_entry_metadata
from tests.broker.fakes import FakeChannel, settle

TOPIC = "persistent://public/default/replicated"


@pytest.fixture(autouse=True)
def _no_breaks() -> Iterator[None]:
    breaks.disable_all()
    yield
    breaks.disable_all()


def _replicated(entry_id: int, origin: str = "A") -> tuple[bytes, pb.MessageMetadata]:
    metadata = pb.MessageMetadata(producer_name="orig", sequence_id=entry_id, publish_time=1, replicated_from=origin)
    metadata.properties.add(key=REPL_SOURCE_POSITION_PROPERTY, value=f"7:{entry_id}")
    return headers_and_payload(metadata, f"v{entry_id}".encode()), metadata


async def _topic(store: MemoryLogStore) -> Topic:
    topic = Topic(TopicName.parse(TOPIC), await store.open_log(TOPIC, create=True), BrokerConfig())
    await topic.dedup.ready()
    await topic.repl_dedup.ready()
    return topic


async def _replicate(topic: Topic, entry_ids: range, seq_base: int = 0, origin: str = "A") -> FakeChannel:
    channel = FakeChannel()
    producer = Producer(topic, 1, replicator_producer_name(origin, "B"), channel, AccessMode.SHARED, 1000)
    assert producer.replicator
    for i, entry_id in enumerate(entry_ids):
        data, metadata = _replicated(entry_id, origin)
        await producer.send(SendCommand(producer_id=1, sequence_id=seq_base + i), data,
                            source=replicated_source(metadata))
    await settle()
    return channel


async def _stored(store: MemoryLogStore) -> list[str]:
    log = await store.open_log(TOPIC, create=False)
    out = []
    for entry in await log.read(EARLIEST, 10_000):
        metadata = stored_entry_metadata(entry.payload)
        out.append(f"{metadata.replicated_from}:{metadata.sequence_id}")
    return out


def test_resent_source_positions_are_dropped_also_after_a_crash() -> None:
    async def run() -> None:
        store = MemoryLogStore()
        first = await _topic(store)
        channel = await _replicate(first, range(0, 5))
        assert [r[3] for r in channel.receipts] == list(range(5))
        # the replicator restarts with new sequence ids and resends 3..7: 3 and 4 are duplicates
        channel = await _replicate(first, range(3, 8), seq_base=100)
        assert [r[3] for r in channel.receipts] == [-1, -1, 5, 6, 7]
        # the broker dies without closing (no snapshot): the next owner replays the log
        second = await _topic(store)
        channel = await _replicate(second, range(6, 10), seq_base=200)
        assert [r[2] < 0 for r in channel.receipts] == [True, True, False, False]
        # another source cluster has its own positions
        channel = await _replicate(second, range(0, 2), origin="C")
        assert [r[2] < 0 for r in channel.receipts] == [False, False]
        assert await _stored(store) == [f"A:{i}" for i in range(10)] + ["C:0", "C:1"]

    asyncio.run(run())


def test_negative_control_no_repl_dedup_stores_resends_twice() -> None:
    async def run() -> None:
        breaks.enable(breaks.Break.NO_REPL_DEDUP)
        store = MemoryLogStore()
        topic = await _topic(store)
        await _replicate(topic, range(0, 3))
        await _replicate(topic, range(1, 4), seq_base=10)
        assert await _stored(store) == ["A:0", "A:1", "A:2", "A:1", "A:2", "A:3"]

    asyncio.run(run())
