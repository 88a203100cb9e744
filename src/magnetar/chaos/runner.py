"""One chaos run: start the target, run the workload, inject the schedule, drain, check.

Order: start every process; start consumers, then producers; let traffic flow ``settle_s``; for
each step of the schedule inject it (``chaos.faults``) and let traffic flow ``settle_s`` again;
restart whatever is down; stop the producers (each waits for its sends in flight); drain every
topic (``drain-1``); give the consumers ``consumer_wait_s`` to receive everything drained; drain
again (``drain-2``); stop everything by PID; check the history.

The run is bounded: ``run_s_max`` for the injections (later steps are skipped and the history
says so), the workload's message count, and a timeout on every wait. The target is always
stopped, also when the run fails.
"""

from __future__ import annotations

import os
import random
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from magnetar.base.errors import InvalidArgumentError
from magnetar.base.limits import CHAOS_RUN_S_MAX
from magnetar.chaos import faults as schedule
from magnetar.chaos.report import write_outputs
from magnetar.chaos.target import ChaosCluster, ChaosProcess, StandaloneTarget, owner_broker
from magnetar.chaos.workload import Workload, WorkloadConfig
from magnetar.faults import breaks
from magnetar.sim.checker import CheckResult, check
from magnetar.sim.history import FaultEvent, History

FAULTS_ENV = "MAGNETAR_FAULTS"
REPORT_ENV = "MAGNETAR_FAULTS_REPORT"
POLL_S = 0.05
RESTART_ATTEMPTS_MAX = 3


@dataclass(frozen=True)
class RunConfig:
    scenario: str = "smoke"
    out_dir: Path = Path("chaos-out")
    injections: int = 10
    seed: int = 1
    breaks: tuple[str, ...] = ()
    target: str = "standalone"  # or "cluster" (runtime.cluster.LocalCluster)
    bookies: int = 3
    brokers: int = 2
    topics: int = 1
    settle_s: float = 2.0
    hit_timeout_s: float = 15.0
    drain_timeout_s: float = 60.0
    consumer_wait_s: float = 30.0
    run_s_max: float = 3600.0
    messages_per_producer: int = 100_000
    send_interval_s: float = 0.0

    def __post_init__(self) -> None:
        if not 0 < self.run_s_max <= CHAOS_RUN_S_MAX:
            raise InvalidArgumentError(f"run_s_max must be 0 < s <= {CHAOS_RUN_S_MAX}")
        breaks.parse(",".join(self.breaks))  # refuse unknown names before anything starts
        if self.target not in ("standalone", "cluster"):
            raise InvalidArgumentError(f"target must be standalone or cluster, got {self.target!r}")


@dataclass
class RunOutcome:
    history: History
    result: CheckResult
    steps_done: int
    reached: dict[str, int] = field(default_factory=dict)  # point -> steps that reached it
    not_reached: dict[str, int] = field(default_factory=dict)


#: The brokers of a chaos target run with deduplication on (off by default, as in Pulsar): the run
#: checks "no duplicates after producer retries" (docs/faults.md invariant 8), which holds with it on.
#: The ``no-dedup`` break turns it off again whatever this says (its negative control).
BROKER_DEDUP_ENV = {"MAGNETAR_BROKER_DEDUPLICATION": "true"}


def make_target(config: RunConfig, base_dir: Path, env: dict[str, str]) -> ChaosCluster:
    if config.target == "standalone":
        return StandaloneTarget(base_dir, env={**env, **BROKER_DEDUP_ENV})
    from magnetar.runtime.cluster import LocalCluster  # built by the cluster work (issue 8 part A)

    names = ["zookeeper"] + [f"bookie-{i}" for i in range(config.bookies)] + [f"broker-{i}" for i in range(config.brokers)]
    cluster: ChaosCluster = LocalCluster(base_dir, bookies=config.bookies, brokers=config.brokers, ensemble=(3, 3, 2),
                                         env={name: {**env, **(BROKER_DEDUP_ENV if name.startswith("broker-") else {})}
                                              for name in names})
    return cluster


