"""The load balancer's decision: a pure function of the brokers' load reports (and its own history).

``step(state, brokers, last_moved_ms, now_ms, settings)`` folds the reports into the averaged
history and returns the decisions with the next state; ``decide(brokers, last_moved_ms, now_ms,
settings)``, the stateless core it calls on the averaged figures, returns the bundles to split and the bundles
to unload from one broker so that another acquires them (``Decision``), each with its reason.
The leader broker (``control.leader``) feeds it the reports it reads and carries the decisions out;
nothing here reads a clock or the store, so the same inputs always give the same decisions.

**Load score.** Each broker has a load vector over five dimensions — CPU percent, bandwidth
(bytes/s in + out), message rate (in + out), topics, sessions (producers + consumers) — the sum of
its bundles' figures (a bundle's CPU is its broker's CPU times the bundle's share of the
broker's message rate, or of its topics when idle). A dimension counts when its weight is above
0 and its cluster average reaches a noise floor (``FLOORS``). A broker's *score* is the largest
weighted ratio of its value to the cluster average, so 1.0 is "average" everywhere.

**Averaging** (``step``, ``average``; Pulsar's ``loadBalancerHistoryResourcePercentage``, 0.9).
A saturated broker's rate figures swing from one report to the next, and a decision on one
report chases the swing (moves after balance, bundles sent back once their grace period ends).
So the leader decides on averaged figures: each bundle's CPU share, bandwidth and message rate
are an exponentially weighted average over the reports, ``avg = f * avg + (1 - f) * new``,
normalised by the weight so far so the first reports give their plain mean. Pulsar's
ThresholdShedder keeps this history per broker; here it is per bundle, so it follows a bundle
that moves (the move shows at once on both brokers instead of fading in over ten reports, which
would make the leader shed the same load again), and a split's halves inherit their parent's.
The history is explicit state (``BalancerState``) passed in and returned: ``step`` stays pure.

**Shedding** (Pulsar's ThresholdShedder and UniformLoadShedder, on one scale), with hysteresis:
with ``hi = 1 + threshold%`` and ``lo = 1 - threshold%``, a wave of moves *starts* when some broker
is above ``hi`` (or above the CPU overload threshold) or some broker is below ``lo``, and once
started it *goes on* (within the round, and in the next rounds while ``BalancerState.shedding``
is latched) until every broker is within the inner band ``1 +- (threshold - margin)%`` or no move
is possible (Pulsar's ThresholdShedder likewise sheds a 5% margin beyond its threshold). So a
balanced cluster sits well inside the band that would start a wave, and noise must exceed the
margin to start one. Each move goes from the highest-scoring broker to another when, after the
move, the source's score is lower, (a) the target's score is at most ``hi``
and its CPU below the overload threshold, and (b) the target's score is at most the source's new
score (the move never crosses: both end up within the old [target, source] interval, so the
cluster's highest score never rises and its lowest never falls). Among such moves take the one
with the lowest resulting pair maximum (then the lowest target score). A bundle moved within the grace period, a bundle just
chosen for a split, and a bundle with no measured load are never moved. At most
``unloads_per_cycle_max`` moves per call, one per bundle.

**Splits.** A bundle above any of the four maxima (topics, sessions, msg rate, bandwidth) with at
least two topics is split, while its namespace has fewer than ``namespace_bundles_max`` bundles
(counting the splits decided in this call), at most ``splits_per_cycle_max`` per call.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from magnetar.base.errors import InvalidArgumentError
from magnetar.broker.config import BrokerConfig
from magnetar.control.bundles import BundleRange

#: The Pulsar configuration key of each ``BrokerConfig`` load-balancer field, with the factor
#: that turns the Pulsar value into ours (minutes -> ms, Mbytes -> bytes). A ``--pulsar-conf``
#: reader sets ``field = value * factor`` (booleans and percentages as they are).
PULSAR_KEYS: dict[str, tuple[str, float]] = {
    "loadBalancerEnabled": ("load_balancer_enabled", 1),
    "loadBalancerSheddingEnabled": ("load_balancer_shedding_enabled", 1),
    "loadBalancerSheddingIntervalMinutes": ("load_balancer_shedding_interval_ms", 60_000),
    "loadBalancerSheddingGracePeriodMinutes": ("load_balancer_shedding_grace_period_ms", 60_000),
    "loadBalancerBrokerOverloadedThresholdPercentage": ("load_balancer_broker_overloaded_threshold_percent", 1),
    "loadBalancerBrokerThresholdShedderPercentage": ("load_balancer_broker_threshold_percent", 1),
    "loadBalancerAutoBundleSplitEnabled": ("load_balancer_auto_bundle_split_enabled", 1),
    "loadBalancerNamespaceBundleMaxTopics": ("load_balancer_namespace_bundle_topics_max", 1),
    "loadBalancerNamespaceBundleMaxSessions": ("load_balancer_namespace_bundle_sessions_max", 1),
    "loadBalancerNamespaceBundleMaxMsgRate": ("load_balancer_namespace_bundle_msg_rate_max", 1),
    "loadBalancerNamespaceBundleMaxBandwidthMbytes": ("load_balancer_namespace_bundle_bandwidth_bytes_max",
                                                      1024 * 1024),
    "loadBalancerNamespaceMaximumBundles": ("load_balancer_namespace_bundles_max", 1),
    "namespaceBundleUnloadingTimeoutMs": ("namespace_bundle_unloading_timeout_ms", 1),
    "loadBalancerMaxNumberOfBundlesToSplitPerCycle": ("load_balancer_bundle_splits_per_cycle_max", 1),
    "loadBalancerCPUResourceWeight": ("load_balancer_cpu_weight", 1),
    "loadBalancerBandwithInResourceWeight": ("load_balancer_bandwidth_weight", 1),
    "loadBalancerBandwithOutResourceWeight": ("load_balancer_bandwidth_weight", 1),
    "loadBalancerHistoryResourcePercentage": ("load_balancer_history_resource_fraction", 1),
}

#: Dimensions of the load vector, in order.
DIMENSIONS = ("cpu", "bandwidth", "msg_rate", "topics", "sessions")
#: A dimension whose cluster average is below its floor is noise and does not count.
FLOORS = (10.0, 64 * 1024.0, 10.0, 1.0, 1.0)
#: Rounds of reports ``step`` folds in before it sheds (splits go on meanwhile): a new leader's
#: first report of a swinging broker is not yet an average.
HISTORY_ROUNDS_MIN = 3


class DecisionKind(enum.Enum):
    UNLOAD = "unload"
    SPLIT = "split"


@dataclass(frozen=True, slots=True)
class BundleLoad:
    """One bundle's figures as its owner reports them; ``bundle`` is ``tenant/ns/0xLO_0xHI``."""

    bundle: str
    topics: int = 0
    sessions: int = 0
    msg_rate: float = 0.0
    bandwidth_bytes: float = 0.0

    @property
    def namespace(self) -> str:
        return self.bundle.rsplit("/", 1)[0]

    @property
    def range(self) -> BundleRange:
        return BundleRange.parse(self.bundle.rsplit("/", 1)[1])


