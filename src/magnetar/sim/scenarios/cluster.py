"""Scenario ``cluster``: the whole stack in one seeded process, judged by the Jepsen-queue checker.

Nodes, all assembled from ``magnetar.node`` exactly as the real processes are, on the simulated
capabilities (``SimDisk``, ``SimKeyValueStore``, ``SimNetwork``, ``SimClock``):

* ``bookie0..``  ``node.bookie.start_bookie_node`` over the node's disk and index store
* ``autorecovery`` ``node.autorecovery.start_autorecovery``: an auditor and a replication worker
  that copy the fragments of a bookie that is gone to a live one (four bookies, ensembles of three)
* ``broker0..``  ``node.ledger.open_ledger_manager`` + ``node.broker.start_broker``; with more than
  one broker, bundle ownership through the metadata store (``control.ownership``), so a topic moves
  when its owner dies or loses its session
* clients: our ``magnetar.client`` package, one node per producer and consumer: producers with
  deduplication (a fixed name, explicit sequence ids, resent until receipted) and without, one
  consumer per subscription type (exclusive, failover, shared, key_shared), and at the end two
  independent readers from the earliest position (``drain-1``, ``drain-2``)
* the metadata store: one ``MemoryMetadataServer`` on virtual time; each node's sessions are
  suspended when it dies (they expire after their timeout, as ZooKeeper's do)

Faults (``faults_count`` of them, times and targets from the world's seeded ``Rng``; see
``_FAULT_KINDS``): a crash at a registered fault point of a bookie or broker (``bookie.*``,
``journal.*``, ``ledger.*``, ``managed_ledger.*``, ``broker.*``), random kills, power cuts of
every bookie at once (unsynced writes lost or torn), network partitions (two-way and one-way)
between any two nodes, clock jumps, and zombie owners (a broker hung inside its write path while
its session expires and another broker takes the topic over, then released). Every dead node is
restarted after a random delay; then faults stop, the network heals and the workload finishes.

The history (every send with its outcome, every receive, both drains) goes to
``magnetar.sim.checker`` (lost, moved, duplicated with deduplication on, reordered, unexpected,
divergent, unstable, undelivered); ``cluster_check`` adds what only the simulator can see
(ledger metadata moving forward only, run failures). Breaks (negative controls, the production
switches of ``faults.breaks``): ``ack-before-fsync``, ``no-fencing``, ``truncate-to-lac``,
``no-dedup``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from magnetar import faults
from magnetar.base.errors import MagnetarError
from magnetar.broker import BrokerConfig
from magnetar.client import (
    EARLIEST,
    ClientError,
    ClientOptions,
    ConsumerConfig,
    InitialPosition,
    ProducerConfig,
    PulsarClient,
    SubscriptionType,
)
from magnetar.faults import breaks
from magnetar.ledger.autorecovery import AutoRecoveryConfig
from magnetar.ledger.bookie_transport import BookieClientTransport
from magnetar.ledger.config import LedgerClientConfig
from magnetar.managed_ledger import ManagedLedgerConfig
from magnetar.metadata.api import MetadataStore
from magnetar.metadata.memory import MemoryMetadataServer
from magnetar.node.autorecovery import start_autorecovery
from magnetar.node.bookie import start_bookie_node
from magnetar.node.broker_generation import Generation, GenerationConfig, serve_generations, start_generation
from magnetar.sim.checker import check
from magnetar.sim.clock import SimClock
from magnetar.sim.disk import SimDiskConfig
from magnetar.sim.errors import SimCrashError
from magnetar.sim.history import FaultEvent, History, Op, OpType, Outcome, value_of
from magnetar.sim.scenarios.base import ScenarioOptions, Verdict
from magnetar.sim.scenarios.cluster_check import MetadataWatch, probe_recovered_ledgers, verdict_of
from magnetar.sim.world import NodeContext, NodeMain, NodeState, SimConfig, SimWorld
from magnetar.storage import BookieConfig

BREAKS = frozenset(b.value for b in breaks.Break)

BOOKIE_PORT = 3181
BROKER_PORT = 6650
TOPIC = "persistent://public/default/sim"
SUBSCRIPTION_TYPES = (SubscriptionType.EXCLUSIVE, SubscriptionType.FAILOVER, SubscriptionType.SHARED,
                      SubscriptionType.KEY_SHARED)
#: Virtual seconds: how long any phase may take before the run is declared stuck (a liveness
#: failure, reported as a violation), and how often the controller looks at the world.
PHASE_S_MAX = 120.0
POLL_S = 0.05
SESSION_TIMEOUT_MS = 2_000
RESTART_DELAY_S_MAX = 1.0
DRAIN_IDLE_MS = 3_000  # one read of a drain waits this long at most
DRAIN_ERRORS_MAX = 50
CREATE_ATTEMPTS_MAX = 200
CREATE_RETRY_S = 0.1
PLAIN_SEND_TIMEOUT_MS = 3_000
KEYS_COUNT = 3
BUNDLES_COUNT = 4
CLIENT_OPTIONS = ClientOptions(operation_timeout_ms=3_000, connection_timeout_ms=1_000, keep_alive_interval_ms=1_000)
LEDGER_CONFIG = LedgerClientConfig(
    add_timeout_ms=1_000, read_timeout_ms=1_000, speculative_read_timeout_ms=200, recovery_fence_timeout_ms=1_000
)
BOOKIE_CONFIG = BookieConfig(
    port=BOOKIE_PORT,
    write_cache_bytes_max=2 * 1024 * 1024,
    entry_bytes_max=256 * 1024,
    journal_queue_bytes_max=1024 * 1024,
    journal_group_bytes_max=16 * 1024,
    journal_file_bytes_max=64 * 1024,
    entry_log_bytes_max=64 * 1024,
    checkpoint_interval_ms=200,
    disk_free_bytes_min=0,
    gc_interval_ms=0,
)


#: The world of a cluster run: journal syncs take 2-20 ms (a disk under load), so a reply sent
#: before its fsync has a window in which a power cut can find it (the ``ack-before-fsync`` control).
SIM_CONFIG = SimConfig(disk=SimDiskConfig(sync_latency_us_min=2_000, sync_latency_us_max=20_000))


def new_world(seed: int) -> SimWorld:
    return SimWorld(seed, SIM_CONFIG)


@dataclass(frozen=True, slots=True)
class ClusterOptions:
    bookies_count: int = 4
    brokers_count: int = 2
    quorum: tuple[int, int, int] = (3, 2, 2)
    messages_per_producer: int = 12
    dedup_producers_count: int = 1
    plain_producers_count: int = 1
    faults_count: int = 4
    fault_window_s: float = 3.0
    max_entries_per_ledger: int = 8
    breaks: frozenset[str] = field(default_factory=frozenset)
    #: Run an AutoRecovery node (auditor and replication worker) beside the bookies.
    autorecovery: bool = True
    #: The kinds of fault drawn from (``cluster_faults.FAULT_KINDS``); empty: all of them.
    fault_kinds: tuple[str, ...] = ()
    #: Virtual seconds the producers have to finish once the faults stopped (then: stuck).
    producers_s_max: float = PHASE_S_MAX


@dataclass
class ClusterRun:
    """Everything the controller and the nodes share in one run."""

    world: SimWorld
    options: ClusterOptions
    meta: MemoryMetadataServer
    history: History = field(default_factory=History)
    sessions: dict[str, list[MetadataStore]] = field(default_factory=dict)
    ready: set[str] = field(default_factory=set)
    producers_done: set[str] = field(default_factory=set)
    #: Each producer's send in flight: its value and since when (virtual ns).
    sending: dict[str, tuple[str, int]] = field(default_factory=dict)
    stop_consumers: bool = False
    drained: set[str] = field(default_factory=set)
    held_down: set[str] = field(default_factory=set)
    fencing: list[str] | None = None  # the fencing probe's violations, once it ran
    crashes_count: int = 0

    @staticmethod
    def new(world: SimWorld, options: ClusterOptions) -> ClusterRun:
        return ClusterRun(world, options, MemoryMetadataServer(SimClock()))

    def now_ns(self) -> int:
        return self.world.loop.now_ns

    async def connect(self, ctx: NodeContext) -> MetadataStore:
        session = await self.meta.connect(session_timeout_ms=SESSION_TIMEOUT_MS)
        self.sessions.setdefault(ctx.name, []).append(session)
        return session

    def fault(self, kind: str, process: str, point: str = "", detail: str = "") -> None:
        self.history.record_fault(FaultEvent(self.now_ns(), kind, process, point, detail))
        self.world.record("controller", f"fault-{kind}", f"{process} {point} {detail}".strip())


def bookie_names(options: ClusterOptions) -> list[str]:
    return [f"bookie{i}" for i in range(options.bookies_count)]


def broker_names(options: ClusterOptions) -> list[str]:
    return [f"broker{i}" for i in range(options.brokers_count)]


def bookie_main(run: ClusterRun) -> NodeMain:
    async def main(ctx: NodeContext) -> None:
        store = await run.connect(ctx)

        async def reopen() -> MetadataStore:
            return await run.connect(ctx)

        config = dataclasses.replace(BOOKIE_CONFIG, host=ctx.host, data_dir=ctx.name)
        running = await start_bookie_node(config, disk=ctx.disk, kv=ctx.kv("index"), store=store, clock=ctx.clock,
                                          network=ctx.network, rng=ctx.rng.fork("cookie"), reopen_store=reopen)
        run.ready.add(ctx.name)
        try:
            while True:
                await ctx.clock.sleep(3600)
        finally:
            run.ready.discard(ctx.name)
            await running.stop()

    return main


def broker_main(run: ClusterRun) -> NodeMain:
    e, qw, qa = run.options.quorum
    config = GenerationConfig(
        # Deduplication on broker-wide (off by default, as in Pulsar): the dedup producers' "no
        # duplicates" is checked; the no-dedup break is the control that switches it off.
        broker=BrokerConfig(cluster_name="sim", retention_time_s=-1, retention_size_bytes=-1, policy_check_interval_ms=1_000,
                            deduplication=True),
        managed_ledger=ManagedLedgerConfig(ensemble_size=e, write_quorum_size=qw, ack_quorum_size=qa,
                                           max_entries_per_ledger=run.options.max_entries_per_ledger,
                                           retention_time_s=-1, retention_size_bytes=-1,
                                           cursor_flush_interval_ms=200),
        ledger=LEDGER_CONFIG,
        bundles_count=BUNDLES_COUNT,
        load_report_interval_ms=1_000,
    )

    async def main(ctx: NodeContext) -> None:
        async def connect() -> MetadataStore:
            return await run.connect(ctx)

        async def build(store: MetadataStore) -> Generation:
            return await start_generation(store, config, host=ctx.host, port=BROKER_PORT, advertised_host=ctx.host,
                                          http_url=f"http://{ctx.host}:8080", network=ctx.network, clock=ctx.clock,
                                          rng=ctx.rng.fork("generation"))

        def on_generation(generation: Generation | None) -> None:
            (run.ready.add if generation is not None else run.ready.discard)(ctx.name)

        await serve_generations(connect, build, ctx.clock, on_generation=on_generation)

    return main


async def _retry(ctx: NodeContext, what: str, make: Callable[[], asyncio.Future[object] | object]) -> object:
    last = ""
    for _ in range(CREATE_ATTEMPTS_MAX):
        try:
            return await make()  # type: ignore[misc]
        except (ClientError, MagnetarError) as exc:
            last = f"{type(exc).__name__}: {exc}"
            await ctx.clock.sleep(CREATE_RETRY_S)
    raise AssertionError(f"{ctx.name}: could not {what}: {last}")


def _client(run: ClusterRun, ctx: NodeContext) -> PulsarClient:
    broker = ctx.rng.choice(broker_names(run.options))
    return PulsarClient((broker, BROKER_PORT), network=ctx.network, clock=ctx.clock, rng=ctx.rng.fork("client"),
                        options=CLIENT_OPTIONS)


def _producer_main(run: ClusterRun, name: str, dedup: bool) -> NodeMain:
    async def main(ctx: NodeContext) -> None:
        client = _client(run, ctx)
        config = (ProducerConfig(producer_name=name, send_timeout_ms=0) if dedup
                  else ProducerConfig(send_timeout_ms=PLAIN_SEND_TIMEOUT_MS))
        producer = await _retry(ctx, "create a producer", lambda: client.create_producer(TOPIC, config))
        try:
            pace_s = 2 * run.options.fault_window_s / max(1, run.options.messages_per_producer)
            for seq in range(run.options.messages_per_producer):
                await ctx.clock.sleep(pace_s * ctx.rng.random())  # spread the sends over the faults
                value = value_of(name, seq)
                key = f"k{seq % KEYS_COUNT}"
                run.sending[name] = (value, run.now_ns())
                try:
                    msg_id = await producer.send(value.encode(), key=key,  # type: ignore[attr-defined]
                                                 sequence_id=seq if dedup else None)
                except (ClientError, MagnetarError) as exc:
                    run.history.record(Op(name, OpType.SEND, TOPIC, value, Outcome.UNKNOWN, None, run.now_ns(),
                                          error=type(exc).__name__))
                    continue
                finally:
                    run.sending.pop(name, None)
                run.history.record(Op(name, OpType.SEND, TOPIC, value, Outcome.OK,
                                      (msg_id.ledger_id, msg_id.entry_id, msg_id.batch_index), run.now_ns()))
        finally:
            run.producers_done.add(name)
        await client.close()

    return main


def _consumer_main(run: ClusterRun, name: str, kind: SubscriptionType) -> NodeMain:
    subscription = f"sub-{kind.name.lower()}"

    async def main(ctx: NodeContext) -> None:
        client = _client(run, ctx)
        config = ConsumerConfig(subscription_type=kind, initial_position=InitialPosition.EARLIEST,
                                consumer_name=name, ack_group_time_ms=0, receiver_queue_size=50)
        consumer = await _retry(ctx, "subscribe", lambda: client.subscribe(TOPIC, subscription, config))
        run.ready.add(name)
        while not run.stop_consumers:
            try:
                message = await consumer.receive(timeout_ms=200)  # type: ignore[attr-defined]
            except (ClientError, MagnetarError, TimeoutError):
                continue
            msg_id = message.message_id
            run.history.record(Op(name, OpType.RECEIVE, TOPIC, message.value(), Outcome.OK,
                                  (msg_id.ledger_id, msg_id.entry_id, msg_id.batch_index), run.now_ns(),
                                  subscription=subscription))
            try:
                consumer.acknowledge(message)  # type: ignore[attr-defined]
            except (ClientError, MagnetarError):
                pass
        await client.close()

    return main


def _drain_main(run: ClusterRun, name: str) -> NodeMain:
    async def main(ctx: NodeContext) -> None:
        client = _client(run, ctx)
        reader = await _retry(ctx, "create a reader", lambda: client.create_reader(TOPIC, EARLIEST))
        errors_count = 0
        while errors_count < DRAIN_ERRORS_MAX:
            try:
                if not await reader.has_message_available():  # type: ignore[attr-defined]
                    break
                message = await reader.read_next(timeout_ms=DRAIN_IDLE_MS)  # type: ignore[attr-defined]
            except (ClientError, MagnetarError, TimeoutError) as exc:
                errors_count += 1
                ctx.trace("drain-retry", f"{type(exc).__name__}: {exc}")
                await ctx.clock.sleep(CREATE_RETRY_S)
                continue
            msg_id = message.message_id
            run.history.record(Op(name, OpType.DRAIN, TOPIC, message.value(), Outcome.OK,
                                  (msg_id.ledger_id, msg_id.entry_id, msg_id.batch_index), run.now_ns()))
        if errors_count >= DRAIN_ERRORS_MAX:
            raise AssertionError(f"{name}: the drain failed {errors_count} times")
        run.drained.add(name)
        await client.close()

    return main


def quiet_crashes(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
    """Tasks of a crashed node end with ``SimCrashError``, often unretrieved: that is the crash, not news."""
    if isinstance(context.get("exception"), SimCrashError):
        return
    loop.default_exception_handler(context)


AUTORECOVERY_CONFIG = AutoRecoveryConfig(audit_interval_ms=1_000, open_ledger_grace_ms=2_000,
                                         worker_poll_interval_ms=500)


def autorecovery_main(run: ClusterRun) -> NodeMain:
    """``node.autorecovery`` as a node: it re-replicates fragments of bookies that are gone."""

    async def main(ctx: NodeContext) -> None:
        while True:  # a new session (and loops) whenever the last one ended
            store = await run.connect(ctx)
            running = await start_autorecovery(store, network=ctx.network, clock=ctx.clock, rng=ctx.rng.fork("ar"),
                                               config=AUTORECOVERY_CONFIG, ledger_config=LEDGER_CONFIG,
                                               owner=ctx.name)
            run.ready.add(ctx.name)
            try:
                while store.session.alive:
                    await ctx.clock.sleep(1.0)
            finally:
                run.ready.discard(ctx.name)
                await running.stop()

    return main


def _prober_main(run: ClusterRun, watch: MetadataWatch) -> NodeMain:
    async def main(ctx: NodeContext) -> None:
        transport = BookieClientTransport(ctx.network, ctx.clock, LEDGER_CONFIG)
        try:
            run.fencing = await probe_recovered_ledgers(watch, transport)
        finally:
            await transport.close()

    return main


@dataclass(frozen=True, slots=True)
class ClusterResult:
    """A run's verdict and what it did (for the soak report and the tests' own checks)."""

    verdict: Verdict
    faults_count: int
    crashes_count: int
    ops_count: int
    recovered_ledgers_count: int


@dataclass
class SoakReport:
    """What a run of many seeds did: ``magnetar sim --scenario cluster --seeds A-B``."""

    seeds_count: int = 0
    failed_seeds: list[int] = field(default_factory=list)
    faults_count: int = 0
    crashes_count: int = 0
    ops_count: int = 0
    recovered_ledgers_count: int = 0

    def add(self, seed: int, result: ClusterResult) -> None:
        self.seeds_count += 1
        self.faults_count += result.faults_count
        self.crashes_count += result.crashes_count
        self.ops_count += result.ops_count
        self.recovered_ledgers_count += result.recovered_ledgers_count
        if not result.verdict.ok:
            self.failed_seeds.append(seed)

    def text(self) -> str:
        return (f"seeds {self.seeds_count}, violations in {len(self.failed_seeds)} "
                f"{self.failed_seeds[:20] if self.failed_seeds else ''}".rstrip()
                + f", faults injected {self.faults_count}, node crashes {self.crashes_count}, "
                f"ledgers recovered {self.recovered_ledgers_count}, history ops {self.ops_count}")


def run(world: SimWorld, options: ScenarioOptions) -> Verdict:
    """``magnetar sim --scenario cluster``: ``ops_count`` messages per producer."""
    return run_cluster(world, ClusterOptions(messages_per_producer=options.ops_count, breaks=options.breaks))


def run_cluster(world: SimWorld, options: ClusterOptions) -> Verdict:
    return run_cluster_result(world, options).verdict


def run_cluster_result(world: SimWorld, options: ClusterOptions) -> ClusterResult:
    unknown = options.breaks - BREAKS
    if unknown:
        raise ValueError(f"unknown breaks {sorted(unknown)}")
    state = ClusterRun.new(world, options)
    watch = MetadataWatch()
    from magnetar.sim.scenarios import cluster_faults

    for name in sorted(options.breaks):
        breaks.enable(breaks.Break(name))
    # The nodes log what a real process would (retries, fenced topics); the trace and the verdict
    # are the record of a simulated run, so the log is quiet while it runs.
    logger = logging.getLogger("magnetar")
    level = logger.level
    logger.setLevel(logging.CRITICAL)
    world.loop.set_exception_handler(quiet_crashes)
    try:
        world.run(cluster_faults.controller(state, watch))
    finally:
        logger.setLevel(level)
        breaks.disable_all()
        faults.disarm_all()
    verdict = verdict_of(check(state.history), state.history, watch, list(world.failures), state.crashes_count,
                         state.fencing or [])
    return ClusterResult(verdict, len(state.history.faults), state.crashes_count, len(state.history.ops),
                         len(watch.recovered))


__all__ = [
    "BREAKS",
    "ClusterOptions",
    "ClusterResult",
    "NodeState",
    "SoakReport",
    "new_world",
    "run",
    "run_cluster",
    "run_cluster_result",
]
