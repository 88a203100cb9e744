"""The controller of scenario ``cluster``: starts the nodes, injects the faults, runs the drains.

Phases (each bounded by ``PHASE_S_MAX`` virtual seconds; a phase that does not finish is a
liveness failure reported with the verdict): bookies, then brokers, then one consumer per
subscription type (subscribed from the earliest position before anything is sent), then the
producers. While they work, ``faults_count`` faults are injected at seeded random times within
``fault_window_s``; a supervisor restarts every dead bookie or broker after a seeded delay (and
suspends its metadata sessions, which expire after their timeout). Then every fault is disarmed,
hung tasks released, the network healed, and the run waits for the producers, cuts the power of
every server once more (so what is read next comes from what the bookies made durable, not from
a broker's cache), drains the topic twice and gives the consumers time to catch up.

Fault kinds (``FAULT_KINDS``), targets from the world's seeded ``Rng``:

* ``point``      arm a registered fault point of the node's kind with ``crash`` on one bookie or
  broker, firing at a random hit
* ``kill``       crash one bookie or broker (kill -9 and power cut: unsynced writes lost or torn)
* ``power-cut``  crash every bookie at once
* ``rack-point`` every bookie loses power at once just after a broker persisted a message on Qa
  bookies, before its receipt
  (the correlated failure that finds a reply sent before its fsync)
* ``partition``  cut two nodes apart (two-way, or one-way) for a while
* ``clock-jump`` step one node's wall clock forwards or backwards
* ``bookie-down`` kill a bookie and keep it down for ``BOOKIE_DOWN_S`` (AutoRecovery's case)
* ``zombie``     (two or more brokers) hang a broker inside its write path, expire its metadata
  session so another broker takes the topic over and recovers its ledger, then release it
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Callable

from magnetar import faults
from magnetar.base.rng import Rng
from magnetar.faults import breaks
from magnetar.sim.history import Op, OpType, Outcome
from magnetar.sim.scenarios import cluster
from magnetar.sim.scenarios.cluster_check import MetadataWatch
from magnetar.sim.world import NodeState

FAULT_KINDS = ("point", "kill", "power-cut", "rack-point", "partition", "clock-jump", "zombie", "bookie-down")
#: How long ``bookie-down`` keeps a bookie away: past its session timeout and an audit, so
#: AutoRecovery finds it gone and copies its fragments elsewhere.
BOOKIE_DOWN_S = 5.0
#: The broker's point after which every bookie of the rack loses power in ``rack-point``: a
#: producer's message acknowledged by Qa bookies, its receipt not yet sent (those replies must
#: not have come before the bookies' fsyncs). A producer's: a cursor's write would not be missed.
RACK_POINT = "broker.after_persist_before_receipt"
RACK_WAIT_S = 2.0
BOOKIE_POINT_PREFIXES = ("bookie.",)
BROKER_POINT_PREFIXES = ("ledger.", "managed_ledger.rollover.", "managed_ledger.cursor.", "broker.after_")
ZOMBIE_POINTS = ("ledger.before_send_next_entry", "ledger.after_reply_before_count")
AUTORECOVERY = "autorecovery"
PARTITION_S_MAX = 2.0
ZOMBIE_HANG_WAIT_S = 2.0
ZOMBIE_HOLD_S = 1.5
CLOCK_JUMPS_MS = (-120_000, -5_000, 5_000, 600_000)
CATCH_UP_S = 30.0


def _uniform(rng: Rng, low: float, high: float) -> float:
    return low + (high - low) * rng.random()


def points_for(name: str) -> list[str]:
    if name == AUTORECOVERY:
        return [p for p in faults.REGISTRY if p.startswith("autorecovery.")]
    prefixes = BOOKIE_POINT_PREFIXES if name.startswith("bookie") else BROKER_POINT_PREFIXES
    return [p for p in faults.REGISTRY if p.startswith(prefixes)]


def servers(opts: cluster.ClusterOptions) -> list[str]:
    """The nodes faults may kill and the supervisor restarts (clients are never killed)."""
    return cluster.bookie_names(opts) + cluster.broker_names(opts) + ([AUTORECOVERY] if opts.autorecovery else [])


async def until(run: cluster.ClusterRun, condition: Callable[[], bool], what: str, limit_s: float = cluster.PHASE_S_MAX,
                *, failure: bool = True) -> bool:
    """Wait (virtual time) for ``condition``; a failure of the run if it does not come in time
    (``failure=False``: the caller reports it)."""
    deadline = run.world.now_s() + limit_s
    while not condition():
        if run.world.now_s() > deadline:
            if failure:
                run.world.failures.append(f"stuck waiting for {what} ({limit_s:.0f} s virtual)")
            run.world.record("controller", "stuck", what)
            return False
        await run.world.sleep(cluster.POLL_S)
    return True


def stop_stuck_producers(run: cluster.ClusterRun, names: list[str]) -> None:
    """The producers that did not finish in time: a liveness failure each, naming the message it
    waited for and what its client did meanwhile. Each is then stopped, its message recorded as
    unknown (stored or not): the drains that follow must still agree on everything else."""
    now_ns = run.now_ns()
    for name in names:
        if name in run.producers_done:
            continue
        sending = run.sending.pop(name, None)
        if sending is None:
            detail = "no send in flight (its producer was never created?)"
            since_ns = 0
        else:
            value, since_ns = sending
            detail = (f"{value} unacknowledged for {(now_ns - since_ns) / 1e9:.1f} s virtual "
                      f"(sent at {since_ns / 1e9:.3f} s)")
            run.history.record(Op(name, OpType.SEND, cluster.TOPIC, value, Outcome.UNKNOWN, None, now_ns,
                                  error="stuck"))
        connects = run.world.trace.count(name, "connect", since_ns)
        run.world.failures.append(f"liveness: producer {name} stuck: {detail}; its client opened {connects} "
                                  f"connections meanwhile")
        run.world.crash(name, "stuck: stopped before the drains")


class _Supervisor:
    """Restarts dead bookies and brokers after a seeded delay; suspends their metadata sessions."""

    def __init__(self, run: cluster.ClusterRun, rng: Rng) -> None:
        self.run = run
        self.rng = rng
        self.restart_at: dict[str, float] = {}
        self.hurry = False

    async def loop(self) -> None:
        world = self.run.world
        names = servers(self.run.options)
        while True:
            for name in names:
                if world.state(name) is NodeState.CRASHED and name not in self.restart_at:
                    self.run.crashes_count += 1
                    self.run.ready.discard(name)
                    for session in self.run.sessions.pop(name, []):
                        self.run.meta.suspend_session(session.session.session_id)
                    self.restart_at[name] = world.now_s() + _uniform(self.rng, 0.05, cluster.RESTART_DELAY_S_MAX)
                due = self.restart_at.get(name)
                if due is not None and (self.hurry or world.now_s() >= due) and name not in self.run.held_down:
                    del self.restart_at[name]
                    world.restart(name)
            await world.sleep(cluster.POLL_S)

    def all_up(self) -> bool:
        names = servers(self.run.options)
        return all(self.run.world.state(n) is NodeState.RUNNING and n in self.run.ready for n in names)


async def _partition(run: cluster.ClusterRun, rng: Rng, nodes: list[str]) -> None:
    a = rng.choice(nodes)
    b = rng.choice([n for n in nodes if n != a])
    symmetric = rng.random() < 0.5
    run.fault("partition", a, detail=f"{'<->' if symmetric else '->'} {b}")
    run.world.network.partition(a, b, symmetric=symmetric)
    await run.world.sleep(_uniform(rng, 0.1, PARTITION_S_MAX))
    run.world.network.heal(a, b)
    if not symmetric:
        run.world.network.heal(b, a)
    run.world.record("controller", "heal", f"{a} {b}")


async def _zombie(run: cluster.ClusterRun, rng: Rng) -> None:
    brokers = cluster.broker_names(run.options)
    victim = rng.choice(brokers)
    point = rng.choice(ZOMBIE_POINTS)
    run.fault("zombie", victim, point)
    faults.arm(point, "hang", node=victim)
    deadline = run.world.now_s() + ZOMBIE_HANG_WAIT_S
    while faults.hits(point) == 0 and run.world.now_s() < deadline:
        await run.world.sleep(cluster.POLL_S)
    if faults.hits(point) > 0:
        for session in list(run.sessions.get(victim, [])):
            if session.session.alive:
                await run.meta.expire_session(session.session.session_id)
        await run.world.sleep(ZOMBIE_HOLD_S)
    run.world.release(point)  # releasing also disarms: later hits pass


async def _rack_power_cut(run: cluster.ClusterRun, rng: Rng) -> None:
    broker = rng.choice(cluster.broker_names(run.options))
    run.fault("arm-rack-power-cut", broker, RACK_POINT)
    faults.arm(RACK_POINT, "delay", delay_ms=0, node=broker)  # counts the hits, changes nothing
    done: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def power_cut() -> None:  # between two loop iterations, right after the hit: nothing ran since
        run.world.release(RACK_POINT)  # disarms it
        run.fault("rack-power-cut", "bookies", RACK_POINT)
        for name in cluster.bookie_names(run.options):
            if run.world.state(name) is NodeState.RUNNING:
                run.world.crash(name, f"rack power cut after {broker} persisted a message")
        done.set_result(None)

    remove = run.world.loop.watch(lambda: faults.hits(RACK_POINT) > 0, power_cut)
    try:
        await asyncio.wait_for(done, RACK_WAIT_S)
    except TimeoutError:
        remove()
        run.world.release(RACK_POINT)


async def _one_fault(run: cluster.ClusterRun, rng: Rng, kind: str) -> None:
    opts = run.options
    world = run.world
    if kind == "point":
        name = rng.choice(servers(opts))
        point = rng.choice(points_for(name))
        run.fault("arm-crash", name, point)
        faults.arm(point, "crash", from_hit=rng.randint(1, 6), node=name)
    elif kind == "kill":
        name = rng.choice(servers(opts))
        if world.state(name) is NodeState.RUNNING:
            run.fault("kill", name)
            world.crash(name, "random kill")
    elif kind == "power-cut":
        run.fault("power-cut", "bookies")
        for name in cluster.bookie_names(opts):
            if world.state(name) is NodeState.RUNNING:
                world.crash(name, "power cut")
    elif kind == "rack-point":
        await _rack_power_cut(run, rng)
    elif kind == "partition":
        # Half the partitions cut a broker from a bookie: the writer's view of its ensemble.
        if rng.random() < 0.5:
            await _partition(run, rng, [rng.choice(cluster.broker_names(opts)), rng.choice(cluster.bookie_names(opts))])
        else:
            await _partition(run, rng, world.nodes())
    elif kind == "clock-jump":
        name = rng.choice(world.nodes())
        delta_ms = rng.choice(CLOCK_JUMPS_MS)
        run.fault("clock-jump", name, detail=f"{delta_ms:+d} ms")
        world.clock(name).jump(delta_ms)
    elif kind == "zombie":
        await _zombie(run, rng)
    elif kind == "bookie-down":
        name = rng.choice(cluster.bookie_names(opts))
        if world.state(name) is NodeState.RUNNING and name not in run.held_down:
            run.fault("bookie-down", name, detail=f"{BOOKIE_DOWN_S:.0f} s")
            run.held_down.add(name)
            world.crash(name, "taken down for a while")
            await world.sleep(BOOKIE_DOWN_S)
            run.held_down.discard(name)


async def _inject(run: cluster.ClusterRun, rng: Rng) -> None:
    opts = run.options
    kinds = [k for k in (opts.fault_kinds or FAULT_KINDS)
             if (k != "zombie" or opts.brokers_count > 1) and (k != "bookie-down" or opts.autorecovery)]
    times = sorted(_uniform(rng, 0.0, opts.fault_window_s) for _ in range(opts.faults_count))
    started = run.world.now_s()
    pending: list[asyncio.Future[None]] = []
    for at in times:
        await run.world.sleep(max(0.0, started + at - run.world.now_s()))
        pending.append(asyncio.ensure_future(_one_fault(run, rng, rng.choice(kinds))))
    for future in pending:
        await future
    await run.world.sleep(max(0.0, started + opts.fault_window_s - run.world.now_s()))


async def start_servers(run: cluster.ClusterRun) -> bool:
    """Start the bookies, then the brokers, each serving before the next kind starts."""
    opts = run.options
    for name in cluster.bookie_names(opts):
        run.world.add_node(name, cluster.bookie_main(run))
    if not await until(run, lambda: all(n in run.ready for n in cluster.bookie_names(opts)), "bookies"):
        return False
    for name in cluster.broker_names(opts):
        run.world.add_node(name, cluster.broker_main(run))
    if opts.autorecovery:
        run.world.add_node(AUTORECOVERY, cluster.autorecovery_main(run))
    return await until(run, lambda: all(n in run.ready for n in cluster.broker_names(opts)), "brokers")


async def controller(run: cluster.ClusterRun, watch: MetadataWatch) -> None:
    world = run.world
    opts = run.options
    rng = world.rng.fork("cluster")
    await watch.run(run.meta)
    await start_servers(run)
    consumers = [(f"c-{kind.name.lower()}", kind) for kind in cluster.SUBSCRIPTION_TYPES]
    for name, kind in consumers:
        world.add_node(name, cluster._consumer_main(run, name, kind))
    await until(run, lambda: all(n in run.ready for n, _ in consumers), "subscriptions")
    run.history.meta["subscriptions"] = [[cluster.TOPIC, f"sub-{k.name.lower()}"] for _, k in consumers]
    producers = [(f"p{i}-dedup", True) for i in range(opts.dedup_producers_count)]
    producers += [(f"p{i + opts.dedup_producers_count}-plain", False) for i in range(opts.plain_producers_count)]
    for name, dedup in producers:
        run.history.add_producer(name, cluster.TOPIC, dedup=dedup)
        world.add_node(name, cluster._producer_main(run, name, dedup))
    supervisor = _Supervisor(run, rng.fork("supervisor"))
    supervising = asyncio.ensure_future(supervisor.loop())
    if opts.faults_count:
        await _inject(run, rng.fork("faults"))
    faults.disarm_all()  # releases every hang; it also turns the breaks off: the run keeps them
    for name in sorted(opts.breaks):
        breaks.enable(breaks.Break(name))
    world.network.heal()
    supervisor.hurry = True
    await until(run, supervisor.all_up, "every bookie and broker back")
    if not await until(run, lambda: len(run.producers_done) == len(producers), "producers",
                        opts.producers_s_max, failure=False):
        stop_stuck_producers(run, [name for name, _ in producers])
    # A final power cut of every server: the drains then read what the bookies made durable, not
    # what a broker still holds in its cache.
    run.fault("final-power-cut", "servers")
    for name in servers(opts):
        if world.state(name) is NodeState.RUNNING:
            world.crash(name, "final power cut")
    await until(run, supervisor.all_up, "every bookie and broker back after the final power cut")
    for name in ("drain-1", "drain-2"):
        world.add_node(name, cluster._drain_main(run, name))
        await until(run, lambda: name in run.drained, name)  # noqa: B023 (awaited in this iteration)
    await watch.poll()
    world.add_node("prober", cluster._prober_main(run, watch))
    await until(run, lambda: run.fencing is not None, "the fencing probe")
    stored = {op.value for op in run.history.snapshot() if op.process == "drain-1"}

    def caught_up() -> bool:
        got: dict[str, set[str]] = {}
        for op in run.history.snapshot():
            if op.subscription:
                got.setdefault(op.subscription, set()).add(op.value)
        return all(stored <= got.get(f"sub-{k.name.lower()}", set()) for _, k in consumers)

    run.history.meta["consumers_waited"] = await until(run, caught_up, "consumers to catch up", CATCH_UP_S)
    run.stop_consumers = True
    supervising.cancel()
    # The trace names every op through the history's digest: same seed, same history, same trace.
    digest = hashlib.sha256(run.history.to_json().encode()).hexdigest()[:16]
    world.record("controller", "history", f"{len(run.history.ops)} ops sha256:{digest}")


__all__ = ["FAULT_KINDS", "controller", "points_for", "start_servers", "stop_stuck_producers", "until"]
