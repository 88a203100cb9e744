"""Deduplication persisted in the ``pulsar.dedup`` cursor: snapshots, replay after a crash, resends
in flight, batches and chunks, the switch; each checked against a broker that would store twice."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from magnetar.base.types import EARLIEST, Position, TopicName
from magnetar.broker import BrokerConfig, MemoryLogStore
from magnetar.broker.dedup import DEDUP_CURSOR_NAME, DedupState, MessageDeduplication, entry_highest_sequence
from magnetar.broker.log import AppendCallback
from magnetar.broker.producer import DUPLICATE, AccessMode, Producer
from magnetar.broker.topic import Topic
from magnetar.protocol.pulsar import SendCommand, headers_and_payload, pb, stored_entry_metadata
from tests.broker.fakes import FakeChannel, append, append_each_then, settle

TOPIC = "persistent://public/default/dedup"
#: Deduplication is off by default (as in Pulsar); these tests are about it, so they turn it on.
DEDUP_ON = BrokerConfig(deduplication=True)


def _entry(name: str, seq: int, batch: int | None = None, chunk: tuple[int, int] | None = None) -> bytes:
    metadata = pb.MessageMetadata(producer_name=name, sequence_id=seq, publish_time=1)
    if batch is not None:
        metadata.num_messages_in_batch = batch
    if chunk is not None:
        metadata.uuid = f"{name}-{seq}"
        metadata.chunk_id, metadata.num_chunks_from_msg = chunk
        metadata.total_chunk_msg_size = chunk[1]
    return headers_and_payload(metadata, b"x")


async def _topic(store: MemoryLogStore, config: BrokerConfig | None = None, interval: int | None = None) -> Topic:
    topic = Topic(TopicName.parse(TOPIC), await store.open_log(TOPIC, create=True), config or DEDUP_ON)
    if interval is not None:
        topic.dedup = MessageDeduplication(topic.log, topic.config, snapshot_interval=interval)
    await topic.dedup.ready()
    return topic


async def _send(producer: Producer, seq: int, count: int = 1) -> None:
    command = SendCommand(producer_id=producer.producer_id, sequence_id=seq)
    if count > 1:
        command.num_messages = count
    await producer.send(command, _entry(producer.name, seq, batch=count if count > 1 else None))


async def _stored(store: MemoryLogStore) -> list[tuple[str, int]]:
    log = await store.open_log(TOPIC, create=False)
    out = []
    for entry in await log.read(EARLIEST, 100_000):
        metadata = stored_entry_metadata(entry.payload)
        out.append((metadata.producer_name, metadata.sequence_id))
    return out


def test_a_crash_after_snapshots_loses_no_sequence_id() -> None:
    """Broker 1 persists 0..24 (a snapshot after >= 10, none for the last 5) and dies without
    closing; broker 2 replays the entries after the snapshot, reports 24 and drops resent 20..24."""

    async def run() -> None:
        store = MemoryLogStore()
        topic = await _topic(store, interval=10)
        channel = FakeChannel()
        producer = Producer(topic, 0, "fixed", channel, AccessMode.SHARED, 100)
        for seq in range(20):
            await _send(producer, seq)
        await settle()
        for seq in range(20, 25):
            await _send(producer, seq)
        await settle()
        assert topic.dedup.snapshots_taken >= 1
        cursor = await topic.log.open_cursor(DEDUP_CURSOR_NAME, durable=True, initial_mark_delete=EARLIEST)
        snapshot_at = cursor.mark_delete_position.entry_id
        assert 9 <= snapshot_at < 20 and cursor.properties == {"fixed": snapshot_at}
        # no close(): what a kill -9 leaves behind
        second = await _topic(store, interval=10)
        assert second.last_sequence_id("fixed") == 24
        channel2 = FakeChannel()
        again = Producer(second, 0, "fixed", channel2, AccessMode.SHARED, 100)
        for seq in range(20, 30):
            await _send(again, seq)
        await settle()
        receipts = [(seq, Position(ledger, entry) == DUPLICATE) for _, seq, ledger, entry in channel2.receipts]
        assert receipts == [(s, s < 25) for s in range(20, 30)]
        assert await _stored(store) == [("fixed", s) for s in range(30)]

    asyncio.run(run())


def test_negative_control_without_dedup_the_resends_are_stored_twice() -> None:
    async def run() -> None:
        store = MemoryLogStore()
        config = BrokerConfig()  # the default: off, as in Pulsar
        topic = await _topic(store, config)
        producer = Producer(topic, 0, "fixed", FakeChannel(), AccessMode.SHARED, 100)
        for seq in (0, 1, 0, 1):
            await _send(producer, seq)
        await settle()
        assert len(await _stored(store)) == 4
        assert topic.last_sequence_id("fixed") == -1
        assert DEDUP_CURSOR_NAME not in topic.log.cursor_names()

    asyncio.run(run())


def test_turning_dedup_off_deletes_its_cursor_and_on_again_recovers() -> None:
    async def run() -> None:
        store = MemoryLogStore()
        switch = {"on": True}
        log = await store.open_log(TOPIC, create=True)
        topic = Topic(TopicName.parse(TOPIC), log, DEDUP_ON)
        topic.dedup = MessageDeduplication(log, topic.config, enabled=lambda: switch["on"])
        await topic.dedup.ready()
        assert DEDUP_CURSOR_NAME in log.cursor_names()
        producer = Producer(topic, 0, "p", FakeChannel(), AccessMode.SHARED, 100)
        await _send(producer, 5)
        await settle()
        switch["on"] = False
        await topic.dedup.ready()
        assert topic.dedup.state is DedupState.DISABLED and DEDUP_CURSOR_NAME not in log.cursor_names()
        switch["on"] = True
        await topic.dedup.ready()  # a new cursor starts at the end: what came before is not replayed
        assert topic.dedup.state is DedupState.READY and topic.last_sequence_id("p") == -1

    asyncio.run(run())


class _GatedLog:
    """Appends wait until ``open()``; the first ``fail_first`` appends then fail."""

    def __init__(self, inner: object, fail_first: int = 0) -> None:
        self.inner = inner
        self.gate = asyncio.Event()
        self.fail_first = fail_first

    def __getattr__(self, name: str) -> object:
        return getattr(self.inner, name)

    def append_run(self, run: Sequence[tuple[bytes, AppendCallback]]) -> None:
        append_each_then(run, self._append)

    async def _append(self, data: bytes) -> Position:
        await self.gate.wait()
        if self.fail_first:
            self.fail_first -= 1
            raise OSError("bookies are down")
        return await append(self.inner, data)  # type: ignore[arg-type]


def test_a_resend_racing_its_original_waits_and_is_dropped() -> None:
    """The client reconnects and resends seq 0 while the first append of seq 0 is still running:
    the resend must neither be stored again nor be answered before the original is known."""

    async def run() -> None:
        store = MemoryLogStore()
        inner = await store.open_log(TOPIC, create=True)
        gated = _GatedLog(inner)
        topic = Topic(TopicName.parse(TOPIC), gated, DEDUP_ON)  # type: ignore[arg-type]
        await topic.dedup.ready()
        old = Producer(topic, 0, "fixed", FakeChannel(), AccessMode.SHARED, 100)
        await _send(old, 0)
        await settle()
        new_channel = FakeChannel()
        new = Producer(topic, 1, "fixed", new_channel, AccessMode.SHARED, 100)
        resend = asyncio.ensure_future(_send(new, 0))
        await settle()
        assert not resend.done() and new_channel.receipts == []
        gated.gate.set()
        await resend
        await settle()
        assert [(s, Position(ledger, e)) for _, s, ledger, e in new_channel.receipts] == [(0, DUPLICATE)]
        assert await _stored(store) == [("fixed", 0)]

    asyncio.run(run())


def test_a_resend_of_a_failed_append_is_stored() -> None:
    async def run() -> None:
        store = MemoryLogStore()
        inner = await store.open_log(TOPIC, create=True)
        gated = _GatedLog(inner, fail_first=1)
        topic = Topic(TopicName.parse(TOPIC), gated, DEDUP_ON)  # type: ignore[arg-type]
        await topic.dedup.ready()
        old_channel = FakeChannel()
        old = Producer(topic, 0, "fixed", old_channel, AccessMode.SHARED, 100)
        await _send(old, 0)
        await settle()
        new_channel = FakeChannel()
        new = Producer(topic, 1, "fixed", new_channel, AccessMode.SHARED, 100)
        resend = asyncio.ensure_future(_send(new, 0))
        await settle()
        gated.gate.set()
        await resend
        await settle()
        assert [seq for _, seq, _ in old_channel.send_errors] == [0]
        assert [(s, e) for _, s, _, e in new_channel.receipts] == [(0, 0)]
        assert await _stored(store) == [("fixed", 0)]

    asyncio.run(run())


def test_batches_count_their_highest_id_live_and_on_replay() -> None:
    async def run() -> None:
        store = MemoryLogStore()
        topic = await _topic(store)
        channel = FakeChannel()
        producer = Producer(topic, 0, "b", channel, AccessMode.SHARED, 100)
        await _send(producer, 10, count=5)  # ids 10..14
        await settle()
        assert topic.last_sequence_id("b") == 14
        second = await _topic(store)  # replayed from the stored metadata, no snapshot yet
        assert second.last_sequence_id("b") == 14
        again = Producer(second, 0, "b", channel, AccessMode.SHARED, 100)
        await _send(again, 12, count=3)
        await _send(again, 15, count=2)
        await settle()
        assert [Position(ledger, e) == DUPLICATE for _, _, ledger, e in channel.receipts] == [False, True, False]

    asyncio.run(run())


def test_only_the_last_chunk_records_the_sequence_id() -> None:
    first_chunk = stored_entry_metadata(_entry("c", 3, chunk=(0, 3)))
    last_chunk = stored_entry_metadata(_entry("c", 3, chunk=(2, 3)))
    assert entry_highest_sequence(first_chunk) is None
    assert entry_highest_sequence(last_chunk) == 3
    with_highest = pb.MessageMetadata(producer_name="h", sequence_id=4, publish_time=1, highest_sequence_id=9)
    assert entry_highest_sequence(with_highest) == 9


def test_close_takes_a_final_snapshot_so_the_next_load_replays_nothing() -> None:
    async def run() -> None:
        store = MemoryLogStore()
        topic = await _topic(store, interval=1000)
        producer = Producer(topic, 0, "p", FakeChannel(), AccessMode.SHARED, 100)
        for seq in range(7):
            await _send(producer, seq)
        await settle()
        assert topic.dedup.snapshots_taken == 0
        await topic.close()
        log = await store.open_log(TOPIC, create=False)
        cursor = await log.open_cursor(DEDUP_CURSOR_NAME, durable=True, initial_mark_delete=EARLIEST)
        assert cursor.properties == {"p": 6} and cursor.mark_delete_position == log.last_position

    asyncio.run(run())


def test_a_resent_chunked_message_is_not_completed_twice() -> None:
    async def run() -> None:
        store = MemoryLogStore()
        topic = await _topic(store)
        channel = FakeChannel()
        producer = Producer(topic, 0, "c", channel, AccessMode.SHARED, 100)
        for _ in range(2):  # the whole message, then its resend after a reconnect
            for chunk_id in range(3):
                command = SendCommand(producer_id=0, sequence_id=7, is_chunk=True)
                await producer.send(command, _entry("c", 7, chunk=(chunk_id, 3)), records_sequence=chunk_id == 2)
            await settle()
        last_chunks = [Position(ledger, e) == DUPLICATE for _, _, ledger, e in channel.receipts][2::3]
        assert last_chunks == [False, True]
        assert len(await _stored(store)) == 5  # 3 + the resent first two chunks

    asyncio.run(run())