@dataclass(frozen=True, slots=True)
class BrokerLoad:
    broker: str  # service URL
    cpu_percent: float = 0.0
    bundles: tuple[BundleLoad, ...] = ()


@dataclass(frozen=True, slots=True)
class Decision:
    kind: DecisionKind
    bundle: str
    source: str
    target: str | None  # None for a split (the halves stay on the source)
    reason: str


@dataclass(frozen=True, slots=True)
class BalancerSettings:
    shedding_enabled: bool = True
    split_enabled: bool = True
    grace_period_ms: int = 1_800_000
    overloaded_cpu_percent: float = 85.0
    threshold_percent: float = 10.0
    bundle_topics_max: int = 1000
    bundle_sessions_max: int = 1000
    bundle_msg_rate_max: float = 30_000.0
    bundle_bandwidth_bytes_max: float = 100 * 1024 * 1024.0
    namespace_bundles_max: int = 128
    splits_per_cycle_max: int = 10
    unloads_per_cycle_max: int = 16
    weights: tuple[float, float, float, float, float] = (1.0, 1.0, 1.0, 1.0, 1.0)
    history_fraction: float = 0.9
    margin_percent: float = 5.0
    history_rounds_min: int = HISTORY_ROUNDS_MIN

    def __post_init__(self) -> None:
        if not 0 < self.threshold_percent < 100:
            raise InvalidArgumentError("the shedding threshold must be 1..99 percent")
        if not 0 <= self.history_fraction < 1:
            raise InvalidArgumentError("loadBalancerHistoryResourcePercentage must be in [0, 1)")
        if not 0 <= self.margin_percent < self.threshold_percent:
            raise InvalidArgumentError("the shedding margin must be >= 0 and below the threshold percent")
        if self.history_rounds_min < 1:
            raise InvalidArgumentError("history_rounds_min must be >= 1")
        if len(self.weights) != len(DIMENSIONS) or any(w < 0 for w in self.weights):
            raise InvalidArgumentError(f"weights must be {len(DIMENSIONS)} numbers >= 0")

    @staticmethod
    def from_config(config: BrokerConfig) -> BalancerSettings:
        return BalancerSettings(
            shedding_enabled=config.load_balancer_enabled and config.load_balancer_shedding_enabled,
            split_enabled=config.load_balancer_enabled and config.load_balancer_auto_bundle_split_enabled,
            grace_period_ms=config.load_balancer_shedding_grace_period_ms,
            overloaded_cpu_percent=float(config.load_balancer_broker_overloaded_threshold_percent),
            threshold_percent=float(config.load_balancer_broker_threshold_percent),
            bundle_topics_max=config.load_balancer_namespace_bundle_topics_max,
            bundle_sessions_max=config.load_balancer_namespace_bundle_sessions_max,
            bundle_msg_rate_max=float(config.load_balancer_namespace_bundle_msg_rate_max),
            bundle_bandwidth_bytes_max=float(config.load_balancer_namespace_bundle_bandwidth_bytes_max),
            namespace_bundles_max=config.load_balancer_namespace_bundles_max,
            splits_per_cycle_max=config.load_balancer_bundle_splits_per_cycle_max,
            unloads_per_cycle_max=config.load_balancer_unloads_per_cycle_max,
            weights=(config.load_balancer_cpu_weight, config.load_balancer_bandwidth_weight,
                     config.load_balancer_msg_rate_weight, config.load_balancer_topics_weight,
                     config.load_balancer_sessions_weight),
            history_fraction=config.load_balancer_history_resource_fraction,
            margin_percent=config.load_balancer_shedding_margin_percent,
        )


