"""``magnetar perf produce|consume|e2e``: a load generator modelled on ``pulsar-perf`` and the
OpenMessaging Benchmark, driving the official ``pulsar-client`` (the ``dev``/``bench`` extras).

* ``produce``: ``--producers`` producers per topic send ``--size``-byte messages at ``--rate``
  messages/s in total (0 = as fast as the pending queues allow), batched or not; the publish
  latency (``send_async`` to receipt, i.e. until the broker's durable ack) goes into an
  HdrHistogram.
* ``consume``: ``--consumers`` consumers per topic on one subscription receive and acknowledge;
  the end-to-end latency is read from the send timestamp ``perf produce`` puts in the first 8
  bytes of each payload (wall-clock ns, so producer and consumer must share a machine's clock).
* ``e2e``: both in one process; the consumers subscribe before the first send.

Topics are ``<topic>`` (``--topics 1``) or ``<topic>-0 .. <topic>-{N-1}``; with ``--partitions P``
each is addressed as its ``-partition-0 .. -partition-{P-1}`` topics, which is what a client of a
partitioned topic does underneath (so no admin call is needed). Every run is bounded by
``--duration`` and ``--messages`` (whichever comes first). Throughput counts what was
acknowledged (or received) within that window; messages still pending when it ends are
answered after it (up to ``PERF_DRAIN_S_MAX``) before the client closes: closing a producer with
SENDs in flight makes the broker's receipts for them arrive after the client dropped the producer,
which the official client logs as an ERROR per receipt (``Got invalid producer Id in SendReceipt``).
What is still pending after that is abandoned and reported as ``pending_at_end``, not as failures. In ``e2e``
the consumers then get up to ``PERF_DRAIN_S_MAX`` to receive what was acknowledged. Prints a live line per second (msgs/s,
MB/s, latency percentiles of the last second) and a summary; ``--json FILE`` writes the results
(settings, totals, p50/p95/p99/p99.9/max, per-second series, the client's CPU seconds and
microseconds per message). ``run_perf`` is the same run as a function for the benchmarks under
``bench/``.

The client's own cost per message bounds what one process can measure (one Python process
drives the official client through its GIL). Three measures keep it low:

* the send goes to the client's binding (``_pulsar``) under ``Producer.send_async``, skipping the
  wrapper's per-message argument checks;
* one receipt callback per producer (a bound method), the send times in a FIFO: the client
  answers one producer's sends in order;
* the client's threads keep their Python thread state (``_pin_thread_state``): pybind11 creates
  and deletes one around every callback it runs on a thread Python did not start, which maps
  and unmaps a frame stack (``mmap``/``munmap``) per message.

``--processes N`` runs N client processes (``multiprocessing``, spawn), each with its own client
and a share of the producers and consumers (round robin; with fewer producers than processes
each process still gets one, on the topics in turn), of ``--rate``, ``--messages`` and
``--max-outstanding``; they start measuring together, report every second to the parent, which
prints the live line and merges the results (counts summed, latency histograms merged from
their encodings). The children are stopped when the run ends, fails or is interrupted.
"""

from __future__ import annotations

import ctypes
import dataclasses
import json
import multiprocessing
import os
import queue
import signal
import struct
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import typer
from rich.console import Console
from rich.live import Live
from rich.text import Text

