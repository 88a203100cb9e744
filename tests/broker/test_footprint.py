"""What an idle topic keeps alive in the broker (issue 22: 100,000 topics on one standalone).

Every object the cyclic GC tracks is walked by the young collections that follow its creation
and again when it is promoted (docs/performance.md, session 20), and at 100,000 topics a topic's
objects are out of cache. An idle topic's state that only some topics ever use is made on first
use (session 21): the publish-rate throttle and its lock, the compaction's load lock, the
replication hooks' lists, the WaitForExclusive queue; the deduplication's lock exists only while a
``ready`` or ``rebuild`` runs, its appends in flight are a list and a head index (``base/fifo.py``;
an empty deque is ~760 bytes); the dedup switch is a bound method (was a lambda and its cell), the
policy cache's watch callback one bound method for every watched node (was a lambda per node),
and the service's fenced-log callback is bound once (was a bound method per topic).

Measured here on the memory log and metadata store: a topic loaded, its deduplication made
ready (what admitting a producer does) and one message published.
"""

from __future__ import annotations

import asyncio
import gc
from functools import partial

from magnetar.base.types import TopicName
from magnetar.broker.topic import Topic
from tests import footprint
from tests.admin.harness import AdminWorld, message, run_world

NS = "persistent://public/default/"
#: Topics loaded before the measure (shared state: the namespace's policies, interned names) and
#: measured.
WARM_COUNT = 20
MEASURED_COUNT = 200
#: Bounds per idle topic (the topic, its log, deduplication, compaction, meters, histogram, its
#: policy view and watched node). Measured in session 21: 19 tracked objects and 3,598 bytes
#: compiled, 19 and 3,703 pure. Negative controls (measured, with this test): the session-start
#: tree, 30 objects and 5,151 bytes compiled, 32 and 5,414 pure (three ``asyncio.Lock``s, three
#: lists, the dedup lambda and its cell, the watch lambda and its cell, the fenced-log bound
#: method per topic, the appends-in-flight deque): both bounds fail in both modes; this branch
#: before ``base/fifo.py``, 19 objects and 4,294 bytes compiled, 4,399 pure (the deque, ~700
#: bytes empty): the bytes bound fails.
TRACKED_OBJECTS_MAX = 24
BYTES_MAX = 4_000


async def _load(w: AdminWorld, names: list[str]) -> list[Topic]:
    topics = []
    for name in names:
        topic = await w.service.get_topic(TopicName.parse(f"{NS}{name}"), create=True)
        await topic.dedup.ready()
        await topic.publish(message())
        topics.append(topic)
    return topics


def test_an_idle_topic_keeps_few_objects() -> None:
    async def body(w: AdminWorld) -> None:
        objects_per, bytes_per = await footprint.per_item(partial(_load, w), "", WARM_COUNT, MEASURED_COUNT)
        print(f"per idle topic: {objects_per:.1f} tracked objects, {bytes_per:.0f} bytes")
        assert objects_per <= TRACKED_OBJECTS_MAX
        assert bytes_per <= BYTES_MAX
        # None of an idle topic's parts holds a lock (each one is made on first use).
        locks = [o for o in gc.get_objects() if isinstance(o, asyncio.Lock)]
        assert len(locks) < MEASURED_COUNT

    run_world(body)


def test_the_state_made_on_first_use_still_works() -> None:
    """The hooks' lists are made by their first reader and kept; the dedup lock is gone once
    ``ready`` ends and made again by the next one (two at once still run one after the other)."""
    async def body(w: AdminWorld) -> None:
        (topic,) = await _load(w, ["lazy"])
        called: list[str] = []
        topic.entry_listeners.append(lambda: called.append("entry"))
        assert topic.entry_listeners is topic.entry_listeners
        await topic.publish(message())
        assert called == ["entry"]
        topic.entry_listeners.clear()
        await topic.publish(message())
        assert called == ["entry"]
        order: list[str] = []

        async def ready(name: str) -> None:
            await topic.dedup.ready()
            order.append(name)

        await asyncio.gather(ready("a"), ready("b"))
        assert order == ["a", "b"]
        assert topic.dedup._lock is None and topic.dedup._lock_users == 0

    run_world(body)