Vector = tuple[float, float, float, float, float]


def _add(a: Vector, b: Vector, sign: float = 1.0) -> Vector:
    return (a[0] + sign * b[0], a[1] + sign * b[1], a[2] + sign * b[2], a[3] + sign * b[3], a[4] + sign * b[4])


def bundle_vectors(broker: BrokerLoad) -> dict[str, Vector]:
    """Each bundle's share of the broker's load vector (CPU apportioned by rate, else topics)."""
    rate = sum(b.msg_rate for b in broker.bundles)
    topics = sum(b.topics for b in broker.bundles)
    out: dict[str, Vector] = {}
    for b in broker.bundles:
        if rate > 0:
            share = b.msg_rate / rate
        elif topics > 0:
            share = b.topics / topics
        else:
            share = 1.0 / len(broker.bundles)
        out[b.bundle] = (broker.cpu_percent * share, b.bandwidth_bytes, b.msg_rate, float(b.topics),
                         float(b.sessions))
    return out


def scores(vectors: Mapping[str, Vector], settings: BalancerSettings) -> dict[str, float]:
    """Each broker's score: the largest weighted ratio of a counted dimension to its average."""
    count = len(vectors)
    if count == 0:
        return {}
    averages = [sum(v[d] for v in vectors.values()) / count for d in range(len(DIMENSIONS))]
    counted = [d for d in range(len(DIMENSIONS)) if settings.weights[d] > 0 and averages[d] >= FLOORS[d]]
    return {broker: max((settings.weights[d] * v[d] / averages[d] for d in counted), default=1.0)
            for broker, v in vectors.items()}


