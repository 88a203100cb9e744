"""The SENDs of one receive go session -> producer -> topic -> log in the call that hands them
over when nothing has to wait (issue 22, the per-run work at a modest rate: no coroutine frame
per run); from the first SEND or entry that must wait, the rest is one awaitable, and the outcome
(what is stored, in which runs, the answers and their order) is the one the waiting path gives.

Each test checks the synchronous case and its control (the same run made to wait: a full FIFO, a
duplicate check behind an append in flight, room in the log, a publish rate), so a fast path that
skipped a wait, or one that was never taken, fails one of the two.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import replace

from magnetar.base.types import TopicName
from magnetar.broker import BrokerConfig, MemoryLogStore
from magnetar.broker.log import AppendCallback
from magnetar.broker.producer import AccessMode, Producer
from magnetar.broker.topic import PublishCallback, Topic
from magnetar.protocol.pulsar import SendCommand
from tests.broker.fakes import FakeChannel, entry, settle

_BOUND_S = 5.0


class _Log:
    """A memory log that records every ``append_run``'s length and can be made to lack room."""

    def __init__(self, inner: object) -> None:
        self.inner = inner
        self.runs: list[int] = []
        self.room: int | None = None  # entries it takes before it waits (None: no bound)
        self.roomy = asyncio.Event()
        self.held: list[tuple[AppendCallback, object, BaseException | None]] | None = None  # completions held

    def release(self) -> None:
        held, self.held = self.held or [], None
        for on_done, position, error in held:
            on_done(position, error)  # type: ignore[arg-type]

    def _hold(self, on_done: AppendCallback) -> AppendCallback:
        def held(position: object, error: BaseException | None) -> None:
            if self.held is None:
                on_done(position, error)  # type: ignore[arg-type]
            else:
                self.held.append((on_done, position, error))

        return held  # type: ignore[return-value]

    def __getattr__(self, name: str) -> object:
        return getattr(self.inner, name)

    def has_room(self, count: int = 1) -> bool:
        return self.room is None or count <= self.room

    async def wait_for_room(self) -> None:
        await self.roomy.wait()

    def append_run(self, run: Sequence[tuple[bytes, AppendCallback]]) -> None:
        self.runs.append(len(run))
        if self.room is not None:
            self.room -= len(run)
        self.inner.append_run([(data, self._hold(on_done)) for data, on_done in run])  # type: ignore[attr-defined]


async def _producer(pending_max: int = 100, dedup: bool = False) -> tuple[_Log, Topic, Producer, FakeChannel]:
    inner = await MemoryLogStore().open_log("persistent://public/default/t", create=True)
    log = _Log(inner)
    topic = Topic(TopicName.parse("t"), log, BrokerConfig(deduplication=dedup))  # type: ignore[arg-type]
    await topic.dedup.ready()
    channel = FakeChannel()
    return log, topic, Producer(topic, 0, "p", channel, AccessMode.SHARED, pending_max), channel


def _items(*seqs: int) -> list[tuple[SendCommand, bytes | None, bool, None]]:
    return [(SendCommand(producer_id=0, sequence_id=seq), entry(sequence_id=seq), True, None) for seq in seqs]


def _receipts(channel: FakeChannel) -> list[tuple[int, int, int]]:
    return [(seq, ledger, entry) for _, seq, ledger, entry in channel.receipts]


def test_a_run_that_waits_for_nothing_reaches_the_log_in_the_call() -> None:
    """Three SENDs, room for them: handed to the log as one run before anything is awaited.
    Control: a FIFO of two holds the third back: the first two went to the log in the call, the
    rest is an awaitable, and awaiting it stores the third once the first receipts made room."""

    async def run(pending_max: int) -> tuple[bool, list[int], list[int], list[tuple[int, int, int]]]:
        log, _topic, producer, channel = await _producer(pending_max)
        rest = producer.start_send_run(_items(0, 1, 2))
        in_the_call = list(log.runs)
        if rest is not None:
            await asyncio.wait_for(rest, _BOUND_S)
        await settle()
        return rest is None, in_the_call, log.runs, _receipts(channel)

    done, in_the_call, runs, receipts = asyncio.run(run(pending_max=100))
    assert done and in_the_call == [3] and runs == [3]
    assert receipts == [(0, 1, 0), (1, 1, 1), (2, 1, 2)]
    done, in_the_call, runs, receipts = asyncio.run(run(pending_max=2))
    assert not done and in_the_call == [] and runs == [2, 1]  # the gathered two go first, then the wait
    assert receipts == [(0, 1, 0), (1, 1, 1), (2, 1, 2)]


def test_a_duplicate_check_behind_an_append_in_flight_takes_the_waiting_way() -> None:
    """Deduplication on: new ids go in the call; a resend of an id whose append is still in flight
    returns an awaitable, which hands the run before it over first and answers the resend (-1,-1)
    once the original is stored."""

    async def run() -> tuple[bool, bool, list[int], list[tuple[int, int, int]]]:
        log, _topic, producer, channel = await _producer(dedup=True)
        log.held = []  # appends stay in flight until released
        first = producer.start_send_run(_items(0, 1))
        second = producer.start_send_run(_items(2, 1, 3))  # 1 is in flight: undecided
        assert second is not None
        waiting = asyncio.ensure_future(second)
        await settle()
        assert log.runs == [2, 1] and not waiting.done()  # [2] handed over before the wait
        log.release()
        await asyncio.wait_for(waiting, _BOUND_S)
        await settle()
        return first is None, second is None, log.runs, _receipts(channel)

    first_done, second_done, runs, receipts = asyncio.run(run())
    assert first_done and not second_done
    assert runs == [2, 1, 1]  # [0, 1], then [2] before the wait, then [3]
    assert receipts == [(0, 1, 0), (1, 1, 1), (2, 1, 2), (1, -1, -1), (3, 1, 3)]


