"""The write path after a failed ledger add (the `magnetar chaos` findings of docs/chaos-report.md).

Each test reproduces one finding on the simulator's virtual-time loop over fake bookies
(``tests/ledger/fakes``): an add that fails although the entry reached the bookies, adds queued
behind a failed one, a recovery that cannot run at once. What must hold:

* no add of the log succeeds after an earlier one failed to its caller, until the failure is
  settled (the stored order of one producer is its send order);
* an add whose ledger failed is told the truth the ledger's recovery finds: stored (its position
  in the closed ledger) or not stored (it is written again, in order, to the next ledger);
* deduplication never answers "duplicate" for a sequence id the log does not hold, and a resend
  of a message that did land after an ambiguous failure is answered "duplicate" (stored once).
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any

import pytest

from magnetar import sim
from magnetar.base.errors import MagnetarError
from magnetar.base.types import EARLIEST, Position, TopicName
from magnetar.broker import BrokerConfig
from magnetar.broker.managed_log import ManagedTopicLog
from magnetar.broker.producer import DUPLICATE, AccessMode, Producer
from magnetar.broker.topic import Topic, TopicState
from magnetar.ledger.errors import BookieUnavailableError
from magnetar.managed_ledger import ManagedLedger
from magnetar.protocol.pulsar import SendCommand, headers_and_payload, pb, stored_entry_metadata
from tests.broker.fakes import FakeChannel
from tests.managed_ledger.harness import TOPIC, World, config, make_world, until

BROKER_TOPIC = "persistent://public/default/t1"


def _run(coro: Coroutine[Any, Any, None]) -> None:
    sim.run(coro, steps_max=2_000_000)


async def _ml(world: World) -> ManagedLedger:
    factory = await world.broker(config(ensemble_size=3, write_quorum_size=3, ack_quorum_size=2))
    return await factory.open(TOPIC)


def _fail_entry_on_one_bookie_after_it_reached_two(world: World, entry_id: int) -> None:
    """Entry ``entry_id`` is refused by one bookie and stored by the other two, one of which never
    answers: one ack < Qa = 2, no spare bookie to replace the failed one, so the add fails
    although the entry is on two bookies (recovery will find it)."""
    first, second, _third = sorted(world.bookies)
    world.transport.rule(first, "add", entry_id, action="fail")
    world.transport.rule(second, "add", entry_id, action="hold_reply")


def _never_store(world: World, entry_id: int) -> None:
    for bookie in world.bookies:
        world.transport.rule(bookie, "add", entry_id, action="hold_before")


def _release_rules(world: World) -> None:
    for rule in world.transport.rules:
        rule.release()


def _outcomes(tasks: list[asyncio.Task[Position]]) -> list[Position | str]:
    return [t.result() if t.exception() is None else type(t.exception()).__name__ for t in tasks]


def _assert_no_success_after_a_failure(outcomes: list[Position | str]) -> None:
    failed = False
    for outcome in outcomes:
        if isinstance(outcome, str):
            failed = True
        else:
            assert not failed, f"an add succeeded after an earlier one failed: {outcomes}"


# --- managed ledger ----------------------------------------------------------------------------


def test_a_failed_add_is_told_what_recovery_found_and_later_adds_keep_their_order() -> None:
    """Entries 2 and 3 reached the bookies, entry 4 did not, entry 5 did (after the hole): the
    ledger is closed through recovery at 3; adds 2 and 3 succeed at their place in it, 4 and 5 are
    written again, in order, to the next ledger. Nothing is stored twice, nothing out of order
    (before the fix: 2..5 failed to their callers, and 2, 3 were readable anyway)."""

    async def run() -> None:
        world = make_world(3)
        ml = await _ml(world)
        first = [await ml.add_entry(f"m{i}".encode()) for i in range(2)]
        ledger = first[0].ledger_id
        _fail_entry_on_one_bookie_after_it_reached_two(world, 2)
        _never_store(world, 4)
        tasks = [asyncio.ensure_future(ml.add_entry(f"m{i}".encode())) for i in range(2, 6)]
        await asyncio.wait(tasks)
        _release_rules(world)
        outcomes = _outcomes(tasks)
        assert outcomes[:2] == [Position(ledger, 2), Position(ledger, 3)], outcomes
        assert all(isinstance(o, Position) and o.ledger_id > ledger for o in outcomes[2:]), outcomes
        after = await ml.add_entry(b"m6")
        stored = [e.payload for e in await ml.read_entries(EARLIEST, 100)]
        assert stored == [f"m{i}".encode() for i in range(7)]
        assert after > outcomes[-1]  # type: ignore[operator]

    _run(run())


def test_when_recovery_cannot_run_every_add_behind_the_failure_fails_until_settled() -> None:
    """The failed ledger cannot be recovered at once: the failed adds and every add queued behind
    them fail, and later adds are refused until ``settle_failed_writes`` (the topic's signal that
    it rebuilt its deduplication state) recovers the ledger. The entries that had reached the
    bookies then appear in the log before anything newer (before the fix: a later add was stored
    in a new ledger while earlier ones had failed)."""

    async def run() -> None:
        world = make_world(3)
        ml = await _ml(world)
        ledger = (await ml.add_entry(b"m0")).ledger_id
        real_recover = ml.manager.recover_ledger
        refused: list[int] = []

        async def recover_fails_once(ledger_id: int, **kwargs: Any) -> Any:
            if not refused:
                refused.append(ledger_id)
                raise BookieUnavailableError("no quorum for recovery now")
            return await real_recover(ledger_id, **kwargs)

        ml.manager.recover_ledger = recover_fails_once  # type: ignore[method-assign]
        _fail_entry_on_one_bookie_after_it_reached_two(world, 1)
        tasks = [asyncio.ensure_future(ml.add_entry(f"m{i}".encode())) for i in range(1, 4)]
        await asyncio.wait(tasks)
        _release_rules(world)
        outcomes = _outcomes(tasks)
        assert all(isinstance(o, str) for o in outcomes), outcomes
        with pytest.raises(MagnetarError):
            await ml.add_entry(b"too early")
        await ml.settle_failed_writes()
        assert ml.current_ledger_id != ledger
        later = await ml.add_entry(b"m4")
        stored = [e.payload for e in await ml.read_entries(EARLIEST, 100)]
        assert stored[-1] == b"m4" and later.ledger_id == ml.current_ledger_id
        assert stored == [b"m0", b"m1", b"m2", b"m3", b"m4"]  # 1..3 reached two bookies each

    _run(run())


# --- broker: deduplication over the managed ledger ----------------------------------------------


def _message(name: str, seq: int) -> bytes:
    return headers_and_payload(pb.MessageMetadata(producer_name=name, sequence_id=seq, publish_time=1), b"x")


async def _topic(world: World) -> Topic:
    ml = await _ml(world)
    # these tests are about deduplication, off by default (as in Pulsar): turned on here
    topic = Topic(TopicName.parse(BROKER_TOPIC), ManagedTopicLog(BROKER_TOPIC, ml), BrokerConfig(deduplication=True))
    await topic.dedup.ready()
    return topic


async def _send(producer: Producer, seq: int) -> None:
    await producer.send(SendCommand(producer_id=producer.producer_id, sequence_id=seq),
                        _message(producer.name, seq))


async def _stored(topic: Topic) -> list[tuple[str, int]]:
    out = []
    for entry in await topic.log.read(EARLIEST, 10_000):
        metadata = stored_entry_metadata(entry.payload)
        out.append((metadata.producer_name, metadata.sequence_id))
    return out


async def _connect(topic: Topic, name: str, producer_id: int) -> tuple[Producer, FakeChannel]:
    """A (re)connecting client: PRODUCER retried while the topic refuses it (ServiceNotReady)."""
    channel = FakeChannel()
    producer = Producer(topic, producer_id, name, channel, AccessMode.SHARED, 1000)
    for _ in range(100):
        try:
            topic.add_producer(producer, 0, lambda p, r: None)
            return producer, channel
        except MagnetarError:
            await asyncio.sleep(0.1)
    raise AssertionError("the topic never admitted the producer again")


def _assert_receipts_name_stored_messages(channel: FakeChannel, stored: list[tuple[str, int]], name: str) -> None:
    for _pid, seq, ledger_id, entry_id in channel.receipts:
        assert (name, seq) in stored, f"seq {seq} receipted at {(ledger_id, entry_id)} but not stored"


def test_dedup_never_calls_a_message_duplicate_that_the_log_does_not_hold() -> None:
    """Chaos finding 1 (lost via dedup): seq 1 fails on a ledger and is not on the bookies; seq 2
    arrives while the failed ledger is being recovered. Before the fix seq 2 was stored in the new
    ledger and recorded, so the client's resend of seq 1 got the duplicate receipt (-1,-1) although
    seq 1 was stored nowhere. Now seq 1 is written again before seq 2, both in order."""

    async def run() -> None:
        world = make_world(3)
        topic = await _topic(world)
        producer, channel = await _connect(topic, "plain", 0)
        await _send(producer, 0)
        await until(lambda: len(channel.receipts) == 1)
        first, second, third = sorted(world.bookies)
        world.transport.rule(first, "add", 1, action="fail")
        for bookie in (second, third):
            world.transport.rule(bookie, "add", 1, action="hold_before")
        held_recovery = [world.transport.rule(b, "read_last") for b in world.bookies]
        await _send(producer, 1)
        await until(lambda: sum(r.hits for r in held_recovery) >= 2 or bool(channel.send_errors))
        await _send(producer, 2)  # queued behind the failed add while its ledger is recovered
        _release_rules(world)
        await until(lambda: len(channel.receipts) + len(channel.send_errors) >= 3
                    or producer.state.value == "closed", rounds=100_000)
        # The client resends everything it has no receipt for, after reconnecting if it was told to.
        answered = {seq for _pid, seq, _l, _e in channel.receipts}
        channel.open = False  # the client drops the connection (it would after an error) and comes back
        again, again_channel = await _connect(topic, "plain", 1)
        for seq in (1, 2):
            if seq not in answered:
                await _send(again, seq)
        await until(lambda: len(answered) + len(again_channel.receipts) >= 3, rounds=100_000)
        stored = await _stored(topic)
        assert stored == [("plain", 0), ("plain", 1), ("plain", 2)], stored
        _assert_receipts_name_stored_messages(channel, stored, "plain")
        _assert_receipts_name_stored_messages(again_channel, stored, "plain")

    _run(run())


def test_a_resend_of_a_message_that_landed_despite_its_failure_is_a_duplicate() -> None:
    """Chaos finding 2 (duplicates with dedup on): the add of seq 1 fails although the entry is on
    two bookies, and recovery cannot run at once, so the send fails to the client. The topic is
    fenced, the failed ledger recovered and the dedup state rebuilt from the log before producers
    are admitted again: the resend of seq 1 (and of 2, which also landed) is a duplicate, seq 3 is
    stored once (before the fix: 1 and 2 stored twice, in two ledgers)."""

    async def run() -> None:
        world = make_world(3)
        topic = await _topic(world)
        ml = topic.log.managed_ledger  # type: ignore[attr-defined]
        producer, channel = await _connect(topic, "dedup", 0)
        await _send(producer, 0)
        await until(lambda: len(channel.receipts) == 1)
        real_recover = ml.manager.recover_ledger
        refused: list[int] = []

        async def recover_fails_once(ledger_id: int, **kwargs: Any) -> Any:
            if not refused:
                refused.append(ledger_id)
                raise BookieUnavailableError("no quorum for recovery now")
            return await real_recover(ledger_id, **kwargs)

        ml.manager.recover_ledger = recover_fails_once
        _fail_entry_on_one_bookie_after_it_reached_two(world, 1)
        for seq in (1, 2):
            await _send(producer, seq)
        await until(lambda: producer.pending_count == 0 or producer.state.value == "closed", rounds=100_000)
        _release_rules(world)
        assert [seq for _pid, seq, _l, _e in channel.receipts] == [0]
        channel.open = False  # the client drops the connection and comes back
        again, again_channel = await _connect(topic, "dedup", 1)
        assert topic.state is TopicState.ACTIVE
        for seq in (1, 2, 3):
            await _send(again, seq)
        await until(lambda: len(again_channel.receipts) + len(again_channel.send_errors) >= 3, rounds=100_000)
        stored = await _stored(topic)
        assert stored == [("dedup", 0), ("dedup", 1), ("dedup", 2), ("dedup", 3)], stored
        assert again_channel.send_errors == []
        answers = [(seq, Position(ledger, entry)) for _pid, seq, ledger, entry in again_channel.receipts]
        assert answers[:2] == [(1, DUPLICATE), (2, DUPLICATE)], answers
        assert topic.last_sequence_id("dedup") == 3 and topic.dedup.rebuilds == 1

    _run(run())
