"""Rack-aware placement (``ledger.rack_placement``): exhaustively against brute force for small
sizes, and with hypothesis for larger ones; the rack configuration store (``ledger.racks``)."""

from __future__ import annotations

import asyncio
import itertools
import logging

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from magnetar.base.errors import InvalidArgumentError, NotFoundError
from magnetar.base.rng import SeededRng
from magnetar.base.types import BookieId
from magnetar.ledger.errors import NotEnoughBookiesError
from magnetar.ledger.placement import StaticBookieDirectory
from magnetar.ledger.quorum import write_set
from magnetar.ledger.rack_placement import (
    RackAwarePlacement,
    choose_replacement,
    min_distinct_racks,
    min_distinct_regions,
    place_ensemble,
    write_set_spans,
)
from magnetar.ledger.racks import (
    BookieRack,
    RackConfig,
    RackedBookieDirectory,
    delete_rack,
    rack_with_region,
    read_racks,
    region_of,
    set_rack,
)
from magnetar.metadata import MemoryMetadataServer
from magnetar.runtime.clock import SystemClock


def bookies_on(rack_sizes: tuple[int, ...]) -> tuple[list[BookieId], dict[BookieId, str]]:
    bookies, racks = [], {}
    for r, size in enumerate(rack_sizes):
        for i in range(size):
            b = BookieId.parse(f"127.0.0.{r + 1}:{3181 + i}")
            bookies.append(b)
            racks[b] = f"/rack-{r}"
    return bookies, racks


def best_possible(rack_sizes: tuple[int, ...], e: int, qw: int) -> int:
    """Brute force: the best tightest-write-set rack count over every slot-rack sequence."""
    best = 0
    for seq in itertools.product(range(len(rack_sizes)), repeat=e):
        if all(seq.count(r) <= size for r, size in enumerate(rack_sizes)):
            best = max(best, min_distinct_racks([str(r) for r in seq], qw))
    return best


def write_set_racks(ensemble: tuple[BookieId, ...], racks: dict[BookieId, str], qw: int) -> list[set[str]]:
    e = len(ensemble)
    return [{racks[ensemble[i]] for i in write_set(entry, e, qw)} for entry in range(e)]


RACK_SHAPES = [s for n in range(1, 5) for s in itertools.product(range(1, 4), repeat=n)]


@pytest.mark.parametrize("rack_sizes", RACK_SHAPES)
def test_exhaustive_small_sizes_reach_the_best_spread(rack_sizes: tuple[int, ...]) -> None:
    bookies, racks = bookies_on(rack_sizes)
    for e in range(1, min(5, len(bookies)) + 1):
        for qw in range(1, e + 1):
            ensemble, spanned = place_ensemble(bookies, racks, e, qw)
            assert len(set(ensemble)) == e and set(ensemble) <= set(bookies)
            assert spanned == min(len(s) for s in write_set_racks(ensemble, racks, qw))
            assert spanned == best_possible(rack_sizes, e, qw), (rack_sizes, e, qw, ensemble)


def test_three_racks_of_two_put_every_write_set_on_three_racks() -> None:
    bookies, racks = bookies_on((2, 2, 2))
    ensemble, spanned = place_ensemble(bookies, racks, 3, 3)
    assert spanned == 3 and len({racks[b] for b in ensemble}) == 3
    ensemble, spanned = place_ensemble(bookies, racks, 6, 3)  # striped: still 3 racks per write set
    assert spanned == 3 and all(len(s) == 3 for s in write_set_racks(ensemble, racks, 3))


@given(st.lists(st.integers(1, 4), min_size=1, max_size=6), st.integers(1, 8), st.integers(1, 8),
       st.randoms(use_true_random=False))
