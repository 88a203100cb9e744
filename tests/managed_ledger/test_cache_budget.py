"""The entry caches of one factory's managed ledgers share one byte bound (as Pulsar's
broker-wide managedLedgerCacheSizeMB), on top of each one's own bound."""

from __future__ import annotations

import pytest

from magnetar.base.invariant import InvariantViolationError
from magnetar.base.limits import MANAGED_LEDGER_CACHE_TOTAL_BYTES_MAX
from magnetar.base.types import Position
from magnetar.managed_ledger.entry_reader import CacheBudget, CacheHolder, EntryReader
from tests.managed_ledger.harness import config, make_world


def _reader(budget: CacheBudget) -> EntryReader:
    return EntryReader(manager=None, budget=budget)  # type: ignore[arg-type]  # caching only


def test_readers_sharing_a_budget_stay_under_it_and_the_least_recently_written_gives_way() -> None:
    budget = CacheBudget(bytes_max=1000)
    a, b = _reader(budget), _reader(budget)
    for i in range(6):
        a.remember(Position(1, i), b"a" * 100)
    for i in range(6):
        b.remember(Position(2, i), b"b" * 100)
    assert budget.bytes == a.cached_bytes + b.cached_bytes <= 1000
    assert b.cached_bytes == 600 and a.cached_bytes == 400  # a wrote least recently: it gave up its oldest
    b.forget_ledger(2)
    a.clear()
    assert budget.bytes == 0 and a.cached_bytes == b.cached_bytes == 0


def test_negative_control_separate_budgets_add_up() -> None:
    """Each reader with a budget of its own (the old per-ledger bound only) holds all it wrote."""
    a, b = _reader(CacheBudget(bytes_max=1000)), _reader(CacheBudget(bytes_max=1000))
    for i in range(6):
        a.remember(Position(1, i), b"a" * 100)
        b.remember(Position(2, i), b"b" * 100)
    assert a.cached_bytes + b.cached_bytes == 1200


async def test_a_factorys_managed_ledgers_share_its_budget_and_closing_gives_bytes_back() -> None:
    world = make_world()
    factory = await world.broker(config())
    assert factory.cache_budget.bytes_max == MANAGED_LEDGER_CACHE_TOTAL_BYTES_MAX
    factory.cache_budget.bytes_max = 10_000
    mls = [await factory.open(f"public/default/persistent/t{i}") for i in range(3)]
    for ml in mls:
        for _ in range(20):
            await ml.add_entry(b"x" * 1000)
    assert factory.cache_budget.bytes <= 10_000
    entries = await mls[0].read_entries(Position(-1, -1), 100)  # evicted entries come from the bookies
    assert len(entries) == 20 and all(e.payload == b"x" * 1000 for e in entries)
    for ml in mls:
        await ml.close()
    assert factory.cache_budget.bytes == 0


async def test_the_cached_tail_is_read_without_a_suspension_and_a_miss_says_so() -> None:
    """``read_cached`` (the dispatcher's send at add): the current ledger's tail from the cache,
    the same entries ``read_entries`` gives; None where only ``read_entries`` can answer."""
    world = make_world()
    factory = await world.broker(config())
    ml = await factory.open("public/default/persistent/tail")
    positions = [await ml.add_entry(b"e%d" % i) for i in range(5)]
    ledger = positions[0].ledger_id
    tail = ml.read_cached(positions[2], 100)
    assert tail is not None and tail == await ml.read_entries(positions[2], 100)
    assert [e.payload for e in tail] == [b"e2", b"e3", b"e4"]
    assert [e.position for e in ml.read_cached(positions[0], 2) or []] == positions[:2]  # count bound
    assert ml.read_cached(Position(ledger, 5), 10) == []  # past the last confirmed entry
    assert ml.read_cached(Position(ledger - 1, 0), 10) is None  # not the current ledger
    factory.cache_budget.bytes_max = 0  # control: a cache miss is None, never a short read
    await ml.add_entry(b"e5")
    assert ml.read_cached(positions[0], 10) is None
    assert len(await ml.read_entries(positions[0], 10)) == 6
    await ml.close()


