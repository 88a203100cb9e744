"""The console's pure parts: the rate ring and the durability arithmetic (against brute force)."""

from __future__ import annotations

import itertools

from magnetar.admin.console.durability import LedgerFacts, ledger_view, short_entries
from magnetar.admin.console.history import Counters, RateHistory
from magnetar.base.types import BookieId
from magnetar.ledger.ledger_metadata import Fragment, LedgerMetadata, LedgerState
from magnetar.ledger.quorum import write_set


def test_rates_come_from_counter_differences_over_time() -> None:
    history = RateHistory(samples_max=3)
    history.sample(1_000, {"t": Counters(0, 0, 0, 0)})
    history.sample(3_000, {"t": Counters(20, 4, 2_000, 16)})
    last = history.topic("t")[-1]
    assert (last.msg_rate_in, last.msg_rate_out, last.byte_rate_in, last.backlog_count) == (10.0, 2.0, 1000.0, 16)
    assert history.broker()[-1].msg_rate_in == 10.0
    for t in (5_000, 7_000, 9_000):
        history.sample(t, {"t": Counters(20, 4, 2_000, 16)})
    assert [s.t_ms for s in history.topic("t")] == [5_000, 7_000, 9_000]  # bounded: the oldest went
    assert history.topic("t")[-1].msg_rate_in == 0.0


def test_a_topic_seen_first_has_no_rate_and_an_unloaded_one_is_forgotten() -> None:
    history = RateHistory(topics_max=1)
    history.sample(1_000, {"a": Counters(50, 0, 500, 50), "b": Counters(9, 0, 9, 0)})
    assert history.topic("a")[-1].msg_rate_in == 0.0  # counted before we looked: no rate invented
    assert history.topic("b") == []  # beyond topics_max: not tracked
    history.sample(2_000, {})
    assert history.topic("a") == []


def test_partitions_add_up_by_sample_time() -> None:
    history = RateHistory()
    history.sample(0, {"p0": Counters(0, 0, 0, 0), "p1": Counters(0, 0, 0, 0)})
    history.sample(1_000, {"p0": Counters(3, 0, 0, 3), "p1": Counters(5, 0, 0, 5)})
    summed = history.topics(["p0", "p1"])
    assert [(s.t_ms, s.msg_rate_in, s.backlog_count) for s in summed] == [(0, 0.0, 0), (1_000, 8.0, 8)]


def _brute(first: int, last: int, e: int, qw: int, missing: set[int]) -> int:
    return sum(1 for entry in range(first, last + 1) if set(write_set(entry, e, qw)) & missing)


def test_short_entries_matches_brute_force() -> None:
    for e in range(1, 6):
        for qw in range(1, e + 1):
            for missing_count in range(0, e + 1):
                for missing in itertools.combinations(range(e), missing_count):
                    for first, last in ((0, -1), (0, 0), (3, 17), (5, 64)):
                        assert short_entries(first, last, e, qw, missing) == _brute(first, last, e, qw, set(missing)), (
                            e, qw, missing, first, last)


