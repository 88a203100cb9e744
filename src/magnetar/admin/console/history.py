"""``RateHistory``: the last minutes of message rates and backlog, per topic and for the broker.

A bounded ring of samples (``CONSOLE_SAMPLES_COUNT_MAX`` each) filled by ``sample(now_ms, counters)``
at a fixed interval (the runtime's task calls it). Rates are computed here from the counters the
broker already keeps (messages published, messages dispatched), as the difference between two
samples over the time between them, so the graph moves at the first sample after a message:
no second source of truth, only a memory of the first. At most
``CONSOLE_TOPICS_TRACKED_COUNT_MAX`` topics are tracked; a topic that is no longer loaded is
forgotten at the next sample. Pure: the caller gives the time.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass

from magnetar.base.limits import CONSOLE_SAMPLES_COUNT_MAX, CONSOLE_TOPICS_TRACKED_COUNT_MAX


@dataclass(frozen=True, slots=True)
class Counters:
    """What a topic has counted so far (``msg_in_count``, ``msg_out_count``) and its backlog now."""

    msg_in_count: int
    msg_out_count: int
    bytes_in_count: int
    backlog_count: int


@dataclass(frozen=True, slots=True)
class Sample:
    t_ms: int
    msg_rate_in: float
    msg_rate_out: float
    byte_rate_in: float
    backlog_count: int

    def to_json(self) -> dict[str, float | int]:
        return {"t": self.t_ms, "in": round(self.msg_rate_in, 3), "out": round(self.msg_rate_out, 3),
                "bytesIn": round(self.byte_rate_in, 1), "backlog": self.backlog_count}


class RateHistory:
    def __init__(self, samples_max: int = CONSOLE_SAMPLES_COUNT_MAX,
                 topics_max: int = CONSOLE_TOPICS_TRACKED_COUNT_MAX) -> None:
        self._samples_max = samples_max
        self._topics_max = topics_max
        self._last: dict[str, tuple[int, Counters]] = {}
        self._topics: dict[str, deque[Sample]] = {}
        self._broker: deque[Sample] = deque(maxlen=samples_max)

    def tracked(self) -> list[str]:
        """The topics whose samples are recorded now."""
        return list(self._topics)

    def room(self) -> int:
        """How many more topics would be tracked."""
        return max(0, self._topics_max - len(self._topics))

    def sample(self, now_ms: int, counters: Mapping[str, Counters]) -> None:
        """Record one sample of every topic in ``counters`` and of their sum (the broker).

        An idle topic (counters as at its last sample, or first seen) gets the pass's shared
        sample of no rate and its backlog (samples are frozen): at 20,000 idle topics the sampler
        was 36% of the standalone's idle CPU, a new ``Sample`` per topic and one more for the
        running sum (docs/performance.md, session 20)."""
        for gone in [name for name in self._topics if name not in counters]:
            del self._topics[gone]
            self._last.pop(gone, None)
        rate_in = rate_out = byte_rate = 0.0
        backlog_sum = 0
        still: dict[int, Sample] = {}  # this pass's no-rate samples, by backlog
        for name, now in counters.items():
            ring = self._topics.get(name)
            if ring is None:
                if len(self._topics) >= self._topics_max:
                    continue
                ring = self._topics[name] = deque(maxlen=self._samples_max)
            previous = self._last.get(name)
            self._last[name] = (now_ms, now)
            backlog = now.backlog_count
            backlog_sum += backlog
            if previous is not None and now_ms > previous[0] and now != previous[1]:
                elapsed_s = (now_ms - previous[0]) / 1000
                before = previous[1]
                sample = Sample(now_ms,
                                max(0, now.msg_in_count - before.msg_in_count) / elapsed_s,
                                max(0, now.msg_out_count - before.msg_out_count) / elapsed_s,
                                max(0, now.bytes_in_count - before.bytes_in_count) / elapsed_s,
                                backlog)
                rate_in += sample.msg_rate_in
                rate_out += sample.msg_rate_out
                byte_rate += sample.byte_rate_in
            else:  # first seen, or nothing counted since its last sample
                found = still.get(backlog)
                sample = still[backlog] = found if found is not None else Sample(now_ms, 0.0, 0.0, 0.0, backlog)
            ring.append(sample)
        self._broker.append(Sample(now_ms, rate_in, rate_out, byte_rate, backlog_sum))

    def broker(self) -> list[Sample]:
        return list(self._broker)

    def topic(self, name: str) -> list[Sample]:
        return list(self._topics.get(name, ()))

    def topics(self, names: list[str]) -> list[Sample]:
        """The samples of several topics (a partitioned topic's partitions) added up, by time."""
        rings = [self._topics[n] for n in names if n in self._topics]
        by_time: dict[int, Sample] = {}
        for ring in rings:
            for s in ring:
                t = by_time.get(s.t_ms)
                by_time[s.t_ms] = s if t is None else Sample(
                    s.t_ms, t.msg_rate_in + s.msg_rate_in, t.msg_rate_out + s.msg_rate_out,
                    t.byte_rate_in + s.byte_rate_in, t.backlog_count + s.backlog_count)
        return [by_time[t] for t in sorted(by_time)][-self._samples_max:]