def test_entries_are_found_by_ledger_and_id_across_runs_gaps_and_the_compaction_of_given_up_slots() -> None:
    """The entry cache keeps consecutive entries of a ledger as one run (``_CachedRun``): a new
    ledger or a gap starts another; the oldest entry goes first across runs; a run whose head was
    given up is compacted (the ids after it still find their payloads); an entry remembered out
    of log order is a bug (the pipeline's positions only grow)."""
    budget = CacheBudget(bytes_max=10**9)
    r = _reader(budget)
    for i in range(5):
        r.remember(Position(1, i), b"a%d" % i)
    for i in (0, 1, 5, 6):  # 2..4 never remembered: a gap
        r.remember(Position(2, i), b"b%d" % i)
    assert r.cached(1, 0, 4) == [b"a%d" % i for i in range(5)]
    assert r.cached(2, 0, 1) == [b"b0", b"b1"] and r.cached(2, 5, 6) == [b"b5", b"b6"]
    assert r.cached(2, 1, 5) is None and r.cached(2, 7, 7) is None and r.cached(3, 0, 0) is None
    for _ in range(6):  # ledger 1's five, then ledger 2's first
        assert r.evict_oldest()
    assert r.cached(1, 4, 4) is None and r.cached(2, 0, 0) is None and r.cached(2, 1, 1) == [b"b1"]
    assert r.cached_bytes == budget.bytes == 6
    r.forget_ledger(2)
    assert r.cached_bytes == budget.bytes == 0 and not r.evict_oldest()
    for i in range(2000):
        r.remember(Position(3, i), bytes([i % 256]))
    for _ in range(1500):  # past half of the run: its list is compacted on the way
        assert r.evict_oldest()
    assert r.cached(3, 1499, 1499) is None
    assert r.cached(3, 1500, 1999) == [bytes([i % 256]) for i in range(1500, 2000)]
    assert r.cached_bytes == budget.bytes == 500
    with pytest.raises(InvariantViolationError):
        r.remember(Position(3, 10), b"x")  # not after the cached tail
    r.clear()
    assert budget.bytes == 0 and r.cached(3, 1999, 1999) is None


class _Holder(CacheHolder):
    """A ``CacheHolder`` with a number of cached entries of one byte each."""

    def __init__(self, name: int, budget: CacheBudget) -> None:
        self.name = name
        self.budget = budget
        self.entries = 0

    def evict_oldest(self) -> bool:
        if not self.entries:
            return False
        self.entries -= 1
        self.budget.bytes -= 1  # as ``EntryReader.evict_oldest``
        return True


def test_the_budget_evicts_from_the_least_recently_written_holder_exactly_as_an_ordered_dict_does() -> None:
    """The budget's order is a list with stale entries (a write appends, the holder's older entry
    stays behind) compacted now and then: checked write by write against the reference, an
    ``OrderedDict`` moved to the end per write, over many holders (compactions happen) with
    evictions, holders emptied and holders leaving. (Negative control, run: ``_oldest`` without
    its check that an entry is its holder's last one evicts from a holder written to since, and
    the first comparison of the order fails.)"""
    import random
    from collections import OrderedDict

    rng = random.Random(23)
    budget = CacheBudget(bytes_max=40)
    holders = [_Holder(i, budget) for i in range(30)]
    model: OrderedDict[int, None] = OrderedDict()
    for step in range(5000):
        holder = holders[rng.randrange(len(holders)) if rng.random() < 0.7 else rng.randrange(3)]
        if rng.random() < 0.05 and holder.entries:  # the holder gives back everything (closed)
            budget.released(holder, holder.entries, empty=True)
            holder.entries = 0
            model.pop(holder.name, None)
        else:
            holder.entries += 1
            model[holder.name] = None
            model.move_to_end(holder.name)
            before = {h.name: h.entries for h in holders}
            budget.charged(holder, 1)
            evicted = [name for name, count in before.items() if holders[name].entries < count]
            while sum(before.values()) > 40:  # the reference evicts from its oldest
                oldest = next(iter(model))
                if before[oldest]:
                    before[oldest] -= 1
                else:
                    del model[oldest]
            assert {h.name: h.entries for h in holders} == before, f"step {step}: evicted {evicted}"
        assert [h.name for h in budget.holders()] == list(model), f"step {step}"
    assert len(budget._order) <= 2 * len(model) + 64 + 1  # compacted: stale entries stay bounded
