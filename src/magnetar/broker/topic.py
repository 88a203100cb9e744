"""A loaded topic: its log, producers and subscriptions.

States: ACTIVE -> CLOSED (unloaded or broker shutdown). A closed topic refuses new producers and
consumers with ServiceNotReady; the client looks it up again and retries.

ACTIVE -> BLOCKED -> ACTIVE after a failed write (Pulsar's ``PersistentTopic.addFailed``): an append
failed for a reason other than losing the topic (a ledger failure the log could not repair). The
outcome of that append is unknown (its entry may be on the bookies) and the producer's later
messages must not be stored before it. So the topic is blocked: every publish and every new
producer is refused with ServiceNotReady, and every producer is disconnected (CLOSE_PRODUCER: the
client reconnects and resends everything pending, in order, with the same sequence ids). Once
every append started has ended, the log settles the failure (``SettlesFailedWrites``: the failed
ledger is closed through recovery, so what landed is in the log and the rest never will be) and
deduplication is rebuilt from the log (snapshot + replay: its map then names exactly the ids the
log holds, none of a failed append that did not land); only then is the topic ACTIVE again. A
resend of a message that landed is answered as a duplicate, one that did not land is stored once.
If settling fails (bookies still down) the topic stays blocked and tries again every
``BROKER_TOPIC_UNBLOCK_RETRY_INTERVAL_MS`` (at most ``BROKER_TOPIC_UNBLOCK_ATTEMPTS_COUNT_MAX``
times) and on every producer that asks to be admitted.

A log found fenced (an append fails with ``FencedError``: someone opened its ledger with recovery,
another owner or AutoRecovery closing an open ledger that lost a bookie) can never be written
again. As Pulsar's ``addFailed`` does for a fenced managed ledger, the topic then calls
``on_log_fenced`` once: the service takes it out of service, tells its clients to reconnect and
closes it, and the next client loads it again on a freshly opened log (which recovers the fenced
ledger and writes a new one), or finds that another broker owns it now.

Producer access modes: Shared producers coexist; Exclusive is refused (ProducerBusy) while any
other producer exists and keeps others out; ExclusiveWithFencing closes the existing producers
(CLOSE_PRODUCER) and makes their reconnects fail with ProducerFenced; WaitForExclusive is answered
``producer_ready=false`` and admitted (a second PRODUCER_SUCCESS) when the topic has no producer.

Deduplication (``dedup``, see ``broker/dedup.py``) keeps the highest sequence id persisted per
producer name, snapshotted in the ``pulsar.dedup`` cursor and rebuilt on load. Geo-replication's
(``repl_dedup``, see ``broker/replicated.py``) keeps the highest source position persisted per source
cluster, in the ``pulsar.repl.dedup`` cursor; it is recovered when the first replicator producer
arrives and is always on.

Hooks for geo-replication (``magnetar.replication``, a layer above): ``entry_listeners`` are called
after every append, ``close_hooks`` are awaited first thing in ``close`` (replicators stop before
the log closes), and ``replicators`` maps a remote cluster to what its replicator reports in stats.

Policies (``catalog/policies.py``, read through ``policies()`` on every use, so a change applies at
once): max producers (ProducerBusy) and consumers (ConsumerBusy); max message size (the SEND fails
with NotAllowedError); publish rate (publishes wait, in SEND order, for the next one-second window:
throttled, never dropped); backlog quotas, checked by ``check_policies`` and on each new producer:
``producer_request_hold`` refuses producers with ProducerBlockedQuotaExceededError (the client keeps
retrying, its sends held) and disconnects the connected ones, ``producer_exception`` does the same
with ProducerBlockedQuotaExceededException (the client fails its pending sends),
``consumer_backlog_eviction`` moves the slowest subscriptions forward until the quota holds;
message TTL expires entries by publish time on every subscription; retention is handed to the log,
which deletes only ledgers every durable cursor consumed *and* retention lets go.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any, Final, Protocol

from mypy_extensions import mypyc_attr

from magnetar.base.clock import Clock
from magnetar.base.errors import ClosedError, FencedError
from magnetar.base.invariant import invariant
from magnetar.base.limits import (
    BROKER_TOPIC_UNBLOCK_ATTEMPTS_COUNT_MAX,
    BROKER_TOPIC_UNBLOCK_RETRY_INTERVAL_MS,
)
from magnetar.base.types import Position, TopicName
from magnetar.broker import topic_queries
from magnetar.broker.compaction import TopicCompaction
from magnetar.broker.config import BrokerConfig
from magnetar.broker.dedup import REPL_DEDUP_CURSOR_NAME, DedupState, MessageDeduplication, is_system_cursor
from magnetar.broker.entry import entry_message_count
from magnetar.broker.entry_published import EntryPublished
from magnetar.broker.errors import BrokerError
from magnetar.broker.log import AppendCallback, SettlesFailedWrites, Terminable, TopicLog
from magnetar.broker.metrics import LatencyHistogram, RateMeter
from magnetar.broker.policy_checks import ALL_CHECKS, DueChecks
from magnetar.broker.producer import AccessMode, Producer
from magnetar.broker.publish_throttle import PublishThrottle
from magnetar.broker.replicated import replicated_source
from magnetar.broker.subscription import Subscription
from magnetar.catalog.policies import EffectivePolicies, QuotaLimit, RetentionAction, resolve
from magnetar.faults import breaks
from magnetar.protocol.pulsar import pb, stored_entry_metadata

log = logging.getLogger(__name__)

# ``Final``: compiled, read as constants, not looked up by name (no test patches them).
DEDUP_PRODUCER_NAMES_COUNT_MAX: Final = 10_000
SUBSCRIPTIONS_PER_TOPIC_COUNT_MAX: Final = 10_000
PRODUCERS_PER_TOPIC_COUNT_MAX: Final = 10_000


class TopicState(enum.Enum):
    ACTIVE = "active"
    BLOCKED = "blocked"  # a write failed: no publish, no new producer until the log is settled
    CLOSED = "closed"


_TRANSITIONS = {
    (TopicState.ACTIVE, TopicState.CLOSED),
    (TopicState.ACTIVE, TopicState.BLOCKED),
    (TopicState.BLOCKED, TopicState.ACTIVE),
    (TopicState.BLOCKED, TopicState.CLOSED),
}


def is_write_failure(error: BaseException) -> bool:
    """An append error that leaves its outcome unknown, as opposed to a refusal (BrokerError), the
    topic having moved to another owner (FencedError) or being closed."""
    return isinstance(error, Exception) and not isinstance(error, BrokerError | FencedError | ClosedError)


class ReplicatorView(Protocol):
    """What a topic needs from one of its geo-replicators (``magnetar.replication.Replicator``)."""

    lag: LatencyHistogram  # publish here -> receipt from the remote, per replicated entry

    def stats(self) -> dict[str, Any]: ...


@dataclass(slots=True)
class WaitingProducer:
    producer: Producer
    request_id: int
    admit: Callable[[Producer, int], None]


@mypyc_attr(allow_interpreted_subclasses=True)  # NonPersistentTopic, tests' recording topics
class Topic:
    def __init__(self, name: TopicName, topic_log: TopicLog, config: BrokerConfig,
                 clock: Clock | None = None, policies: Callable[[], EffectivePolicies] | None = None,
                 on_log_fenced: Callable[[Topic], None] | None = None) -> None:
        self.name = name
        #: Called once when an append finds the log fenced (see the module docstring).
        self._on_log_fenced = on_log_fenced
        self._log_fenced = False
        self.log = topic_log
        self.config = config
        self.producers: dict[str, Producer] = {}
        self.subscriptions: dict[str, Subscription] = {}
        self.clock = clock  # delayed delivery, publish throttling; None: neither waits
        self._monotonic_ns = clock.monotonic_ns if clock is not None else None  # bound once: read per run
        defaults = resolve(config, None, None)
        self.policies: Callable[[], EffectivePolicies] = policies or (lambda: defaults)
        # What a publish run needs of the policies, read from ``_run_policies`` (the object
        # ``policies()`` returned last; a change of policy is a new object): two native fields
        # instead of three attribute reads of the interpreted ``EffectivePolicies`` per run.
        self._run_policies: EffectivePolicies | None = None
        self._run_throttled = False
        self._run_size_max = 0
        self.dedup = MessageDeduplication(topic_log, config, enabled=self._dedup_enabled)
        self._repl_dedup: MessageDeduplication | None = None  # made for the first replicator (repl_dedup)
        # Made on first use (``entry_listeners``, ``close_hooks``): only replicated topics have them.
        self._entry_listeners: list[Callable[[], None]] | None = None
        self._close_hooks: list[Callable[[], Awaitable[None]]] | None = None
        self.replicators: dict[str, ReplicatorView] = {}
        self.published = RateMeter()
        if clock is not None:
            self.published.sample(clock.monotonic_ns())  # rates count from the load
        self.publish_latency = LatencyHistogram()
        #: The backlog quota found exceeded by the last check (None: within every quota).
        self.quota_exceeded: QuotaLimit | None = None
        self._throttle: PublishThrottle | None = None  # made by the first throttled publish
        #: Producers fenced by an ExclusiveWithFencing one (insertion-ordered, bounded).
        self._fenced_names: dict[str, None] = {}
        #: Moved by every exclusive producer that takes the topic (Pulsar's topic epoch); None
        #: until one does.
        self.topic_epoch: int | None = None
        self._waiting: tuple[WaitingProducer, ...] = ()  # WaitForExclusive producers, in arrival order
        self._unblocking: asyncio.Task[None] | None = None
        self.write_failures = 0  # times the topic was blocked after a failed write
        self.compaction = TopicCompaction(topic_log)  # see broker/compaction.py
        self._state = TopicState.ACTIVE
        follow = getattr(topic_log, "on_entries_added", None)
        if follow is not None:  # a read-only log learns of entries its owner appended (broker/read_only.py)
            follow(self._entries_added)

    @property
    def entry_listeners(self) -> list[Callable[[], None]]:
        """Called after every append (geo-replication's replicators)."""
        if self._entry_listeners is None:
            self._entry_listeners = []
        return self._entry_listeners

    @property
    def close_hooks(self) -> list[Callable[[], Awaitable[None]]]:
        """Awaited first thing in ``close`` (geo-replication stops its replicators)."""
        if self._close_hooks is None:
            self._close_hooks = []
        return self._close_hooks

    def _dedup_enabled(self) -> bool:
        return self.policies().deduplication

    @property
    def repl_dedup(self) -> MessageDeduplication:
        """Source positions of replicated messages (broker/replicated.py); made on first use: most
        topics never see a replicator, and an idle topic should not hold its state (issue 22)."""
        if self._repl_dedup is None:
            self._repl_dedup = MessageDeduplication(self.log, self.config, enabled=lambda: True,
                                                    cursor_name=REPL_DEDUP_CURSOR_NAME, replay_key=replicated_source,
                                                    negative_control=breaks.Break.NO_REPL_DEDUP)
        return self._repl_dedup

    def _entries_added(self) -> None:
        for subscription in self.subscriptions.values():
            subscription.notify_entries_added()

    @property
    def state(self) -> TopicState:
        return self._state

    @property
    def partition_index(self) -> int:
        return self.name.partition_index

    def _move(self, new: TopicState) -> None:
        invariant((self._state, new) in _TRANSITIONS, f"topic state {self._state} -> {new}")
        self._state = new

    def _check_active(self) -> None:
        if self._state is TopicState.CLOSED:
            raise BrokerError(pb.ServiceNotReady, f"topic {self.name} is being unloaded")

    def _check_writable(self) -> None:
        self._check_active()
        if self._state is TopicState.BLOCKED:
            self._start_unblock()
            raise BrokerError(pb.ServiceNotReady, f"topic {self.name} is blocked after a failed write; retry")

    # --- write failures -------------------------------------------------------------------------

    def _block(self, error: BaseException) -> None:
        if self._state is not TopicState.ACTIVE:
            return
        self._move(TopicState.BLOCKED)
        self.write_failures += 1
        log.warning("topic %s blocked after a failed write: %s", self.name, error)
        self.disconnect_producers()
        self._start_unblock()

    def _start_unblock(self) -> None:
        if self._state is TopicState.BLOCKED and (self._unblocking is None or self._unblocking.done()):
            self._unblocking = asyncio.get_running_loop().create_task(self._unblock(), name=f"unblock:{self.name}")

    async def _unblock(self) -> None:
        for attempt in range(BROKER_TOPIC_UNBLOCK_ATTEMPTS_COUNT_MAX):
            if self._state is not TopicState.BLOCKED:
                return
            try:
                await self.dedup.wait_appends_finished()
                if self._repl_dedup is not None:
                    await self._repl_dedup.wait_appends_finished()
                if isinstance(self.log, SettlesFailedWrites):
                    await self.log.settle_failed_writes()
                await self.dedup.rebuild()
                if self._repl_dedup is not None and self._repl_dedup.state is not DedupState.NEW:
                    await self._repl_dedup.rebuild()  # recovered once: rebuild it the same way
            except Exception as error:  # bookies or metadata still down: try again later
                log.warning("topic %s stays blocked (attempt %d): %s", self.name, attempt + 1, error)
                retry = True
            else:
                retry = False
            if retry:
                # After the handler: compiled (mypyc), an ``except`` block never awaits (the
                # handled exception lives in the thread's shared state; managed_ledger/cursor.py).
                if self.clock is None:
                    return
                await self.clock.sleep(BROKER_TOPIC_UNBLOCK_RETRY_INTERVAL_MS / 1000)
                continue
            if self._state is TopicState.BLOCKED:
                self._move(TopicState.ACTIVE)
                log.info("topic %s accepts writes again", self.name)
            return

    def _fenced(self, error: FencedError) -> None:
        if self._log_fenced or self._state is TopicState.CLOSED:
            return
        self._log_fenced = True
        log.warning("topic %s: its log was fenced (%s); unloading it so that it is loaded again", self.name, error)
        if self._on_log_fenced is not None:
            self._on_log_fenced(self)

    # --- producers ------------------------------------------------------------------------------

    def last_sequence_id(self, producer_name: str) -> int:
        return self.dedup.last_sequence_id(producer_name)

    def add_producer(self, producer: Producer, request_id: int,
                     admit: Callable[[Producer, int], None]) -> bool:
        """Admit ``producer``; False means it waits (WaitForExclusive) and ``admit`` is called later.

        Access modes as Pulsar rules them: a Shared producer is refused ProducerBusy while an
        exclusive one holds the topic or waits for it; an Exclusive one is refused ProducerFenced
        while any producer is connected, or when it asks for a topic epoch older than the topic's;
        ExclusiveWithFencing closes every other producer (they are refused ProducerFenced when they
        come back) and takes the topic; WaitForExclusive is answered ``producer_ready=false`` and
        admitted once the topic has no producer. Every non-shared producer that takes the topic
        moves the topic epoch (to the epoch it asked for, else one more), which its
        PRODUCER_SUCCESS carries and its reconnects present again. The epoch lives as long as the
        loaded topic.
        """
        refuse = getattr(self.log, "refuse_producer", None)
        if refuse is not None:  # a read-only broker: the error names the owner (broker/read_only.py)
            refuse()
        self._check_writable()
        if self.terminated_at is not None:
            raise BrokerError(pb.TopicTerminatedError, f"Topic {self.name} is terminated")
        if producer.name in self._fenced_names:
            raise BrokerError(pb.ProducerFenced, f"producer {producer.name} was fenced by an exclusive producer")
        existing = self.producers.get(producer.name)
        if existing is not None:
            if existing.channel.is_open():
                raise BrokerError(pb.ProducerBusy, f"producer with name '{producer.name}' is already connected")
            self.remove_producer(existing)  # a stale producer of a connection that is gone
        if len(self.producers) >= PRODUCERS_PER_TOPIC_COUNT_MAX:
            raise BrokerError(pb.ProducerBusy, "too many producers on this topic")
        limit = self.policies().max_producers
        if limit and len(self.producers) >= limit:
            raise BrokerError(pb.ProducerBusy, f"Topic reached max producers limit ({limit})")
        self._refuse_if_over_quota()
        others = list(self.producers.values())
        exclusive = next((p for p in others if p.access_mode is not AccessMode.SHARED), None)
        mode = producer.access_mode
        if mode is AccessMode.SHARED:
            if exclusive is not None or self._waiting:
                holder = exclusive.name if exclusive is not None else self._waiting[0].producer.name
                raise BrokerError(pb.ProducerBusy, f"Topic has an existing exclusive producer: {holder}")
            self.producers[producer.name] = producer
            return True
        if mode is AccessMode.EXCLUSIVE:
            if exclusive is not None:
                raise BrokerError(pb.ProducerFenced, f"Topic has an existing exclusive producer: {exclusive.name}")
            if others:
                raise BrokerError(pb.ProducerFenced, "Topic has existing shared producers")
        requested = producer.topic_epoch
        if requested is not None and self.topic_epoch is not None and requested < self.topic_epoch:
            raise BrokerError(pb.ProducerFenced, f"Topic epoch has already moved. Current epoch: "
                                                 f"{self.topic_epoch}, Producer epoch: {requested}")
        if mode is AccessMode.EXCLUSIVE_WITH_FENCING:
            for other in [w.producer for w in self._waiting] + others:
                self._fence_name(other.name)
                self.remove_producer(other)
                if other.channel.is_open():
                    other.channel.send_close_producer(other.producer_id)
        elif mode is AccessMode.WAIT_FOR_EXCLUSIVE and others:
            self._waiting += (WaitingProducer(producer, request_id, admit),)
            return False
        self._take_exclusive(producer)
        return True

    @property
    def terminated_at(self) -> Position | None:
        """The last entry of a terminated topic (no producer is admitted again), else None."""
        return self.log.terminated_position if isinstance(self.log, Terminable) else None

    async def terminate(self) -> Position:
        """Pulsar's terminate: appends end for good (after the in-flight ones), producers are
        closed (they come back to a TopicTerminatedError); the last entry's position is returned."""
        if not isinstance(self.log, Terminable):
            raise BrokerError(pb.NotAllowedError, f"topic {self.name} cannot be terminated")
        position = await self.log.terminate()
        self.disconnect_producers()
        return position

    def _fence_name(self, name: str) -> None:
        self._fenced_names[name] = None
        while len(self._fenced_names) > PRODUCERS_PER_TOPIC_COUNT_MAX:  # the oldest is forgotten
            del self._fenced_names[next(iter(self._fenced_names))]

    def _take_exclusive(self, producer: Producer) -> None:
        requested = producer.topic_epoch
        self.topic_epoch = requested if requested is not None else (
            0 if self.topic_epoch is None else self.topic_epoch + 1)
        producer.topic_epoch = self.topic_epoch
        self.producers[producer.name] = producer

    def remove_producer(self, producer: Producer) -> None:
        if self.producers.get(producer.name) is producer:
            del self.producers[producer.name]
        if self._waiting:
            self._waiting = tuple(w for w in self._waiting if w.producer is not producer)
        if producer.state.value == "active":
            producer.close()
        if not self.producers and self._waiting:
            waiting, self._waiting = self._waiting[0], self._waiting[1:]
            waiting.producer.topic_epoch = None  # it waited: it takes the next epoch
            self._take_exclusive(waiting.producer)
            waiting.admit(waiting.producer, waiting.request_id)

    async def publish(self, data: bytes) -> Position:
        """``publish_then`` awaited to its end: the position, or the error."""
        published: asyncio.Future[Position] = asyncio.get_running_loop().create_future()
        await self.publish_then(data, partial(_settle_publish, published))
        return await published

    async def publish_then(self, data: bytes, on_done: PublishCallback, *, messages: int = 0) -> None:
        """``publish_run`` of one entry."""
        await self.publish_run(((data, on_done, messages),))

    async def publish_run(self, run: Sequence[tuple[bytes, PublishCallback, int]]) -> None:
        """``start_publish_run`` awaited to its end."""
        rest = self.start_publish_run(run)
        if rest is not None:
            await rest

    def start_publish_run(self, run: Sequence[tuple[bytes, PublishCallback, int]]) -> Awaitable[None] | None:
        """The one publish path, for a run of entries in order (the SENDs of one producer from one
        receive): for each ``(data, on_done, messages)``, check, wait for the publish-rate window
        and for room in the log (backpressure: the caller, the connection, stops reading
        meanwhile), start the append; later ``on_done(position, None)`` or ``on_done(None,
        error)``. An entry the topic refuses (not writable, too large, the log refuses) is told at
        once, nothing appended, and the run goes on. A write failure blocks the topic (see the
        module docstring). ``messages``: the count the SEND declared (stats; 0: read from the
        entry). The entries that passed the checks go to the log as one ``append_run`` (one
        append call, one send per bookie), handed over before any wait.

        Runs synchronously while no entry has to wait: None once the whole run was handed over
        (the usual case: no coroutine frame per run). At the first entry that must wait (a
        publish rate set, no room in the log) the rest of the run is returned as an awaitable
        (``_publish_rest``) the caller must await before it publishes anything else."""
        policies = self.policies()
        if policies is not self._run_policies:
            self._note_run_policies(policies)
        if self._run_throttled:
            return self._publish_rest(run, 0, [], [], policies)  # throttled: every entry may wait
        size_max = self._run_size_max
        log = self.log
        batch: list[tuple[bytes, AppendCallback]] = []
        callers: list[PublishCallback] = []  # who is told if the log refuses the batch
        started_ns = self._monotonic_ns() if self._monotonic_ns is not None else 0  # one reading per run
        index, count = 0, len(run)
        while index < count:
            if not log.has_room(len(batch) + 1):  # the rest judges this entry (once) and waits
                return self._publish_rest(run, index, batch, callers, policies)
            data, on_done, messages = run[index]
            refusal = self._refusal(data, size_max)
            if refusal is not None:
                on_done(None, refusal)
            else:
                self._add_to_batch(data, on_done, messages or _message_count(data), started_ns, batch, callers)
            index += 1
        self._append_run(batch, callers)
        return None

    def _note_run_policies(self, policies: EffectivePolicies) -> None:
        self._run_throttled = bool(policies.publish_rate_msgs_per_s or policies.publish_rate_bytes_per_s)
        self._run_size_max = policies.max_message_size_bytes
        self._run_policies = policies

    def _refusal(self, data: bytes, size_max: int) -> Exception | None:
        """Why this topic refuses ``data`` now, or None."""
        if self._state is not TopicState.ACTIVE:
            try:
                self._check_writable()
            except Exception as error:
                return error
        if size_max and len(data) > size_max:
            return BrokerError(pb.NotAllowedError, f"Exceed maximum message size: {len(data)} > {size_max} bytes")
        return None

    def _add_to_batch(self, data: bytes, on_done: PublishCallback, messages: int, started_ns: int,
                      batch: list[tuple[bytes, AppendCallback]], callers: list[PublishCallback]) -> None:
        batch.append((data, EntryPublished(self, len(data), messages, started_ns, on_done)))
        callers.append(on_done)

    async def _publish_rest(self, run: Sequence[tuple[bytes, PublishCallback, int]], index: int,
                            batch: list[tuple[bytes, AppendCallback]], callers: list[PublishCallback],
                            policies: EffectivePolicies) -> None:
        """``start_publish_run`` from ``run[index]`` on, waiting where it must; ``batch`` and
        ``callers``: the entries before it that passed, not yet handed to the log."""
        size_max = policies.max_message_size_bytes
        throttled = bool(policies.publish_rate_msgs_per_s or policies.publish_rate_bytes_per_s)
        log = self.log
        for data, on_done, messages in run[index:]:
            try:
                refusal = self._refusal(data, size_max)
                if refusal is not None:
                    raise refusal
                waited = False
                if throttled:
                    self._append_run(batch, callers)
                    batch, callers = [], []  # the log keeps the lists it was handed
                    messages = entry_message_count(stored_entry_metadata(data))
                    if self.clock is not None:  # publishes wait only with a clock
                        if self._throttle is None:
                            self._throttle = PublishThrottle(self.clock)
                        await self._throttle.wait(policies, messages, len(data))
                    waited = True
                elif not messages:
                    messages = _message_count(data)
                if not log.has_room(len(batch) + 1):
                    self._append_run(batch, callers)
                    batch, callers = [], []
                    if not log.has_room():
                        await log.wait_for_room()
                        waited = True
                if waited:
                    self._check_writable()  # blocked or closed while it waited
            except Exception as error:  # refused before anything was appended
                on_done(None, error)
                continue
            started_ns = self.clock.monotonic_ns() if self.clock is not None else 0  # after its waits
            self._add_to_batch(data, on_done, messages, started_ns, batch, callers)
        self._append_run(batch, callers)

    def _append_run(self, batch: list[tuple[bytes, AppendCallback]], callers: list[PublishCallback]) -> None:
        """Hand ``batch`` to the log in one call (the log may keep the list: the caller starts a
        new one); if the log refuses it (nothing appended) every caller is told."""
        if not batch:
            return
        try:
            self.log.append_run(batch)
        except Exception as error:  # the log refused the run: nothing appended
            if is_write_failure(error):
                self._block(error)
            elif isinstance(error, FencedError):
                self._fenced(error)
            for on_done in callers:
                on_done(None, error)

    def entry_published(self, size: int, messages: int, started_ns: int, on_done: PublishCallback,
                        position: Position | None, error: BaseException | None) -> None:
        if error is not None:
            if is_write_failure(error):
                self._block(error)
            on_done(None, error)
            if isinstance(error, FencedError):
                self._fenced(error)
            return
        if self._monotonic_ns is not None:
            self.publish_latency.observe((self._monotonic_ns() - started_ns) / 1e6)
        self.published.record(messages, size)
        if self.subscriptions:  # no values iterator per entry for a topic nobody subscribed to
            for subscription in self.subscriptions.values():
                subscription.notify_entries_added()
        if self._entry_listeners is not None:
            for listener in self._entry_listeners:
                listener()
        on_done(position, None)

    # --- subscriptions --------------------------------------------------------------------------

    async def subscription(self, name: str, *, durable: bool, initial_mark_delete: Position) -> Subscription:
        self._check_active()
        found = self.subscriptions.get(name)
        if found is not None:
            return found
        if len(self.subscriptions) >= SUBSCRIPTIONS_PER_TOPIC_COUNT_MAX:
            raise BrokerError(pb.TooManyRequests, "too many subscriptions on this topic")
        cursor = await self.log.open_cursor(name, durable=durable, initial_mark_delete=initial_mark_delete)
        found = self.subscriptions.get(name)  # another subscribe may have won while we awaited
        if found is not None:
            return found
        subscription = Subscription(name, self.log, cursor, self.config, self.partition_index, self._forget,
                                    clock=self.clock, admit_consumer=self._admit_consumer,
                                    delayed_enabled=lambda: self.policies().delayed_delivery)
        self.subscriptions[name] = subscription
        return subscription

    def _forget(self, subscription: Subscription) -> None:
        if self.subscriptions.get(subscription.name) is subscription:
            del self.subscriptions[subscription.name]

    def _admit_consumer(self) -> None:
        limit = self.policies().max_consumers
        if limit and sum(len(s.consumers) for s in self.subscriptions.values()) >= limit:
            raise BrokerError(pb.ConsumerBusy, f"Topic reached max consumers limit ({limit})")

    def subscription_names(self) -> list[str]:
        """Durable subscriptions stored and non-durable ones attached (system cursors left out)."""
        names = {n for n in self.log.cursor_names() if not is_system_cursor(n)} | set(self.subscriptions)
        return sorted(names)

    # --- policies -------------------------------------------------------------------------------

    def _durable_subscriptions(self) -> list[Subscription]:
        return [s for s in self.subscriptions.values() if s.durable and not is_system_cursor(s.name)]

    def backlog_bytes(self) -> int:
        """Bytes after the slowest durable subscription (Pulsar's topic backlog size)."""
        marks = [s.cursor.mark_delete_position for s in self._durable_subscriptions()]
        # Subscriptions read-only brokers serve count too (their persisted positions, read by the
        # owner's last trim: broker/read_only.py); a producer quota then holds for them as well.
        marks += getattr(self.log, "read_only_holds", ())
        if not marks:
            return 0
        return self.log.backlog_bytes(min(marks))

    async def oldest_backlog_publish_ms(self) -> int | None:
        """Publish time of the oldest entry some durable subscription has not acknowledged."""
        subscriptions = self._durable_subscriptions()
        if not subscriptions:
            return None
        slowest = min(s.cursor.mark_delete_position for s in subscriptions)
        entries = await self.log.read(slowest.next(), 1)
        return stored_entry_metadata(entries[0].payload).publish_time if entries else None

    def _refuse_if_over_quota(self) -> None:
        policies = self.policies()
        exceeded = self.quota_exceeded
        size = policies.backlog_size
        if size is not None and size.action is not RetentionAction.CONSUMER_BACKLOG_EVICTION and (
                self.backlog_bytes() > size.limit):
            exceeded = size
        if exceeded is None or exceeded.action is RetentionAction.CONSUMER_BACKLOG_EVICTION:
            return
        if exceeded.action is RetentionAction.PRODUCER_REQUEST_HOLD:
            raise BrokerError(pb.ProducerBlockedQuotaExceededError,
                              f"Cannot create producer on topic with backlog quota exceeded ({exceeded.limit})")
        raise BrokerError(pb.ProducerBlockedQuotaExceededException,
                          f"Cannot create producer on topic with backlog quota exceeded ({exceeded.limit})")

    async def check_policies(self, now_ms: int, due: DueChecks = ALL_CHECKS) -> None:
        """One policy pass: the checks ``due`` of TTL expiry, backlog quotas, retention. Called
        periodically (each check on its own period) and by tests (all at once). A check that
        cannot act on this topic costs nothing: TTL without subscriptions, quotas without one
        set, retention with no closed ledger (the managed ledger's trim returns at once)."""
        if self._state is not TopicState.ACTIVE:
            return
        policies = self.policies()
        if due.expiry and policies.message_ttl_s > 0:
            for subscription in list(self.subscriptions.values()):
                await subscription.expire_older_than(now_ms - policies.message_ttl_s * 1000)
        if due.backlog_quota:
            await self._check_backlog_quota(policies, now_ms)
        if due.retention:
            await self.log.apply_retention(policies.retention_time_s, policies.retention_size_bytes)

    def rate_meters(self) -> list[RateMeter]:
        """The meters the broker samples every rate period: publish, dispatch and expiry."""
        meters = [self.published]
        for subscription in self.subscriptions.values():
            meters.append(subscription.dispatched)
            meters.append(subscription.expired)
        return meters

    def sample_rates(self, now_ns: int, previous_ns: int = -1) -> bool:
        """Sample the rates (the broker does, every rate period); ``previous_ns``: the time of the
        broker's previous pass (-1: none). A topic whose meters are all idle is skipped (its rates
        are zero and stay zero); its next sample counts from ``previous_ns``, as if sampled then,
        so the rates are the ones sampling every pass gives. Returns whether it sampled."""
        if previous_ns >= 0 and self.rates_idle():
            return False
        for meter in self.rate_meters():
            meter.sample(now_ns, previous_ns)
        return True

    def rates_idle(self) -> bool:
        """Every meter of ``rate_meters`` idle (checked without building the list: most topics are)."""
        if not self.published.idle():
            return False
        for subscription in self.subscriptions.values():
            if not (subscription.dispatched.idle() and subscription.expired.idle()):
                return False
        return True

    async def trim(self) -> list[int]:
        """Pulsar's trim: delete now the ledgers the retention policy no longer keeps (what the
        policy check does periodically); returns the deleted ledger ids."""
        self._check_active()
        policies = self.policies()
        return await self.log.apply_retention(policies.retention_time_s, policies.retention_size_bytes)

    async def _check_backlog_quota(self, policies: EffectivePolicies, now_ms: int) -> None:
        exceeded: QuotaLimit | None = None
        size = policies.backlog_size
        if size is None and policies.backlog_time is None:
            self.quota_exceeded = None
            return
        # Subscriptions read-only brokers serve count: their positions, read now (not only by the
        # last trim, which skips a topic without a closed ledger).
        refresh = getattr(self.log, "refresh_read_only_holds", None)  # logs on managed ledgers have them
        if refresh is not None:
            await refresh()
        if size is not None and self.backlog_bytes() > size.limit:
            if size.action is RetentionAction.CONSUMER_BACKLOG_EVICTION:
                for subscription in self._durable_subscriptions():
                    await subscription.evict_to_size(size.limit)
            else:
                exceeded = size
        age = policies.backlog_time
        oldest = await self.oldest_backlog_publish_ms() if age is not None else None
        if age is not None and oldest is not None and now_ms - oldest > age.limit * 1000:
            if age.action is RetentionAction.CONSUMER_BACKLOG_EVICTION:
                for subscription in self._durable_subscriptions():
                    await subscription.expire_older_than(now_ms - age.limit * 1000)
            else:
                exceeded = exceeded or age
        self.quota_exceeded = exceeded
        if exceeded is not None:
            self.disconnect_producers()

    def disconnect_producers(self) -> None:
        """CLOSE_PRODUCER to every producer: their clients reconnect and are asked again."""
        for producer in list(self.producers.values()):
            self.remove_producer(producer)
            if producer.channel.is_open():
                producer.channel.send_close_producer(producer.producer_id)

    # --- queries --------------------------------------------------------------------------------

    async def last_message_id(self) -> pb.MessageIdData:
        """The last entry's id (``topic_queries.last_message_id``)."""
        return await topic_queries.last_message_id(self.log, self.partition_index)

    async def find_by_publish_time(self, timestamp_ms: int, scan_max: int) -> Position | None:
        """The first entry published at or after ``timestamp_ms`` (a bounded forward scan)."""
        return await topic_queries.find_by_publish_time(self.log, self.config.dispatch_read_count_max,
                                                        timestamp_ms, scan_max)

    # --- lifecycle ------------------------------------------------------------------------------

    async def close(self) -> None:
        if self._state is TopicState.CLOSED:
            return
        self._move(TopicState.CLOSED)
        for hook in list(self._close_hooks or ()):
            try:
                await hook()
            except Exception:  # a replicator failing to stop must not keep the log open
                log.exception("close hook of %s failed", self.name)
        unblocking, self._unblocking = self._unblocking, None
        if unblocking is not None and not unblocking.done():
            unblocking.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await unblocking
        for producer in list(self.producers.values()):
            self.remove_producer(producer)
        clock = self.clock
        begun = clock.monotonic_ns() if clock is not None else 0
        await self._close_parts()
        parts = clock.monotonic_ns() if clock is not None else 0
        await self.log.close()
        if clock is not None and (done := clock.monotonic_ns()) - begun >= SLOW_CLOSE_NS:
            steps = getattr(getattr(self.log, "managed_ledger", None), "close_steps_ms", None)
            log.info("slow close of %s: %.0f ms: subscriptions, dedup, compaction %.0f ms, log %.0f ms "
                     "(appends drained, cursors closed, ledger closed: %s ms)", self.name, (done - begun) / 1e6,
                     (parts - begun) / 1e6, (done - parts) / 1e6, steps)

    async def _close_parts(self) -> None:
        """Close the subscriptions, compaction and dedup states concurrently: each may wait for a
        write (a dedup snapshot, a non-durable cursor's delete), and one after another they cost
        a round trip each (issue 24's slow unloads; ``Break.SERIAL_CLOSE``, a negative control,
        closes them one after another)."""
        subscriptions = list(self.subscriptions.values())
        if breaks.active(breaks.Break.SERIAL_CLOSE):  # negative control only
            for subscription in subscriptions:
                await subscription.close(delete=not subscription.durable)
            await self.compaction.close()
            await self.dedup.close()
            if self._repl_dedup is not None:
                await self._repl_dedup.close()
            return
        await asyncio.gather(
            *(subscription.close(delete=not subscription.durable) for subscription in subscriptions),
            self.compaction.close(), self.dedup.close(),
            *((self._repl_dedup.close(),) if self._repl_dedup is not None else ()),
        )


#: A topic close at least this long logs its steps (the owner's part of the pause of a move).
SLOW_CLOSE_NS = 1_000_000_000

#: How a publish is told its outcome: ``(position, None)`` or ``(None, error)``, once.
PublishCallback = Callable[[Position | None, BaseException | None], None]


def _settle_publish(published: asyncio.Future[Position], position: Position | None,
                    error: BaseException | None) -> None:
    if published.done():
        return
    if error is not None:
        published.set_exception(error)
    else:
        published.set_result(position)  # type: ignore[arg-type]


def _message_count(data: bytes) -> int:
    try:
        return entry_message_count(stored_entry_metadata(data))
    except Exception:  # counted for stats only: an unreadable entry counts as one
        return 1