from magnetar.base.errors import InvalidArgumentError
from magnetar.base.limits import (
    MIB,
    PERF_CLIENTS_PER_TOPIC_MAX,
    PERF_DRAIN_S_MAX,
    PERF_DURATION_S_MAX,
    PERF_LATENCY_US_MAX,
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
#: A client process gets this long to start (spawn, import the client) before its producers and
#: consumers are created (``--operation-timeout`` more).
CHILD_START_S = 60.0
#: When a run ends, its client processes get this long to close their clients and report, then
#: they are terminated (and killed after as long again).
CHILD_STOP_S = 30.0
#: The parent prints second N once every process reported it, or this long after the first did.
TICK_WAIT_S = 0.5


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
    base, extra = divmod(settings.messages, count)
    out = []
    for i in range(count):
        messages = 0 if settings.mode == "consume" else base + (1 if i < extra else 0)
        outstanding = max(1, settings.max_outstanding // count) if settings.max_outstanding else 0
        out.append(dataclasses.replace(settings, processes=1, rate=settings.rate / count, messages=messages,
                                       max_outstanding=outstanding))
    return out


class Latency:
    """A thread-safe HdrHistogram of latencies in microseconds (1 us .. 60 s, 3 digits). A value
    is recorded once, into the current interval's histogram (the live line's); taken intervals
    are added to the run's, and ``total`` is both."""

    def __init__(self) -> None:
        self.interval = self._new()
        self._taken = self._new()
        self._lock = threading.Lock()

    @staticmethod
    def _new() -> Any:
        from hdrh.histogram import HdrHistogram

        return HdrHistogram(1, PERF_LATENCY_US_MAX, 3)

    def record(self, micros: int) -> None:
        value = PERF_LATENCY_US_MAX if micros > PERF_LATENCY_US_MAX else micros if micros > 0 else 1
        with self._lock:
            self.interval.record_value(value)

    def take_interval(self) -> Any:
        with self._lock:
            taken, self.interval = self.interval, self._new()
            self._taken.add(taken)
        return taken

    @property
    def total(self) -> Any:
        """Every value recorded so far (a new histogram)."""
        out = self._new()
        with self._lock:
            out.add(self._taken)
            out.add(self.interval)
        return out

    @staticmethod
    def merged(encoded: list[str]) -> Any:
        """One histogram of several ``encode()``d ones (other processes' counts)."""
        out = Latency._new()
        for item in encoded:
            out.decode_and_add(item)
        return out

    @staticmethod
    def summary(histogram: Any) -> dict[str, float]:
        """p50/p95/p99/p99.9/max/mean in milliseconds (zeros when nothing was recorded)."""
        if histogram.get_total_count() == 0:
            return {**{name: 0.0 for name, _ in PERCENTILES}, "max": 0.0, "mean": 0.0, "count": 0}
        out = {name: histogram.get_value_at_percentile(q) / 1000 for name, q in PERCENTILES}
        out["max"] = histogram.get_max_value() / 1000
        out["mean"] = histogram.get_mean_value() / 1000
        out["count"] = histogram.get_total_count()
        return out


def _row(second: int, done: float, size: int, histogram: Any) -> dict[str, float]:
    window = Latency.summary(histogram)
    return {"t": second, "msgs_s": done, "mb_s": done * size / MIB, "p50_ms": window["p50"],
            "p99_ms": window["p99"], "max_ms": window["max"]}


@dataclass
class Side:
    """Counters of one side (publish or receive) of a run."""

    latency: Latency = field(default_factory=Latency)
    count: int = 0
    failed: int = 0
    per_second: list[dict[str, float]] = field(default_factory=list)
    last_interval: Any = None
    _last_count: int = 0

    def tick(self, second: int, interval_s: float, size: int) -> dict[str, float]:
        done, self._last_count = self.count - self._last_count, self.count
        self.last_interval = self.latency.take_interval()
        row = _row(second, done / interval_s, size, self.last_interval)
        self.per_second.append(row)
        return row

    def result(self, elapsed_s: float, size: int, count: int) -> dict[str, Any]:
        """Totals of the measured window (``count`` done in ``elapsed_s``); latency of every message."""
        return {"count": count, "failed": self.failed, "msgs_s": count / elapsed_s,
                "mb_s": count * size / MIB / elapsed_s, "latency_ms": Latency.summary(self.latency.total),
                "per_second": self.per_second}


def live_line(mode: str, second: int, publish: dict[str, float] | None, receive: dict[str, float] | None,
              failed: int) -> str:
    parts = [f"{second:>4}s"]
    if mode != "consume" and publish is not None:
        parts.append(f"publish {publish['msgs_s']:>9,.0f} msg/s {publish['mb_s']:>7.1f} MB/s "
                     f"p50 {publish['p50_ms']:.2f} p99 {publish['p99_ms']:.2f} max {publish['max_ms']:.2f} ms")
    if mode != "produce" and receive is not None:
        parts.append(f"receive {receive['msgs_s']:>9,.0f} msg/s e2e p50 {receive['p50_ms']:.2f} "
                     f"p99 {receive['p99_ms']:.2f} ms")
    if failed:
        parts.append(f"failed {failed}")
    return " | ".join(parts)


def _import_pulsar() -> Any:
    try:
        import pulsar
    except ImportError as exc:
        raise InvalidArgumentError("magnetar perf needs the official client: pip install 'magnetar[bench]'") from exc
    return pulsar


@contextmanager
def _official_client(settings: PerfSettings) -> Iterator[Any]:
    pulsar = _import_pulsar()
    client = pulsar.Client(settings.service_url, operation_timeout_seconds=settings.operation_timeout_s,
                           io_threads=1, message_listener_threads=1,
                           authentication=pulsar.AuthenticationToken(settings.token) if settings.token else None,
                           tls_trust_certs_file_path=settings.tls_trust_cert,
                           tls_validate_hostname=settings.tls_trust_cert is not None,
                           logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    try:
        yield client
    finally:
        try:
            client.close()
        except Exception as exc:  # already closed after a lost connection: the figures still stand
            print(f"perf: closing the client: {exc}", file=sys.stderr)


def _in_parallel(make: Callable[[str], Any], names: list[str]) -> list[Any]:
    if not names:
        return []
    with ThreadPoolExecutor(min(SETUP_THREADS, len(names))) as pool:
        return list(pool.map(make, names))


#: ``pinned`` is set in a thread state once it is kept (``_pin_thread_state``): thread-local, so
#: a new thread that reuses a dead one's identifier is not taken for it.
_THREAD = threading.local()


def _pin_thread_state() -> None:
    """Keep the calling thread's Python thread state until the process exits.

    The official client calls back from its own threads through pybind11, which creates a Python
    thread state for each call on a thread Python did not start and deletes it after, i.e. maps
    and unmaps (``mmap``/``munmap``) a 16 KiB frame stack per message (about 20 us/msg of this
    process's CPU, with the GIL handovers it lengthens). One ``PyGILState_Ensure`` that is never
    released keeps the count of the state pybind11 made above zero, so it is reused. Done only
    when that state is the thread's registered one (else ``Ensure`` would make another and
    block on the GIL this thread holds); one small state per client thread is left at exit."""
    _THREAD.pinned = True
    try:
        api = ctypes.pythonapi
        registered, current = api.PyGILState_GetThisThreadState, api.PyThreadState_Get
        registered.restype = current.restype = ctypes.c_void_p
        if registered() == current():
            api.PyGILState_Ensure()
    except (AttributeError, OSError):  # not CPython: no cost to save
        pass


def _sender(producer: Any) -> Callable[[bytes, Callable[[Any, Any], None]], None]:
    """``producer.send_async(data, callback)`` through the client's binding (``_pulsar``): the
    wrapper's per-message argument checks and keyword handling cost about 6 us/msg."""
    try:
        import _pulsar

        raw, builder = producer._producer.send_async, _pulsar.MessageBuilder
    except (ImportError, AttributeError):  # another client version: its public call
        return producer.send_async  # type: ignore[no-any-return]

    def send(data: bytes, callback: Callable[[Any, Any], None]) -> None:
        raw(builder().content(data).build(), callback)

    return send


class _Receipts:
    """The receipts of one producer. The client answers a producer's sends in the order they
    were made (batches in order, a batch's messages in order, failures too), so the send times
    wait in a FIFO and one bound method per producer is the callback of every send (no closure
    per message). ``push`` runs before the send: its callback may run at once."""

    def __init__(self, run: PerfRun, ok: Any, outstanding: threading.BoundedSemaphore | None) -> None:
        self._times: deque[int] = deque()
        self.push = self._times.append
        self._pop = self._times.popleft
        self._run = run
        self._side = run.published
        self._record = run.published.latency.record
        self._ok = ok
        self._release = outstanding.release if outstanding is not None else None

    def done(self, result: Any, _msg_id: Any) -> None:
        # An exception escaping a callback ends the process (the client's rule): none may.
        try:
            if not getattr(_THREAD, "pinned", False):
                _pin_thread_state()
            now = time.time_ns()
            sent_ns = self._pop() if self._times else now
            if self._release is not None:
                self._release()
            if self._run.draining:
                self._run.drained += 1  # answered after the measured window: counted apart
            elif result == self._ok:
                self._side.count += 1
                self._record((now - sent_ns) // 1000)
            elif self._run.closing:
                self._run.abandoned += 1  # still pending when the run ended: not a failure
            else:
                self._side.failed += 1
                if len(self._run.errors) < 10:
                    self._run.errors.append(str(result))
        except Exception as exc:
            self._run.errors.append(f"receipt: {type(exc).__name__}: {exc}")


class _ChildLink:
    """A client process's side of ``--processes``: reports to the parent through ``reports``
    and follows its events (``go``: start measuring; ``stop``: end the measured phase;
    ``drained``: e2e, stop waiting for messages)."""

    def __init__(self, index: int, reports: Any, go: Any, stop: Any, drained: Any) -> None:
        self.index = index
        self.reports = reports
        self.go = go
        self.stop = stop
        self.drained = drained

    def put(self, kind: str, *data: Any) -> None:
        self.reports.put((kind, self.index, *data))

    def ready(self) -> bool:
        """Tell the parent the clients are set up; wait for the start (False: stopped first)."""
        self.put("ready")
        deadline = time.monotonic() + CHILD_START_S
        while not self.go.wait(PROGRESS_S):
            if self.stop.is_set() or time.monotonic() > deadline:
                return False
        return not self.stop.is_set()

    def progress(self, run: PerfRun, draining: bool) -> None:
        self.put("progress", run.sent, run.published.count + run.published.failed, run.received.count, draining)

    def tick(self, second: int, run: PerfRun) -> None:
        sides = {}
        for name, side in (("publish", run.published), ("receive", run.received)):
            if side.per_second and side.last_interval is not None:
                sides[name] = (side.per_second[-1]["msgs_s"], side.last_interval.encode().decode("ascii"))
        self.put("tick", second, sides, run.published.failed)


class PerfRun:
    """One bounded run: create consumers and producers, send and/or receive, summarise.
    ``share`` is what this process creates (all of it by default); ``link`` makes it one of the
    client processes of a ``--processes`` run."""

    def __init__(self, settings: PerfSettings, on_tick: Callable[[str], None] | None = None,
                 share: Share | None = None, link: _ChildLink | None = None,
                 on_phase: Callable[[str], None] | None = None) -> None:
        self.s = settings
        self.on_tick = on_tick
        self.on_phase = on_phase
        self.share = share or split_shares(dataclasses.replace(settings, processes=1, messages=0))[0]
        self.link = link
        self.published = Side()
        self.received = Side()
        self.sent = 0
        self.stop = threading.Event()
        self.closing = False
        self.draining = False
        self.drained = 0
        self.abandoned = 0
        self.windows: list[dict[str, float]] = []
        self.errors: list[str] = []

    # --- consumers -----------------------------------------------------------------------------
    def _on_message(self, consumer: Any, message: Any) -> None:
        if not getattr(_THREAD, "pinned", False):
            _pin_thread_state()
        now = time.time_ns()
        data = message.data()
        if len(data) >= STAMP.size:
            self.received.latency.record((now - STAMP.unpack_from(data)[0]) // 1000)
        self.received.count += 1
        consumer.acknowledge(message)

    def _subscribe(self, client: Any, pulsar: Any) -> list[Any]:
        sub_type = getattr(pulsar.ConsumerType, {"key_shared": "KeyShared"}.get(
            self.s.subscription_type, self.s.subscription_type.capitalize()))
        position = pulsar.InitialPosition.Earliest if self.s.earliest else pulsar.InitialPosition.Latest

        def make(name: str) -> Any:
            return client.subscribe(name, self.s.subscription, consumer_type=sub_type,
                                    initial_position=position, receiver_queue_size=self.s.receiver_queue,
                                    message_listener=self._on_message)

        return _in_parallel(make, list(self.share.consumers))

    # --- producers -----------------------------------------------------------------------------
    def _create_producers(self, client: Any) -> list[Any]:
        timeout_ms = int((self.s.duration_s + PERF_DRAIN_S_MAX) * 1000)

        def make(name: str) -> Any:
            return client.create_producer(
                name, batching_enabled=self.s.batching, batching_max_messages=self.s.batch_max_messages,
                batching_max_allowed_size_in_bytes=self.s.batch_max_bytes,
                batching_max_publish_delay_ms=self.s.batch_delay_ms, max_pending_messages=self.s.max_pending,
                block_if_queue_full=True, send_timeout_millis=timeout_ms)

        return _in_parallel(make, list(self.share.producers))

    def _send_loop(self, producers: list[Any], pulsar: Any) -> None:
        try:
            self._send(producers, pulsar)
        except Exception as exc:  # a producer closed under us (lost connection): stop, report it
            if not self.closing:
                self.errors.append(f"send: {type(exc).__name__}: {exc}")
            self.stop.set()

    def _send(self, producers: list[Any], pulsar: Any) -> None:
        body = bytearray(os.urandom(self.s.size))
        stamped = len(body) >= STAMP.size
        pack = STAMP.pack_into
        outstanding = threading.BoundedSemaphore(self.s.max_outstanding) if self.s.max_outstanding else None
        receipts = [_Receipts(self, pulsar.Result.Ok, outstanding) for _ in producers]
        sends = [_sender(producer) for producer in producers]
        pushes = [receipt.push for receipt in receipts]
        callbacks = [receipt.done for receipt in receipts]
        limit = self.s.messages or PERF_MESSAGES_COUNT_MAX
        interval = 1.0 / self.s.rate if self.s.rate > 0 else 0.0
        start = time.perf_counter()
        count = len(producers)
        burst = self.s.burst
        stop = self.stop
        time_ns = time.time_ns
        while self.sent < limit and not stop.is_set():
            if interval:
                ahead = start + self.sent * interval - time.perf_counter()
                if ahead > 0:
                    time.sleep(ahead)
            if outstanding is not None:
                while not outstanding.acquire(timeout=0.1):
                    if stop.is_set():
                        return
            now = time_ns()
            if stamped:
                pack(body, 0, now)
            i = (self.sent // burst) % count
            pushes[i](now)
            sends[i](bytes(body), callbacks[i])
            self.sent += 1

    # --- the run -------------------------------------------------------------------------------
    def _line(self, second: int) -> str:
        publish = self.published.tick(second, 1.0, self.s.size) if self.s.mode != "consume" else None
        receive = self.received.tick(second, 1.0, self.s.size) if self.s.mode != "produce" else None
        return live_line(self.s.mode, second, publish, receive, self.published.failed)

    def _phase_over(self, sender: threading.Thread | None) -> bool:
        """True once a ``--messages`` bound is reached: all sent and answered, or all received;
        or the parent (``--processes``) ended the phase."""
        if self.link is not None and self.link.stop.is_set():
            return True
        if sender is not None:
            answered = self.published.count + self.published.failed
            return not sender.is_alive() and (answered >= self.sent or self.stop.is_set())
        return self.received.count >= (self.s.messages or PERF_MESSAGES_COUNT_MAX)

    def _wait(self, sender: threading.Thread | None, start: float) -> float:
        """Tick once a second until every window is over or the ``--messages`` bound is reached;
        returns the elapsed seconds of that measured phase. Each window's rates are recorded."""
        deadline = start + self.s.duration_s * self.s.windows
        second = 0
        window_end, marks = start + self.s.duration_s, (0, 0)
        next_progress = start
        while True:
            now = time.perf_counter()
            if now >= window_end and len(self.windows) < self.s.windows:
                marks = self._close_window(marks, now - (window_end - self.s.duration_s))
                window_end += self.s.duration_s
            if now >= deadline or self._phase_over(sender):
                break
            if self.link is not None and now >= next_progress:
                self.link.progress(self, draining=False)
                next_progress = now + PROGRESS_S
            next_tick = start + second + 1
            time.sleep(min(max(0.0, min(next_tick, deadline) - now), 0.02))
            if time.perf_counter() >= next_tick:
                second += 1
                line = self._line(second)
                if self.link is not None:
                    self.link.tick(second, self)
                if self.on_tick is not None:
                    self.on_tick(line)
        self.stop.set()
        return time.perf_counter() - start

    def _close_window(self, marks: tuple[int, int], elapsed_s: float) -> tuple[int, int]:
        published, received = self.published.count, self.received.count
        self.windows.append({"publish_msgs_s": (published - marks[0]) / elapsed_s,
                             "receive_msgs_s": (received - marks[1]) / elapsed_s})
        return published, received

    def _drain_receive(self) -> None:
        """e2e: let the consumers receive everything sent (bounded; stops early when
        nothing arrives for a while). With ``--processes`` the parent decides, over every
        process's counts (a process's consumers receive other processes' messages)."""
        deadline = time.perf_counter() + PERF_DRAIN_S_MAX
        if self.link is not None:
            while not self.link.drained.wait(PROGRESS_S) and time.perf_counter() < deadline + CHILD_STOP_S:
                self.link.progress(self, draining=True)
            return
        last, last_change = self.received.count, time.perf_counter()
        while self.received.count < self.sent and time.perf_counter() < deadline:
            time.sleep(0.01)
            if self.received.count != last:
                last, last_change = self.received.count, time.perf_counter()
            elif time.perf_counter() - last_change > DRAIN_IDLE_S:
                break

    def _drain_publish(self) -> None:
        """Wait (bounded by ``PERF_DRAIN_S_MAX``) until every SEND made was answered, so the client
        closes its producers with nothing in flight. The window's figures were taken already."""
        self.draining = True
        deadline = time.perf_counter() + PERF_DRAIN_S_MAX
        while (self.published.count + self.published.failed + self.drained < self.sent
               and time.perf_counter() < deadline):
            time.sleep(0.01)

    def _phase(self, name: str) -> None:
        if self.on_phase is not None:
            self.on_phase(name)

    def run(self) -> dict[str, Any]:
        pulsar = _import_pulsar()
        elapsed = cpu_s = 0.0
        published = received = 0
        with _official_client(self.s) as client:
            if self.s.mode != "produce":
                self._subscribe(client, pulsar)
            producers = self._create_producers(client) if self.s.mode != "consume" else []
            if self.link is not None and not self.link.ready():
                self.stop.set()
                producers = []
            sender = None
            self._phase("start")
            start, cpu0 = time.perf_counter(), time.process_time()
            if producers:
                sender = threading.Thread(target=self._send_loop, args=(producers, pulsar), name="perf-sender",
                                          daemon=True)
                sender.start()
            try:
                if not self.stop.is_set():
                    elapsed = self._wait(sender, start)
                    cpu_s = time.process_time() - cpu0
                published, received = self.published.count, self.received.count  # the measured window
                self._phase("end")
                if self.link is not None:
                    self.link.put("measured")
                if sender is not None:
                    sender.join(timeout=PERF_DRAIN_S_MAX)
                    self._drain_publish()
                if self.s.mode == "e2e":
                    self._drain_receive()
                    received = self.received.count
            finally:
                self.stop.set()
                self.closing = True  # closing the client fails what is still pending: not failures
        return self._result(elapsed, cpu_s, published, received)

    def _result(self, elapsed: float, cpu_s: float, published: int, received: int) -> dict[str, Any]:
        elapsed = max(elapsed, 1e-9)
        result: dict[str, Any] = {"settings": self.s.public(), "elapsed_s": elapsed,
                                  "topics_addressed": len(self.s.topic_names()), "windows": self.windows,
                                  "processes": 1, "client_cpu_s": cpu_s}
        if self.s.mode != "consume":
            result["publish"] = {"sent": self.sent, "pending_at_end": self.abandoned,
                                 **self.published.result(elapsed, self.s.size, published)}
        if self.s.mode != "produce":
            result["receive"] = self.received.result(elapsed, self.s.size, received)
        result["client_cpu_us_per_msg"] = _cpu_per_message(result)
        result["errors"] = self.errors
        return result


def _cpu_per_message(result: dict[str, Any]) -> float:
    """The client processes' CPU over the measured phase per message published (``consume``:
    received)."""
    side = result.get("publish") or result.get("receive") or {}
    count = side.get("count", 0)
    return 1e6 * result["client_cpu_s"] / count if count else 0.0


def _child_main(index: int, settings: PerfSettings, share: Share, reports: Any, go: Any, stop: Any,
                drained: Any, parent: int) -> None:
    """One client process of ``--processes`` (spawned): run its share, report the result with
    its latency histograms encoded. The parent stops it (Ctrl-C goes to the parent only); it
    ends itself if the parent is gone."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)

    def orphaned() -> None:
        while os.getppid() == parent:
            time.sleep(0.5)
        os._exit(3)

    threading.Thread(target=orphaned, name="perf-orphan", daemon=True).start()
    link = _ChildLink(index, reports, go, stop, drained)
    try:
        run = PerfRun(settings, share=share, link=link)
        result = run.run()
        result["histograms"] = {side: getattr(run, attr).latency.total.encode().decode("ascii")
                                for side, attr in (("publish", "published"), ("receive", "received"))}
        link.put("result", result)
    except BaseException as exc:  # reported to the parent, which fails the run
        link.put("error", f"{type(exc).__name__}: {exc}")


class MultiRun:
    """``--processes N``: N spawned client processes (``_child_main``), started together,
    their per-second reports merged into the live line and their results into one."""

    def __init__(self, settings: PerfSettings, on_tick: Callable[[str], None] | None = None,
                 on_phase: Callable[[str], None] | None = None) -> None:
        self.s = settings
        self.on_tick = on_tick
        self.on_phase = on_phase
        self.count = settings.processes
        self.ready: set[int] = set()
        self.measured: set[int] = set()
        self.results: dict[int, dict[str, Any]] = {}
        self.failed: dict[int, str] = {}
        self.progress: dict[int, tuple[int, int, int, bool]] = {}
        self.ticks: dict[int, dict[int, tuple[dict[str, Any], int]]] = {}
        self.tick_first_seen: dict[int, float] = {}
        self.next_second = 1
        self.per_second: dict[str, list[dict[str, float]]] = {"publish": [], "receive": []}
        self.failed_sends: dict[int, int] = {}

    # --- reports -------------------------------------------------------------------------------
    def _handle(self, report: tuple[Any, ...]) -> None:
        kind, index, *data = report
        if kind == "ready":
            self.ready.add(index)
        elif kind == "progress":
            sent, answered, received, draining = data
            self.progress[index] = (sent, answered, received, draining)
        elif kind == "tick":
            second, sides, failed = data
            self.ticks.setdefault(second, {})[index] = (sides, failed)
            self.tick_first_seen.setdefault(second, time.monotonic())
        elif kind == "measured":
            self.measured.add(index)
        elif kind == "result":
            self.results[index] = data[0]
        elif kind == "error":
            self.failed[index] = data[0]

    def _pump(self, reports: Any, processes: list[Any], done: Callable[[], bool], deadline: float) -> bool:
        """Handle reports until ``done()`` (True) or ``deadline`` (False); a process that exits
        without its result counts as failed."""
        while not done():
            if time.monotonic() >= deadline:
                return False
            try:
                self._handle(reports.get(timeout=0.02))
                continue
            except queue.Empty:
                pass
            self._emit_ticks(final=False)
            exited = [i for i, p in enumerate(processes)
                      if p.exitcode is not None and i not in self.results and i not in self.failed]
            if exited:  # its last reports may have arrived since the queue was found empty
                self._read_all(reports)
                for index in exited:
                    if index not in self.results and index not in self.failed:
                        self.failed[index] = f"exited with code {processes[index].exitcode} without a result"
        return True

    def _read_all(self, reports: Any) -> None:
        while True:
            try:
                self._handle(reports.get(timeout=0.2))
            except queue.Empty:
                return

    def _live(self, index: int) -> bool:
        return index not in self.failed and index not in self.measured

    def _emit_ticks(self, final: bool) -> None:
        """Print each second once every running process reported it (or ``TICK_WAIT_S`` after
        the first did; ``final``: whatever arrived)."""
        while self.next_second in self.ticks:
            second = self.next_second
            got = self.ticks[second]
            waiting = [i for i in range(self.count) if i not in got and self._live(i)]
            if waiting and not final and time.monotonic() - self.tick_first_seen[second] < TICK_WAIT_S:
                return
            rows: dict[str, dict[str, float] | None] = {}
            for side in ("publish", "receive"):
                parts = [sides[side] for sides, _ in got.values() if side in sides]
                if not parts:
                    rows[side] = None
                    continue
                row = _row(second, sum(done for done, _ in parts), self.s.size, Latency.merged([h for _, h in parts]))
                self.per_second[side].append(row)
                rows[side] = row
            for index, (_, failed) in got.items():
                self.failed_sends[index] = failed
            if self.on_tick is not None:
                self.on_tick(live_line(self.s.mode, second, rows["publish"], rows["receive"],
                                       sum(self.failed_sends.values())))
            del self.ticks[second]
            self.next_second += 1

    def _all(self, seen: set[int] | dict[int, Any]) -> Callable[[], bool]:
        return lambda: all(i in seen or i in self.failed for i in range(self.count))

    # --- the run -------------------------------------------------------------------------------
    def run(self) -> dict[str, Any]:
        _import_pulsar()  # fail here, not in N processes
        context = multiprocessing.get_context("spawn")
        reports = context.Queue()
        go, stop, drained = context.Event(), context.Event(), context.Event()
        processes = [context.Process(target=_child_main, name=f"magnetar-perf-{i}", daemon=True,
                                     args=(i, child, share, reports, go, stop, drained, os.getpid()))
                     for i, (child, share) in enumerate(zip(split_settings(self.s), split_shares(self.s),
                                                            strict=True))]
        try:
            for process in processes:
                process.start()
            setup_s = CHILD_START_S + 2 * self.s.operation_timeout_s
            self._pump(reports, processes, self._all(self.ready), time.monotonic() + setup_s)
            if self.failed or len(self.ready) < self.count:
                raise RuntimeError(self._failure("did not start"))
            if self.on_phase is not None:
                self.on_phase("start")
            go.set()
            self._measure(reports, processes, stop)
            if self.on_phase is not None:
                self.on_phase("end")
            if self.s.mode == "e2e":
                self._drain(reports, processes)
            drained.set()
            self._pump(reports, processes, self._all(self.results),
                       time.monotonic() + PERF_DRAIN_S_MAX + CHILD_STOP_S + self.s.operation_timeout_s)
            self._emit_ticks(final=True)
        finally:
            stop.set()
            drained.set()
            self._stop(reports, processes)
        if not self.results:
            raise RuntimeError(self._failure("reported no result"))
        return self._merge()

    def _measure(self, reports: Any, processes: list[Any], stop: Any) -> None:
        """Until every process ended its measured phase (their own bounds). ``consume`` with
        ``--messages``: the parent stops them once the total is received."""
        start = time.monotonic()
        bound = self.s.messages if self.s.mode == "consume" else 0

        def over() -> bool:
            if bound and sum(p[2] for p in self.progress.values()) >= bound:
                stop.set()
            return self._all(self.measured)()

        if not self._pump(reports, processes, over, start + self.s.duration_s * self.s.windows + PROGRESS_S * 10):
            stop.set()  # a process missed its own deadline
            self._pump(reports, processes, self._all(self.measured), time.monotonic() + CHILD_STOP_S)

    def _drain(self, reports: Any, processes: list[Any]) -> None:
        """e2e: until every process's consumers received what all of them sent, nothing arrived
        for ``DRAIN_IDLE_S``, or ``PERF_DRAIN_S_MAX``."""
        deadline = time.monotonic() + PERF_DRAIN_S_MAX
        last, last_change = -1, time.monotonic()
        while time.monotonic() < deadline:
            self._pump(reports, processes, lambda: False, time.monotonic() + PROGRESS_S)
            running = [i for i in range(self.count) if i not in self.failed]
            draining = [self.progress[i] for i in running if i in self.progress and self.progress[i][3]]
            if len(draining) < len(running):
                continue  # a sender is still finishing: its last count of sends is not in yet
            sent, received = sum(p[0] for p in draining), sum(p[2] for p in draining)
            if received >= sent:
                return
            if received != last:
                last, last_change = received, time.monotonic()
            elif time.monotonic() - last_change > DRAIN_IDLE_S:
                return

    def _stop(self, reports: Any, processes: list[Any]) -> None:
        """Every process ends: given ``CHILD_STOP_S`` to close and exit (their reports read
        meanwhile, so none blocks on a full pipe), then terminated, then killed."""
        deadline = time.monotonic() + CHILD_STOP_S
        for signal_them in (None, "terminate", "kill"):
            if signal_them is not None:
                for process in processes:
                    if process.is_alive():
                        getattr(process, signal_them)()
                deadline = time.monotonic() + CHILD_STOP_S
            while any(p.is_alive() for p in processes) and time.monotonic() < deadline:
                try:
                    self._handle(reports.get(timeout=0.05))
                except queue.Empty:
                    pass
            if not any(p.is_alive() for p in processes):
                break
        for process in processes:
            process.join(timeout=1)
        reports.cancel_join_thread()
        reports.close()

    def _failure(self, what: str) -> str:
        details = "; ".join(f"process {i}: {error}" for i, error in sorted(self.failed.items()))
        return f"client processes {what}" + (f": {details}" if details else "")

    def _merge(self) -> dict[str, Any]:
        results = [self.results[i] for i in sorted(self.results)]
        elapsed = max(max(r["elapsed_s"] for r in results), 1e-9)
        cpu_s = sum(r["client_cpu_s"] for r in results)
        merged: dict[str, Any] = {"settings": self.s.public(), "elapsed_s": elapsed,
                                  "topics_addressed": len(self.s.topic_names()), "processes": self.count,
                                  "client_cpu_s": cpu_s}
        windows = []
        for w in range(max(len(r["windows"]) for r in results)):
            rows = [r["windows"][w] for r in results if len(r["windows"]) > w]
            windows.append({key: sum(row[key] for row in rows) for key in ("publish_msgs_s", "receive_msgs_s")})
        merged["windows"] = windows
        for side in ("publish", "receive"):
            if side not in results[0]:
                continue
            count = sum(r[side]["count"] for r in results)
            data: dict[str, Any] = {}
            if side == "publish":
                data = {"sent": sum(r[side]["sent"] for r in results),
                        "pending_at_end": sum(r[side]["pending_at_end"] for r in results)}
            histogram = Latency.merged([r["histograms"][side] for r in results])
            data.update(count=count, failed=sum(r[side]["failed"] for r in results), msgs_s=count / elapsed,
                        mb_s=count * self.s.size / MIB / elapsed, latency_ms=Latency.summary(histogram),
                        per_second=self.per_second[side])
            merged[side] = data
        merged["client_cpu_us_per_msg"] = _cpu_per_message(merged)
        errors = [f"process {i}: {e}" for i in sorted(self.results) for e in self.results[i]["errors"]]
        errors += [f"process {i}: {e}" for i, e in sorted(self.failed.items())]
        merged["errors"] = errors
        return merged


def run_perf(settings: PerfSettings, on_tick: Callable[[str], None] | None = None,
             on_phase: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Run ``settings`` to its bound and return the results (what ``--json`` writes).
    ``on_phase("start")``/``("end")`` is called where the measured phase starts and ends."""
    if settings.processes > 1:
        return MultiRun(settings, on_tick, on_phase).run()
    return PerfRun(settings, on_tick, on_phase=on_phase).run()


def summary_lines(result: dict[str, Any]) -> list[str]:
    lines = []
    for side, label in (("publish", "publish latency"), ("receive", "end-to-end latency")):
        if side not in result:
            continue
        data = result[side]
        lat = data["latency_ms"]
        lines.append(f"{side}: {data['count']:,} msgs in {result['elapsed_s']:.2f} s = {data['msgs_s']:,.0f} msg/s "
                     f"{data['mb_s']:.2f} MB/s (failed {data['failed']})")
        lines.append(f"  {label} ms: p50 {lat['p50']:.3f}  p95 {lat['p95']:.3f}  p99 {lat['p99']:.3f}  "
                     f"p99.9 {lat['p99_9']:.3f}  max {lat['max']:.3f}")
    if "client_cpu_s" in result:
        lines.append(f"client: {result.get('processes', 1)} process(es), {result['client_cpu_s']:.2f} CPU s = "
                     f"{result['client_cpu_us_per_msg']:.1f} us/msg")
    return lines


def _cli(mode: str, **options: Any) -> None:
    console = Console()
    json_path = options.pop("json_path")
    try:
        settings = PerfSettings(mode=mode, **options)
    except InvalidArgumentError as exc:
        console.print(f"[red]error:[/red] {exc}")
        raise typer.Exit(2) from None
    if console.is_terminal:
        live = Live(Text("starting..."), console=console, refresh_per_second=4, transient=False)
        with live:
            result = _guarded(console, settings, lambda line: live.update(Text(line)))
    else:
        result = _guarded(console, settings, lambda line: console.print(line, highlight=False))
    result["command"] = " ".join(["magnetar", *sys.argv[1:]])
    for line in summary_lines(result):
        console.print(line, highlight=False)
    for error in result["errors"]:
        console.print(f"[red]error:[/red] {error}")
    if json_path:
        with open(json_path, "w") as out:
            json.dump(result, out, indent=2)
        console.print(f"results written to {json_path}")
    moved = sum(result[side]["count"] for side in ("publish", "receive") if side in result)
    failed = sum(result[side]["failed"] for side in ("publish", "receive") if side in result)
    if moved == 0 or failed:
        raise typer.Exit(1)


def _guarded(console: Console, settings: PerfSettings, on_tick: Callable[[str], None]) -> dict[str, Any]:
    try:
        return run_perf(settings, on_tick)
    except InvalidArgumentError as exc:
        console.print(f"[red]error:[/red] {exc}")
        raise typer.Exit(2) from None
    except Exception as exc:  # the official client raises its own exception types
        console.print(f"[red]error:[/red] {type(exc).__name__}: {exc}")
        raise typer.Exit(1) from None


def register(app: typer.Typer) -> None:
    perf_app = typer.Typer(help="Load generator (pulsar-perf style) with the official client.", no_args_is_help=True)
    app.add_typer(perf_app, name="perf")

    def command(mode: str, doc: str) -> None:
        def run(
            topic: str = typer.Argument("perf", help="topic name, or the prefix of --topics names"),
            service_url: str = typer.Option(DEFAULT_SERVICE_URL, "--service-url", "-u"),
            topics: int = typer.Option(1, "--topics", "-t", help="number of topics"),
            partitions: int = typer.Option(0, "--partitions", help="partitions per topic (0 = not partitioned)"),
            producers: int = typer.Option(1, "--producers", help="producers per topic"),
            consumers: int = typer.Option(1, "--consumers", help="consumers per topic"),
            size: int = typer.Option(1024, "--size", "-s", help="message payload bytes"),
            rate: float = typer.Option(0.0, "--rate", "-r", help="messages/s over all producers (0 = max)"),
            batching: bool = typer.Option(True, "--batching/--no-batching"),
            batch_max_messages: int = typer.Option(1000, "--batch-max-messages"),
            batch_delay_ms: int = typer.Option(10, "--batch-delay-ms"),
            max_pending: int = typer.Option(1000, "--max-pending", help="pending messages per producer"),
            burst: int = typer.Option(1, "--burst", help="messages to one producer before the next one's turn"),
            max_outstanding: int = typer.Option(0, "--max-outstanding",
                                                help="messages awaiting receipt over all producers (0 = no bound)"),
            duration_s: float = typer.Option(10.0, "--duration", "-d", help="seconds (always bounded)"),
            messages: int = typer.Option(0, "--messages", "-m", help="stop after this many (0 = duration only)"),
            subscription: str = typer.Option("perf-sub", "--subscription"),
            subscription_type: str = typer.Option("exclusive", "--subscription-type"),
            receiver_queue: int = typer.Option(1000, "--receiver-queue"),
            earliest: bool = typer.Option(False, "--earliest", help="new subscriptions start at the earliest"),
            windows: int = typer.Option(1, "--windows", help="measured windows of --duration each (same clients)"),
            operation_timeout_s: int = typer.Option(30, "--operation-timeout", help="seconds per create/close"),
            processes: int = typer.Option(1, "--processes",
                                          help="client processes, each with its own client and a share of the load"),
            json_path: str = typer.Option(None, "--json", help="write the results to this JSON file"),
            token: str = typer.Option(None, "--token", envvar="MAGNETAR_TOKEN", help="JWT, or file:///path to one"),
            tls_trust_cert: str = typer.Option(None, "--tls-trust-cert", help="CA file for pulsar+ssl:// URLs"),
            blast: bool = typer.Option(False, "--blast", help="produce only: pre-encoded SEND frames, pipelined up to "
                                       "--max-pending per process, --processes processes (the broker's ingest limit)"),
        ) -> None:
            from magnetar.cli.credentials import Credentials

            if blast:
                _blast_cli(mode, service_url=service_url, topic=topic, size=size, duration_s=duration_s,
                           window=max_pending, processes=processes, json_path=json_path)
                return

            try:
                credentials = Credentials.from_options(token=token, tls_trust_cert=tls_trust_cert)
            except InvalidArgumentError as exc:
                raise typer.BadParameter(str(exc)) from None
            _cli(mode, token=credentials.data.decode() or None, tls_trust_cert=tls_trust_cert,
                 service_url=service_url, topic=topic, topics=topics, partitions=partitions,
                 producers=producers, consumers=consumers, size=size, rate=rate, batching=batching,
                 batch_max_messages=batch_max_messages, batch_delay_ms=batch_delay_ms, max_pending=max_pending, burst=burst,
                 max_outstanding=max_outstanding,
                 duration_s=duration_s, messages=messages, subscription=subscription,
                 subscription_type=subscription_type, receiver_queue=receiver_queue, earliest=earliest,
                 windows=windows, operation_timeout_s=operation_timeout_s, processes=processes,
                 json_path=json_path)

        run.__doc__ = doc
        perf_app.command(mode)(run)

    command("produce", "Publish at a rate (or as fast as possible) and report publish latency.")
    command("consume", "Receive and acknowledge, and report the end-to-end latency of perf-produced messages.")
    command("e2e", "Produce and consume in one process: publish and end-to-end latency.")


def _blast_cli(mode: str, *, service_url: str, topic: str, size: int, duration_s: float, window: int,
               processes: int, json_path: str | None) -> None:
    from magnetar.cli.blast import run_blast

    if mode != "produce":
        raise typer.BadParameter("--blast is a produce option")
    try:
        result = run_blast(service_url, topic, size=size, seconds=duration_s, window=window, processes=processes)
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None
    typer.echo(f"blast: {result['acked']:,} acknowledged of {result['sent']:,} sent ({result['failed']} failed) "
               f"in {result['elapsed_s']:.1f} s: {result['msgs_s']:,.0f} msg/s {result['mb_s']:.1f} MB/s, "
               f"p50 {result['p50_ms']:.2f} p99 {result['p99_ms']:.2f} ms, "
               f"client CPU {result['client_cpu_us_per_msg']:.1f} us/msg, {processes} process(es)")
    if json_path:
        with open(json_path, "w") as out:
            json.dump(result, out, indent=1)
