"""The chaos workload: official ``pulsar`` client producers and consumers, and the final drain.

* Producers (one thread each, ``WorkloadConfig.producers``): a deduplicating producer has a fixed
  ``producer_name`` and sends with explicit sequence ids, one message in flight at a time; a send
  whose outcome is unknown (timeout, broken connection) is retried with the same sequence id up to
  ``CHAOS_SEND_RETRIES_MAX`` times before the producer moves on, so its sequence ids only ever
  grow at the broker (a resend of seq 5 after seq 6 would be dropped by deduplication and
  receipted although never stored). A plain producer has a generated name and keeps up to
  ``pending_max`` sends in flight; unknown sends are recorded, not retried. Batching is off so a
  SEND_RECEIPT names exactly one position.
* Consumers (one thread each): one per subscription type (exclusive, failover, shared,
  key_shared) per topic, subscribed from the earliest position before the producers start; every
  received message is recorded and acknowledged.
* ``drain``: after the faults, readers from the earliest position read each topic to its end;
  two independent passes (``drain-1``, ``drain-2``), the checker compares them.

Every loop is bounded in count (``messages_per_producer``) and time (``deadline``).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pulsar

from magnetar.base.errors import InvalidArgumentError, LimitExceededError
from magnetar.base.limits import (
    CHAOS_CLIENTS_COUNT_MAX,
    CHAOS_DRAIN_MESSAGES_COUNT_MAX,
    CHAOS_MESSAGES_PER_PRODUCER_MAX,
    CHAOS_PRODUCER_PENDING_COUNT_MAX,
    CHAOS_SEND_RETRIES_MAX,
)
from magnetar.sim.history import History, MessageId, Op, OpType, Outcome, value_of

log = logging.getLogger(__name__)

SUBSCRIPTION_TYPES = {
    "exclusive": pulsar.ConsumerType.Exclusive,
    "failover": pulsar.ConsumerType.Failover,
    "shared": pulsar.ConsumerType.Shared,
    "key_shared": pulsar.ConsumerType.KeyShared,
}
#: Results that say the message never left the client; every other failure is indefinite.
DEFINITE_FAILURES = frozenset({
    pulsar.Result.ProducerQueueIsFull,
    pulsar.Result.MessageTooBig,
    pulsar.Result.InvalidMessage,
    pulsar.Result.MemoryBufferIsFull,
    pulsar.Result.InvalidConfiguration,
})
RECEIVE_POLL_MS = 200
HOLD_SUBSCRIPTION = "chaos-hold"
KEYS_COUNT = 8  # distinct partition keys, so key_shared consumers split the key space


@dataclass(frozen=True)
class WorkloadConfig:
    topics: tuple[str, ...]
    dedup_producers_per_topic: int = 1
    plain_producers_per_topic: int = 1
    subscriptions: tuple[str, ...] = ("exclusive", "failover", "shared", "key_shared")
    messages_per_producer: int = 100_000
    pending_max: int = 50
    send_timeout_ms: int = 30_000  # the official client's default; longer than any pause
    operation_timeout_s: int = 10
    send_interval_s: float = 0.0  # pause between sends of one producer (keeps histories small)

    def __post_init__(self) -> None:
        clients = len(self.topics) * (self.dedup_producers_per_topic + self.plain_producers_per_topic
                                      + len(self.subscriptions))
        if clients > CHAOS_CLIENTS_COUNT_MAX:
            raise LimitExceededError("CHAOS_CLIENTS_COUNT_MAX", clients, CHAOS_CLIENTS_COUNT_MAX)
        if not 1 <= self.messages_per_producer <= CHAOS_MESSAGES_PER_PRODUCER_MAX:
            raise LimitExceededError("CHAOS_MESSAGES_PER_PRODUCER_MAX", self.messages_per_producer,
                                CHAOS_MESSAGES_PER_PRODUCER_MAX)
        if not 1 <= self.pending_max <= CHAOS_PRODUCER_PENDING_COUNT_MAX:
            raise LimitExceededError("CHAOS_PRODUCER_PENDING_COUNT_MAX", self.pending_max,
                                CHAOS_PRODUCER_PENDING_COUNT_MAX)
        unknown = set(self.subscriptions) - set(SUBSCRIPTION_TYPES)
        if unknown:
            raise InvalidArgumentError(f"unknown subscription types {sorted(unknown)}")


def message_id_of(mid: Any) -> MessageId:
    return (int(mid.ledger_id()), int(mid.entry_id()), int(mid.batch_index()))


def quiet_logger() -> logging.Logger:
    """The official client logs every reconnect at INFO; a chaos run reconnects a lot."""
    logger = logging.getLogger("magnetar.chaos.pulsar")
    logger.setLevel(logging.ERROR)
    return logger


class Clock:
    """Nanoseconds since the run started (the history's time axis)."""

    def __init__(self) -> None:
        self._start = time.monotonic_ns()

    def now_ns(self) -> int:
        return time.monotonic_ns() - self._start


@dataclass
class _Worker:
    thread: threading.Thread
    name: str


@dataclass
class Workload:
    """Producers and consumers running in threads against ``service_url`` until ``stop()``."""

    service_url: str
    config: WorkloadConfig
    history: History
    clock: Clock = field(default_factory=Clock)
    _stop: threading.Event = field(default_factory=threading.Event)
    _stop_consumers: threading.Event = field(default_factory=threading.Event)
    _producers: list[_Worker] = field(default_factory=list)
    _consumers: list[_Worker] = field(default_factory=list)
    _client: Any = None
    errors: list[str] = field(default_factory=list)

    def start(self, deadline: float) -> None:
        self._client = pulsar.Client(self.service_url, operation_timeout_seconds=self.config.operation_timeout_s,
                                     logger=quiet_logger())
        subscriptions = []
        for topic in self.config.topics:
            # A durable subscription that never acknowledges: without retention the broker deletes
            # ledgers every subscription has consumed, and the final drain must see everything.
            self._client.subscribe(topic, HOLD_SUBSCRIPTION, initial_position=pulsar.InitialPosition.Earliest).close()
            for kind in self.config.subscriptions:
                subscriptions.append([topic, f"chaos-{kind}"])
                consumer = self._client.subscribe(
                    topic, f"chaos-{kind}", consumer_type=SUBSCRIPTION_TYPES[kind],
                    initial_position=pulsar.InitialPosition.Earliest, receiver_queue_size=100)
                name = f"consumer-{kind}-{len(self._consumers)}"
                self._spawn(self._consumers, name, self._consume, consumer, topic, f"chaos-{kind}", name, deadline)
        self.history.meta["subscriptions"] = subscriptions
        index = 0
        for topic in self.config.topics:
            for dedup, count in ((True, self.config.dedup_producers_per_topic),
                                 (False, self.config.plain_producers_per_topic)):
                for _ in range(count):
                    name = f"p{index}-{'dedup' if dedup else 'plain'}"
                    index += 1
                    self.history.add_producer(name, topic, dedup=dedup)
                    target = self._produce_dedup if dedup else self._produce_plain
                    self._spawn(self._producers, name, target, name, topic, deadline)

    def _spawn(self, into: list[_Worker], name: str, target: Callable[..., None], *args: Any) -> None:
        def run() -> None:
            try:
                target(*args)
            except Exception as exc:  # recorded for the report; the run goes on
                log.exception("chaos worker %s failed", name)
                self.errors.append(f"{name}: {exc!r}")

        thread = threading.Thread(target=run, name=f"chaos-{name}", daemon=True)
        into.append(_Worker(thread, name))
        thread.start()

    def _create_producer(self, topic: str, name: str | None, deadline: float) -> Any:
        while not self._stop.is_set() and time.monotonic() < deadline:
            try:
                return self._client.create_producer(
                    topic, producer_name=name, batching_enabled=False,
                    send_timeout_millis=self.config.send_timeout_ms, max_pending_messages=self.config.pending_max,
                    block_if_queue_full=True)
            except Exception as exc:  # broker down: the client library gives up after its timeout
                log.info("creating producer %s on %s: %r", name, topic, exc)
                self._stop.wait(0.5)
        return None

    def _record_send(self, name: str, topic: str, seq: int, result: Any, mid: Any) -> Outcome:
        if result == pulsar.Result.Ok:
            outcome, message_id, error = Outcome.OK, message_id_of(mid), ""
        else:
            outcome = Outcome.ERROR if result in DEFINITE_FAILURES else Outcome.UNKNOWN
            message_id, error = None, str(result)
        self.history.record(Op(f"producer-{name}", OpType.SEND, topic, value_of(name, seq), outcome,
                               message_id, self.clock.now_ns(), error=error))
        return outcome

    def _produce_dedup(self, name: str, topic: str, deadline: float) -> None:
        producer = self._create_producer(topic, name, deadline)
        seq = 0
        while producer is not None and seq < self.config.messages_per_producer:
            for _ in range(1 + CHAOS_SEND_RETRIES_MAX):
                if self._stop.is_set() or time.monotonic() >= deadline:
                    return
                done = threading.Event()
                answer: list[Any] = []

                def callback(result: Any, mid: Any, answer: list[Any] = answer, done: threading.Event = done) -> None:
                    answer.extend((result, mid))
                    done.set()

                try:
                    producer.send_async(value_of(name, seq).encode(), callback, sequence_id=seq,
                                        partition_key=f"k{seq % KEYS_COUNT}")
                except Exception as exc:
                    self._record_error(name, topic, seq, exc)
                    producer = self._create_producer(topic, name, deadline)
                    break
                if not done.wait(self.config.send_timeout_ms / 1000 + 30):
                    self._record_error(name, topic, seq, TimeoutError("no callback"), Outcome.UNKNOWN)
                    continue
                if self._record_send(name, topic, seq, answer[0], answer[1]) is not Outcome.UNKNOWN:
                    break
            seq += 1
            if self.config.send_interval_s:
                self._stop.wait(self.config.send_interval_s)

    def _produce_plain(self, name: str, topic: str, deadline: float) -> None:
        producer = self._create_producer(topic, None, deadline)
        window = threading.BoundedSemaphore(self.config.pending_max)
        seq = 0
        while producer is not None and seq < self.config.messages_per_producer:
            if self._stop.is_set() or time.monotonic() >= deadline:
                break
            if not window.acquire(timeout=0.5):
                continue

            def callback(result: Any, mid: Any, seq: int = seq) -> None:
                self._record_send(name, topic, seq, result, mid)
                window.release()

            try:
                producer.send_async(value_of(name, seq).encode(), callback, partition_key=f"k{seq % KEYS_COUNT}")
            except Exception as exc:
                window.release()
                self._record_error(name, topic, seq, exc)
                producer = self._create_producer(topic, None, deadline)
            seq += 1
            if self.config.send_interval_s:
                self._stop.wait(self.config.send_interval_s)
        # Let the callbacks of sends in flight arrive (each within its send timeout).
        for _ in range(self.config.pending_max):
            if not window.acquire(timeout=self.config.send_timeout_ms / 1000 + 30):
                break

    def _record_error(self, name: str, topic: str, seq: int, exc: BaseException,
                      outcome: Outcome = Outcome.UNKNOWN) -> None:
        self.history.record(Op(f"producer-{name}", OpType.SEND, topic, value_of(name, seq), outcome, None,
                               self.clock.now_ns(), error=repr(exc)))

    def _consume(self, consumer: Any, topic: str, subscription: str, name: str, deadline: float) -> None:
        while not self._stop_consumers.is_set() and time.monotonic() < deadline:
            try:
                msg = consumer.receive(timeout_millis=RECEIVE_POLL_MS)
            except Exception:  # a timeout, or the broker is down: poll again
                continue
            mid = message_id_of(msg.message_id())
            value = msg.data().decode(errors="replace")
            self.history.record(Op(name, OpType.RECEIVE, topic, value, Outcome.OK, mid, self.clock.now_ns(),
                                   subscription=subscription))
            try:
                consumer.acknowledge(msg)
            except Exception as exc:
                log.info("ack by %s failed: %r", name, exc)
                continue
            self.history.record(Op(name, OpType.ACK, topic, value, Outcome.OK, mid, self.clock.now_ns(),
                                   subscription=subscription))

    def stop_producers(self, timeout_s: float) -> None:
        self._stop.set()
        end = time.monotonic() + timeout_s
        for worker in self._producers:
            worker.thread.join(max(0.0, end - time.monotonic()))

    def received(self) -> dict[tuple[str, str], set[str]]:
        out: dict[tuple[str, str], set[str]] = {}
        for op in self.history.snapshot():
            if op.type is OpType.RECEIVE:
                out.setdefault((op.topic, op.subscription), set()).add(op.value)
        return out

    def wait_for_consumers(self, stored: dict[str, list[str]], timeout_s: float) -> bool:
        """Wait until every subscription received every stored value; False on timeout."""
        end = time.monotonic() + timeout_s
        while True:
            received = self.received()
            behind = [
                (topic, sub) for topic, sub in self.history.meta.get("subscriptions", [])
                if not set(stored.get(topic, [])) <= received.get((topic, sub), set())
            ]
            if not behind or time.monotonic() >= end:
                self.history.meta["consumers_waited"] = True
                self.history.meta["consumers_behind"] = [list(b) for b in behind]
                return not behind
            time.sleep(0.2)

    def drain(self, process: str, timeout_s: float) -> dict[str, list[str]]:
        """Read every topic from the earliest position to its end; record DRAIN ops; the values."""
        out: dict[str, list[str]] = {}
        for topic in self.config.topics:
            out[topic] = self._drain_topic(topic, process, time.monotonic() + timeout_s)
        return out

    def _drain_topic(self, topic: str, process: str, deadline: float) -> list[str]:
        values: list[str] = []
        reader = None
        while reader is None:
            try:
                reader = self._client.create_reader(topic, pulsar.MessageId.earliest, receiver_queue_size=500)
            except Exception as exc:
                if time.monotonic() >= deadline:
                    raise
                log.info("creating reader on %s: %r", topic, exc)
                time.sleep(0.5)
        try:
            while len(values) < CHAOS_DRAIN_MESSAGES_COUNT_MAX and time.monotonic() < deadline:
                try:
                    if not reader.has_message_available():
                        break
                    msg = reader.read_next(timeout_millis=5_000)
                except Exception as exc:
                    log.info("drain of %s: %r", topic, exc)
                    time.sleep(0.2)
                    continue
                value = msg.data().decode(errors="replace")
                values.append(value)
                self.history.record(Op(process, OpType.DRAIN, topic, value, Outcome.OK,
                                       message_id_of(msg.message_id()), self.clock.now_ns()))
            else:
                self.errors.append(f"{process}: drain of {topic} stopped at its bound")
        finally:
            reader.close()
        return values

    def touch(self, url: str, timeout_s: float) -> bool:
        """Open every topic through the broker at ``url`` with a short-lived reader (the broker
        becomes the owner if the old one lost its session). True if every topic opened."""
        client = pulsar.Client(url, operation_timeout_seconds=max(1, int(timeout_s)), logger=quiet_logger())
        try:
            for topic in self.config.topics:
                reader = client.create_reader(topic, pulsar.MessageId.latest)
                reader.has_message_available()
                reader.close()
            return True
        except Exception as exc:
            log.info("takeover through %s: %r", url, exc)
            return False
        finally:
            client.close()

    def close(self, timeout_s: float = 10.0) -> None:
        self._stop.set()
        self._stop_consumers.set()
        end = time.monotonic() + timeout_s
        for worker in self._producers + self._consumers:
            worker.thread.join(max(0.0, end - time.monotonic()))
        if self._client is not None:
            try:
                self._client.close()
            except Exception as exc:
                log.info("closing the client: %r", exc)
            self._client = None

