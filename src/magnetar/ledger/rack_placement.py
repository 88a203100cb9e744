"""Rack-aware placement (BookKeeper's ``RackawareEnsemblePlacementPolicy``), as pure functions.

The copies of an entry go to its write set: ``Qw`` consecutive ensemble slots, wrapping around
(``ledger.quorum.write_set``). A rack failure must not take every copy of an entry, so:

* ``place_ensemble`` chooses, for an ensemble of ``E`` slots, a rack per slot such that every
  write set spans ``min(Qw, racks available)`` distinct racks when such an assignment exists
  (slot racks found by a depth-first search that tries the rack with the most unused bookies
  first and prunes a write set that can no longer reach the target), else the largest number
  below that it can reach (the *degraded* case, which the policy logs); then takes the bookies of
  each rack in the given (shuffled) order. It returns the ensemble and the number of distinct
  racks its tightest write set spans.
* ``choose_replacement`` picks a bookie for one slot (ensemble change, AutoRecovery) whose rack
  holds the fewest other copies of the write sets that slot belongs to (0 when possible), then
  the rack least used in the ensemble.

``RackAwarePlacement`` is the ``PlacementPolicy`` over a ``RackedBookieDirectory``: it shuffles
the candidates with the injected ``Rng`` (so equal racks are used evenly) and calls these.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Collection, Mapping, Sequence

from magnetar.base.rng import Rng
from magnetar.base.types import BookieId
from magnetar.ledger.errors import NotEnoughBookiesError
from magnetar.ledger.racks import DEFAULT_RACK, RackedBookieDirectory

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


def _search(sizes: dict[str, int], order: list[str], e: int, qw: int, target: int) -> list[str] | None:
    slots: list[str] = []
    remaining = dict(sizes)
    visited = 0
    windows = [[(s + w) % e for w in range(qw)] for s in range(e)]
    windows_of = [[win for win in windows if p in win] for p in range(e)]

    def ok(p: int) -> bool:
        for win in windows_of[p]:
            assigned = [q for q in win if q <= p]
            if len({slots[q] for q in assigned}) + (len(win) - len(assigned)) < target:
                return False
        return True

    def dfs(p: int) -> bool:
        nonlocal visited
        if p == e:
            return True
        visited += 1
        if visited > PLACEMENT_SEARCH_NODES_MAX:
            return False
        for rack in sorted(order, key=lambda r: -remaining[r]):
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


def place_ensemble(candidates: Sequence[BookieId], racks: Mapping[BookieId, str], ensemble_size: int,
                   write_quorum_size: int) -> tuple[tuple[BookieId, ...], int]:
    """An ensemble over ``candidates`` (their order breaks ties) and the racks its tightest write
    set spans; ``NotEnoughBookiesError`` if there are fewer than ``ensemble_size`` candidates."""
    unique = list(dict.fromkeys(candidates))
    if len(unique) < ensemble_size:
        raise NotEnoughBookiesError(f"need {ensemble_size} bookies, {len(unique)} available")
    by_rack: dict[str, list[BookieId]] = {}
    for bookie in unique:
        by_rack.setdefault(racks.get(bookie, DEFAULT_RACK), []).append(bookie)
    order = list(by_rack)
    sizes = {r: len(b) for r, b in by_rack.items()}
    qw = min(write_quorum_size, ensemble_size)
    for target in range(min(qw, len(order)), 0, -1):
        slots = _search(sizes, order, ensemble_size, qw, target)
        if slots is not None:
            taken: Counter[str] = Counter()
            ensemble = []
            for rack in slots:
                ensemble.append(by_rack[rack][taken[rack]])
                taken[rack] += 1
            return tuple(ensemble), min_distinct_racks(slots, qw)
    raise NotEnoughBookiesError("no ensemble found")  # target 1 always succeeds with enough bookies


def choose_replacement(candidates: Sequence[BookieId], racks: Mapping[BookieId, str], ensemble: Sequence[BookieId],
                       slot: int, write_quorum_size: int) -> tuple[BookieId, int]:
    """A bookie for ``ensemble[slot]`` and how many other copies of its write sets share its rack."""
    if not candidates:
        raise NotEnoughBookiesError(f"no bookie available outside the ensemble {[str(b) for b in ensemble]}")
    e = len(ensemble)
    qw = min(write_quorum_size, e)
    neighbours = {q for win in write_sets_of(slot, e, qw) for q in win if q != slot}
    near = Counter(racks.get(ensemble[q], DEFAULT_RACK) for q in neighbours)
    used = Counter(racks.get(ensemble[q], DEFAULT_RACK) for q in range(e) if q != slot)
    best = min(range(len(candidates)), key=lambda i: (near[racks.get(candidates[i], DEFAULT_RACK)],
                                                      used[racks.get(candidates[i], DEFAULT_RACK)], i))
    chosen = candidates[best]
    return chosen, near[racks.get(chosen, DEFAULT_RACK)]


class RackAwarePlacement:
    """``PlacementPolicy``: write sets on distinct racks when the racks allow it, else degraded
    with a warning (only when some rack is configured: without racks every placement is one rack)."""

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
        qw = write_quorum_size or ensemble_size
        racks = self._directory.racks
        ensemble, spanned = place_ensemble(self._shuffled(available), racks, ensemble_size, qw)
        wanted = min(qw, ensemble_size)
        if spanned < wanted and self._directory.configured:
            self.degraded_count += 1
            log.warning("rack-aware placement degraded: write sets span %d racks, %d wanted (racks available: %d)",
                        spanned, wanted, len({racks.get(b, DEFAULT_RACK) for b in available}))
        return ensemble

    def replace_bookie(self, available: Sequence[BookieId], ensemble: Sequence[BookieId],
                       excluded: Collection[BookieId], write_quorum_size: int | None = None,
                       slot: int | None = None) -> BookieId:
        avoid = set(ensemble) | set(excluded)
        candidates = [b for b in self._shuffled(available) if b not in avoid]
        failed = [i for i, b in enumerate(ensemble) if b in set(excluded)]
        index = slot if slot is not None else (failed[0] if failed else 0)
        chosen, shared = choose_replacement(candidates, self._directory.racks, ensemble, index,
                                            write_quorum_size or len(ensemble))
        if shared and self._directory.configured:
            self.degraded_count += 1
            log.warning("rack-aware replacement degraded: %s shares its rack with %d other copies of a write set",
                        chosen, shared)
        return chosen


__all__ = [
    "PLACEMENT_SEARCH_NODES_MAX",
    "RackAwarePlacement",
    "choose_replacement",
    "min_distinct_racks",
    "place_ensemble",
    "write_sets_of",
]
