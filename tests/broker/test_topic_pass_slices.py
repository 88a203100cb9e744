"""The broker's passes over every loaded topic run in slices (issue 22, 100,000 topics): the
policy checks and the rate samples let the event loop run after ``topic_pass_slice_ns`` of the
broker's clock, so a pass over many topics is many short loop passes, not one long stall (at
20,000 topics a backlog-quota and compaction pass held the loop 0.34-1.5 s in one pass, every
60 s; every producer's receipt waited for it). Every topic is still checked and sampled once.

Shown with a clock that advances 100 us per read and 64 topics on a memory log: with a 1 ms slice
the pass yields to the loop (a callback that runs once per loop pass counts them) several times;
an unloaded topic met after a yield is skipped. Negative control: with a slice longer than the
pass (the session-start behaviour: one pass, no yield) the counter does not move.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import uvloop

from magnetar.base.types import TopicName
from magnetar.broker import BrokerConfig, MemoryLogStore
from magnetar.broker.service import BrokerService
from magnetar.metadata import MemoryMetadataServer
from magnetar.node.broker_generation import bootstrap_cluster
from magnetar.runtime.clock import SystemClock

TOPICS = 64
TICK_NS = 100_000


class _TickingClock:
    """Each monotonic read is ``TICK_NS`` later (work takes time); its sleeps other than a yield
    never end (the service's own periodic checker stays out of the way: the test runs the passes
    itself)."""

    def __init__(self) -> None:
        self._ns = 0
        self._wall = SystemClock()

    def now_ms(self) -> int:
        return self._wall.now_ms()

    def monotonic_ns(self) -> int:
        self._ns += TICK_NS
        return self._ns

    async def sleep(self, duration_s: float) -> None:
        if duration_s == 0:  # a pass's yield: resumed in the next loop pass (call_soon is FIFO)
            loop = asyncio.get_running_loop()
            yielded = loop.create_future()
            loop.call_soon(yielded.set_result, None)
            await yielded
            return
        await asyncio.get_running_loop().create_future()

    def call_later(self, delay_s: float, callback: Callable[[], None]) -> asyncio.TimerHandle:
        return asyncio.get_running_loop().call_later(3600, callback)


async def _loop_passes_during_a_check(slice_ns: int, unload_one: bool = False) -> tuple[int, list[bool], bool]:
    """(loop passes the checks and samples let run, each loaded topic's rates sampled by this
    pass, the unloaded topic's meters left alone)."""
    clock = _TickingClock()
    store = await MemoryMetadataServer(SystemClock()).connect()
    service = BrokerService(BrokerConfig(), MemoryLogStore(), store, clock=clock)
    await bootstrap_cluster(service, web_url="http://127.0.0.1:9")
    for index in range(TOPICS):
        await service.get_topic(TopicName.parse(f"persistent://public/default/t{index}"), create=True)
    last = service.topics[f"persistent://public/default/t{TOPICS - 1}"]
    before = {key: topic.published._sampled_ns for key, topic in service.topics.items()}  # sampled at load
    service.topic_pass_slice_ns = slice_ns
    loop = asyncio.get_running_loop()
    passes = [0]
    running = [True]

    def count_pass() -> None:
        passes[0] += 1
        if unload_one and passes[0] == 1:
            del service.topics[str(last.name)]  # unloaded while the pass yielded (the slot freed)
        if running[0]:
            loop.call_soon(count_pass)

    loop.call_soon(count_pass)
    await service.check_policies()
    running[0] = False
    sampled = [topic.published._sampled_ns != before[key] for key, topic in service.topics.items()]
    return passes[0], sampled, last.published._sampled_ns == before[str(last.name)]
    # (the memory log's checks never wait: every pass counted above is one the slices gave)


def test_a_pass_over_the_topics_yields_to_the_loop_in_slices() -> None:
    passes, sampled, _ = uvloop.run(_loop_passes_during_a_check(1_000_000))
    assert passes >= 5  # ~10 topics per 1 ms slice at 100 us per clock read: several yields
    assert sampled == [True] * TOPICS  # and every topic sampled once all the same


def test_a_topic_unloaded_while_the_pass_yielded_is_skipped() -> None:
    passes, sampled, skipped = uvloop.run(_loop_passes_during_a_check(1_000_000, unload_one=True))
    assert passes >= 5 and skipped
    assert sampled == [True] * (TOPICS - 1)


def test_negative_control_a_slice_longer_than_the_pass_is_one_loop_pass() -> None:
    passes, sampled, _ = uvloop.run(_loop_passes_during_a_check(10**15))
    assert passes == 0  # the counter never ran during the pass: one stall
    assert sampled == [True] * TOPICS