def _score_of(v: Vector, averages: Sequence[float], counted: Sequence[int], weights: Sequence[float]) -> float:
    return max((weights[d] * v[d] / averages[d] for d in counted), default=1.0)


def _split_reason(b: BundleLoad, s: BalancerSettings) -> str | None:
    if b.topics > s.bundle_topics_max:
        return f"topics {b.topics} > loadBalancerNamespaceBundleMaxTopics {s.bundle_topics_max}"
    if b.sessions > s.bundle_sessions_max:
        return f"sessions {b.sessions} > loadBalancerNamespaceBundleMaxSessions {s.bundle_sessions_max}"
    if b.msg_rate > s.bundle_msg_rate_max:
        return f"msg rate {b.msg_rate:.1f}/s > loadBalancerNamespaceBundleMaxMsgRate {s.bundle_msg_rate_max:.0f}"
    if b.bandwidth_bytes > s.bundle_bandwidth_bytes_max:
        return (f"bandwidth {b.bandwidth_bytes / 1048576:.2f} MB/s > loadBalancerNamespaceBundleMaxBandwidthMbytes "
                f"{s.bundle_bandwidth_bytes_max / 1048576:.0f}")
    return None


def decide_splits(brokers: Sequence[BrokerLoad], settings: BalancerSettings,
                  namespace_bundles: Mapping[str, int] | None = None) -> list[Decision]:
    if not settings.split_enabled:
        return []
    counts: dict[str, int] = dict(namespace_bundles or {})
    for broker in brokers:
        for b in broker.bundles:
            counts.setdefault(b.namespace, sum(1 for x in broker.bundles if x.namespace == b.namespace))
    out: list[Decision] = []
    candidates = sorted(((broker.broker, b) for broker in brokers for b in broker.bundles),
                        key=lambda item: item[1].bundle)
    for owner, b in candidates:
        if len(out) >= settings.splits_per_cycle_max:
            break
        reason = _split_reason(b, settings)
        if reason is None or b.topics < 2 or counts.get(b.namespace, 1) >= settings.namespace_bundles_max:
            continue
        if b.range.upper - b.range.lower < 2:
            continue
        counts[b.namespace] = counts.get(b.namespace, 1) + 1
        out.append(Decision(DecisionKind.SPLIT, b.bundle, owner, None, reason))
    return out


@dataclass(slots=True)
class _Board:
    """The shedding loop's working copy: bundles' vectors per broker, broker totals and CPU."""

    per_bundle: dict[str, dict[str, Vector]]
    vectors: dict[str, Vector]
    cpu: dict[str, float]
    averages: list[float]
    counted: list[int]
    weights: tuple[float, float, float, float, float]

    @staticmethod
    def of(brokers: Sequence[BrokerLoad], settings: BalancerSettings) -> _Board:
        per_bundle = {b.broker: bundle_vectors(b) for b in brokers}
        vectors: dict[str, Vector] = {}
        for broker, bundles in per_bundle.items():
            total: Vector = (0.0, 0.0, 0.0, 0.0, 0.0)
            for v in bundles.values():
                total = _add(total, v)
            vectors[broker] = total
        averages = [sum(v[d] for v in vectors.values()) / len(vectors) for d in range(len(DIMENSIONS))]
        counted = [d for d in range(len(DIMENSIONS)) if settings.weights[d] > 0 and averages[d] >= FLOORS[d]]
        return _Board(per_bundle, vectors, {b.broker: b.cpu_percent for b in brokers}, averages, counted,
                      settings.weights)

    def score(self, v: Vector) -> float:
        return _score_of(v, self.averages, self.counted, self.weights)

    def move(self, bundle: str, source: str, target: str) -> None:
        v = self.per_bundle[source].pop(bundle)
        self.per_bundle[target][bundle] = v
        self.vectors[source] = _add(self.vectors[source], v, -1.0)
        self.vectors[target] = _add(self.vectors[target], v)
        self.cpu[source] -= v[0]
        self.cpu[target] += v[0]


