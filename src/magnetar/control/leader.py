"""The load balancer's leader broker, and the bundle commands every broker carries out.

**Election.** Every cluster broker runs a ``LoadBalancerLeader`` candidate: it waits for the
ephemeral lock ``/loadbalance/leader`` (JSON ``{"serviceUrl": http URL, "brokerId"}``, Pulsar's
``LeaderBroker``). One broker holds it at a time; when the holder's session ends (it died, or
was paused beyond the session timeout) the node goes and the next candidate takes it, so a new
leader decides within one session timeout. A leader that loses the lock stops deciding at once.

**Deciding.** Every ``interval_ms`` the leader reads every broker's load report
(``control.load``), the namespaces' bundle counts, and the time each bundle last moved, and calls
the pure ``control.balancer.step`` with the state it keeps between rounds (each bundle's averaged
figures and the shedding latch; a new leader starts a new history and sheds only after
``history_rounds_min`` rounds). Only the leader moves bundles, and it moves them only
through their owners:

* split: a command to the owner, which halves the bundle and keeps both halves (a later round
  may move a half);
* unload: first the assignment ``/loadbalance/assignments/{ns}/{bundle}`` = the chosen target
  (Pulsar's "preallocated" owner: any broker answering a lookup for the free bundle sends the
  client there, and the target acquires it), then a command to the owner, which closes the
  bundle's topics (clients look up again) and releases its lock (``BundleOwnership.unload``).

Commands are sequential nodes ``/loadbalance/commands/{brokerId}/cmd-N`` (JSON ``{"op", "bundle",
"target", "reason", "time"}``) that the owner (``BundleCommands``) watches, carries out (in
order per bundle, distinct bundles concurrently), and deletes. Every decision is logged with its reason and appended to
``/loadbalance/decisions`` (the last ``DECISIONS_KEPT``), from which a new leader learns when
each bundle last moved, so the grace period survives a change of leader. A round is skipped
until the brokers touched by the previous round have published a report newer than it, so one
move is not decided twice from a stale view; and while moves of the last wave are still settling
(a bundle whose unload command its owner has not carried out yet, or released but not yet
reported by its target for two intervals) it only splits, counting those bundles on their
targets. A busy owner may take many seconds per unload: while its command is pending the move
stays in flight however long that takes, so the bundle is not decided again (to another target)
behind the owner's back; the grace period of a bundle counts from when its move settled.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import enum
import json
import logging
from collections.abc import Sequence

from magnetar.base.clock import Clock
from magnetar.base.errors import BadVersionError, InvalidArgumentError, MagnetarError, NotFoundError
from magnetar.control.balancer import (
    BalancerSettings,
    BalancerState,
    BrokerLoad,
    BundleLoad,
    Decision,
    DecisionKind,
    step,
)
from magnetar.control.bundles import BundleRange
from magnetar.control.load import LoadReport
from magnetar.control.ownership import Assignment, BundleOwnership, OwnershipState, assignment_path
from magnetar.metadata.api import MetadataStore, WatchEvent
from magnetar.metadata.lock import LockLostError, LockState, MetadataLock

log = logging.getLogger(__name__)

LEADER_PATH = "/loadbalance/leader"
COMMANDS_ROOT = "/loadbalance/commands"
DECISIONS_PATH = "/loadbalance/decisions"
#: Decisions kept in ``/loadbalance/decisions`` (oldest dropped): what ``cluster status`` shows
#: and what a new leader reads the last moves from.
DECISIONS_KEPT = 200
#: How long a move may stay unsettled (released, not yet reported by its target) before the
#: leader stops waiting for it (plus three shedding intervals); counted from the release, not
#: while the owner's command is still pending.
IN_FLIGHT_MS_MAX = 30_000
#: Commands one broker carries out per wake-up (the rest on the next).
COMMANDS_PER_PASS_MAX = 64
#: Commands (of distinct bundles) one broker carries out at once.
COMMANDS_CONCURRENT_MAX = 8


def _command_bundle(value: bytes) -> str:
    """The bundle a command names ("" if it cannot be read: carried out alone, and ignored)."""
    try:
        return str(json.loads(value)["bundle"])
    except (ValueError, KeyError, TypeError):
        return ""


@dataclasses.dataclass(frozen=True, slots=True)
class LeaderData:
    service_url: str  # the leader's HTTP URL, as Pulsar's LeaderBroker.serviceUrl
    broker_id: str

    def encode(self) -> bytes:
        return json.dumps({"serviceUrl": self.service_url, "brokerId": self.broker_id}).encode()

    @staticmethod
    def decode(value: bytes) -> LeaderData:
        try:
            data = json.loads(value)
            return LeaderData(str(data["serviceUrl"]), str(data.get("brokerId", "")))
        except (ValueError, KeyError, TypeError) as error:
            raise InvalidArgumentError(f"bad leader data: {error}") from None


async def read_leader(store: MetadataStore) -> LeaderData | None:
    found = await store.get(LEADER_PATH)
    return None if found is None else LeaderData.decode(found.value)


def decision_json(d: Decision, time_ms: int, leader: str) -> dict[str, object]:
    return {"time": time_ms, "kind": d.kind.value, "bundle": d.bundle, "from": d.source, "to": d.target,
            "reason": d.reason, "leader": leader}


async def read_decisions(store: MetadataStore) -> list[dict[str, object]]:
    found = await store.get(DECISIONS_PATH)
    if found is None:
        return []
    try:
        decisions = json.loads(found.value)["decisions"]
    except (ValueError, KeyError, TypeError):
        return []
    return [d for d in decisions if isinstance(d, dict)]


def _split_bundle(bundle: str) -> tuple[str, BundleRange]:
    namespace, _, name = bundle.rpartition("/")
    return namespace, BundleRange.parse(name)


async def _upsert(store: MetadataStore, path: str, value: bytes) -> None:
    for _ in range(8):
        found = await store.get(path)
        try:
            await store.put(path, value, -1 if found is None else found.version)
            return
        except BadVersionError:
            continue  # created or changed meanwhile: read again
    raise BadVersionError(f"{path} keeps changing")


@dataclasses.dataclass(slots=True)
class _InFlight:
    target: str
    figures: BundleLoad
    since_ms: int
    seen_ms: int | None = None  # when the target first reported it


class LeaderState(enum.Enum):
    CANDIDATE = "candidate"
    LEADER = "leader"
    STOPPED = "stopped"


class LoadBalancerLeader:
    """A candidate for leader; while leader, decides every ``interval_ms`` (see the module doc)."""

    def __init__(self, store: MetadataStore, ownership: BundleOwnership, clock: Clock, settings: BalancerSettings,
                 *, interval_ms: int, broker_id: str, web_url: str) -> None:
        self._store = store
        self._ownership = ownership
        self._clock = clock
        self.settings = settings
        self.interval_ms = interval_ms
        self.data = LeaderData(web_url, broker_id)
        self.state = LeaderState.CANDIDATE
        self.rounds = 0
        self._last_moved_ms: dict[str, int] = {}
        #: The balancer's history of averaged figures and its hysteresis latch (``balancer.step``).
        self.balancer_state = BalancerState()
        self._last_round: tuple[int, frozenset[str]] | None = None  # (time, brokers touched)
        #: Bundles unloaded and not yet seen in the target's report: (target, figures, time).
        self._in_flight: dict[str, _InFlight] = {}
        self._lock: MetadataLock | None = None
        self.elected = asyncio.Event()  # set once this candidate became leader

    async def run(self) -> None:
        """Campaign; while leader, decide every interval; return when the lock or session is lost."""
        self._lock = lock = MetadataLock(self._store, LEADER_PATH, self.data.encode())
        try:
            await lock.acquire()
        except LockLostError:
            self.state = LeaderState.STOPPED
            return
        self.state = LeaderState.LEADER
        self.elected.set()
        log.warning("load balancer: %s is the leader broker", self.data.broker_id)
        try:
            await self._learn_history()
            while lock.state is LockState.HELD and self._ownership.state is OwnershipState.ACTIVE:
                # First wait: a new leader (or a restarted cluster) lets the brokers report first.
                await _wait_or_lost(self._clock, self.interval_ms / 1000, lock)
                if lock.state is not LockState.HELD or self._ownership.state is not OwnershipState.ACTIVE:
                    break
                try:
                    await self.run_once()
                except MagnetarError as error:  # metadata trouble: the next round tries again
                    log.warning("load balancer round failed: %s", error)
        finally:
            self.state = LeaderState.STOPPED
            await lock.release()

    async def stop(self) -> None:
        if self._lock is not None:
            await self._lock.release()

    @property
    def is_leader(self) -> bool:
        return self.state is LeaderState.LEADER and self._lock is not None and self._lock.state is LockState.HELD

    async def _learn_history(self) -> None:
        left: dict[str, dict[str, int]] = {}
        for d in await read_decisions(self._store):
            bundle, time_ms, source = d.get("bundle"), d.get("time"), d.get("from")
            if d.get("kind") == DecisionKind.UNLOAD.value and isinstance(bundle, str) and isinstance(time_ms, int):
                self._last_moved_ms[bundle] = max(time_ms, self._last_moved_ms.get(bundle, 0))
                if isinstance(source, str):  # where the bundle was: the new leader does not send it back
                    where = left.setdefault(bundle, {})
                    where[source] = max(time_ms, where.get(source, 0))
        self.balancer_state = dataclasses.replace(self.balancer_state, left=left)

    def _fresh(self, reports: Sequence[LoadReport]) -> bool:
        if self._last_round is None:
            return True
        since, touched = self._last_round
        return all(r.last_update_ms > since for r in reports if r.pulsar_service_url in touched)

    async def run_once(self) -> list[Decision]:
        """One round: read the reports, decide, send the commands; returns the decisions."""
        if self._lock is not None and self._lock.state is not LockState.HELD:
            return []  # not (or no longer) the leader
        reports = await self._ownership.loads.all()
        if not self._fresh(reports):
            log.info("load balancer: waiting for fresh load reports before deciding again")
            return []
        now_ms = self._clock.now_ms()
        pending = await self._pending_unloads(reports) if self._in_flight else set()
        loads = self._with_in_flight([r.broker_load() for r in reports], now_ms, pending)
        counts = {}
        for namespace in sorted({b.namespace for load in loads for b in load.bundles}):
            counts[namespace] = len((await self._ownership.current_bundles(namespace)).ranges)
        settings = self.settings
        if self._in_flight:  # one wave of moves at a time: shed again from a settled view
            log.info("load balancer: %d bundle moves settling; splits only this round", len(self._in_flight))
            settings = dataclasses.replace(settings, shedding_enabled=False)
        decisions, self.balancer_state = step(self.balancer_state, loads, self._last_moved_ms, now_ms, settings,
                                              counts)
        if self.balancer_state.hits:
            log.info("load balancer: out of the threshold band for %d consecutive round(s); a wave starts after "
                     "more than %d", self.balancer_state.hits, settings.hit_count_threshold)
        self.rounds += 1
        ids = {r.pulsar_service_url: r.broker_id for r in reports}
        done: list[Decision] = []
        for d in decisions:
            if self._lock is not None and self._lock.state is not LockState.HELD:
                break  # no longer the leader: the new one decides
            namespace, bundle = _split_bundle(d.bundle)
            if d.kind is DecisionKind.UNLOAD and d.target is not None:
                await _upsert(self._store, assignment_path(namespace, bundle),
                              Assignment(d.target, d.source, d.reason, now_ms).encode())
                self._last_moved_ms[d.bundle] = now_ms
                figures = next((b for load in loads for b in load.bundles if b.bundle == d.bundle), None)
                if figures is not None:
                    self._in_flight[d.bundle] = _InFlight(d.target, figures, now_ms)
            command = {"op": d.kind.value, "bundle": d.bundle, "target": d.target, "reason": d.reason,
                       "time": now_ms}
            await self._store.create(f"{COMMANDS_ROOT}/{ids[d.source]}/cmd-", json.dumps(command).encode(),
                                     sequential=True)
            log.info("load balancer: %s %s on %s%s: %s", d.kind.value, d.bundle, d.source,
                     f" -> {d.target}" if d.target else "", d.reason)
            done.append(d)
        if done:
            await self._record(done, now_ms)
            self._last_round = (now_ms, frozenset(u for d in done for u in (d.source, d.target) if u))
        await self._clean_dead(reports)
        return done

    async def _pending_unloads(self, reports: Sequence[LoadReport]) -> set[str]:
        """Bundles with an unload command not yet carried out by their owner (its node remains)."""
        pending: set[str] = set()
        for broker in {r.broker_id for r in reports}:
            path = f"{COMMANDS_ROOT}/{broker}"
            with contextlib.suppress(NotFoundError):
                for child in await self._store.children(path):
                    found = await self._store.get(f"{path}/{child}")
                    if found is None:
                        continue
                    with contextlib.suppress(ValueError, KeyError, TypeError):
                        command = json.loads(found.value)
                        if command["op"] == DecisionKind.UNLOAD.value:
                            pending.add(str(command["bundle"]))
        return pending

    def _with_in_flight(self, loads: list[BrokerLoad], now_ms: int, pending: set[str] | None = None) -> list[BrokerLoad]:
        """The reports with each bundle still moving counted on its target: until the owner has
        carried out the unload (``pending``: it still lists the bundle) and between its release
        and the target's acquisition (when clients look up again, the bundle is in no report),
        deciding without it would shed the same load twice. A move is settled once the target
        has reported the bundle for two intervals (its rates sampled again; its grace period
        starts then), or given up ``IN_FLIGHT_MS_MAX`` plus three intervals after the command was
        carried out (no client came back for it: nobody owns it, which is fine)."""
        pending = pending or set()
        listed = {b.bundle: load.broker for load in loads for b in load.bundles}
        for bundle, move in list(self._in_flight.items()):
            if listed.get(bundle) == move.target:
                if move.seen_ms is None:
                    move.seen_ms = now_ms
                if now_ms - move.seen_ms >= 2 * self.interval_ms:
                    del self._in_flight[bundle]
                    self._last_moved_ms[bundle] = max(now_ms, self._last_moved_ms.get(bundle, 0))
            elif bundle in pending:
                move.since_ms = now_ms  # the owner has not let go yet: the give-up clock waits
            elif now_ms - move.since_ms >= IN_FLIGHT_MS_MAX + 3 * self.interval_ms:
                del self._in_flight[bundle]
        out = []
        for load in loads:
            moving_in = tuple(m.figures for b, m in self._in_flight.items() if m.target == load.broker)
            kept = tuple(b for b in load.bundles if b.bundle not in self._in_flight)
            out.append(BrokerLoad(load.broker, load.cpu_percent, kept + moving_in))
        return out

    async def _record(self, decisions: Sequence[Decision], now_ms: int) -> None:
        for _ in range(8):
            found = await self._store.get(DECISIONS_PATH)
            kept = []
            if found is not None:
                with contextlib.suppress(ValueError, KeyError, TypeError):
                    kept = [d for d in json.loads(found.value)["decisions"] if isinstance(d, dict)]
            kept.extend(decision_json(d, now_ms, self.data.broker_id) for d in decisions)
            value = json.dumps({"decisions": kept[-DECISIONS_KEPT:]}).encode()
            try:
                await self._store.put(DECISIONS_PATH, value, -1 if found is None else found.version)
                return
            except BadVersionError:
                continue

    async def _clean_dead(self, reports: Sequence[LoadReport]) -> None:
        """Commands for brokers that no longer report are never carried out: drop them."""
        alive = {r.broker_id for r in reports}
        for broker in await self._store.children(COMMANDS_ROOT):
            if broker in alive:
                continue
            for child in await self._store.children(f"{COMMANDS_ROOT}/{broker}"):
                with contextlib.suppress(NotFoundError):
                    await self._store.delete(f"{COMMANDS_ROOT}/{broker}/{child}")


async def _wait_or_lost(clock: Clock, duration_s: float, lock: MetadataLock) -> None:
    sleeper = asyncio.ensure_future(clock.sleep(duration_s))
    lost = asyncio.ensure_future(lock.lost.wait())
    try:
        await asyncio.wait({sleeper, lost}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in (sleeper, lost):
            task.cancel()


class BundleCommands:
    """Carries out the leader's commands addressed to this broker (unload, split): in order per
    bundle, distinct bundles concurrently (``run_once``)."""

    def __init__(self, store: MetadataStore, ownership: BundleOwnership, clock: Clock, *, poll_ms: int) -> None:
        self._store = store
        self._ownership = ownership
        self._clock = clock
        self._poll_ms = poll_ms
        self.path = f"{COMMANDS_ROOT}/{ownership.loads.broker_id}"
        self._wake = asyncio.Event()
        self.done_count = 0

    async def run(self) -> None:
        def wake(_event: WatchEvent) -> None:
            self._wake.set()

        watch = await self._store.watch(self.path, wake)
        try:
            while self._ownership.state is OwnershipState.ACTIVE:
                self._wake.clear()
                try:
                    await self.run_once()
                except MagnetarError as error:
                    log.warning("bundle commands: %s", error)
                sleeper = asyncio.ensure_future(self._clock.sleep(self._poll_ms / 1000))
                woken = asyncio.ensure_future(self._wake.wait())
                try:
                    await asyncio.wait({sleeper, woken}, return_when=asyncio.FIRST_COMPLETED)
                finally:
                    for task in (sleeper, woken):
                        task.cancel()
        finally:
            watch.cancel()

    async def run_once(self) -> int:
        """Carry out the pending commands; returns how many were handled. The commands of one
        bundle run in order (oldest first); those of distinct bundles run concurrently, at most
        ``COMMANDS_CONCURRENT_MAX`` at once: a busy owner closing one bundle's topics after
        another took tens of seconds per unload, and a wave of moves waited for the slowest."""
        chains: dict[str, list[tuple[str, bytes]]] = {}
        for child in (await self._store.children(self.path))[:COMMANDS_PER_PASS_MAX]:
            found = await self._store.get(f"{self.path}/{child}")
            if found is None:
                continue
            chains.setdefault(_command_bundle(found.value), []).append((child, found.value))
        gate = asyncio.Semaphore(COMMANDS_CONCURRENT_MAX)

        async def run_chain(commands: list[tuple[str, bytes]]) -> None:
            async with gate:
                for child, value in commands:
                    await self._carry_out(child, value)

        await asyncio.gather(*(run_chain(commands) for commands in chains.values()))
        return sum(len(commands) for commands in chains.values())

    async def _carry_out(self, child: str, value: bytes) -> None:
        try:
            await self._execute(json.loads(value))
        except (ValueError, KeyError, TypeError) as error:
            log.warning("bundle command %s ignored: %s", child, error)
        except MagnetarError as error:  # not owned any more, split meanwhile: nothing to do
            log.info("bundle command %s not carried out: %s", child, error)
        with contextlib.suppress(NotFoundError):
            await self._store.delete(f"{self.path}/{child}")
        self.done_count += 1

    async def _execute(self, command: dict[str, object]) -> None:
        op, bundle = str(command["op"]), str(command["bundle"])
        namespace, rng = _split_bundle(bundle)
        if not self._ownership.owns(namespace, rng.name):
            log.info("bundle command %s %s: not owned here", op, bundle)
            return
        started_ns = self._clock.monotonic_ns()
        if op == DecisionKind.UNLOAD.value:
            target = command.get("target")
            await self._ownership.unload(namespace, rng.name, target=target if isinstance(target, str) else None)
        elif op == DecisionKind.SPLIT.value:
            await self._ownership.split(namespace, rng.name)
        else:
            raise InvalidArgumentError(f"unknown bundle command {op!r}")
        log.info("load balancer command: %s %s done in %.1f ms (%s)", op, bundle,
                 (self._clock.monotonic_ns() - started_ns) / 1e6, command.get("reason", ""))


__all__ = [
    "COMMANDS_CONCURRENT_MAX",
    "COMMANDS_ROOT",
    "DECISIONS_PATH",
    "LEADER_PATH",
    "BundleCommands",
    "LeaderData",
    "LeaderState",
    "LoadBalancerLeader",
    "decision_json",
    "read_decisions",
    "read_leader",
]
