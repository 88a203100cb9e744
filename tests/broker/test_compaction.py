"""Compaction in process: the two passes, the compacted view, the admin API, the threshold policy
and a crash or error at each fault point (nothing lost or duplicated for a compacted reader)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest

from magnetar import faults
from magnetar.base.types import EARLIEST, Position, TopicName
from magnetar.broker import MemoryLogStore
from magnetar.broker.compaction import (
    AFTER_RECORD_POINT,
    AFTER_WRITE_POINT,
    COMPACTED_LEDGER_PROPERTY,
    COMPACTION_CURSOR_NAME,
    CompactedView,
    CompactionStatus,
    compacted_view,
)
from magnetar.broker.consumer import Consumer, SubType
from magnetar.broker.errors import BrokerError
from magnetar.broker.service import BrokerService
from magnetar.protocol.pulsar import headers_and_payload, pb
from magnetar.protocol.pulsar.batch import LZ4, decode_entry, encode_entry
from magnetar.protocol.pulsar.stored import split_stored_entry
from tests.admin.harness import AdminWorld, run_world
from tests.broker.fakes import FakeChannel

T = "persistent://public/default/ct"
NS = "/namespaces/public/default"


class SimulatedCrash(BaseException):
    """What the crash hook raises: the task stops dead at the fault point, as a killed process would."""


@pytest.fixture(autouse=True)
def _disarm() -> Iterator[None]:
    yield
    faults.disarm_all()
    faults.set_crash_hook(None)


def keyed(key: str | None, value: bytes, *, null_value: bool = False) -> bytes:
    metadata = pb.MessageMetadata(producer_name="p", sequence_id=0, publish_time=1)
    if key is not None:
        metadata.partition_key = key
    if null_value:
        metadata.null_value = True
    return headers_and_payload(metadata, value)


def batch(messages: list[tuple[str | None, bytes]], codec: int = 0) -> bytes:
    base = pb.MessageMetadata(producer_name="p", sequence_id=0, publish_time=1)
    singles = []
    for key, value in messages:
        single = pb.SingleMessageMetadata()
        if key is not None:
            single.partition_key = key
        singles.append((single, value))
    metadata, payload = encode_entry(base, messages=singles, codec=codec)
    return headers_and_payload(metadata, payload)


async def compacted_messages(view: CompactedView) -> list[tuple[Position, str | None, bytes]]:
    """Every message a read_compacted reader gets, in order: (entry position, key, value)."""
    out = []
    start = previous = EARLIEST
    while True:
        entries = await view.read(start, 3)  # small reads cross the compacted ledger / topic boundary
        if not entries:
            return out
        for entry in entries:
            assert entry.position > previous, f"entry {entry.position} read twice or out of order"
            previous = entry.position
            metadata, payload = split_stored_entry(entry.payload)
            for single in decode_entry(metadata, payload):
                md = single.metadata
                key = (md.partition_key if md.HasField("partition_key") else None) if md is not None else (
                    metadata.partition_key if metadata.HasField("partition_key") else None)
                out.append((entry.position, key, single.payload))
        start = entries[-1].position.next()


def latest(messages: list[tuple[Position, str | None, bytes]],
           horizon: Position | None = None) -> tuple[dict[str, bytes], list[bytes]]:
    """What an application rebuilds from a compacted read: each key's last value (an empty one
    removes it) and the keyless values. Below the horizon each key appears at most once; no
    entry is read twice (``compacted_messages`` checks that)."""
    keys: dict[str, bytes] = {}
    keyless: list[bytes] = []
    seen_below: set[str] = set()
    for position, key, value in messages:
        if key is None:
            keyless.append(value)
            continue
        if horizon is None or position <= horizon:
            assert key not in seen_below, f"key {key} twice below the horizon"
            seen_below.add(key)
        if value:
            keys[key] = value
        else:
            keys.pop(key, None)
    return keys, keyless


async def run_compaction(service: BrokerService) -> Any:
    topic = await service.get_topic(TopicName.parse(T), create=True)
    await topic.compaction.start()
    return topic


def test_two_passes_keep_latest_per_key_tombstones_keyless_and_batch_survivors() -> None:
    async def body(w: AdminWorld) -> None:
        topic = await w.service.get_topic(TopicName.parse(T), create=True)
        await topic.publish(keyed("a", b"a1"))
        await topic.publish(keyed("b", b"b1"))
        await topic.publish(keyed(None, b"free-1"))
        await topic.publish(batch([("a", b"a2"), ("c", b"c1"), ("b", b"b2"), (None, b"free-2")], codec=LZ4))
        await topic.publish(keyed("c", b""))  # empty payload: tombstone
        await topic.publish(keyed("d", b"d1"))
        await topic.publish(keyed("d", b"x", null_value=True))  # null_value: tombstone
        await topic.publish(batch([("e", b"e1"), ("e", b"e2")]))
        await topic.compaction.start()
        assert topic.compaction.status is CompactionStatus.SUCCESS
        view = CompactedView(topic.log, topic.compaction)
        messages = await compacted_messages(view)
        assert latest(messages, topic.log.last_position) == ({"a": b"a2", "b": b"b2", "e": b"e2"},
                                                             [b"free-1", b"free-2"])
        # The rewritten batches keep only their survivors, at their entry's position.
        positions = [p for p, _, _ in messages]
        assert positions == sorted(positions)
        state = await topic.compaction.state()
        assert state is not None and state.horizon == topic.log.last_position
        cursor = await topic.log.open_cursor(COMPACTION_CURSOR_NAME, durable=True, initial_mark_delete=EARLIEST)
        assert cursor.properties == {COMPACTED_LEDGER_PROPERTY: state.ledger_id}
        assert cursor.mark_delete_position == state.horizon
        # Negative control: the full topic still has every message.
        full = [m for e in await topic.log.read(EARLIEST, 100) for m in decode_entry(*split_stored_entry(e.payload))]
        assert len(full) == 12

    run_world(body)


def test_read_compacted_only_for_exclusive_and_failover() -> None:
    async def body(w: AdminWorld) -> None:
        topic = await w.service.get_topic(TopicName.parse(T), create=True)
        for sub_type in (SubType.EXCLUSIVE, SubType.FAILOVER):
            compacted_view(topic.log, topic.compaction, topic.name, sub_type)
        for sub_type in (SubType.SHARED, SubType.KEY_SHARED):
            with pytest.raises(BrokerError) as refused:
                compacted_view(topic.log, topic.compaction, topic.name, sub_type)
            assert refused.value.code == pb.NotAllowedError

    run_world(body)


def test_admin_compaction_endpoints() -> None:
    async def body(w: AdminWorld) -> None:
        path = f"{w.topic_path(T)}/compaction"
        assert (await w.call("GET", path)).status == 404
        topic = await w.service.get_topic(TopicName.parse(T), create=True)
        assert await w.ok("GET", path) == {"status": "NOT_RUN", "lastError": ""}
        await topic.publish(keyed("a", b"1"))
        faults.arm(AFTER_WRITE_POINT, "hang")
        assert (await w.call("PUT", path)).status == 204
        await _until(lambda: faults.hits(AFTER_WRITE_POINT) == 1)
        assert (await w.ok("GET", path))["status"] == "RUNNING"
        assert (await w.call("PUT", path)).status == 409
        faults.release(AFTER_WRITE_POINT)
        await _until(lambda: topic.compaction.status is not CompactionStatus.RUNNING)
        assert await w.ok("GET", path) == {"status": "SUCCESS", "lastError": ""}
        faults.arm(AFTER_WRITE_POINT, "error")
        await topic.publish(keyed("a", b"2"))
        await w.ok("PUT", path)
        await _until(lambda: topic.compaction.status is not CompactionStatus.RUNNING)
        status = await w.ok("GET", path)
        assert status["status"] == "ERROR" and "InjectedFaultError" in status["lastError"]

    run_world(body)


def test_compaction_threshold_policy_triggers_in_the_policy_pass() -> None:
    async def body(w: AdminWorld) -> None:
        topic = await w.service.get_topic(TopicName.parse(T), create=True)
        for i in range(20):
            await topic.publish(keyed(f"k{i % 4}", b"v" * 50))
        await w.check()
        assert topic.compaction.status is CompactionStatus.NOT_RUN  # no threshold: never
        await w.ok("PUT", f"{NS}/compactionThreshold", 10_000)
        assert await w.ok("GET", f"{NS}/compactionThreshold") == 10_000
        await w.check()
        assert topic.compaction.status is CompactionStatus.NOT_RUN  # below the threshold
        await w.ok("PUT", f"{NS}/compactionThreshold", 500)
        await w.ok("POST", f"{w.topic_path(T)}/compactionThreshold", 1_000_000)  # the topic's wins
        await w.check()
        assert topic.compaction.status is CompactionStatus.NOT_RUN
        await w.ok("DELETE", f"{w.topic_path(T)}/compactionThreshold")
        await w.check()
        await _until(lambda: topic.compaction.status is CompactionStatus.SUCCESS)
        state = await topic.compaction.state()
        assert state is not None and state.horizon == topic.log.last_position
        await w.check()  # nothing after the horizon now: no new compaction
        assert (await topic.compaction.state()) == state
        assert (await w.call("PUT", f"{NS}/compactionThreshold", -1)).status == 412

    run_world(body)


async def _until(condition: Any, rounds: int = 2000) -> None:
    for _ in range(rounds):
        if condition():
            return
        await asyncio.sleep(0)
    raise AssertionError("condition not reached")


@pytest.mark.parametrize("point", [AFTER_WRITE_POINT, AFTER_RECORD_POINT])
@pytest.mark.parametrize("action", ["error", "crash"])
def test_a_failure_at_each_fault_point_loses_and_duplicates_nothing(point: str, action: str) -> None:
    async def main() -> None:
        store = MemoryLogStore()
        world = await AdminWorld(log_store=store).start()
        topic = await world.service.get_topic(TopicName.parse(T), create=True)
        expected: dict[str, bytes] = {}
        for i in range(12):
            await topic.publish(keyed(f"k{i % 3}", f"r1-{i}".encode()))
            expected[f"k{i % 3}"] = f"r1-{i}".encode()
        await topic.compaction.start()
        first = await topic.compaction.state()
        assert first is not None
        await topic.publish(batch([("k0", b"r2-0"), ("k9", b"r2-9")]))
        await topic.publish(keyed("k1", b""))
        expected.update({"k0": b"r2-0", "k9": b"r2-9"})
        del expected["k1"]
        if action == "crash":
            def crash(name: str) -> Any:
                raise SimulatedCrash(name)

            faults.set_crash_hook(crash)
        faults.arm(point, action)
        task = topic.compaction.start()
        with pytest.raises(Exception if action == "error" else SimulatedCrash):
            await asyncio.shield(task) if action == "crash" else await _raise_if_error(topic)
        faults.disarm_all()
        # The broker goes away (a crash: no close) and a new one opens the same storage.
        await world.service.close()
        again = await AdminWorld(log_store=store).start(world.metadata)
        reloaded = await again.service.get_topic(TopicName.parse(T), create=False)
        state = await reloaded.compaction.state()
        assert state is not None
        if point == AFTER_WRITE_POINT:
            assert state == first  # the new ledger was never recorded
        else:
            assert state.horizon == reloaded.log.last_position and state.ledger_id != first.ledger_id
        view = CompactedView(reloaded.log, reloaded.compaction)
        keys, keyless = latest(await compacted_messages(view), state.horizon)
        assert keys == expected and keyless == []
        # And the next compaction completes from there.
        await reloaded.compaction.start()
        assert reloaded.compaction.status is CompactionStatus.SUCCESS
        final = await reloaded.compaction.state()
        assert final is not None and final.horizon == reloaded.log.last_position
        assert latest(await compacted_messages(CompactedView(reloaded.log, reloaded.compaction)), final.horizon) == (
            expected, [])
        await again.close()

    asyncio.run(main())


async def _raise_if_error(topic: Any) -> None:
    await _until(lambda: topic.compaction.status is not CompactionStatus.RUNNING)
    if topic.compaction.status is CompactionStatus.ERROR:
        raise RuntimeError(topic.compaction.last_error)


def test_deleting_the_topic_deletes_its_compacted_ledger() -> None:
    async def main() -> None:
        store = MemoryLogStore()
        world = await AdminWorld(log_store=store).start()
        try:
            topic = await world.service.get_topic(TopicName.parse(T), create=True)
            await topic.publish(keyed("a", b"1"))
            await topic.compaction.start()
            state = await topic.compaction.state()
            assert state is not None and state.ledger_id in store.compacted.sealed
            await world.ok("DELETE", world.topic_path(T))
            assert store.compacted.sealed == {}
        finally:
            await world.close()

    asyncio.run(main())


def test_acks_of_a_compacted_subscription_cover_what_compaction_removed() -> None:
    async def body(w: AdminWorld) -> None:
        topic = await w.service.get_topic(TopicName.parse(T), create=True)
        for i in range(30):
            await topic.publish(keyed(f"k{i % 3}", f"v{i}".encode()))
        await topic.compaction.start()
        await topic.publish(keyed("k0", b"above"))  # above the horizon: read from the topic
        state = await topic.compaction.state()
        assert state is not None
        subscription = await topic.subscription("compacted", durable=True, initial_mark_delete=EARLIEST)
        channel = FakeChannel()
        consumer = Consumer(1, "c", SubType.EXCLUSIVE, channel)
        subscription.add_consumer(consumer, compacted_view(topic.log, topic.compaction, topic.name, SubType.EXCLUSIVE))
        subscription.flow(consumer, 100)
        await _until(lambda: len(channel.messages) == 4)
        delivered = [Position(*m[1]) for m in channel.messages]
        assert delivered[:3] == [Position(state.horizon.ledger_id, e) for e in (27, 28, 29)]
        for position in reversed(delivered[:3]):  # individual acks, out of order
            await subscription.acknowledge(False, [(position, [])])
        assert subscription.cursor.mark_delete_position == state.horizon  # the 27 removed ones too
        await subscription.acknowledge(False, [(delivered[3], [])])
        assert subscription.cursor.mark_delete_position == topic.log.last_position
        assert subscription.cursor.backlog_entries() == 0
        # Negative control: a subscription reading the full topic is not moved over anything.
        full = await topic.subscription("full", durable=True, initial_mark_delete=EARLIEST)
        other = Consumer(2, "f", SubType.EXCLUSIVE, FakeChannel())
        full.add_consumer(other)
        await full.acknowledge(False, [(delivered[2], [])])
        assert full.cursor.mark_delete_position == EARLIEST

    run_world(body)


def test_chunks_are_kept_and_an_encrypted_batch_is_judged_whole() -> None:
    async def body(w: AdminWorld) -> None:
        topic = await w.service.get_topic(TopicName.parse(T), create=True)
        for chunk in range(2):
            metadata = pb.MessageMetadata(producer_name="p", sequence_id=0, publish_time=1, partition_key="big",
                                          uuid="u", chunk_id=chunk, num_chunks_from_msg=2, total_chunk_msg_size=4)
            await topic.publish(headers_and_payload(metadata, b"ch"))
        encrypted = pb.MessageMetadata(producer_name="p", sequence_id=1, publish_time=1, partition_key="enc",
                                       num_messages_in_batch=3)
        encrypted.encryption_keys.add(key="k", value=b"v")
        await topic.publish(headers_and_payload(encrypted, b"\x00\x01not-a-readable-batch"))
        await topic.publish(headers_and_payload(encrypted, b"\x00\x02not-a-readable-batch"))
        await topic.compaction.start()
        assert topic.compaction.status is CompactionStatus.SUCCESS, topic.compaction.last_error
        entries = await CompactedView(topic.log, topic.compaction).read(EARLIEST, 10)
        first = (await topic.log.read(EARLIEST, 1))[0].position
        assert [e.position.entry_id - first.entry_id for e in entries] == [0, 1, 3]  # both chunks, the last batch

    run_world(body)