#: A move must lower its source's score by more than this: a fall within float rounding (a bundle
#: with a negligible share of the dimension that makes the source the most loaded) is no fall.
SCORE_FALL_MIN = 1e-9


def _best_move(board: _Board, source: str, source_score: float, hi: float, skip: set[str],
               last_moved_ms: Mapping[str, int], now_ms: int, settings: BalancerSettings) -> tuple[str, str] | None:
    """The bundle of ``source`` and the target giving the lowest resulting pair maximum (then the
    lowest target score) among the moves the module docstring allows; None if there is none."""
    best: tuple[float, float, str, str] | None = None
    for bundle, v in sorted(board.per_bundle[source].items()):
        if bundle in skip or not any(v[d] > 0 for d in board.counted):
            continue
        if now_ms - last_moved_ms.get(bundle, -(1 << 62)) < settings.grace_period_ms:
            continue
        new_source = board.score(_add(board.vectors[source], v, -1.0))
        if new_source >= source_score - SCORE_FALL_MIN:
            continue  # the bundle carries none of what makes the source the most loaded
        for target in sorted(board.vectors):
            if target == source or board.cpu[target] >= settings.overloaded_cpu_percent:
                continue
            new_target = board.score(_add(board.vectors[target], v))
            if new_target > hi or new_target > new_source:
                continue
            key = (max(new_source, new_target), new_target, bundle, target)
            if best is None or key < best:
                best = key
    return None if best is None else (best[2], best[3])


def _shed(brokers: Sequence[BrokerLoad], last_moved_ms: Mapping[str, int], now_ms: int, settings: BalancerSettings,
          splitting: set[str], shedding: bool) -> list[Decision]:
    board = _Board.of(brokers, settings)
    hi = 1.0 + settings.threshold_percent / 100.0
    lo = 1.0 - settings.threshold_percent / 100.0
    inner = (settings.threshold_percent - settings.margin_percent) / 100.0
    active = shedding  # hysteresis: a wave started goes on to the inner band [1 - inner, 1 + inner]
    skip = set(splitting)
    unloads: list[Decision] = []
    while len(unloads) < settings.unloads_per_cycle_max:
        score = {b: board.score(v) for b, v in board.vectors.items()}
        source = max(sorted(score), key=lambda b: score[b])
        overloaded_cpu = board.cpu[source] >= settings.overloaded_cpu_percent
        lowest = min(score.values())
        if not active and score[source] <= hi and lowest >= lo and not overloaded_cpu:
            break  # within the threshold band: nothing starts
        active = True
        if score[source] <= 1.0 + inner and lowest >= 1.0 - inner and not overloaded_cpu:
            break  # the wave reached the inner band
        chosen = _best_move(board, source, score[source], hi, skip, last_moved_ms, now_ms, settings)
        if chosen is None:
            break
        bundle, target = chosen
        cpu_before = board.cpu[source]
        board.move(bundle, source, target)
        skip.add(bundle)
        why = (f"cpu {score[source]:.2f}x avg, {cpu_before:.0f}% >= overloaded threshold" if overloaded_cpu else
               f"load {score[source]:.2f}x cluster average (threshold {hi:.2f})" if score[source] > hi else
               f"a broker is under {lo:.2f}x the average" if lowest < lo else
               f"shedding on to within {inner * 100:.0f}% of the average (load {score[source]:.2f}x)")
        unloads.append(Decision(DecisionKind.UNLOAD, bundle, source, target,
                                f"{why}; moving to {target} ({score[target]:.2f}x -> "
                                f"{board.score(board.vectors[target]):.2f}x)"))
    return unloads


