"""The replicator over an in-memory topic with a fake remote producer and a manual clock: what it
sends, what it acknowledges and when, the backoff after failures, resending after a lost producer."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from magnetar.base.errors import ClosedError
from magnetar.base.types import TopicName
from magnetar.broker import BrokerConfig, MemoryLogStore
from magnetar.broker.replicated import REPL_SOURCE_POSITION_PROPERTY
from magnetar.broker.topic import Topic
from magnetar.client.message import MessageId
from magnetar.protocol.pulsar import headers_and_payload, pb
from magnetar.replication import Replicator, ReplicatorState
from tests.manual_clock import ManualClock, settle

TOPIC = "persistent://public/default/r"


class _State:
    name = "READY"


@dataclass
class FakeRemote:
    """Producers the replicator makes; each records what it was sent and holds the futures."""

    failures_left: int = 0
    made: int = 0
    sent: list[tuple[pb.MessageMetadata, asyncio.Future[MessageId]]] = field(default_factory=list)
    state: _State = field(default_factory=_State)
    closed: int = 0

    async def make(self, topic: str, producer_name: str) -> FakeRemote:
        self.made += 1
        if self.failures_left:
            self.failures_left -= 1
            raise ClosedError("remote unreachable")
        return self

    async def send_entry_async(self, metadata: pb.MessageMetadata, payload: bytes) -> asyncio.Future[MessageId]:
        future: asyncio.Future[MessageId] = asyncio.get_running_loop().create_future()
        copy = pb.MessageMetadata()
        copy.CopyFrom(metadata)
        self.sent.append((copy, future))
        return future

    async def close(self) -> None:
        self.closed += 1

    def receipt_all(self) -> None:
        for _, future in self.sent:
            if not future.done():
                future.set_result(MessageId(9, 9))

    def fail_all(self) -> None:
        for _, future in self.sent:
            if not future.done():
                future.set_exception(ClosedError("connection lost for good"))


def _message(seq: int, **fields: object) -> bytes:
    metadata = pb.MessageMetadata(producer_name="p", sequence_id=seq, publish_time=1)
    for name, value in fields.items():
        if isinstance(value, list):
            getattr(metadata, name).extend(value)
        else:
            setattr(metadata, name, value)
    return headers_and_payload(metadata, b"x")


async def _setup(remote: FakeRemote) -> tuple[Topic, Replicator, ManualClock]:
    clock = ManualClock()
    store = MemoryLogStore()
    topic = Topic(TopicName.parse(TOPIC), await store.open_log(TOPIC, create=True), BrokerConfig(), clock=clock)
    replicator = Replicator(topic, "A", "B", remote.make, clock)  # type: ignore[arg-type]
    await replicator.open_cursor()
    replicator.start()
    return topic, replicator, clock


def test_sends_local_entries_with_source_position_and_acks_only_on_receipts() -> None:
    async def run() -> None:
        remote = FakeRemote()
        topic, replicator, _clock = await _setup(remote)
        positions = [await topic.publish(_message(0)),
                     await topic.publish(_message(1, replicated_from="C")),  # came from elsewhere
                     await topic.publish(_message(2, replicate_to=["A"])),  # not for B
                     await topic.publish(_message(3))]
        await settle()
        sent = [m for m, _ in remote.sent]
        assert [m.sequence_id for m in sent] == [0, 3]
        assert all(m.replicated_from == "A" for m in sent)
        assert [dict((p.key, p.value) for p in m.properties)[REPL_SOURCE_POSITION_PROPERTY] for m in sent] == [
            f"{positions[0].ledger_id}:{positions[0].entry_id}", f"{positions[3].ledger_id}:{positions[3].entry_id}"]
        cursor = replicator.cursor
        assert cursor is not None
        assert cursor.mark_delete_position < positions[0]  # nothing receipted yet
        assert replicator.backlog_entries() == 2  # the skipped ones are acknowledged already
        remote.receipt_all()
        await settle()
        assert cursor.mark_delete_position == positions[3]
        assert replicator.stats()["replicationBacklog"] == 0 and replicator.stats()["connected"]
        await replicator.stop()

    asyncio.run(run())


def test_backoff_doubles_from_100_ms_and_a_lost_producer_resends_what_was_not_receipted() -> None:
    async def run() -> None:
        remote = FakeRemote(failures_left=3)
        topic, replicator, clock = await _setup(remote)
        first = await topic.publish(_message(0))
        await settle()
        assert remote.made == 1 and replicator.state is ReplicatorState.CONNECTING
        assert "remote unreachable" in replicator.last_error
        for wait_s, made in ((0.099, 1), (0.001, 2), (0.199, 2), (0.001, 3), (0.4, 4)):  # 100, 200, 400 ms
            await clock.advance(wait_s)
            assert remote.made == made, (wait_s, remote.made)
        assert replicator.state is ReplicatorState.CONNECTED and replicator.last_error == ""
        assert [m.sequence_id for m, _ in remote.sent] == [0]
        second = await topic.publish(_message(1))
        await settle()
        remote.sent[0][1].set_result(MessageId(9, 9))  # the first is receipted, the second is not
        remote.fail_all()  # ...its producer fails instead
        await settle()
        assert replicator.state is ReplicatorState.CONNECTING
        await clock.advance(0.1)  # the backoff starts again at 100 ms after a good connection
        assert [m.sequence_id for m, _ in remote.sent] == [0, 1, 1]  # only the unreceipted one again
        remote.receipt_all()
        await settle()
        cursor = replicator.cursor
        assert cursor is not None and cursor.mark_delete_position == second and first < second
        await replicator.stop()
        assert replicator.state is ReplicatorState.STOPPED and remote.closed >= 2

    asyncio.run(run())


def test_stop_leaves_unreceipted_entries_in_the_backlog() -> None:
    async def run() -> None:
        remote = FakeRemote()
        topic, replicator, _clock = await _setup(remote)
        position = await topic.publish(_message(0))
        await settle()
        await replicator.stop()
        cursor = replicator.cursor
        assert cursor is not None and cursor.mark_delete_position < position
        assert replicator.backlog_entries() == 1

    asyncio.run(run())




def test_stats_follow_the_remote_producers_own_reconnect() -> None:
    """The remote producer loses its connection and reconnects by itself (the replicator's loop
    sees nothing fail): ``connected``, ``lastError`` and ``outboundConnectedSince`` follow it."""

    async def run() -> None:
        remote = FakeRemote()
        _topic, replicator, clock = await _setup(remote)
        await settle()
        replicator.sample(clock.monotonic_ns())
        first = replicator.stats()
        assert first["connected"] and first["lastError"] == ""
        remote.state.name = "CONNECTING"
        replicator.sample(clock.monotonic_ns())
        lost = replicator.stats()
        assert not lost["connected"] and "lost" in lost["lastError"]
        await clock.advance(5.0)
        remote.state.name = "READY"
        replicator.sample(clock.monotonic_ns())
        back = replicator.stats()
        assert back["connected"] and back["lastError"] == ""
        assert int(back["outboundConnectedSince"]) == int(first["outboundConnectedSince"]) + 5_000
        await replicator.stop()

    asyncio.run(run())
