"""Rack- and region-aware placement (BookKeeper's ``RackawareEnsemblePlacementPolicy``, and the
idea of its ``RegionAwareEnsemblePlacementPolicy`` simplified), as pure functions.

The copies of an entry go to its write set: ``Qw`` consecutive ensemble slots, wrapping around
(``ledger.quorum.write_set``). A rack failure, or a whole region's, must not take every copy of
an entry, so (a region is the first part of a ``/region/rack`` location, ``ledger.racks``):

* ``place_ensemble`` chooses, for an ensemble of ``E`` slots, a rack per slot such that every
  write set spans ``min(Qw, regions available)`` distinct regions and, among such assignments,
  ``min(Qw, racks available)`` distinct racks when one exists (slot racks found by a depth-first
  search that tries racks of a region the last slots do not use first, then the rack with the
  most unused bookies, and prunes a write set that can no longer reach the target), else the
  best (regions, racks) pair below that it can reach, regions first (the *degraded* case, which
  the policy logs); then takes the bookies of each rack in the given (shuffled) order. It
  returns the ensemble and the number of distinct racks its tightest write set spans
  (``write_set_spans`` gives regions and racks).
* ``choose_replacement`` picks a bookie for one slot (ensemble change, AutoRecovery) whose region
  holds the fewest other copies of the write sets that slot belongs to, then whose rack does
  (0 when possible), then the rack least used in the ensemble.

Bookies without a region are all in the default region ``""``: with no regions configured the
rules reduce to the rack-aware ones.

``RackAwarePlacement`` is the ``PlacementPolicy`` over a ``RackedBookieDirectory``: it shuffles
the candidates with the injected ``Rng`` (so equal racks are used evenly) and calls these.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

from magnetar.base.rng import Rng
from magnetar.base.types import BookieId
from magnetar.ledger.errors import NotEnoughBookiesError
from magnetar.ledger.racks import DEFAULT_RACK, RackedBookieDirectory, region_of

log = logging.getLogger(__name__)

#: Search nodes one ``place_ensemble`` target may visit before the next lower target is tried.
PLACEMENT_SEARCH_NODES_MAX = 20_000


def write_sets_of(slot: int, ensemble_size: int, write_quorum_size: int) -> list[list[int]]:
    """The write sets (slot lists) that contain ``slot``."""
    out = []
    for start in range(ensemble_size):
        members = [(start + w) % ensemble_size for w in range(write_quorum_size)]
        if slot in members:
            out.append(members)
    return out


def min_distinct_racks(racks: Sequence[str], write_quorum_size: int) -> int:
    """The fewest distinct racks any write set of this slot-rack sequence spans."""
    e = len(racks)
    return min(len({racks[(s + w) % e] for w in range(write_quorum_size)}) for s in range(e))


def min_distinct_regions(racks: Sequence[str], write_quorum_size: int) -> int:
    """The fewest distinct regions any write set of this slot-rack sequence spans."""
    return min_distinct_racks([region_of(r) for r in racks], write_quorum_size)


@dataclass(frozen=True, slots=True)
class _Target:
    regions: int
    racks: int


def _search(sizes: dict[str, int], order: list[str], e: int, qw: int, target: _Target) -> list[str] | None:
    slots: list[str] = []
    remaining = dict(sizes)
    region = {r: region_of(r) for r in order}
    visited = 0
    windows = [[(s + w) % e for w in range(qw)] for s in range(e)]
    windows_of = [[win for win in windows if p in win] for p in range(e)]

    def ok(p: int) -> bool:
        for win in windows_of[p]:
            assigned = [slots[q] for q in win if q <= p]
            free = len(win) - len(assigned)
            if len(set(assigned)) + free < target.racks:
                return False
            if len({region[r] for r in assigned}) + free < target.regions:
                return False
        return True

    def dfs(p: int) -> bool:
        nonlocal visited
        if p == e:
            return True
        visited += 1
        if visited > PLACEMENT_SEARCH_NODES_MAX:
            return False
        recent = {region[r] for r in slots[max(0, p - qw + 1):]}
        # Racks of a region the last slots do not use first, then the rack with the most bookies left.
        for rack in sorted(order, key=lambda r: (region[r] in recent, -remaining[r])):
            if remaining[rack] == 0:
                continue
            slots.append(rack)
            remaining[rack] -= 1
            if ok(p) and dfs(p + 1):
                return True
            slots.pop()
            remaining[rack] += 1
        return False

    return list(slots) if dfs(0) else None


def _targets(order: Sequence[str], qw: int) -> list[_Target]:
    """(regions, racks) per write set to try, best first: regions first, then racks."""
    regions = len({region_of(r) for r in order})
    return [_Target(g, k) for g in range(min(qw, regions), 0, -1) for k in range(min(qw, len(order)), g - 1, -1)]


def place_ensemble(candidates: Sequence[BookieId], racks: Mapping[BookieId, str], ensemble_size: int,
                   write_quorum_size: int) -> tuple[tuple[BookieId, ...], int]:
    """An ensemble over ``candidates`` (their order breaks ties) and the racks its tightest write
    set spans; ``NotEnoughBookiesError`` if there are fewer than ``ensemble_size`` candidates. Every
    write set spans as many regions as it can, then as many racks (``write_set_spans``)."""
    unique = list(dict.fromkeys(candidates))
    if len(unique) < ensemble_size:
        raise NotEnoughBookiesError(f"need {ensemble_size} bookies, {len(unique)} available")
    by_rack: dict[str, list[BookieId]] = {}
    for bookie in unique:
        by_rack.setdefault(racks.get(bookie, DEFAULT_RACK), []).append(bookie)
    order = list(by_rack)
    sizes = {r: len(b) for r, b in by_rack.items()}
    qw = min(write_quorum_size, ensemble_size)
    for target in _targets(order, qw):
        slots = _search(sizes, order, ensemble_size, qw, target)
        if slots is not None:
            taken: Counter[str] = Counter()
            ensemble = []
            for rack in slots:
                ensemble.append(by_rack[rack][taken[rack]])
                taken[rack] += 1
            return tuple(ensemble), min_distinct_racks(slots, qw)
    raise NotEnoughBookiesError("no ensemble found")  # target (1, 1) always succeeds with enough bookies


def write_set_spans(ensemble: Sequence[BookieId], racks: Mapping[BookieId, str],
                    write_quorum_size: int) -> tuple[int, int]:
    """The fewest distinct regions and the fewest distinct racks any write set of ``ensemble`` spans."""
    slot_racks = [racks.get(b, DEFAULT_RACK) for b in ensemble]
    qw = min(write_quorum_size, len(ensemble))
    return min_distinct_regions(slot_racks, qw), min_distinct_racks(slot_racks, qw)


def choose_replacement(candidates: Sequence[BookieId], racks: Mapping[BookieId, str], ensemble: Sequence[BookieId],
                       slot: int, write_quorum_size: int) -> tuple[BookieId, int]:
    """A bookie for ``ensemble[slot]`` and how many other copies of its write sets share its rack:
    the candidate whose region holds the fewest other copies of the slot's write sets, then
    whose rack does, then the rack least used in the ensemble."""
    if not candidates:
        raise NotEnoughBookiesError(f"no bookie available outside the ensemble {[str(b) for b in ensemble]}")
    e = len(ensemble)
    qw = min(write_quorum_size, e)
    neighbours = {q for win in write_sets_of(slot, e, qw) for q in win if q != slot}
    near = Counter(racks.get(ensemble[q], DEFAULT_RACK) for q in neighbours)
    near_region = Counter(region_of(racks.get(ensemble[q], DEFAULT_RACK)) for q in neighbours)
    used = Counter(racks.get(ensemble[q], DEFAULT_RACK) for q in range(e) if q != slot)

    def key(i: int) -> tuple[int, int, int, int]:
        rack = racks.get(candidates[i], DEFAULT_RACK)
        return near_region[region_of(rack)], near[rack], used[rack], i

    chosen = candidates[min(range(len(candidates)), key=key)]
    return chosen, near[racks.get(chosen, DEFAULT_RACK)]


def _regions(racks: Mapping[BookieId, str], bookies: Collection[BookieId]) -> int:
    return len({region_of(racks.get(b, DEFAULT_RACK)) for b in bookies})


class RackAwarePlacement:
    """``PlacementPolicy``: write sets on distinct regions, then distinct racks, when the bookies
    allow it, else degraded with a warning (only when some rack is configured: without racks
    every placement is one rack)."""

    def __init__(self, rng: Rng, directory: RackedBookieDirectory) -> None:
        self._rng = rng
        self._directory = directory
        self.degraded_count = 0

    def _shuffled(self, bookies: Sequence[BookieId]) -> list[BookieId]:
        candidates = sorted(set(bookies), key=str)
        self._rng.shuffle(candidates)
        return candidates

    def new_ensemble(self, available: Sequence[BookieId], ensemble_size: int,
                     write_quorum_size: int | None = None) -> tuple[BookieId, ...]:
        qw = min(write_quorum_size or ensemble_size, ensemble_size)
        racks = self._directory.racks
        ensemble, _ = place_ensemble(self._shuffled(available), racks, ensemble_size, qw)
        regions, spanned = write_set_spans(ensemble, racks, qw)
        regions_wanted = min(qw, _regions(racks, available))
        if (spanned < qw or regions < regions_wanted) and self._directory.configured:
            self.degraded_count += 1
            log.warning("rack-aware placement degraded: write sets span %d regions (%d wanted) and %d racks "
                        "(%d wanted; racks available: %d)", regions, regions_wanted, spanned, qw,
                        len({racks.get(b, DEFAULT_RACK) for b in available}))
        return ensemble

    def replace_bookie(self, available: Sequence[BookieId], ensemble: Sequence[BookieId],
                       excluded: Collection[BookieId], write_quorum_size: int | None = None,
                       slot: int | None = None) -> BookieId:
        avoid = set(ensemble) | set(excluded)
        candidates = [b for b in self._shuffled(available) if b not in avoid]
        failed = [i for i, b in enumerate(ensemble) if b in set(excluded)]
        index = slot if slot is not None else (failed[0] if failed else 0)
        racks = self._directory.racks
        qw = min(write_quorum_size or len(ensemble), len(ensemble))
        chosen, shared = choose_replacement(candidates, racks, ensemble, index, qw)
        if not self._directory.configured:
            return chosen
        trial = list(ensemble)
        trial[index] = chosen
        regions = min(len({region_of(racks.get(trial[q], DEFAULT_RACK)) for q in win})
                      for win in write_sets_of(index, len(trial), qw))
        regions_wanted = min(qw, _regions(racks, [b for b in trial if b not in set(excluded)] + candidates))
        if shared or regions < regions_wanted:
            self.degraded_count += 1
            log.warning("rack-aware replacement degraded: %s shares its rack with %d other copies of a write set; "
                        "its write sets span %d regions (%d wanted)", chosen, shared, regions, regions_wanted)
        return chosen


__all__ = [
    "PLACEMENT_SEARCH_NODES_MAX",
    "RackAwarePlacement",
    "choose_replacement",
    "min_distinct_racks",
    "min_distinct_regions",
    "place_ensemble",
    "write_set_spans",
    "write_sets_of",
]