def decide(brokers: Sequence[BrokerLoad], last_moved_ms: Mapping[str, int], now_ms: int,
           settings: BalancerSettings, namespace_bundles: Mapping[str, int] | None = None, *,
           shedding: bool = False) -> list[Decision]:
    """Splits, then unloads (see the module docstring). ``shedding``: a wave of moves is under
    way (the hysteresis latch ``step`` carries), so shedding goes on while a broker is outside the
    inner band even if none is outside the threshold. Deterministic for equal inputs."""
    names = [b.broker for b in brokers]
    if len(set(names)) != len(names):
        raise InvalidArgumentError("one load report per broker")
    splits = decide_splits(brokers, settings, namespace_bundles)
    if not settings.shedding_enabled or len(brokers) < 2:
        return splits
    return [*splits, *_shed(brokers, last_moved_ms, now_ms, settings, {d.bundle for d in splits}, shedding)]


#: One bundle's load history: the weighted sums of its CPU share, bandwidth and message rate
#: over the reports so far, and the total weight of those reports (1 - f**n after n of them).
Averaged = tuple[float, float, float, float]


@dataclass(frozen=True, slots=True)
class BalancerState:
    """What the leader carries from one round to the next (``step``): each bundle's load history
    (keyed by bundle, so it follows a bundle that moves; a split's halves inherit their parent's
    history in proportion to their share of its rate), whether a shedding wave is under way (the
    hysteresis latch), and how many rounds of reports it has folded in."""

    history: Mapping[str, Averaged] = field(default_factory=dict)
    shedding: bool = False
    rounds: int = 0


def _share_of_parent(children: Sequence[BundleLoad]) -> dict[str, float]:
    rate = sum(c.msg_rate for c in children)
    topics = sum(c.topics for c in children)
    if rate > 0:
        return {c.bundle: c.msg_rate / rate for c in children}
    if topics > 0:
        return {c.bundle: c.topics / topics for c in children}
    return {c.bundle: 1.0 / len(children) for c in children}


def _inherited(brokers: Sequence[BrokerLoad], history: Mapping[str, Averaged]) -> dict[str, Averaged]:
    """Histories for the bundles of these reports that have none but lie inside a bundle that
    had one and is gone (split): the parent's, scaled by each half's share of the halves' rate."""
    current = {b.bundle for broker in brokers for b in broker.bundles}
    gone = [(name.rsplit("/", 1)[0], BundleRange.parse(name.rsplit("/", 1)[1]), name)
            for name in history if name not in current]
    children: dict[str, list[BundleLoad]] = {}
    for broker in brokers:
        for b in broker.bundles:
            if b.bundle in history:
                continue
            rng = b.range
            parent = next((name for ns, r, name in gone
                           if ns == b.namespace and r.lower <= rng.lower and rng.upper <= r.upper), None)
            if parent is not None:
                children.setdefault(parent, []).append(b)
    out: dict[str, Averaged] = {}
    for parent, halves in children.items():
        cpu, bandwidth, rate, weight = history[parent]
        for bundle, share in _share_of_parent(halves).items():
            out[bundle] = (cpu * share, bandwidth * share, rate * share, weight)
    return out


