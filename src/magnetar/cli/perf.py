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
abandoned when the client closes and reported as ``pending_at_end``, not as failures. In ``e2e``
the consumers then get up to ``PERF_DRAIN_S_MAX`` to receive what was acknowledged. Prints a live line per second (msgs/s,
MB/s, latency percentiles of the last second) and a summary; ``--json FILE`` writes the results
(settings, totals, p50/p95/p99/p99.9/max, per-second series). ``run_perf`` is the same run as a
function for the benchmarks under ``bench/``.
"""

from __future__ import annotations

import dataclasses
import json
import os
import struct
import sys
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import typer
from rich.console import Console
from rich.live import Live
from rich.text import Text

from magnetar.base.errors import InvalidArgument
from magnetar.base.limits import (
    MIB,
    PERF_CLIENTS_PER_TOPIC_MAX,
    PERF_DRAIN_S_MAX,
    PERF_DURATION_S_MAX,
    PERF_LATENCY_US_MAX,
    PERF_MESSAGES_COUNT_MAX,
    PERF_PARTITIONS_COUNT_MAX,
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
        ]
        for ok, message in checks:
            if not ok:
                raise InvalidArgument(message)

    def topic_names(self) -> list[str]:
        """Every topic this run produces to or consumes from (partitions addressed one by one)."""
        bases = [self.topic] if self.topics == 1 else [f"{self.topic}-{i}" for i in range(self.topics)]
        if self.partitions == 0:
            return bases
        return [f"{base}-partition-{p}" for base in bases for p in range(self.partitions)]


class Latency:
    """A thread-safe HdrHistogram of latencies in microseconds (1 us .. 60 s, 3 digits), with a
    second histogram for the current interval of the live line."""

    def __init__(self) -> None:
        self.total = self._new()
        self.interval = self._new()
        self._lock = threading.Lock()

    @staticmethod
    def _new() -> Any:
        from hdrh.histogram import HdrHistogram

        return HdrHistogram(1, PERF_LATENCY_US_MAX, 3)

    def record(self, micros: int) -> None:
        value = min(max(1, micros), PERF_LATENCY_US_MAX)
        with self._lock:
            self.total.record_value(value)
            self.interval.record_value(value)

    def take_interval(self) -> Any:
        with self._lock:
            taken, self.interval = self.interval, self._new()
        return taken

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


@dataclass
class Side:
    """Counters of one side (publish or receive) of a run."""

    latency: Latency = field(default_factory=Latency)
    count: int = 0
    failed: int = 0
    per_second: list[dict[str, float]] = field(default_factory=list)
    _last_count: int = 0

    def tick(self, second: int, interval_s: float, size: int) -> dict[str, float]:
        done, self._last_count = self.count - self._last_count, self.count
        window = Latency.summary(self.latency.take_interval())
        row = {"t": second, "msgs_s": done / interval_s, "mb_s": done * size / MIB / interval_s,
               "p50_ms": window["p50"], "p99_ms": window["p99"], "max_ms": window["max"]}
        self.per_second.append(row)
        return row

    def result(self, elapsed_s: float, size: int, count: int) -> dict[str, Any]:
        """Totals of the measured window (``count`` done in ``elapsed_s``); latency of every message."""
        return {"count": count, "failed": self.failed, "msgs_s": count / elapsed_s,
                "mb_s": count * size / MIB / elapsed_s, "latency_ms": Latency.summary(self.latency.total),
                "per_second": self.per_second}


def _import_pulsar() -> Any:
    try:
        import pulsar
    except ImportError as exc:
        raise InvalidArgument("magnetar perf needs the official client: pip install 'magnetar[bench]'") from exc
    return pulsar


@contextmanager
def _official_client(settings: PerfSettings) -> Iterator[Any]:
    pulsar = _import_pulsar()
    client = pulsar.Client(settings.service_url, operation_timeout_seconds=settings.operation_timeout_s,
                           io_threads=1, message_listener_threads=1,
                           logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    try:
        yield client
    finally:
        try:
            client.close()
        except Exception as exc:  # already closed after a lost connection: the figures still stand
            print(f"perf: closing the client: {exc}", file=sys.stderr)


def _in_parallel(make: Callable[[str], Any], names: list[str]) -> list[Any]:
    with ThreadPoolExecutor(min(SETUP_THREADS, len(names))) as pool:
        return list(pool.map(make, names))


class PerfRun:
    """One bounded run: create consumers and producers, send and/or receive, summarise."""

    def __init__(self, settings: PerfSettings, on_tick: Callable[[str], None] | None = None) -> None:
        self.s = settings
        self.on_tick = on_tick
        self.published = Side()
        self.received = Side()
        self.sent = 0
        self.stop = threading.Event()
        self.closing = False
        self.abandoned = 0
        self.windows: list[dict[str, float]] = []
        self.errors: list[str] = []

    # --- consumers -----------------------------------------------------------------------------
    def _on_message(self, consumer: Any, message: Any) -> None:
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
        names = [name for name in self.s.topic_names() for _ in range(self.s.consumers)]

        def make(name: str) -> Any:
            return client.subscribe(name, self.s.subscription, consumer_type=sub_type,
                                    initial_position=position, receiver_queue_size=self.s.receiver_queue,
                                    message_listener=self._on_message)

        return _in_parallel(make, names)

    # --- producers -----------------------------------------------------------------------------
    def _create_producers(self, client: Any) -> list[Any]:
        names = [name for name in self.s.topic_names() for _ in range(self.s.producers)]
        timeout_ms = int((self.s.duration_s + PERF_DRAIN_S_MAX) * 1000)

        def make(name: str) -> Any:
            return client.create_producer(
                name, batching_enabled=self.s.batching, batching_max_messages=self.s.batch_max_messages,
                batching_max_allowed_size_in_bytes=self.s.batch_max_bytes,
                batching_max_publish_delay_ms=self.s.batch_delay_ms, max_pending_messages=self.s.max_pending,
                block_if_queue_full=True, send_timeout_millis=timeout_ms)

        return _in_parallel(make, names)

    def _send_loop(self, producers: list[Any], pulsar: Any) -> None:
        try:
            self._send(producers, pulsar)
        except Exception as exc:  # a producer closed under us (lost connection): stop, report it
            if not self.closing:
                self.errors.append(f"send: {type(exc).__name__}: {exc}")
            self.stop.set()

    def _send(self, producers: list[Any], pulsar: Any) -> None:
        ok = pulsar.Result.Ok
        body = bytearray(os.urandom(self.s.size))
        stamped = len(body) >= STAMP.size
        published = self.published
        outstanding = threading.BoundedSemaphore(self.s.max_outstanding) if self.s.max_outstanding else None

        def receipt(sent_ns: int) -> Callable[[Any, Any], None]:
            def done(result: Any, _msg_id: Any) -> None:
                if outstanding is not None:
                    outstanding.release()
                if result == ok:
                    published.count += 1
                    published.latency.record((time.time_ns() - sent_ns) // 1000)
                elif self.closing:
                    self.abandoned += 1  # still pending when the run ended: not a failure
                else:
                    published.failed += 1
                    if len(self.errors) < 10:
                        self.errors.append(str(result))
            return done

        limit = self.s.messages or PERF_MESSAGES_COUNT_MAX
        interval = 1.0 / self.s.rate if self.s.rate > 0 else 0.0
        start = time.perf_counter()
        count = len(producers)
        burst = self.s.burst
        while self.sent < limit and not self.stop.is_set():
            if interval:
                ahead = start + self.sent * interval - time.perf_counter()
                if ahead > 0:
                    time.sleep(ahead)
            if outstanding is not None:
                while not outstanding.acquire(timeout=0.1):
                    if self.stop.is_set():
                        return
            now = time.time_ns()
            if stamped:
                STAMP.pack_into(body, 0, now)
            producers[(self.sent // burst) % count].send_async(bytes(body), receipt(now))
            self.sent += 1

    # --- the run -------------------------------------------------------------------------------
    def _line(self, second: int) -> str:
        parts = [f"{second:>4}s"]
        if self.s.mode != "consume":
            row = self.published.tick(second, 1.0, self.s.size)
            parts.append(f"publish {row['msgs_s']:>9,.0f} msg/s {row['mb_s']:>7.1f} MB/s "
                         f"p50 {row['p50_ms']:.2f} p99 {row['p99_ms']:.2f} max {row['max_ms']:.2f} ms")
        if self.s.mode != "produce":
            row = self.received.tick(second, 1.0, self.s.size)
            parts.append(f"receive {row['msgs_s']:>9,.0f} msg/s e2e p50 {row['p50_ms']:.2f} "
                         f"p99 {row['p99_ms']:.2f} ms")
        if self.published.failed:
            parts.append(f"failed {self.published.failed}")
        return " | ".join(parts)

    def _phase_over(self, sender: threading.Thread | None) -> bool:
        """True once a ``--messages`` bound is reached: all sent and answered, or all received."""
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
        while True:
            now = time.perf_counter()
            if now >= window_end and len(self.windows) < self.s.windows:
                marks = self._close_window(marks, now - (window_end - self.s.duration_s))
                window_end += self.s.duration_s
            if now >= deadline or self._phase_over(sender):
                break
            next_tick = start + second + 1
            time.sleep(min(max(0.0, min(next_tick, deadline) - now), 0.02))
            if time.perf_counter() >= next_tick:
                second += 1
                if self.on_tick is not None:
                    self.on_tick(self._line(second))
        self.stop.set()
        return time.perf_counter() - start

    def _close_window(self, marks: tuple[int, int], elapsed_s: float) -> tuple[int, int]:
        published, received = self.published.count, self.received.count
        self.windows.append({"publish_msgs_s": (published - marks[0]) / elapsed_s,
                             "receive_msgs_s": (received - marks[1]) / elapsed_s})
        return published, received

    def _drain_receive(self) -> None:
        """e2e: let the consumers receive everything sent (bounded; stops early when
        nothing arrives for a while)."""
        deadline = time.perf_counter() + PERF_DRAIN_S_MAX
        last, last_change = self.received.count, time.perf_counter()
        while self.received.count < self.sent and time.perf_counter() < deadline:
            time.sleep(0.01)
            if self.received.count != last:
                last, last_change = self.received.count, time.perf_counter()
            elif time.perf_counter() - last_change > DRAIN_IDLE_S:
                break

    def run(self) -> dict[str, Any]:
        pulsar = _import_pulsar()
        with _official_client(self.s) as client:
            if self.s.mode != "produce":
                self._subscribe(client, pulsar)
            producers = self._create_producers(client) if self.s.mode != "consume" else []
            sender = None
            start = time.perf_counter()
            if producers:
                sender = threading.Thread(target=self._send_loop, args=(producers, pulsar), name="perf-sender",
                                          daemon=True)
                sender.start()
            try:
                elapsed = self._wait(sender, start)
                published, received = self.published.count, self.received.count  # the measured window
                if sender is not None:
                    sender.join(timeout=PERF_DRAIN_S_MAX)
                if self.s.mode == "e2e":
                    self._drain_receive()
                    received = self.received.count
            finally:
                self.stop.set()
                self.closing = True  # closing the client fails what is still pending: not failures
        result: dict[str, Any] = {"settings": dataclasses.asdict(self.s), "elapsed_s": elapsed,
                                  "topics_addressed": len(self.s.topic_names()), "windows": self.windows}
        if self.s.mode != "consume":
            result["publish"] = {"sent": self.sent, "pending_at_end": self.abandoned,
                                 **self.published.result(elapsed, self.s.size, published)}
        if self.s.mode != "produce":
            result["receive"] = self.received.result(elapsed, self.s.size, received)
        result["errors"] = self.errors
        return result


def run_perf(settings: PerfSettings, on_tick: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Run ``settings`` to its bound and return the results (what ``--json`` writes)."""
    return PerfRun(settings, on_tick).run()


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
    return lines


def _cli(mode: str, **options: Any) -> None:
    console = Console()
    json_path = options.pop("json_path")
    try:
        settings = PerfSettings(mode=mode, **options)
    except InvalidArgument as exc:
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
    except InvalidArgument as exc:
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
            json_path: str = typer.Option(None, "--json", help="write the results to this JSON file"),
        ) -> None:
            _cli(mode, service_url=service_url, topic=topic, topics=topics, partitions=partitions,
                 producers=producers, consumers=consumers, size=size, rate=rate, batching=batching,
                 batch_max_messages=batch_max_messages, batch_delay_ms=batch_delay_ms, max_pending=max_pending, burst=burst,
                 max_outstanding=max_outstanding,
                 duration_s=duration_s, messages=messages, subscription=subscription,
                 subscription_type=subscription_type, receiver_queue=receiver_queue, earliest=earliest,
                 windows=windows, operation_timeout_s=operation_timeout_s, json_path=json_path)

        run.__doc__ = doc
        perf_app.command(mode)(run)

    command("produce", "Publish at a rate (or as fast as possible) and report publish latency.")
    command("consume", "Receive and acknowledge, and report the end-to-end latency of perf-produced messages.")
    command("e2e", "Produce and consume in one process: publish and end-to-end latency.")
