"""Receipts follow SEND order even when appends complete out of order; checksum errors keep their place."""

from __future__ import annotations

import asyncio

import pytest

from magnetar import faults
from magnetar.base.types import Position, TopicName
from magnetar.broker import BrokerConfig, MemoryLogStore
from magnetar.broker.log import AppendCallback
from magnetar.broker.producer import AccessMode, Producer
from magnetar.broker.topic import Topic
from magnetar.protocol.pulsar import SendCommand, pb
from tests.broker.fakes import FakeChannel, settle


class _ReorderingLog:
    """Completes appends in reverse order once ``release()`` is called."""

    def __init__(self, inner: object) -> None:
        self.inner = inner
        self.appended: list[tuple[AppendCallback, Position]] = []
        self.next_entry = 0

    def __getattr__(self, name: str) -> object:
        return getattr(self.inner, name)

    def append_then(self, data: bytes, on_done: AppendCallback) -> None:
        position = Position(9, self.next_entry)
        self.next_entry += 1
        self.appended.append((on_done, position))

    def release(self) -> None:
        for on_done, position in reversed(self.appended):
            on_done(position, None)


def test_receipts_follow_send_order() -> None:
    async def run() -> None:
        inner = await MemoryLogStore().open_log("persistent://public/default/t", create=True)
        log = _ReorderingLog(inner)
        topic = Topic(TopicName.parse("t"), log, BrokerConfig())  # type: ignore[arg-type]
        channel = FakeChannel()
        producer = Producer(topic, 0, "p", channel, AccessMode.SHARED, 100)
        for seq in range(3):
            await producer.send(SendCommand(producer_id=0, sequence_id=seq), b"data")
        await producer.send(SendCommand(producer_id=0, sequence_id=3), None)  # bad checksum
        await settle()
        assert channel.receipts == [] and channel.send_errors == []  # nothing before the head persisted
        log.release()
        await settle()
        assert [seq for _, seq, _, _ in channel.receipts] == [0, 1, 2]
        assert [(ledger, e) for _, _, ledger, e in channel.receipts] == [(9, 0), (9, 1), (9, 2)]
        assert channel.send_errors == [(0, 3, pb.ChecksumError)]

    asyncio.run(run())


def test_resent_sequence_ids_are_deduplicated_only_once_persisted() -> None:
    async def run() -> None:
        log = await MemoryLogStore().open_log("persistent://public/default/t", create=True)
        topic = Topic(TopicName.parse("t"), log, BrokerConfig(deduplication=True))  # off by default
        await topic.dedup.ready()
        channel = FakeChannel()
        producer = Producer(topic, 0, "p", channel, AccessMode.SHARED, 100)
        await producer.send(SendCommand(producer_id=0, sequence_id=0), b"a")
        await settle()
        await producer.send(SendCommand(producer_id=0, sequence_id=0), b"a")  # a resend after reconnect
        await settle()
        assert [(ledger, e) for _, _, ledger, e in channel.receipts] == [(1, 0), (-1, -1)]
        assert len(await log.read(Position(-1, -1), 10)) == 1

    asyncio.run(run())


@pytest.mark.parametrize("point", ["broker.after_persist_before_receipt", "broker.after_receipt"])
def test_a_receipt_held_at_its_gate_holds_every_later_answer(point: str) -> None:
    """The receipt gates are on the one path: a hang there holds that receipt (or what follows it)
    and every later answer, which all come, in SEND order, once released. Control: the same
    sends with nothing armed are answered at once."""

    async def run(armed: bool) -> list[int]:
        log = await MemoryLogStore().open_log("persistent://public/default/t", create=True)
        topic = Topic(TopicName.parse("t"), log, BrokerConfig())
        channel = FakeChannel()
        producer = Producer(topic, 0, "p", channel, AccessMode.SHARED, 100)
        if armed:
            faults.arm(point, "hang")
        try:
            for seq in range(3):
                await producer.send(SendCommand(producer_id=0, sequence_id=seq), b"data")
            await producer.send(SendCommand(producer_id=0, sequence_id=3), None)  # bad checksum
            await settle()
            held = [seq for _, seq, _, _ in channel.receipts] + [seq for _, seq, _ in channel.send_errors]
            if armed:
                assert held == ([] if point == "broker.after_persist_before_receipt" else [0])
                assert faults.hits(point) == 1
                faults.release(point)
                await settle()
            assert [seq for _, seq, _, _ in channel.receipts] == [0, 1, 2]
            assert channel.send_errors == [(0, 3, pb.ChecksumError)]
            return held
        finally:
            faults.disarm_all()

    asyncio.run(run(armed=True))
    assert asyncio.run(run(armed=False)) == [0, 1, 2, 3]
