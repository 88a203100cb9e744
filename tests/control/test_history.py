"""The balancer's averaged history and hysteresis (``control.balancer.step``, ``average``).

Issue 24's 300-topic run kept moving bundles after balance: a saturated broker's rate figures
swing between reports and a decision on one report chases the swing. These properties hold the
leader's round (``step``) to: no move on stable input with noise once balanced, no move when one
broker's reports swing around the average, and the same decisions as ``decide`` when the
reports do not change. Each has a negative control: without the history and the margin
(``history_fraction=0``, ``margin_percent=0``: a decision on each raw report, the old behaviour)
the same input moves bundles.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from magnetar.broker.config import BrokerConfig
from magnetar.control.balancer import (
    PULSAR_KEYS,
    BalancerSettings,
    BalancerState,
    BrokerLoad,
    BundleLoad,
    Decision,
    DecisionKind,
    average,
    decide,
    step,
)

NS = "public/default"
#: One bundle's steady figures: topics, sessions, msg rate, bandwidth. The tests use 12 or more
#: bundles per broker, so one bundle moved keeps its target's topics within the 10% threshold:
#: otherwise no move would ever be allowed and "no move" would prove nothing.
STEADY = (4, 4, 100.0, 1e5)
SETTINGS = BalancerSettings(split_enabled=False, grace_period_ms=5_000)
RAW = BalancerSettings(split_enabled=False, grace_period_ms=5_000, history_fraction=0.0, margin_percent=0.0,
                       history_rounds_min=1, hit_count_threshold=0, return_grace_periods=0)

#: (round, bundle) -> the factor applied to that bundle's rate and bandwidth in that round's report.
Noise = Callable[[int, str], float]


def bundle_name(index: int) -> str:
    return f"{NS}/0x{index * 0x10000:08x}_0x{index * 0x10000 + 0x10000:08x}"


def reports(owners: dict[str, list[str]], noise: Noise, round_index: int) -> list[BrokerLoad]:
    topics, sessions, rate, bandwidth = STEADY
    return [BrokerLoad(broker, 0.0, tuple(BundleLoad(b, topics, sessions, rate * noise(round_index, b),
                                                     bandwidth * noise(round_index, b)) for b in sorted(bundles)))
            for broker, bundles in sorted(owners.items())]


def simulate(owners: dict[str, list[str]], noise: Noise, rounds: int, s: BalancerSettings,
             state: BalancerState | None = None) -> tuple[list[list[Decision]], BalancerState]:
    """Leader rounds one second apart: each reports the owners' bundles with ``noise``, calls
    ``step``, and carries the unloads out before the next report (the figures follow the bundle)."""
    state = state or BalancerState()
    moved: dict[str, int] = {}
    out = []
    for r in range(rounds):
        now_ms = r * 1000
        decisions, state = step(state, reports(owners, noise, r), moved, now_ms, s)
        for d in decisions:
            if d.kind is DecisionKind.UNLOAD and d.target is not None:
                owners[d.source].remove(d.bundle)
                owners[d.target].append(d.bundle)
                moved[d.bundle] = now_ms
        out.append(decisions)
    return out, state


def balanced(broker_count: int, per_broker: int) -> dict[str, list[str]]:
    return {f"b{i}": [bundle_name(i * per_broker + j) for j in range(per_broker)] for i in range(broker_count)}


def uniform_noise(seed: int, amplitude: float) -> Noise:
    table: dict[tuple[int, str], float] = {}
    rng = random.Random(seed)  # drawn in the (deterministic) order the reports ask

    def noise(round_index: int, bundle: str) -> float:
        key = (round_index, bundle)
        if key not in table:
            table[key] = 1.0 + rng.uniform(-amplitude, amplitude)
        return table[key]
    return noise


def swing(broker_bundles: set[str], amplitude: float, phase: int, since: int = 0) -> Noise:
    """The bundles of one broker all at +amplitude in one report, -amplitude in the next, ..."""
    def noise(round_index: int, bundle: str) -> float:
        if bundle not in broker_bundles or round_index < since:
            return 1.0
        return 1.0 + amplitude * (1 if (round_index + phase) % 2 == 0 else -1)
    return noise


def unloads(rounds: list[list[Decision]]) -> list[Decision]:
    return [d for decisions in rounds for d in decisions if d.kind is DecisionKind.UNLOAD]


def wave_end(rounds: list[list[Decision]]) -> int:
    """The first round without a decision after the first round with one (the first wave's end)."""
    started = next(i for i, decisions in enumerate(rounds) if decisions)
    return next(i for i in range(started, len(rounds)) if not rounds[i])


@given(st.integers(2, 4), st.integers(12, 14), st.integers(0, 10_000), st.floats(0.0, 0.25))
@settings(max_examples=20, deadline=None)
def test_stable_input_with_noise_moves_nothing_after_balance(broker_count: int, per_broker: int, seed: int,
                                                           amplitude: float) -> None:
    """Every bundle starts on one broker; each report carries independent noise of up to
    +-``amplitude`` on every bundle's rate and bandwidth. The leader balances, and once its wave
    has ended (a round that may shed and does not), with every broker within the threshold, no
    bundle moves again in the remaining rounds (30 or more)."""
    owners: dict[str, list[str]] = {f"b{i}": [] for i in range(broker_count)}
    owners["b0"] = [bundle_name(i) for i in range(broker_count * per_broker)]
    rounds, _ = simulate(owners, uniform_noise(seed, amplitude), 45, SETTINGS)
    first_quiet = wave_end(rounds)
    assert first_quiet < 20, "the leader did not finish balancing"
    counts = [len(b) for b in owners.values()]
    assert max(counts) <= 1.1 * per_broker and min(counts) >= 0.9 * per_broker, counts
    assert unloads(rounds[first_quiet:]) == [], [d.reason for d in unloads(rounds[first_quiet:])][:3]


def test_without_history_and_margin_the_same_noise_moves_bundles_after_balance() -> None:
    """Negative control: deciding on each raw report, with no margin, chases the noise."""
    owners: dict[str, list[str]] = {f"b{i}": [] for i in range(3)}
    owners["b0"] = [bundle_name(i) for i in range(36)]
    rounds, _ = simulate(owners, uniform_noise(7, 0.25), 60, RAW)
    first_quiet = wave_end(rounds)
    assert unloads(rounds[first_quiet:]), "the control must move bundles after balance"


@given(st.integers(2, 5), st.integers(12, 16), st.floats(0.0, 0.3), st.integers(0, 1), st.integers(1, 40))
@settings(max_examples=100, deadline=None)
def test_a_broker_swinging_around_the_average_moves_nothing_from_a_cold_start(
        broker_count: int, per_broker: int, amplitude: float, phase: int, rounds: int) -> None:
    """A balanced cluster; one broker's reports swing +-30% (every report, alternating) around the
    average from the first report a new leader reads: no move in any round."""
    owners = balanced(broker_count, per_broker)
    decided, _ = simulate(owners, swing(set(owners["b0"]), amplitude, phase), rounds, SETTINGS)
    assert unloads(decided) == [], [d.reason for d in unloads(decided)][:3]


@given(st.integers(2, 5), st.integers(12, 16), st.floats(0.0, 0.9), st.integers(0, 1))
@settings(max_examples=40, deadline=None)
def test_a_broker_that_starts_swinging_after_balance_moves_nothing(broker_count: int, per_broker: int,
                                                                   amplitude: float, phase: int) -> None:
    """A balanced cluster the leader has watched for 20 rounds; then one broker's reports swing
    +-90% around the average (as a saturated broker's do): no move in 40 rounds."""
    owners = balanced(broker_count, per_broker)
    decided, _ = simulate(owners, swing(set(owners["b0"]), amplitude, phase, since=20), 60, SETTINGS)
    assert unloads(decided) == [], [d.reason for d in unloads(decided)][:3]


def test_without_history_a_swinging_broker_moves_bundles() -> None:
    """Negative control for both swing tests: raw reports shed from the broker at +30%."""
    owners = balanced(3, 12)
    decided, _ = simulate(owners, swing(set(owners["b0"]), 0.3, 0), 10, RAW)
    assert unloads(decided)
    owners = balanced(3, 12)
    decided, _ = simulate(owners, swing(set(owners["b0"]), 0.9, 0, since=20), 30, SETTINGS)
    cold = BalancerSettings(split_enabled=False, grace_period_ms=5_000, history_fraction=0.0, margin_percent=0.0)
    owners = balanced(3, 12)
    raw, _ = simulate(owners, swing(set(owners["b0"]), 0.9, 0, since=20), 30, cold)
    assert unloads(raw) and not unloads(decided)


def test_a_wave_goes_on_to_the_inner_band_and_a_smaller_drift_starts_none() -> None:
    """Hysteresis: 70 / 30 one-topic bundles (1.4x / 0.6x): the wave started at the 10% threshold
    ends within the 5% inner band (52 / 48), where deciding without the margin stops at the
    threshold (55 / 45); a later drift to 54 / 46 (within 10%) starts no wave."""
    def cluster(a: int, b: int) -> list[BrokerLoad]:
        return [BrokerLoad("a", 0.0, tuple(BundleLoad(bundle_name(i), 1) for i in range(a))),
                BrokerLoad("b", 0.0, tuple(BundleLoad(bundle_name(100 + i), 1) for i in range(b)))]

    many = BalancerSettings(split_enabled=False, unloads_per_cycle_max=100)
    assert len(decide(cluster(70, 30), {}, 0, many)) == 18
    no_margin = BalancerSettings(split_enabled=False, unloads_per_cycle_max=100, margin_percent=0.0)
    assert len(decide(cluster(70, 30), {}, 0, no_margin)) == 15
    assert decide(cluster(54, 46), {}, 0, many) == []
    assert len(decide(cluster(54, 46), {}, 0, many, shedding=True)) == 2  # a wave under way goes on


def test_the_latch_carries_a_wave_across_rounds_and_ends_it() -> None:
    """Five moves per round: the wave started at 1.4x goes on in the next rounds while a broker is
    outside the inner band (even once none is outside the threshold), then ends."""
    few = BalancerSettings(split_enabled=False, unloads_per_cycle_max=5, grace_period_ms=0, history_rounds_min=1,
                           hit_count_threshold=0)
    owners = {"a": [bundle_name(i) for i in range(70)], "b": [bundle_name(100 + i) for i in range(30)]}
    rounds, state = simulate(owners, lambda _r, _b: 1.0, 8, few)
    assert [len(r) for r in rounds] == [5, 5, 5, 3, 0, 0, 0, 0]
    assert (len(owners["a"]), len(owners["b"])) == (52, 48)
    assert not state.shedding


@given(st.lists(st.tuples(st.integers(0, 50), st.floats(0, 5000), st.floats(0, 5e6)), min_size=1, max_size=12),
       st.integers(1, 6))
@settings(max_examples=100)
def test_steady_reports_average_to_themselves(figures: list[tuple[int, float, float]], repeat: int) -> None:
    """Reports that do not change average to themselves, so ``step`` decides as ``decide`` does."""
    brokers = [BrokerLoad(f"b{i % 3}", 40.0, ()) for i in range(3)]
    bundles: dict[str, list[BundleLoad]] = {b.broker: [] for b in brokers}
    for i, (topics, rate, bandwidth) in enumerate(figures):
        bundles[f"b{i % 3}"].append(BundleLoad(bundle_name(i), topics, topics, rate, bandwidth))
    brokers = [BrokerLoad(b.broker, 40.0, tuple(bundles[b.broker])) for b in brokers]
    history: dict[str, tuple[float, float, float, float]] = {}
    for _ in range(repeat):
        averaged, history = average(brokers, history, 0.9)
    for got, want in zip(averaged, brokers, strict=True):
        assert abs(got.cpu_percent - (want.cpu_percent if want.bundles else 40.0)) < 1e-6
        for g, w in zip(got.bundles, want.bundles, strict=True):
            assert (g.bundle, g.topics, g.sessions) == (w.bundle, w.topics, w.sessions)
            assert abs(g.msg_rate - w.msg_rate) <= 1e-6 * max(1.0, w.msg_rate)
            assert abs(g.bandwidth_bytes - w.bandwidth_bytes) <= 1e-6 * max(1.0, w.bandwidth_bytes)
    s = BalancerSettings(split_enabled=False, history_rounds_min=1, hit_count_threshold=0)
    assert [d.bundle for d in step(BalancerState(), brokers, {}, 0, s)[0]] == \
        [d.bundle for d in decide(brokers, {}, 0, s)]


def test_the_history_follows_a_bundle_that_moves_and_a_split_inherits_it() -> None:
    hot = BundleLoad(f"{NS}/0x00000000_0x80000000", 4, 4, 1000.0, 1e6)
    other = BundleLoad(f"{NS}/0x80000000_0xffffffff", 4, 4, 100.0, 1e5)
    _, history = average([BrokerLoad("a", 0.0, (hot, other)), BrokerLoad("b", 0.0, ())], {}, 0.9)
    # Moved to b, reporting a near-idle rate at first (its topics just loaded): the average holds.
    idle = BundleLoad(hot.bundle, 4, 4, 0.0, 0.0)
    moved, _ = average([BrokerLoad("a", 0.0, (other,)), BrokerLoad("b", 0.0, (idle,))], history, 0.9)
    assert moved[1].bundles[0].msg_rate > 400.0
    # Split into quarters' halves: the halves' averages add up to what the parent's would be.
    left = BundleLoad(f"{NS}/0x00000000_0x40000000", 2, 2, 300.0, 3e5)
    right = BundleLoad(f"{NS}/0x40000000_0x80000000", 2, 2, 100.0, 1e5)
    split, new_history = average([BrokerLoad("a", 0.0, (left, right, other))], history, 0.9)
    parent, _ = average([BrokerLoad("a", 0.0, (BundleLoad(hot.bundle, 4, 4, 400.0, 4e5), other))], history, 0.9)
    halves = split[0].bundles[0].msg_rate + split[0].bundles[1].msg_rate
    assert abs(halves - parent[0].bundles[0].msg_rate) < 1e-6
    assert split[0].bundles[0].msg_rate > split[0].bundles[1].msg_rate
    assert hot.bundle not in new_history and {left.bundle, right.bundle} <= set(new_history)


def test_step_is_pure() -> None:
    owners = {"a": [bundle_name(i) for i in range(10)], "b": []}
    load = reports(owners, uniform_noise(1, 0.2), 0)
    state = BalancerState()
    at_once = BalancerSettings(split_enabled=False, history_rounds_min=1, hit_count_threshold=0)
    one = step(state, load, {}, 0, at_once)
    two = step(state, load, {}, 0, at_once)
    assert one == two and state == BalancerState() and one[0]
    assert one[1].shedding and one[1].rounds == 1


def test_the_history_settings_map_pulsar_keys() -> None:
    assert PULSAR_KEYS["loadBalancerHistoryResourcePercentage"] == ("load_balancer_history_resource_fraction", 1)
    s = BalancerSettings.from_config(BrokerConfig(load_balancer_history_resource_fraction=0.5,
                                                  load_balancer_shedding_margin_percent=2.0))
    assert (s.history_fraction, s.margin_percent) == (0.5, 2.0)
    from magnetar.runtime.pulsar_conf import translate

    conf = translate({"loadBalancerHistoryResourcePercentage": "0.8"})
    assert conf.broker == {"load_balancer_history_resource_fraction": 0.8}
    conf = translate({"loadBalancerSheddingConditionHitCountThreshold": "5"})
    assert conf.broker == {"load_balancer_shedding_condition_hit_count_threshold": 5}
    assert BalancerSettings.from_config(BrokerConfig(**conf.broker)).hit_count_threshold == 5
    assert BalancerSettings().hit_count_threshold == 3  # Pulsar's default
    import pytest

    from magnetar.base.errors import InvalidArgumentError

    with pytest.raises(InvalidArgumentError):
        BalancerSettings(history_fraction=1.0)
    with pytest.raises(InvalidArgumentError):
        BalancerSettings(threshold_percent=10, margin_percent=10)
    with pytest.raises(InvalidArgumentError):
        BrokerConfig(load_balancer_shedding_margin_percent=20)
    with pytest.raises(InvalidArgumentError):
        BrokerConfig(load_balancer_shedding_condition_hit_count_threshold=-1)
    with pytest.raises(InvalidArgumentError):
        BalancerSettings(return_grace_periods=-1)


# --- persistence (loadBalancerSheddingConditionHitCountThreshold) and the return window ----------
#
# The elastic test's runs moved bundles back to the broker they came from after balance: a new
# wave started on a swing just over the threshold (a target's burst right after it received a
# wave), and with three brokers the only other target was often the bundle's previous broker.

#: Reports taken as they come (no averaging), so a swing of n reports is exactly n rounds out of the band.
PLAIN = BalancerSettings(split_enabled=False, grace_period_ms=5_000, history_fraction=0.0)


def burst(owners: dict[str, list[str]], broker: str, rounds: set[int], amplitude: float) -> Noise:
    """``broker``'s bundles (whatever it owns at the time) at +``amplitude`` in ``rounds``."""
    def noise(round_index: int, bundle: str) -> float:
        return 1.0 + amplitude if round_index in rounds and bundle in owners[broker] else 1.0
    return noise


def bursts(draw_lengths: list[int], start: int) -> set[int]:
    """Bursts of the given lengths from round ``start``, each followed by one calm round."""
    out: set[int] = set()
    at = start
    for length in draw_lengths:
        out.update(range(at, at + length))
        at += length + 1
    return out


@given(st.integers(2, 4), st.integers(12, 14), st.integers(0, 3),
       st.lists(st.integers(1, 3), min_size=1, max_size=8), st.floats(0.3, 1.0))
@settings(max_examples=60, deadline=None)
def test_transient_swings_after_a_wave_start_no_wave(broker_count: int, per_broker: int, hot: int,
                                                    lengths: list[int], amplitude: float) -> None:
    """Every bundle starts on one broker; the leader's wave balances the cluster. Then one broker's
    figures jump +30..100% (well out of the band) for 1..3 consecutive rounds at a time, again and
    again with one calm round between: with the default hit-count threshold (3: a wave starts on
    the 4th consecutive round out of the band) no bundle moves after the first wave."""
    owners: dict[str, list[str]] = {f"b{i}": [] for i in range(broker_count)}
    owners["b0"] = [bundle_name(i) for i in range(broker_count * per_broker)]
    swung = bursts(lengths, 30)
    rounds, _ = simulate(owners, burst(owners, f"b{hot % broker_count}", swung, amplitude), max(swung) + 8, PLAIN)
    end = wave_end(rounds)
    assert end < 30, "the first wave did not end before the swings"
    assert unloads(rounds[:end]), "the cluster must first be balanced by a wave"
    assert unloads(rounds[end:]) == [], [d.reason for d in unloads(rounds[end:])][:3]


def test_with_a_hit_count_threshold_of_zero_the_same_swings_start_waves() -> None:
    """Negative control: a wave on the first round out of the band (the old behaviour) chases a
    one-round swing; the same swing held four rounds starts a wave with the default threshold."""
    at_once = replace(PLAIN, hit_count_threshold=0)
    for s, swung, moves in ((at_once, {30}, True), (PLAIN, {30}, False), (PLAIN, {30, 31, 32}, False),
                            (PLAIN, {30, 31, 32, 33}, True)):
        owners: dict[str, list[str]] = {f"b{i}": [] for i in range(3)}
        owners["b0"] = [bundle_name(i) for i in range(36)]
        rounds, _ = simulate(owners, burst(owners, "b1", swung, 0.8), 40, s)
        end = wave_end(rounds)
        assert end < 30
        assert bool(unloads(rounds[end:])) is moves, (s.hit_count_threshold, sorted(swung))


def test_a_persistent_imbalance_starts_a_wave_on_the_round_after_the_threshold() -> None:
    """The count: rounds that may shed and find the cluster out of the band; the wave starts on
    the (threshold + 1)-th. Rounds before the history is long enough count none."""
    for threshold in (0, 1, 3, 5):
        s = BalancerSettings(split_enabled=False, history_rounds_min=3, hit_count_threshold=threshold)
        owners = {"a": [bundle_name(i) for i in range(20)], "b": []}
        rounds, _ = simulate(owners, lambda _r, _b: 1.0, 12, s)
        assert next(i for i, r in enumerate(rounds) if r) == s.history_rounds_min - 1 + threshold


def test_rounds_that_may_not_shed_reset_the_count() -> None:
    """A round with moves still settling (the leader passes shedding off) is no hit: the count
    starts again after it, so reports right after a wave do not add up to a start."""
    s = BalancerSettings(split_enabled=False, history_rounds_min=1, hit_count_threshold=2)
    load = reports({"a": [bundle_name(i) for i in range(20)], "b": []}, lambda _r, _b: 1.0, 0)
    state = BalancerState()
    decisions, state = step(state, load, {}, 0, s)
    decisions, state = step(state, load, {}, 1000, s)
    assert not decisions and state.hits == 2
    decisions, state = step(state, load, {}, 2000, replace(s, shedding_enabled=False))
    assert not decisions and state.hits == 0
    for t in (3000, 4000):
        decisions, state = step(state, load, {}, t, s)
        assert not decisions
    decisions, state = step(state, load, {}, 5000, s)
    assert decisions and state.shedding and state.hits == 0


def three_brokers_where_only_a_return_helps() -> tuple[list[BrokerLoad], BalancerState, int]:
    """Elastic run 17:26: bundle X moved a -> b, then b -> c; later c is out of the band and X is
    its only bundle out of the grace period. The state remembers where X has been."""
    x = bundle_name(0)
    others = [bundle_name(i) for i in range(30, 41)]  # c's other bundles, busier (+30%)
    owners = {"a": [bundle_name(i) for i in range(10, 22)], "b": [bundle_name(i) for i in range(50, 62)],
              "c": [x, *others]}
    load = reports(owners, lambda _r, b: 1.3 if b in others else 1.0, 0)
    state = BalancerState(left={x: {"a": 10_000, "b": 40_000}})
    return load, state, 80_000


def test_a_bundle_is_not_sent_back_to_a_broker_it_left_within_the_window() -> None:
    load, state, now_ms = three_brokers_where_only_a_return_helps()
    s = BalancerSettings(split_enabled=False, grace_period_ms=15_000, history_rounds_min=1, hit_count_threshold=0)
    recent = {bundle_name(i): 70_000 for i in range(30, 41)}  # the other bundles of c: within their grace
    decided, after = step(state, load, recent, now_ms, s)
    assert [d for d in decided if d.kind is DecisionKind.UNLOAD] == []
    assert after.left[bundle_name(0)] == {"a": 10_000, "b": 40_000}
    # Negative control: without the memory (no window), X goes back to a broker it came from.
    back, _ = step(state, load, recent, now_ms, replace(s, return_grace_periods=0))
    assert [(d.bundle, d.target in ("a", "b")) for d in back] == [(bundle_name(0), True)]
    # Once the window is over, the move is allowed again; entries past it are forgotten.
    later = now_ms + s.return_window_ms
    moved, forgotten = step(state, load, recent, later, s)
    assert [d.bundle for d in moved] == [bundle_name(0)] and set(forgotten.left) == {bundle_name(0)}
    assert forgotten.left[bundle_name(0)] == {"c": later}


def test_a_split_bundle_s_halves_remember_where_their_parent_has_been() -> None:
    parent = f"{NS}/0x00000000_0x80000000"
    halves = (BundleLoad(f"{NS}/0x00000000_0x40000000", 2, 2, 50.0, 5e4),
              BundleLoad(f"{NS}/0x40000000_0x80000000", 2, 2, 50.0, 5e4))
    state = BalancerState(left={parent: {"a": 1000}})
    s = BalancerSettings(split_enabled=False, grace_period_ms=15_000)
    _, after = step(state, [BrokerLoad("a", 0.0, ()), BrokerLoad("b", 0.0, halves)], {}, 2000, s)
    assert after.left == {parent: {"a": 1000}, halves[0].bundle: {"a": 1000}, halves[1].bundle: {"a": 1000}}


Swing = tuple[int, int, int, float]  # (broker, first round, rounds, +factor)


def returns_within(s: BalancerSettings, window_ms: int, broker_count: int, per_broker: int, seed: int,
                   amplitude: float, swings: list[Swing]) -> list[Decision]:
    """80 leader rounds: every bundle starts on one broker; reports carry noise, and brokers'
    figures jump for a while (long enough to start waves); the moves that send a bundle back to
    a broker it left less than ``window_ms`` before."""
    owners: dict[str, list[str]] = {f"b{i}": [] for i in range(broker_count)}
    owners["b0"] = [bundle_name(i) for i in range(broker_count * per_broker)]
    base = uniform_noise(seed, amplitude)

    def noise(round_index: int, bundle: str) -> float:
        factor = base(round_index, bundle)
        for broker, start, length, jump in swings:
            if start <= round_index < start + length and bundle in owners[f"b{broker % broker_count}"]:
                factor *= 1.0 + jump
        return factor
    rounds, _ = simulate(owners, noise, 80, s)
    left: dict[str, dict[str, int]] = {}
    out = []
    for r, decisions in enumerate(rounds):
        for d in unloads([decisions]):
            if r * 1000 - left.get(d.bundle, {}).get(d.target or "", -(1 << 40)) < window_ms:
                out.append(d)
            left.setdefault(d.bundle, {})[d.source] = r * 1000
    return out


#: A run that sends a bundle back without the memory: 3 brokers of 11 bundles, noise +-50%, and
#: the third broker's figures +160% for 8 rounds from round 20.
CONTROL_RUN: tuple[int, int, int, float, list[Swing]] = (3, 11, 9325, 0.5, [(2, 20, 8, 1.6)])
#: A short grace period (3 s), so bundles may move again within the rounds simulated.
SHORT_GRACE = BalancerSettings(split_enabled=False, grace_period_ms=3_000, hit_count_threshold=1)


@given(st.integers(3, 4), st.integers(10, 14), st.integers(0, 10_000), st.floats(0.0, 0.6),
       st.lists(st.tuples(st.integers(0, 3), st.integers(5, 70), st.integers(1, 8), st.floats(0.3, 2.0)),
                max_size=5))
@settings(max_examples=60, deadline=None)
def test_no_bundle_goes_back_to_a_broker_it_left_within_the_window(
        broker_count: int, per_broker: int, seed: int, amplitude: float, swings: list[Swing]) -> None:
    """However the leader moves bundles, none goes back to a broker it left within the return
    window (10 grace periods: 30 s here)."""
    window = SHORT_GRACE.return_window_ms
    assert returns_within(SHORT_GRACE, window, broker_count, per_broker, seed, amplitude, swings) == []


def test_without_the_memory_bundles_go_back_within_the_window() -> None:
    """Negative control: with no memory (``return_grace_periods=0``) the same kind of run sends
    bundles back to a broker they left less than 30 s before."""
    s = replace(SHORT_GRACE, return_grace_periods=0)
    found = returns_within(s, SHORT_GRACE.return_window_ms, *CONTROL_RUN)
    assert found, "the control must send a bundle back"
