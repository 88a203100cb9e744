"""Fault schedules: which fault is injected into which process, in what order (pure, seeded).

A schedule is a list of ``Step``. Kinds (``StepKind``):

* ``arm-hang-kill``  the seed's method: restart ``process`` with ``MAGNETAR_FAULTS=point:hang@N``,
  wait until its ``MAGNETAR_FAULTS_REPORT`` shows the hit (or ``hit_timeout_s`` passes: then the
  step is recorded as not reached), optionally kill -9 ``trigger`` first so that the armed
  process is the one that must take over (recovery points), hold the hang ``hold_s``, kill -9
  the hung process (and ``also_kill``), restart everything clean.
* ``kill``           kill -9 ``process`` and restart it after ``hold_s``.
* ``pause``          SIGSTOP ``process`` for ``hold_s`` (long enough to lose its metadata session:
  a zombie owner), then SIGCONT.

Process names may be roles the runner resolves when the step runs: ``@bookie`` (a random
bookie), ``@broker`` (the owner of the workload's topic, else a random broker), ``@other-broker``
(a broker that is not the owner), ``@any`` (any process). On a ``StandaloneTarget`` every role is
the one ``standalone`` process.

Scenarios (``SCENARIOS``): ``seed-matrix`` (C1-C5 x which node dies x the S transition, as
``docs/faults.md`` maps them), ``every-point`` (one arm-hang-kill per registered fault
point), ``random`` (N seeded injections of every kind), ``smoke`` (a few, for CI), ``zombie``
(the owner broker SIGSTOPped past its session, twice).
"""

from __future__ import annotations

import enum
import random
from dataclasses import dataclass

from magnetar.base.errors import InvalidArgumentError, LimitExceededError
from magnetar.base.limits import CHAOS_INJECTIONS_COUNT_MAX
from magnetar.faults import REGISTRY

BOOKIE = "@bookie"
BROKER = "@broker"
OTHER_BROKER = "@other-broker"
ANY = "@any"
AUTORECOVERY = "autorecovery"
ROLES = (BOOKIE, BROKER, OTHER_BROKER, ANY)


class StepKind(enum.Enum):
    ARM_HANG_KILL = "arm-hang-kill"
    KILL = "kill"
    PAUSE = "pause"


@dataclass(frozen=True, slots=True)
class Step:
    kind: StepKind
    process: str
    point: str = ""
    hit: int = 1
    hold_s: float = 1.0
    trigger: str = ""  # killed (-9) after arming, so that ``process`` is the one reaching the point
    also_kill: tuple[str, ...] = ()
    label: str = ""

    def describe(self) -> str:
        if self.kind is StepKind.ARM_HANG_KILL:
            extra = f" after kill -9 {self.trigger}" if self.trigger else ""
            also = f" +kill {','.join(self.also_kill)}" if self.also_kill else ""
            return f"{self.label or 'arm'}: {self.process} {self.point}:hang@{self.hit}{extra}{also}"
        return f"{self.label or self.kind.value}: {self.kind.value} {self.process} for {self.hold_s:g}s"


#: Points reached on every add (or every few): hang from a random hit among the first dozens.
FREQUENT_POINTS = frozenset({
    "ledger.before_send", "ledger.after_send_before_reply", "ledger.after_reply_before_count",
    "ledger.after_quorum_before_ack", "ledger.before_send_next_entry",
    "bookie.before_journal_append", "bookie.after_write_before_fsync", "bookie.after_fsync_before_reply",
    "bookie.after_reply", "bookie.journal.mid_write",
    "broker.after_persist_before_receipt", "broker.after_receipt",
    "metadata.embedded.after_write_before_reply",
})
FREQUENT_HIT_MAX = 40


def role_of(point: str) -> str:
    """Which process a point lives in, as a role."""
    if point.startswith("bookie."):
        return BOOKIE
    if point.startswith("autorecovery."):
        return AUTORECOVERY
    if point.startswith("metadata.embedded."):
        return ANY  # only a process with the embedded store (standalone) reaches it
    return BROKER


def arm_step(point: str, rng: random.Random, *, label: str = "", hit: int | None = None,
             process: str | None = None, also_kill: tuple[str, ...] = ()) -> Step:
    if point not in REGISTRY:
        raise InvalidArgumentError(f"unknown fault point {point!r}")
    if hit is None:
        hit = rng.randint(2, FREQUENT_HIT_MAX) if point in FREQUENT_POINTS else 1
    if point.startswith("ledger.recovery."):
        # Recovery runs in the broker that takes a dead owner's topics over (or in a restarted
        # standalone): arm it, then kill the owner.
        return Step(StepKind.ARM_HANG_KILL, process or OTHER_BROKER, point, hit, trigger=BROKER,
                    also_kill=also_kill, label=label or point)
    return Step(StepKind.ARM_HANG_KILL, process or role_of(point), point, hit, also_kill=also_kill,
                label=label or point)