class Runner:
    def __init__(self, config: RunConfig, on_event: Callable[[str], None] | None = None,
                 on_progress: Callable[[int, int], None] | None = None) -> None:
        self.config = config
        self.on_event = on_event or (lambda _text: None)
        self.on_progress = on_progress or (lambda _done, _total: None)
        self.rng = random.Random(config.seed ^ 0x5EED)
        self.break_env = {breaks.ENV_VAR: ",".join(config.breaks)} if config.breaks else {}
        self.history = History(meta={
            "scenario": config.scenario, "seed": config.seed, "breaks": list(config.breaks),
            "target": config.target, "injections": config.injections,
        })
        self.cluster: ChaosCluster | None = None
        self.workload: Workload | None = None
        self.outcome_reached: dict[str, int] = {}
        self.outcome_not_reached: dict[str, int] = {}
        self._step_index = 0

    # --- the run ---------------------------------------------------------------------------------

    def run(self) -> RunOutcome:
        config = self.config
        steps = schedule.build(config.scenario, seed=config.seed, injections=config.injections)
        config.out_dir.mkdir(parents=True, exist_ok=True)
        self.cluster = make_target(config, config.out_dir / "cluster", self.break_env)
        started = time.monotonic()
        done = 0
        try:
            self.on_event(f"starting {config.target}")
            self.cluster.start()
            topics = tuple(f"persistent://public/default/chaos-{config.seed}-{i}" for i in range(config.topics))
            self.workload = Workload(self.cluster.service_url(), WorkloadConfig(
                topics=topics, messages_per_producer=config.messages_per_producer,
                send_interval_s=config.send_interval_s), self.history)
            self.workload.start(deadline=time.monotonic() + config.run_s_max + 600)
            self._settle()
            for index, step in enumerate(steps):
                if time.monotonic() - started > config.run_s_max:
                    self.history.meta["stopped_early"] = f"run_s_max reached after {done} of {len(steps)} steps"
                    break
                self._step_index = index
                self.on_event(f"[{index + 1}/{len(steps)}] {step.describe()}")
                self._inject(step)
                done += 1
                self.on_progress(done, len(steps))
                self._settle()
            self._restart_dead()
            self._settle()
            self._finish()
        finally:
            if self.workload is not None:
                self.workload.close()
            self.cluster.stop()
        self.history.meta["steps_done"] = done
        self.history.meta["steps_planned"] = len(steps)
        self.history.meta["workload_errors"] = list(self.workload.errors) if self.workload else []
        self.history.meta["points_reached"] = dict(self.outcome_reached)
        self.history.meta["points_not_reached"] = dict(self.outcome_not_reached)
        result = check(self.history)
        write_outputs(config.out_dir, self.history, result)
        return RunOutcome(self.history, result, done, dict(self.outcome_reached), dict(self.outcome_not_reached))

    def _finish(self) -> None:
        assert self.workload is not None
        self.on_event("stopping producers")
        self.workload.stop_producers(timeout_s=120)
        self.on_event("drain 1")
        stored = self.workload.drain("drain-1", self.config.drain_timeout_s)
        self.on_event(f"drained {sum(len(v) for v in stored.values())} messages; waiting for consumers")
        caught_up = self.workload.wait_for_consumers(stored, self.config.consumer_wait_s)
        self.on_event(f"consumers caught up: {caught_up}; drain 2")
        self.workload.drain("drain-2", self.config.drain_timeout_s)

    def _settle(self) -> None:
        time.sleep(self.config.settle_s)

    def _now_ns(self) -> int:
        return self.workload.clock.now_ns() if self.workload is not None else 0

    def _event(self, kind: str, process: str, point: str = "", detail: str = "") -> None:
        self.history.record_fault(FaultEvent(self._now_ns(), kind, process, point, detail))

    # --- resolving roles -----------------------------------------------------------------------

    def _names(self) -> list[str]:
        assert self.cluster is not None
        return list(self.cluster.processes)

    def _resolve(self, role: str, avoid: str = "") -> str | None:
        names = self._names()
        if "standalone" in names:
            return "standalone"
        bookies = [n for n in names if n.startswith("bookie-")]
        brokers = [n for n in names if n.startswith("broker-")]
        if role == schedule.BOOKIE:
            return self.rng.choice(bookies) if bookies else None
        if role == schedule.BROKER:
            return self._owner(brokers)
        if role == schedule.OTHER_BROKER:
            others = [b for b in brokers if b != avoid]
            return self.rng.choice(others) if others else None
        if role == schedule.ANY:
            return self.rng.choice(names)
        return role if role in names else None

    def _owner(self, brokers: list[str]) -> str | None:
        assert self.cluster is not None
        owner = owner_broker(self.cluster)
        if owner in brokers:
            return owner
        return self.rng.choice(brokers) if brokers else None  # no owner yet: any broker will do

    def _process(self, name: str) -> ChaosProcess:
        assert self.cluster is not None
        return self.cluster.processes[name]

    # --- injecting ---------------------------------------------------------------------------

    def _inject(self, step: schedule.Step) -> None:
        if step.kind is schedule.StepKind.ARM_HANG_KILL:
            self._arm_hang_kill(step)
            return
        name = self._resolve(step.process)
        if name is None:
            self._event(step.kind.value, step.process, detail="no such process in this target")
            return
        proc = self._process(name)
        if step.kind is schedule.StepKind.KILL:
            proc.kill(signal.SIGKILL)
            self._event("kill", name, detail=f"down {step.hold_s:g}s")
            time.sleep(step.hold_s)
            self._restart(name)
        else:
            proc.pause()
            self._event("pause", name, detail=f"SIGSTOP {step.hold_s:g}s")
            paused_at = time.monotonic()
            self._take_over(name, step.hold_s)
            time.sleep(max(0.0, step.hold_s - (time.monotonic() - paused_at)))
            proc.resume()
            self._event("resume", name)

    def _take_over(self, paused: str, hold_s: float) -> None:
        """While a broker is paused past its session, make another broker load the topics (a
        reader through it: the new owner fences and recovers the old owner's ledgers), so that
        the paused one returns as a zombie. The workload's own clients do not notice a paused
        peer (its TCP connections stay open) and would never move the topics."""
        assert self.cluster is not None and self.workload is not None
        session_s = getattr(self.cluster, "session_timeout_ms", None)
        others = [n for n in self._names() if n.startswith("broker-") and n != paused]
        if session_s is None or not others or not paused.startswith("broker-"):
            return
        wait_s = session_s / 1000 + 1.0
        if wait_s >= hold_s:
            return  # too short a pause to lose the session: no takeover
        time.sleep(wait_s)
        port = getattr(self._process(others[0]), "port", None)
        if port is None:
            return
        loaded = self.workload.touch(f"pulsar://127.0.0.1:{port}", timeout_s=hold_s - wait_s)
        self._event("takeover", others[0], detail=f"topics loaded through it: {loaded}")

    def _arm_hang_kill(self, step: schedule.Step) -> None:
        trigger = self._resolve(step.trigger) if step.trigger else None
        name = self._resolve(step.process, avoid=trigger or "")
        if name is None:
            self._event("arm-hang-kill", step.process, step.point, "no such process in this target")
            self.outcome_not_reached[step.point] = self.outcome_not_reached.get(step.point, 0) + 1
            return
        report = self.config.out_dir / "fault-reports" / f"step-{self._step_index:04d}.log"
        report.parent.mkdir(parents=True, exist_ok=True)
        env = dict(self.break_env)
        env[FAULTS_ENV] = f"{step.point}:hang@{step.hit}"
        env[REPORT_ENV] = str(report)
        # The restart may itself hang (a point reached while starting): run it aside.
        restart = threading.Thread(target=self._quiet_restart, args=(name, env), daemon=True)
        restart.start()
        if trigger is not None and trigger != name:
            restart.join(60)
            self._process(trigger).kill(signal.SIGKILL)
            self._event("kill", trigger, detail="trigger: the armed process must take over")
        pid = self._wait_for_hit(report, step.point, restart)
        reached = pid is not None
        detail = f"hang@{step.hit} reached" if reached else f"hang@{step.hit} not reached within {self.config.hit_timeout_s:g}s"
        self._event("arm-hang-kill", name, step.point, detail)
        key = step.point
        if pid is not None:
            self.outcome_reached[key] = self.outcome_reached.get(key, 0) + 1
            time.sleep(step.hold_s)  # hung there while the rest of the system reacts
            self._kill_pid(pid)
        else:
            self.outcome_not_reached[key] = self.outcome_not_reached.get(key, 0) + 1
        restart.join(90)
        self._process(name).kill(signal.SIGKILL)
        for extra in step.also_kill:
            other = self._resolve(extra)
            if other is not None and other != name and self._process(other).alive():
                self._process(other).kill(signal.SIGKILL)
                self._event("kill", other, detail="dies with the hung node")
        self._restart_dead()
        self.on_event(f"  {detail}")

    def _quiet_restart(self, name: str, env: dict[str, str]) -> None:
        try:
            self._process(name).restart(env=env)
        except Exception as exc:  # e.g. killed at a point reached while starting
            self.on_event(f"  armed restart of {name} ended: {str(exc)[:200]}")

    def _wait_for_hit(self, report: Path, point: str, restart: threading.Thread) -> int | None:
        """The pid that reported the hang at ``point``, or None once ``hit_timeout_s`` passed
        (counted from the end of the armed restart)."""
        needle = f"at {point} hit="
        deadline: float | None = None
        while True:
            if report.exists():
                for line in report.read_text().splitlines():
                    if needle in line and "pid=" in line:
                        return int(line.rsplit("pid=", 1)[1])
            if deadline is None and not restart.is_alive():
                deadline = time.monotonic() + self.config.hit_timeout_s
            if deadline is not None and time.monotonic() >= deadline:
                return None
            time.sleep(POLL_S)

    def _kill_pid(self, pid: int) -> None:
        """SIGKILL the incarnation that reported the hang (a child this run started)."""
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    def _restart(self, name: str) -> None:
        for attempt in range(1, RESTART_ATTEMPTS_MAX + 1):
            try:
                self._process(name).restart(env=dict(self.break_env))
                self._event("restart", name)
                return
            except Exception as exc:
                self._event("restart-failed", name, detail=f"attempt {attempt}: {str(exc)[:300]}")
                self.on_event(f"  restart of {name} failed: {str(exc)[:200]}")
        raise RuntimeError(f"{name} did not restart after {RESTART_ATTEMPTS_MAX} attempts")

    def _restart_dead(self) -> None:
        # ZooKeeper first, then bookies, then brokers: each needs the ones before.
        for name in sorted(self._names(), key=_start_order):
            if not self._process(name).alive():
                self._restart(name)


def _start_order(name: str) -> tuple[int, str]:
    for rank, prefix in enumerate(("zookeeper", "bookie-", "standalone", "broker-", "autorecovery")):
        if name.startswith(prefix):
            return rank, name
    return 9, name