@settings(max_examples=300, deadline=None)
def test_every_write_set_spans_the_racks_it_can(sizes: list[int], e: int, qw: int, order: object) -> None:
    bookies, racks = bookies_on(tuple(sizes))
    order.shuffle(bookies)  # type: ignore[attr-defined]
    qw = min(qw, e)
    if len(bookies) < e:
        with pytest.raises(NotEnoughBookiesError):
            place_ensemble(bookies, racks, e, qw)
        return
    ensemble, spanned = place_ensemble(bookies, racks, e, qw)
    assert len(set(ensemble)) == e
    per_set = write_set_racks(ensemble, racks, qw)
    assert spanned == min(len(s) for s in per_set)
    # Enough racks with room for a round-robin layout: the full rule holds.
    if len(sizes) >= qw and e <= qw * 1 + (len(sizes) - qw) + sum(sizes) and _round_robin_fits(sizes, e, qw):
        assert spanned == qw


def _round_robin_fits(sizes: list[int], e: int, qw: int) -> bool:
    """A sufficient condition: e slots dealt round-robin over some k >= qw racks (k divides into
    a cycle with no repeat within qw) fit the racks' sizes."""
    for k in range(qw, len(sizes) + 1):
        if e % k == 0 or e <= k:
            need = [e // k + (1 if i < e % k else 0) for i in range(k)] if e > k else [1] * e
            top = sorted(sizes, reverse=True)[:k]
            if all(n <= s for n, s in zip(sorted(need, reverse=True), top, strict=False)):
                return True
    return False


def test_replacement_avoids_the_racks_of_the_write_set() -> None:
    bookies, racks = bookies_on((2, 2, 2))
    ensemble, _ = place_ensemble(bookies, racks, 3, 3)
    lost_slot = 1
    candidates = [b for b in bookies if b not in ensemble]
    chosen, shared = choose_replacement(candidates, racks, ensemble, lost_slot, 3)
    assert shared == 0 and racks[chosen] == racks[ensemble[lost_slot]]
    # A whole rack lost: no candidate on a fresh rack -> the least-shared one, and it says so.
    dead_rack = racks[ensemble[lost_slot]]
    alive = [b for b in candidates if racks[b] != dead_rack]
    chosen, shared = choose_replacement(alive, racks, ensemble, lost_slot, 3)
    assert shared == 1 and chosen not in ensemble


@given(st.lists(st.integers(1, 3), min_size=1, max_size=5), st.integers(2, 6), st.integers(0, 5))
@settings(max_examples=200, deadline=None)
def test_replacement_is_as_good_as_any_candidate(sizes: list[int], e: int, slot: int) -> None:
    bookies, racks = bookies_on(tuple(sizes))
    if len(bookies) <= e:
        return
    slot %= e
    ensemble, _ = place_ensemble(bookies, racks, e, min(3, e))
    candidates = [b for b in bookies if b not in ensemble]
    _chosen, shared = choose_replacement(candidates, racks, ensemble, slot, min(3, e))
    for other in candidates:
        trial = list(ensemble)
        trial[slot] = other
        others = [trial[q] for win in _sets_with(slot, e, min(3, e)) for q in win if q != slot]
        assert shared <= sum(1 for b in others if racks[b] == racks[other])


def _sets_with(slot: int, e: int, qw: int) -> list[list[int]]:
    from magnetar.ledger.rack_placement import write_sets_of

    return write_sets_of(slot, e, qw)


def test_policy_warns_when_it_must_degrade(caplog: pytest.LogCaptureFixture) -> None:
    async def main() -> None:
        server = MemoryMetadataServer(SystemClock())
        store = await server.connect(10_000)
        bookies, _ = bookies_on((3, 3))  # two racks for Qw = 3
        for b in bookies:
            await set_rack(store, str(b), BookieRack(f"/region-a/rack-{str(b).split('.')[3][0]}"))
        directory = RackedBookieDirectory(StaticBookieDirectory(bookies), store)
        policy = RackAwarePlacement(SeededRng(7), directory)
        available = await directory.available_bookies()
        with caplog.at_level(logging.WARNING):
            ensemble = policy.new_ensemble(available, 3, 3)
        assert len({directory.racks[b] for b in ensemble}) == 2  # both racks used
        assert policy.degraded_count == 1 and "degraded" in caplog.text
        await store.close()

    asyncio.run(main())


def test_rack_configuration_in_pulsars_shape() -> None:
    async def main() -> None:
        server = MemoryMetadataServer(SystemClock())
        store = await server.connect(10_000)
        await set_rack(store, "127.0.0.1:3181", BookieRack("region-a/rack-1", "h1"))
        await set_rack(store, "127.0.0.1:3182", BookieRack("/rack-2"), group="g2")
        config, version = await read_racks(store)
        assert version >= 0
        assert config.to_json() == {"default": {"127.0.0.1:3181": {"rack": "/region-a/rack-1", "hostname": "h1"}},
                                    "g2": {"127.0.0.1:3182": {"rack": "/rack-2", "hostname": ""}}}
        assert config.find("127.0.0.1:3181") == BookieRack("/region-a/rack-1", "h1")
        assert BookieRack("/region-a/rack-1").region == "region-a" and BookieRack("/rack-2").region == ""
        await set_rack(store, "127.0.0.1:3182", BookieRack("/rack-3"))  # moves it to the default group
        config, _ = await read_racks(store)
        assert set(config.groups) == {"default"} and config.rack_of("127.0.0.1:3182") == "/rack-3"
        await delete_rack(store, "127.0.0.1:3182")
        with pytest.raises(NotFoundError):
            await delete_rack(store, "127.0.0.1:3182")
        assert RackConfig.decode(config.encode()) == config
        await store.close()

    asyncio.run(main())


# --- regions -------------------------------------------------------------------------------------

def bookies_in_regions(shape: tuple[tuple[int, ...], ...]) -> tuple[list[BookieId], dict[BookieId, str]]:
    """``shape[g][r]`` bookies in rack r of region g (locations ``/g{g}/r{g}.{r}``)."""
    bookies, racks = [], {}
    for g, rack_sizes in enumerate(shape):
        for r, size in enumerate(rack_sizes):
            for i in range(size):
                b = BookieId.parse(f"127.{g}.{r}.1:{3181 + i}")
                bookies.append(b)
                racks[b] = f"/g{g}/r{g}.{r}"
    return bookies, racks


def best_region_spread(sizes: dict[str, int], e: int, qw: int) -> tuple[int, int]:
    """Brute force: the best (regions, racks) of the tightest write set, regions first."""
    names = sorted(sizes)
    best = (0, 0)
    for seq in itertools.product(names, repeat=e):
        if all(seq.count(r) <= sizes[r] for r in names):
            best = max(best, (min_distinct_regions(list(seq), qw), min_distinct_racks(list(seq), qw)))
    return best


REGION_SHAPES = [((1,), (1,), (1,)), ((2, 1), (1,)), ((1, 1), (1, 1)), ((2,), (1, 1), (1,)), ((1, 1, 1), (2,)),
                 ((3,), (1,)), ((1, 1), (1,), (2,)), ((2, 2), (2,)), ((1,), (1, 1, 1))]


@pytest.mark.parametrize("shape", REGION_SHAPES)
def test_exhaustive_small_region_shapes_reach_the_best_spread_regions_first(
        shape: tuple[tuple[int, ...], ...]) -> None:
    bookies, racks = bookies_in_regions(shape)
    sizes = {r: sum(1 for b in bookies if racks[b] == r) for r in set(racks.values())}
    for e in range(1, min(5, len(bookies)) + 1):
        for qw in range(1, e + 1):
            ensemble, spanned = place_ensemble(bookies, racks, e, qw)
            assert len(set(ensemble)) == e
            got = write_set_spans(ensemble, racks, qw)
            assert got[1] == spanned
            assert got == best_region_spread(sizes, e, qw), (shape, e, qw, ensemble)


@given(st.lists(st.lists(st.integers(1, 3), min_size=1, max_size=3), min_size=1, max_size=4), st.integers(1, 6),
       st.integers(1, 4), st.randoms(use_true_random=False))
@settings(max_examples=100, deadline=None)
def test_write_sets_span_every_region_when_each_region_has_room(shape: list[list[int]], e: int, qw: int,
                                                               order: object) -> None:
    """Regions enough and each with a bookie per write set it must hold: every write set spans
    min(Qw, regions) regions; and never fewer racks than regions."""
    bookies, racks = bookies_in_regions(tuple(tuple(r) for r in shape))
    order.shuffle(bookies)  # type: ignore[attr-defined]
    if len(bookies) < e:
        return
    qw = min(qw, e)
    ensemble, _ = place_ensemble(bookies, racks, e, qw)
    regions, rack_span = write_set_spans(ensemble, racks, qw)
    assert rack_span >= regions
    per_region = [sum(r) for r in shape]
    k = len(shape)
    # Slots dealt round-robin over all k regions (k >= Qw): region i gets ceil or floor of e / k.
    if k >= qw and (e % k == 0 or e < k) and all(n >= -(-e // k) for n in per_region):
        assert regions == min(qw, k)


def test_replacement_prefers_the_lost_copys_region_over_a_fresh_rack_elsewhere() -> None:
    bookies, racks = bookies_in_regions(((1, 1), (1, 1), (1, 1)))
    by_rack = {racks[b]: b for b in bookies}
    ensemble = (by_rack["/g0/r0.0"], by_rack["/g1/r1.0"], by_rack["/g2/r2.0"])
    candidates = [by_rack["/g1/r1.1"], by_rack["/g2/r2.1"], by_rack["/g0/r0.1"]]
    chosen, shared = choose_replacement(candidates, racks, ensemble, 0, 3)
    assert racks[chosen] == "/g0/r0.1" and shared == 0  # the only choice that keeps 3 regions


def test_rack_with_region() -> None:
    assert rack_with_region("rack-1", "") == "/rack-1"
    assert rack_with_region("rack-1", "eu") == "/eu/rack-1"
    assert rack_with_region("/eu/rack-1", "eu") == "/eu/rack-1"
    assert rack_with_region("", "eu") == "/eu/default-rack"
    for rack, region in (("/us/rack-1", "eu"), ("rack", "a/b"), ("", "")):
        with pytest.raises(InvalidArgumentError):
            rack_with_region(rack, region)
    assert region_of("/eu/rack-1") == "eu" and region_of("/rack-1") == ""
    assert BookieRack("/eu/rack-1", "h").to_admin_json() == {"rack": "/eu/rack-1", "hostname": "h", "region": "eu"}


def test_policy_warns_when_regions_cannot_be_spread(caplog: pytest.LogCaptureFixture) -> None:
    """(4,2,2) with one bookie in region g1 and three in g0: alternating regions would need two
    g1 bookies, so some write set stays in g0: placed anyway, with a warning."""
    async def main() -> None:
        server = MemoryMetadataServer(SystemClock())
        store = await server.connect(10_000)
        bookies, racks = bookies_in_regions(((1, 1, 1), (1,)))
        for b in bookies:
            await set_rack(store, str(b), BookieRack(racks[b]))
        directory = RackedBookieDirectory(StaticBookieDirectory(bookies), store)
        policy = RackAwarePlacement(SeededRng(3), directory)
        available = await directory.available_bookies()
        with caplog.at_level(logging.WARNING):
            ensemble = policy.new_ensemble(available, 4, 2)
        assert write_set_spans(ensemble, directory.racks, 2) == (1, 2)
        assert policy.degraded_count == 1 and "regions" in caplog.text
        caplog.clear()
        with caplog.at_level(logging.WARNING):
            ensemble = policy.new_ensemble(available, 2, 2)  # (2,2,2): one per region, no warning
        assert write_set_spans(ensemble, directory.racks, 2) == (2, 2) and "degraded" not in caplog.text
        await store.close()

    asyncio.run(main())