def average(brokers: Sequence[BrokerLoad], history: Mapping[str, Averaged],
            fraction: float) -> tuple[list[BrokerLoad], dict[str, Averaged]]:
    """Fold these reports into each bundle's history (Pulsar's ``loadBalancerHistoryResourcePercentage``
    = ``fraction``: avg = f * avg + (1 - f) * new; started from zero and divided by the weight so far,
    so the first reports give their plain mean instead of the first one alone), and return the
    reports with each bundle's averaged rate and bandwidth and each broker's CPU the sum of its
    bundles' averaged shares (a broker without bundles keeps its reported CPU). Topics and
    sessions are counts, not samples: they stay as reported. Only bundles in the reports are kept."""
    seeded = {**history, **_inherited(brokers, history)}
    new_history: dict[str, Averaged] = {}
    out: list[BrokerLoad] = []
    keep = 1.0 - fraction
    for broker in brokers:
        shares = bundle_vectors(broker)
        bundles: list[BundleLoad] = []
        cpu_total = 0.0
        for b in broker.bundles:
            cpu, bandwidth, rate, weight = seeded.get(b.bundle, (0.0, 0.0, 0.0, 0.0))
            folded = (fraction * cpu + keep * shares[b.bundle][0], fraction * bandwidth + keep * b.bandwidth_bytes,
                      fraction * rate + keep * b.msg_rate, fraction * weight + keep)
            new_history[b.bundle] = folded
            w = folded[3]
            cpu_total += folded[0] / w
            bundles.append(BundleLoad(b.bundle, b.topics, b.sessions, folded[2] / w, folded[1] / w))
        out.append(BrokerLoad(broker.broker, cpu_total if broker.bundles else broker.cpu_percent, tuple(bundles)))
    return out, new_history


def step(state: BalancerState, brokers: Sequence[BrokerLoad], last_moved_ms: Mapping[str, int], now_ms: int,
         settings: BalancerSettings,
         namespace_bundles: Mapping[str, int] | None = None) -> tuple[list[Decision], BalancerState]:
    """One leader round: fold the reports into the history, ``decide`` on the averaged figures
    (no shedding before ``settings.history_rounds_min`` rounds: a leader's first reports are not a history
    yet), and set the latch: a round that sheds keeps the wave going next round; one that may
    shed and does not ends it; one that may not (shedding off, moves still settling) keeps it."""
    averaged, history = average(brokers, state.history, settings.history_fraction)
    rounds = state.rounds + 1
    effective = settings if rounds >= settings.history_rounds_min else replace(settings, shedding_enabled=False)
    decisions = decide(averaged, last_moved_ms, now_ms, effective, namespace_bundles, shedding=state.shedding)
    latch = state.shedding
    if effective.shedding_enabled:
        latch = any(d.kind is DecisionKind.UNLOAD for d in decisions)
    return decisions, BalancerState(history, latch, rounds)


def apply(brokers: Sequence[BrokerLoad], decisions: Sequence[Decision]) -> list[BrokerLoad]:
    """The reports as they would read after the unloads (splits left as they are): for tests and
    for showing what a round intends. CPU follows the bundles as ``decide`` estimates it."""
    per_bundle = {b.broker: {x.bundle: x for x in b.bundles} for b in brokers}
    shares = {b.broker: bundle_vectors(b) for b in brokers}
    cpu = {b.broker: b.cpu_percent for b in brokers}
    for d in decisions:
        if d.kind is DecisionKind.UNLOAD and d.target is not None:
            bundle = per_bundle[d.source].pop(d.bundle)
            per_bundle[d.target][d.bundle] = bundle
            share = shares[d.source][d.bundle][0]
            cpu[d.source] -= share
            cpu[d.target] += share
    return [BrokerLoad(b.broker, max(0.0, cpu[b.broker]), tuple(sorted(per_bundle[b.broker].values(),
                                                                      key=lambda x: x.bundle)))
            for b in brokers]


__all__ = [
    "DIMENSIONS",
    "HISTORY_ROUNDS_MIN",
    "PULSAR_KEYS",
    "Averaged",
    "BalancerSettings",
    "BalancerState",
    "BrokerLoad",
    "BundleLoad",
    "Decision",
    "DecisionKind",
    "apply",
    "average",
    "bundle_vectors",
    "decide",
    "decide_splits",
    "scores",
    "step",
]
