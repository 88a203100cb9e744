"""Receipts follow SEND order even when appends complete out of order; checksum errors keep their place."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Sequence
from dataclasses import replace

import pytest

from magnetar import faults
from magnetar.base.types import Position, TopicName
from magnetar.broker import BrokerConfig, MemoryLogStore
from magnetar.broker.log import AppendCallback
from magnetar.broker.producer import AccessMode, Producer
from magnetar.broker.topic import PublishCallback, Topic
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

    def append_run(self, run: Sequence[tuple[bytes, AppendCallback]]) -> None:
        for _data, on_done in run:
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


def test_each_receipt_passes_both_gates_once_when_armed_and_none_when_unarmed() -> None:
    """The receipt's two gates are called natively while unarmed (``faults.unarmed``) and through
    the point when armed: with both armed ``pass`` every receipt is counted once at each, in SEND
    order; with another point armed (the registry not empty) and with none, nothing is counted
    and every receipt still comes. Negative control: an unarmed branch taken without asking
    ``faults.unarmed`` (the continuation called always) counts 0 hits in the armed case."""
    points = ("broker.after_persist_before_receipt", "broker.after_receipt")

    async def run(arm: tuple[str, ...]) -> tuple[list[int], list[int]]:
        log = await MemoryLogStore().open_log("persistent://public/default/t", create=True)
        topic = Topic(TopicName.parse("t"), log, BrokerConfig())
        channel = FakeChannel()
        producer = Producer(topic, 0, "p", channel, AccessMode.SHARED, 100)
        for name in arm:
            faults.arm(name, "pass")
        try:
            await producer.send_run([(SendCommand(producer_id=0, sequence_id=seq), b"data", True, None)
                                     for seq in range(4)])
            await settle()
            return [seq for _, seq, _, _ in channel.receipts], [faults.hits(name) for name in points]
        finally:
            faults.disarm_all()

    assert asyncio.run(run(points)) == ([0, 1, 2, 3], [4, 4])
    assert asyncio.run(run(("ledger.before_send",))) == ([0, 1, 2, 3], [0, 0])
    assert asyncio.run(run(())) == ([0, 1, 2, 3], [0, 0])


class _CountingTopic(Topic):
    """Records the length of every run handed to the one publish path."""

    runs: list[int]

    def start_publish_run(self, run: Sequence[tuple[bytes, PublishCallback, int]]) -> Awaitable[None] | None:
        self.runs.append(len(run))
        return super().start_publish_run(run)


async def _counting(dedup: bool = False) -> tuple[_CountingTopic, Producer, FakeChannel]:
    log = await MemoryLogStore().open_log("persistent://public/default/t", create=True)
    topic = _CountingTopic(TopicName.parse("t"), log, BrokerConfig(deduplication=dedup))
    topic.runs = []
    await topic.dedup.ready()
    channel = FakeChannel()
    return topic, Producer(topic, 0, "p", channel, AccessMode.SHARED, 100), channel


def _item(seq: int, data: bytes | None = b"data") -> tuple[SendCommand, bytes | None, bool, None]:
    return SendCommand(producer_id=0, sequence_id=seq), data, True, None


def test_the_sends_of_one_receive_are_one_publish_run() -> None:
    """Five SENDs (a bad checksum among them) handed over together: one run of the four to store,
    answered in SEND order. Control: sent one at a time, they are four runs of one."""

    async def run(together: bool) -> list[int]:
        topic, producer, channel = await _counting()
        items = [_item(0), _item(1), _item(2, None), _item(3), _item(4)]
        await _send_items(producer, items, together)
        assert [seq for _, seq, _, _ in channel.receipts] == [0, 1, 3, 4]
        assert [(ledger, e) for _, _, ledger, e in channel.receipts] == [(1, 0), (1, 1), (1, 2), (1, 3)]
        assert channel.send_errors == [(0, 2, pb.ChecksumError)]
        return topic.runs

    assert asyncio.run(run(together=True)) == [4]
    assert asyncio.run(run(together=False)) == [1, 1, 1, 1]


def test_a_duplicate_behind_its_own_run_hands_the_run_over_first() -> None:
    """Deduplication on, the same sequence id twice in one run: the second waits for the first's
    append, so the run gathered before it goes to the topic first (no wait on an append never
    started); the resend is answered (-1,-1), the rest stored once, in order."""

    async def run() -> None:
        topic, producer, channel = await _counting(dedup=True)
        await producer.send_run([_item(0), _item(1), _item(1), _item(2)])
        await settle()
        assert topic.runs == [2, 1]
        assert [(seq, ledger, e) for _, seq, ledger, e in channel.receipts] == [
            (0, 1, 0), (1, 1, 1), (1, -1, -1), (2, 1, 2)]

    asyncio.run(run())


def test_a_refused_entry_fails_alone_and_the_run_goes_on() -> None:
    """Over the topic's max message size: that SEND gets NotAllowedError, the others of its run are
    stored, answers in SEND order."""

    async def run() -> None:
        topic, producer, channel = await _counting()
        limited = replace(topic.policies(), max_message_size_bytes=10)
        topic.policies = lambda: limited
        await producer.send_run([_item(0), _item(1, b"x" * 11), _item(2)])
        await settle()
        assert [seq for _, seq, _, _ in channel.receipts] == [0, 2]
        assert channel.send_errors == [(0, 1, pb.NotAllowedError)]

    asyncio.run(run())


class _RunCountingLog:
    """A memory log that records the length of every ``append_run`` it is handed."""

    def __init__(self, inner: object) -> None:
        self.inner = inner
        self.appended_runs: list[int] = []

    def __getattr__(self, name: str) -> object:
        return getattr(self.inner, name)

    def append_run(self, run: Sequence[tuple[bytes, AppendCallback]]) -> None:
        self.appended_runs.append(len(run))
        self.inner.append_run(run)  # type: ignore[attr-defined]


def test_a_publish_run_reaches_the_log_as_one_append_run() -> None:
    """The entries of a run that pass the topic's checks go to the log in one ``append_run``; an
    entry refused by the topic (too large) is answered alone and the others still go together.
    Control: SENDs one at a time are one ``append_run`` each."""

    async def run(together: bool, size_max: int = 0) -> tuple[list[int], list[int]]:
        inner = await MemoryLogStore().open_log("persistent://public/default/t", create=True)
        log = _RunCountingLog(inner)
        topic = Topic(TopicName.parse("t"), log, BrokerConfig())  # type: ignore[arg-type]
        await topic.dedup.ready()
        if size_max:
            limited = replace(topic.policies(), max_message_size_bytes=size_max)
            topic.policies = lambda: limited  # type: ignore[method-assign]
        channel = FakeChannel()
        producer = Producer(topic, 0, "p", channel, AccessMode.SHARED, 100)
        items = [_item(0), _item(1), _item(2, b"x" * 11), _item(3)]
        await _send_items(producer, items, together)
        return log.appended_runs, [seq for _, seq, _, _ in channel.receipts]

    assert asyncio.run(run(together=True)) == ([4], [0, 1, 2, 3])
    assert asyncio.run(run(together=True, size_max=10)) == ([3], [0, 1, 3])
    assert asyncio.run(run(together=False)) == ([1, 1, 1, 1], [0, 1, 2, 3])


async def _send_items(producer: Producer, items: list[tuple[SendCommand, bytes | None, bool, None]],
                      together: bool) -> None:
    """``items`` as one run (one receive of several SENDs) or one SEND at a time, then settled."""
    if together:
        await producer.send_run(items)
    else:
        for command, data, _, _ in items:
            await producer.send(command, data)
    await settle()
