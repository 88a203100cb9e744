"""The broker's rate sampling pass skips idle topics (issue 22: idle CPU grew with the topic
count) and gives exactly the rates sampling every topic on every pass gives.

The reference for "exactly" is a ``RateMeter`` beside each of the topic's meters, fed the same
counts and sampled on every pass (what the broker did before it skipped idle topics).
"""

from __future__ import annotations

from magnetar.base.types import EARLIEST, TopicName
from magnetar.broker.metrics import RateMeter
from magnetar.broker.topic import Topic
from tests.admin.harness import AdminWorld, run_world

NS = "persistent://public/default/"


def _count_samples(w: AdminWorld) -> set[tuple[str, int]]:
    """The topics ``w`` loads from now on note (topic, time) of the passes that sampled them (a
    set: the service's own scheduled pass and the test's pass at one time count once)."""
    sampled: set[tuple[str, int]] = set()

    class CountingTopic(Topic):
        def sample_rates(self, now_ns: int, previous_ns: int = -1) -> bool:
            did = super().sample_rates(now_ns, previous_ns)
            if did:
                sampled.add((str(self.name), now_ns))
            return did

    w.service.topic_type = CountingTopic
    return sampled


def test_a_pass_over_idle_topics_samples_none_of_them() -> None:
    async def body(w: AdminWorld) -> None:
        sampled = _count_samples(w)
        topics = []
        for i in range(200):
            topic = await w.service.get_topic(TopicName.parse(f"{NS}idle-{i}"), create=True)
            await topic.subscription("s", durable=True, initial_mark_delete=EARLIEST)
            topics.append(topic)
        await w.clock.advance(5.0)
        await w.check()  # the first pass samples every topic (no previous pass to count from)
        assert len(sampled) == 200
        for _ in range(3):
            await w.clock.advance(5.0)
            await w.check()
        assert len(sampled) == 200  # later passes: none of the idle topics
        assert all(t.published.msg_rate == 0.0 for t in topics)
        # Negative control: the call without a previous pass (the old sampling) samples them all.
        now_ns = w.clock.monotonic_ns()
        assert all(t.sample_rates(now_ns) for t in topics)
        assert len(sampled) == 400

    run_world(body)


def test_rates_of_an_active_then_idle_topic_are_the_ones_sampling_every_pass_gives() -> None:
    async def body(w: AdminWorld) -> None:
        sampled = _count_samples(w)
        topic = await w.service.get_topic(TopicName.parse(f"{NS}busy"), create=True)
        await topic.subscription("s", durable=True, initial_mark_delete=EARLIEST)
        meters = topic.rate_meters()
        references = [RateMeter() for _ in meters]
        for reference in references:
            reference.sample(w.clock.monotonic_ns())  # the meters' own load-time sample
        # Messages published before each pass (5 s apart): busy, idle for a while, busy again.
        plan = [3, 0, 7, 0, 0, 0, 0, 1, 0, 0, 12, 12, 0, 0]
        seen: list[tuple[float, float]] = []
        for published in plan:
            await w.clock.advance(1.0)
            await w.publish(f"{NS}busy", published, size=17)
            await w.clock.advance(4.0)
            await w.check()
            for meter, reference in zip(meters, references, strict=True):
                reference.record(meter.msg_count - reference.msg_count, meter.byte_count - reference.byte_count)
                reference.sample(w.clock.monotonic_ns())
                assert (meter.msg_rate, meter.byte_rate) == (reference.msg_rate, reference.byte_rate)
            seen.append((topic.published.msg_rate, topic.published.byte_rate))
        assert seen[0][0] == 3 / 5 and seen[0][1] > 0 and seen[1] == (0.0, 0.0)  # zero on the next pass
        assert seen[7][0] == 1 / 5  # after idle passes: over the last 5 s, not since the last sample
        # Sampled: the busy passes and the one after each (bringing the rates to zero), no other.
        assert len(sampled) == len([i for i, n in enumerate(plan) if n or (i and plan[i - 1])])

    run_world(body)
