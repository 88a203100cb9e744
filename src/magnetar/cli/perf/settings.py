"""What one ``magnetar perf`` run does (``PerfSettings``, checked on creation) and how a
``--processes`` run deals it out to its client processes (``split_shares``, ``split_settings``).
"""

from __future__ import annotations

import dataclasses
import struct
from dataclasses import dataclass
from typing import Any

from magnetar.base.errors import InvalidArgumentError
from magnetar.base.limits import (
    PERF_CLIENTS_PER_TOPIC_MAX,
    PERF_DURATION_S_MAX,
    PERF_MESSAGES_COUNT_MAX,
    PERF_PARTITIONS_COUNT_MAX,
    PERF_PROCESSES_COUNT_MAX,
    PERF_TOPICS_COUNT_MAX,
    PULSAR_MESSAGE_BYTES_MAX,
)
from magnetar.cli.produce import DEFAULT_SERVICE_URL

MODES = ("produce", "consume", "e2e")
SUBSCRIPTION_TYPES = ("exclusive", "shared", "failover", "key_shared")
PERCENTILES = (("p50", 50.0), ("p95", 95.0), ("p99", 99.0), ("p99_9", 99.9))
STAMP = struct.Struct(">q")  # send time (ns since the epoch) at the start of each payload
#: Threads creating producers and consumers at start-up (creation is one round trip each).
SETUP_THREADS = 16
#: e2e drain: stop waiting for the consumers once nothing arrived for this long.
DRAIN_IDLE_S = 2.0
#: A client process reports its counts to the parent this often (the parent's bounds and drain
#: act on them).
PROGRESS_S = 0.1

#: When a run ends, its client processes get this long to close their clients and report, then
#: they are terminated (and killed after as long again).
CHILD_STOP_S = 30.0

@dataclass(frozen=True)
class PerfSettings:
    """One perf run. ``rate`` is messages/s over all producers (0 = unthrottled)."""

    mode: str = "produce"
    service_url: str = DEFAULT_SERVICE_URL
    topic: str = "perf"
    topics: int = 1
    partitions: int = 0
    producers: int = 1
    consumers: int = 1
    size: int = 1024
    rate: float = 0.0
    batching: bool = True
    batch_max_messages: int = 1000
    batch_max_bytes: int = 128 * 1024
    batch_delay_ms: int = 10
    max_pending: int = 1000
    burst: int = 1  # messages sent to one producer before the next one's turn
    max_outstanding: int = 0  # messages awaiting their receipt over all producers (0 = per-producer bound only)
    duration_s: float = 10.0
    messages: int = 0  # 0 = until the duration is over
    subscription: str = "perf-sub"
    subscription_type: str = "exclusive"
    receiver_queue: int = 1000
    earliest: bool = False
    windows: int = 1  # measured windows of duration_s each, over the same producers and consumers
    operation_timeout_s: int = 30  # a producer/consumer creation (or close) slower than this fails the run
    processes: int = 1  # client processes, each with its own client and share of the producers/consumers
    token: str | None = None  # a JWT (already read from file:/data: by the CLI): AuthenticationToken
    tls_trust_cert: str | None = None  # CA file for pulsar+ssl:// and https:// service URLs
    client_tuning: bool = True  # the client process's GIL switch interval and GC set for the run (run.py)
    split: bool = False  # e2e, processes=2: every producer in one client process, every consumer in the other

    def public(self) -> dict[str, Any]:
        """The settings as results record them: the token is never written out."""
        values = dataclasses.asdict(self)
        values["token"] = "<set>" if self.token else None
        return values

    def __post_init__(self) -> None:
        checks = [
            (self.mode in MODES, f"mode must be one of {MODES}"),
            (1 <= self.topics <= PERF_TOPICS_COUNT_MAX, f"topics must be 1..{PERF_TOPICS_COUNT_MAX}"),
            (0 <= self.partitions <= PERF_PARTITIONS_COUNT_MAX,
             f"partitions must be 0..{PERF_PARTITIONS_COUNT_MAX}"),
            (1 <= self.producers <= PERF_CLIENTS_PER_TOPIC_MAX,
             f"producers must be 1..{PERF_CLIENTS_PER_TOPIC_MAX} per topic"),
            (1 <= self.consumers <= PERF_CLIENTS_PER_TOPIC_MAX,
             f"consumers must be 1..{PERF_CLIENTS_PER_TOPIC_MAX} per topic"),
            (1 <= self.size <= PULSAR_MESSAGE_BYTES_MAX, f"size must be 1..{PULSAR_MESSAGE_BYTES_MAX} bytes"),
            (self.rate >= 0, "rate must be >= 0 (0 = as fast as possible)"),
            (0 < self.duration_s <= PERF_DURATION_S_MAX, f"duration must be in (0, {PERF_DURATION_S_MAX}] s"),
            (0 <= self.messages <= PERF_MESSAGES_COUNT_MAX, f"messages must be 0..{PERF_MESSAGES_COUNT_MAX}"),
            (self.max_pending >= 1 and self.receiver_queue >= 1, "max_pending and receiver_queue must be >= 1"),
            (1 <= self.burst <= PERF_MESSAGES_COUNT_MAX, "burst must be >= 1"),
            (1 <= self.windows <= 1000 and 1 <= self.operation_timeout_s <= 600,
             "windows must be 1..1000 and operation_timeout_s 1..600"),
            (self.max_outstanding >= 0, "max_outstanding must be >= 0 (0 = no bound over all producers)"),
            (self.subscription_type in SUBSCRIPTION_TYPES, f"subscription type must be one of {SUBSCRIPTION_TYPES}"),
            (1 <= self.processes <= PERF_PROCESSES_COUNT_MAX, f"processes must be 1..{PERF_PROCESSES_COUNT_MAX}"),
            (self.messages == 0 or self.messages >= self.processes,
             "messages must be 0 or at least one per process"),
            (not self.split or (self.mode == "e2e" and self.processes == 2),
             "split is for e2e in 2 processes (producers in one, consumers in the other)"),
        ]
        for ok, message in checks:
            if not ok:
                raise InvalidArgumentError(message)

    def topic_names(self) -> list[str]:
        """Every topic this run produces to or consumes from (partitions addressed one by one)."""
        bases = [self.topic] if self.topics == 1 else [f"{self.topic}-{i}" for i in range(self.topics)]
        if self.partitions == 0:
            return bases
        return [f"{base}-partition-{p}" for base in bases for p in range(self.partitions)]