def test_ledger_view_names_missing_bookies_and_counts_entries_short_of_qw() -> None:
    a, b, c, d = (BookieId.parse(f"127.0.0.1:{p}") for p in (1, 2, 3, 4))
    metadata = LedgerMetadata(7, 3, 2, 2, LedgerState.CLOSED, 9,
                              (Fragment(0, (a, b, c)), Fragment(6, (a, b, d))))
    view = ledger_view(LedgerFacts(7, 10, 1000, 5), metadata, registered=frozenset({a, b, d}),
                       read_only=frozenset({d}), lost=frozenset(), lac=None, fenced=False)
    assert view["state"] == "closed" and (view["ensembleSize"], view["writeQuorum"], view["ackQuorum"]) == (3, 2, 2)
    first, second = view["fragments"]
    assert (first["firstEntry"], first["lastEntry"], second["firstEntry"], second["lastEntry"]) == (0, 5, 6, 9)
    assert [x["missing"] for x in first["bookies"]] == [False, False, True]  # c is not registered
    assert first["underReplicatedEntries"] == _brute(0, 5, 3, 2, {2}) == 4
    assert second["underReplicatedEntries"] == 0 and second["bookies"][2]["readOnly"]
    assert view["underReplicatedEntries"] == 4
    # a marker naming a lost bookie counts too, and an open ledger fenced by another owner says so
    opened = LedgerMetadata(8, 3, 3, 2, LedgerState.OPEN, -1, (Fragment(0, (a, b, c)),))
    fenced = ledger_view(LedgerFacts(8, 4, 10, 5), opened, registered=frozenset({a, b, c}), read_only=frozenset(),
                         lost=frozenset({b}), lac=3, fenced=True)
    assert fenced["state"] == "fenced" and fenced["lac"] == 3 and fenced["underReplicatedEntries"] == 4
    assert ledger_view(LedgerFacts(9, 0, 0, 0), None, registered=frozenset(), read_only=frozenset(), lost=frozenset(),
                       lac=None, fenced=False)["state"] == "unknown"


class _CountingTopics(dict[str, object]):
    """The broker's loaded topics, counting how many entries a sample walks."""

    walked = 0

    def items(self):  # type: ignore[override]
        for item in super().items():
            _CountingTopics.walked += 1
            yield item


def test_a_sample_reads_the_tracked_topics_not_every_loaded_one() -> None:
    """Issue 22: filtering all loaded topics every 2 s was 20% of a standalone's CPU at 65,000."""
    from types import SimpleNamespace

    from magnetar.admin.console.api import sample_now
    from magnetar.broker.metrics import RateMeter

    topics = _CountingTopics({f"t{i}": SimpleNamespace(subscriptions={}, published=RateMeter()) for i in range(1000)})
    history = RateHistory(topics_max=10)
    ctx = SimpleNamespace(history=history, admin=SimpleNamespace(service=SimpleNamespace(topics=topics)))
    sample_now(ctx, 1_000)  # type: ignore[arg-type]
    assert len(history.tracked()) == 10 and _CountingTopics.walked == 10  # filled the room, then stopped
    _CountingTopics.walked = 0
    sample_now(ctx, 3_000)  # type: ignore[arg-type]
    assert _CountingTopics.walked == 0  # full: only the tracked ones, looked up by name
    del topics["t0"]  # unloaded: forgotten, and its place taken by the next one
    sample_now(ctx, 5_000)  # type: ignore[arg-type]
    sample_now(ctx, 7_000)  # type: ignore[arg-type]
    assert len(history.tracked()) == 10 and "t0" not in history.tracked()


def test_idle_topics_share_one_sample_and_the_sum_still_adds_every_topic() -> None:
    # Negative control (run): a Sample built per topic, as before, makes the identity check fail;
    # a sum that skipped the shared samples' backlog makes the broker's backlog 2, not 7.
    history = RateHistory()
    idle = {f"idle{i}": Counters(5, 5, 50, 1) for i in range(5)}
    history.sample(1_000, {**idle, "busy": Counters(0, 0, 0, 2)})
    history.sample(2_000, {**idle, "busy": Counters(10, 0, 100, 2)})
    latest = [history.topic(f"idle{i}")[-1] for i in range(5)]
    assert all(s is latest[0] for s in latest)  # one object for the pass's idle topics of one backlog
    assert (latest[0].t_ms, latest[0].msg_rate_in, latest[0].backlog_count) == (2_000, 0.0, 1)
    busy = history.topic("busy")[-1]
    assert (busy.msg_rate_in, busy.byte_rate_in, busy.backlog_count) == (10.0, 100.0, 2)
    total = history.broker()[-1]
    assert (total.msg_rate_in, total.byte_rate_in, total.backlog_count) == (10.0, 100.0, 7)