def test_the_topic_hands_over_what_precedes_an_entry_that_waits_for_room() -> None:
    """The log has room for two: the call returns an awaitable; awaited, it hands the first two to
    the log, then the third waits until the log has room, then goes; answers in order. Control:
    with room, None and all three in the call."""

    async def run(room: int | None) -> tuple[bool, list[int], list[int], list[tuple[int, int, int]]]:
        log, topic, producer, channel = await _producer()
        log.room = room
        rest = producer.start_send_run(_items(0, 1, 2))
        in_the_call = list(log.runs)
        if rest is not None:
            waiting = asyncio.ensure_future(rest)
            await settle()
            assert log.runs == [2] and not waiting.done()  # what passed went first; the third waits
            log.room = None
            log.roomy.set()
            await asyncio.wait_for(waiting, _BOUND_S)
        await settle()
        assert topic.published.msg_count == 3
        return rest is None, in_the_call, log.runs, _receipts(channel)

    done, in_the_call, runs, receipts = asyncio.run(run(room=None))
    assert done and in_the_call == [3] and runs == [3]
    done, in_the_call, runs, receipts = asyncio.run(run(room=2))
    assert not done and in_the_call == [] and runs == [2, 1]
    assert receipts == [(0, 1, 0), (1, 1, 1), (2, 1, 2)]


def test_a_publish_rate_makes_every_entry_take_the_waiting_way() -> None:
    """With a publish rate set the topic's start returns an awaitable for the whole run (the
    throttle decides per entry); awaited, everything is stored in order."""

    async def run() -> tuple[bool, list[tuple[int, int, int]]]:
        _log, topic, producer, channel = await _producer()
        throttled = replace(topic.policies(), publish_rate_msgs_per_s=1_000_000)
        topic.policies = lambda: throttled  # type: ignore[method-assign]
        rest = producer.start_send_run(_items(0, 1))
        if rest is not None:
            await asyncio.wait_for(rest, _BOUND_S)
        await settle()
        return rest is None, _receipts(channel)

    done, receipts = asyncio.run(run())
    assert not done
    assert receipts == [(0, 1, 0), (1, 1, 1)]


def test_a_topic_start_with_nothing_to_wait_for_is_none() -> None:
    """``Topic.start_publish_run`` itself: None and the callbacks told once the log completes."""

    async def run() -> tuple[bool, list[object]]:
        _log, topic, _unused, _channel = await _producer()
        told: list[object] = []

        def on_done(position: object, error: BaseException | None) -> None:
            told.append(position if error is None else error)

        callback: PublishCallback = on_done
        rest = topic.start_publish_run([(b"a", callback, 1), (b"b", callback, 1)])
        await settle()
        return rest is None, told

    done, told = asyncio.run(run())
    assert done and [str(p) for p in told] == ["1:0", "1:1"]


def test_a_policy_changed_between_two_runs_applies_to_the_second() -> None:
    """The topic keeps what a run needs of its policies (throttled or not, the size bound) from
    the last ``policies()`` object it saw; a change is a new object, and the next run follows it:
    a size bound set after a run refuses the next run's large entry, a publish rate set after that
    makes the next run wait its way, and dropping both lets a run through in the call again.
    Negative control: a memo kept without comparing the object (read once, never again) stores
    the large entry and returns None for the throttled run."""

    async def run() -> list[object]:
        _log, topic, _unused, _channel = await _producer()
        told: list[object] = []

        def on_done(position: object, error: BaseException | None) -> None:
            told.append(str(position) if error is None else type(error).__name__)

        callback: PublishCallback = on_done
        large, small = entry(key="k" * 200, sequence_id=1), entry(sequence_id=2)
        plain = topic.policies()
        seen: list[object] = []
        seen.append(topic.start_publish_run([(large, callback, 1)]))
        await settle()
        bounded = replace(plain, max_message_size_bytes=len(large) - 1)
        topic.policies = lambda: bounded  # type: ignore[method-assign]
        seen.append(topic.start_publish_run([(large, callback, 1), (small, callback, 1)]))
        await settle()
        throttled = replace(plain, publish_rate_msgs_per_s=1_000_000)
        topic.policies = lambda: throttled  # type: ignore[method-assign]
        rest = topic.start_publish_run([(large, callback, 1)])
        seen.append(rest is None)
        if rest is not None:
            await asyncio.wait_for(rest, _BOUND_S)
        topic.policies = lambda: plain  # type: ignore[method-assign]
        seen.append(topic.start_publish_run([(large, callback, 1)]))
        await settle()
        return seen + told

    assert asyncio.run(run()) == [None, None, False, None, "1:0", "BrokerError", "1:1", "1:2", "1:3"]
