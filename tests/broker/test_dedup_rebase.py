"""Deduplication and the 4.2.0 client's sequence-id re-base (fact sheet §4, quirk c16).

A client that reconnects before its first receipt numbers its next new message
PRODUCER_SUCCESS.last_sequence_id + 1, even when a message it resends already carries that id.
The broker stores those new messages; true resends are still dropped, and a first session's
repeated id is still a duplicate. The official client's side: ``tests/compat/test_dedup_rebase_official.py``.
"""

from __future__ import annotations

import asyncio

from magnetar.base.types import Position
from magnetar.broker import MemoryLogStore
from magnetar.broker.producer import DUPLICATE, AccessMode, Producer
from magnetar.broker.topic import Topic
from magnetar.faults import breaks
from tests.broker.fakes import FakeChannel, settle
from tests.broker.test_dedup import _send, _stored, _topic


def _producer(topic: Topic, channel: FakeChannel, epoch: int) -> Producer:
    """A producer named "p" as the session admits it: PRODUCER.epoch, then PRODUCER_SUCCESS."""
    producer = Producer(topic, 0, "p", channel, AccessMode.SHARED, 100)
    producer.epoch = epoch
    producer.report_last_sequence_id()
    return producer


def _duplicates(channel: FakeChannel) -> list[bool]:
    return [Position(ledger, entry) == DUPLICATE for _, _, ledger, entry in channel.receipts]


def _reuse_after_rebase(broken: bool) -> tuple[list[bool], list[tuple[str, int]]]:
    """Nothing stored for "p" (last_sequence_id -1); the reconnected client resends seq 0, then
    sends two new messages numbered 0 and 1 after re-basing."""

    async def run() -> tuple[list[bool], list[tuple[str, int]]]:
        store = MemoryLogStore()
        topic = await _topic(store)
        channel = FakeChannel()
        producer = _producer(topic, channel, epoch=1)
        for seq in (0, 0, 1):
            await _send(producer, seq)
        await settle()
        return _duplicates(channel), await _stored(store)

    if broken:
        breaks.enable(breaks.Break.NO_REBASE_CHECK)
    try:
        return asyncio.run(run())
    finally:
        breaks.disable_all()


def test_new_messages_under_reused_ids_are_stored() -> None:
    duplicates, stored = _reuse_after_rebase(broken=False)
    assert duplicates == [False, False, False]
    assert stored == [("p", 0), ("p", 0), ("p", 1)]


def test_negative_control_the_reused_id_is_answered_as_a_duplicate_and_lost() -> None:
    duplicates, stored = _reuse_after_rebase(broken=True)
    assert duplicates == [False, True, False]
    assert stored == [("p", 0), ("p", 1)]


def test_after_a_persisted_first_message_only_the_new_ones_are_stored() -> None:
    """The old owner stored seq 0 without a receipt: last_sequence_id 0. The client resends 0 (a
    duplicate) and 1 (stored), then its new messages get 1 and 2."""

    async def run() -> None:
        store = MemoryLogStore()
        topic = await _topic(store)
        await _send(_producer(topic, FakeChannel(), epoch=0), 0)
        await settle()
        channel = FakeChannel()
        producer = _producer(topic, channel, epoch=1)
        for seq in (0, 1, 1, 2):
            await _send(producer, seq)
        await settle()
        assert _duplicates(channel) == [True, False, False, False]
        assert await _stored(store) == [("p", 0), ("p", 1), ("p", 1), ("p", 2)]
        assert topic.last_sequence_id("p") == 2

    asyncio.run(run())


def test_true_resends_and_a_first_session_repeat_are_still_duplicates() -> None:
    """A reconnected session whose resends were all stored (ids at or below last_sequence_id) and
    whose ids then only grow has nothing reused; on a first session (epoch 0) an id sent twice is
    a duplicate, as an application retrying with its own ids expects."""

    async def run() -> None:
        store = MemoryLogStore()
        topic = await _topic(store)
        first = FakeChannel()
        producer = _producer(topic, first, epoch=0)
        for seq in (0, 1, 2, 2, 0):
            await _send(producer, seq)
        await settle()
        assert _duplicates(first) == [False, False, False, True, True]
        again = FakeChannel()
        reconnected = _producer(topic, again, epoch=1)
        for seq in (0, 1, 2, 3, 4):
            await _send(reconnected, seq)
        await settle()
        assert _duplicates(again) == [True, True, True, False, False]
        assert [seq for _, seq in await _stored(store)] == [0, 1, 2, 3, 4]

    asyncio.run(run())


def test_batches_under_reused_ids_are_stored() -> None:
    """A resent batch 0..2 no broker had stored; the re-based client's new batches start at 0."""

    async def run() -> None:
        store = MemoryLogStore()
        topic = await _topic(store)
        channel = FakeChannel()
        producer = _producer(topic, channel, epoch=2)
        await _send(producer, 0, count=3)  # the resend
        await _send(producer, 0, count=2)  # new: 0..1
        await _send(producer, 2, count=2)  # new: 2..3, partly above the resent ids
        await _send(producer, 4)
        await settle()
        assert _duplicates(channel) == [False, False, False, False]
        assert [seq for _, seq in await _stored(store)] == [0, 0, 2, 4]
        assert topic.last_sequence_id("p") == 4

    asyncio.run(run())
