"""Markers of replicated subscriptions: never delivered, acknowledged by the dispatcher, no ack hole
(also on a Shared subscription with delayed messages around them)."""

from __future__ import annotations

import asyncio

from magnetar.base.types import EARLIEST, Position
from magnetar.broker import BrokerConfig, Consumer, MemoryLogStore, SubType
from magnetar.broker.dispatcher_shared import SharedDispatcher
from magnetar.protocol.pulsar import headers_and_payload, pb
from magnetar.protocol.pulsar.markers import MarkerType, marker_entry, mpb
from tests.broker.fakes import FakeChannel, append, settle
from tests.manual_clock import ManualClock


def _data(seq: int, deliver_at_ms: int | None = None) -> bytes:
    metadata = pb.MessageMetadata(producer_name="p", sequence_id=seq, publish_time=1)
    if deliver_at_ms is not None:
        metadata.deliver_at_time = deliver_at_ms
    return headers_and_payload(metadata, b"x")


def _marker(kind: MarkerType) -> bytes:
    request = mpb.ReplicatedSubscriptionsSnapshotRequest(snapshot_id="A-1", source_cluster="A")
    return marker_entry(kind, request.SerializeToString(), replicate_to=["B"], publish_time_ms=1)


def test_markers_are_acknowledged_not_delivered_and_leave_no_hole() -> None:
    async def run() -> None:
        clock = ManualClock()
        store = MemoryLogStore()
        log = await store.open_log("persistent://public/default/m", create=True)
        entries = [_data(0), _marker(MarkerType.SNAPSHOT_REQUEST), _data(1, deliver_at_ms=clock.now_ms() + 5_000),
                   _marker(MarkerType.SNAPSHOT_RESPONSE), _marker(MarkerType.UPDATE), _data(2)]
        positions = [await append(log, data) for data in entries]
        cursor = await log.open_cursor("s", durable=True, initial_mark_delete=EARLIEST)
        dispatcher = SharedDispatcher(log, cursor, BrokerConfig(delayed_delivery=True), -1, clock=clock,
                                      delayed_enabled=lambda: True)
        dispatcher.start()
        channel = FakeChannel()
        consumer = Consumer(1, "c", SubType.SHARED, channel)
        dispatcher.add_consumer(consumer)
        dispatcher.flow(consumer, 100)
        await settle()
        delivered = [Position(*pos) for _, pos, _ in channel.messages]
        assert delivered == [positions[0], positions[5]]  # the delayed one waits, markers never come
        for position in delivered:
            await cursor.delete([position])
        dispatcher.acknowledged(delivered)
        assert all(cursor.is_acked(positions[i]) for i in (1, 3, 4))  # the dispatcher acked the markers
        assert cursor.mark_delete_position == positions[1]  # only the delayed message holds it back
        await clock.advance(6.0)
        await settle()
        assert Position(*channel.messages[-1][1]) == positions[2]
        await cursor.delete([positions[2]])
        assert cursor.mark_delete_position == positions[5]  # everything acknowledged: no hole left
        await dispatcher.close()

    asyncio.run(run())