@dataclass(frozen=True)
class Share:
    """What one client process creates: a producer per entry of ``producers``, a consumer per
    entry of ``consumers`` (topic names, repeated for several per topic)."""

    producers: tuple[str, ...]
    consumers: tuple[str, ...]


def split_shares(settings: PerfSettings) -> list[Share]:
    """The producers and consumers of ``settings`` dealt round robin to its processes. Every
    process of a run that produces gets a producer: with fewer producers than processes, the
    processes take the producers' topics in turn (one more producer on a topic each). Consumers
    are not repeated (an exclusive subscription has one consumer): a process may get none."""
    names = settings.topic_names()
    producers = [] if settings.mode == "consume" else [n for n in names for _ in range(settings.producers)]
    consumers = [] if settings.mode == "produce" else [n for n in names for _ in range(settings.consumers)]
    count = settings.processes
    if settings.split:  # the receipts and the consumers' callbacks in two processes: no shared GIL
        return [Share(tuple(producers), ()), Share((), tuple(consumers))]
    dealt: list[tuple[str, ...]]
    if producers and len(producers) < count:
        dealt = [(producers[i % len(producers)],) for i in range(count)]
    else:
        dealt = [tuple(producers[i::count]) for i in range(count)]
    return [Share(dealt[i], tuple(consumers[i::count])) for i in range(count)]


def split_settings(settings: PerfSettings) -> list[PerfSettings]:
    """Each process's settings: its share of ``rate``, ``messages`` (``consume``: the parent
    stops every process once the total is received) and ``max_outstanding``."""
    count = settings.processes
    if settings.split:  # the producing process sends everything; the other one only receives
        return [dataclasses.replace(settings, processes=1, split=False),
                dataclasses.replace(settings, processes=1, split=False, messages=0, max_outstanding=0)]
    base, extra = divmod(settings.messages, count)
    out = []
    for i in range(count):
        messages = 0 if settings.mode == "consume" else base + (1 if i < extra else 0)
        outstanding = max(1, settings.max_outstanding // count) if settings.max_outstanding else 0
        out.append(dataclasses.replace(settings, processes=1, rate=settings.rate / count, messages=messages,
                                       max_outstanding=outstanding))
    return out