def seed_matrix(rng: random.Random) -> list[Step]:
    """The seed's C1-C5 crash timings on our write path, for each node that can die, plus S.

    C1/C2: bookie.after_fsync_before_reply (bookie dies) and ledger.after_reply_before_count
    (writer dies); C3: ledger.before_send_next_entry; C4: bookie.before_journal_append; C5:
    bookie.after_fsync_before_reply on the next entry. "Which node dies": the hung node itself,
    or the hung bookie together with the broker (writer) that was waiting for it. S: the broker
    owner is killed at the writer-side timing, its topic moves, the old owner restarts (as a
    follower: it no longer owns the topic) — every broker-side step ends that way.
    """
    steps: list[Step] = []
    first = rng.randint(3, FREQUENT_HIT_MAX)
    cells = [
        ("C1/C2", "bookie.after_fsync_before_reply", first),
        ("C1/C2", "ledger.after_reply_before_count", first),
        ("C3", "ledger.before_send_next_entry", first),
        ("C4", "bookie.before_journal_append", first),
        ("C5", "bookie.after_fsync_before_reply", first + 1),
    ]
    for timing, point, hit in cells:
        steps.append(arm_step(point, rng, hit=hit, label=f"{timing} {role_of(point)[1:]} dies"))
        if point.startswith("bookie."):
            steps.append(arm_step(point, rng, hit=hit, also_kill=(BROKER,), label=f"{timing} bookie+broker die"))
    for timing, point in (("S/C1", "ledger.after_reply_before_count"), ("S/C3", "ledger.before_send_next_entry"),
                          ("S/receipt", "broker.after_persist_before_receipt")):
        steps.append(arm_step(point, rng, process=BROKER, label=f"{timing} owner dies, returns as follower"))
    steps.append(Step(StepKind.PAUSE, BROKER, hold_s=12.0, label="S/zombie owner paused past its session"))
    return steps


def every_point(rng: random.Random) -> list[Step]:
    return [arm_step(point, rng) for point in REGISTRY]


def random_steps(rng: random.Random, count: int) -> list[Step]:
    points = list(REGISTRY)
    steps: list[Step] = []
    for _ in range(count):
        kind = rng.choices((StepKind.ARM_HANG_KILL, StepKind.KILL, StepKind.PAUSE), weights=(5, 3, 1))[0]
        if kind is StepKind.ARM_HANG_KILL:
            steps.append(arm_step(rng.choice(points), rng))
        elif kind is StepKind.KILL:
            steps.append(Step(StepKind.KILL, ANY, hold_s=round(rng.uniform(0.0, 2.0), 2)))
        else:
            steps.append(Step(StepKind.PAUSE, rng.choice((BROKER, BOOKIE)), hold_s=round(rng.uniform(1.0, 12.0), 1)))
    return steps


def smoke(rng: random.Random) -> list[Step]:
    return [
        # C4: an add received, nothing stored. Correct bookies have not answered; with the
        # ack-before-fsync break they have, and with truncate-to-lac recovery drops the tail.
        arm_step("bookie.before_journal_append", rng, label="C4 smoke"),
        Step(StepKind.KILL, ANY, hold_s=0.5, label="kill smoke"),
        Step(StepKind.PAUSE, BROKER, hold_s=2.0, label="pause smoke"),
    ]


def lac_tail(rng: random.Random) -> list[Step]:
    """C3 twice: the writer hangs before the add that would carry the previous entry's LAC to
    the bookies, then dies. The last acknowledged entries are on the bookies but beyond every
    LAC they hold, so only recovery that reads forward keeps them (the truncate-to-lac control)."""
    return [arm_step("ledger.before_send_next_entry", rng, hit=hit, process=BROKER, label=f"C3 lac tail {hit}")
            for hit in (rng.randint(20, FREQUENT_HIT_MAX), rng.randint(20, FREQUENT_HIT_MAX))]


def zombie(rng: random.Random) -> list[Step]:
    """The owner broker paused past its metadata session twice: another broker takes the topic
    over (fencing the old owner's ledger) while the paused one still holds client connections."""
    return [Step(StepKind.PAUSE, BROKER, hold_s=12.0, label=f"zombie owner {i + 1}") for i in range(2)]


SCENARIOS = {
    "seed-matrix": "the seed's C1-C5 x which node dies x S (old owner returns as follower)",
    "every-point": "one arm-hang-kill at every fault point in the registry",
    "random": "N seeded injections: arm-hang-kill at random points, kill -9, SIGSTOP",
    "smoke": "three injections (CI)",
    "zombie": "the owner broker paused past its session, twice (needs --target cluster)",
    "lac-tail": "the writer dies before its next add carries the LAC, twice (truncate-to-lac control)",
}


def build(scenario: str, *, seed: int, injections: int = 0) -> list[Step]:
    if injections > CHAOS_INJECTIONS_COUNT_MAX:
        raise LimitExceededError("CHAOS_INJECTIONS_COUNT_MAX", injections, CHAOS_INJECTIONS_COUNT_MAX)
    rng = random.Random(seed)
    if scenario == "seed-matrix":
        steps = seed_matrix(rng)
    elif scenario == "every-point":
        steps = every_point(rng)
    elif scenario == "random":
        steps = random_steps(rng, injections)
    elif scenario == "smoke":
        steps = smoke(rng)
    elif scenario == "zombie":
        steps = zombie(rng)
    elif scenario == "lac-tail":
        steps = lac_tail(rng)
    else:
        raise InvalidArgumentError(f"unknown scenario {scenario!r}; known: {', '.join(SCENARIOS)}")
    if len(steps) > CHAOS_INJECTIONS_COUNT_MAX:
        raise LimitExceededError("CHAOS_INJECTIONS_COUNT_MAX", len(steps), CHAOS_INJECTIONS_COUNT_MAX)
    return steps


def covered_points(steps: list[Step]) -> set[str]:
    return {step.point for step in steps if step.point}
