"""Where a ledger's copies go: the pluggable placement policy and the live-bookie directory.

``PlacementPolicy`` picks a new ensemble and replacement bookies; the default
``RandomPlacement`` draws uniformly (from the injected ``Rng``) among the available bookies,
never choosing one already in the ensemble or one just excluded as failed. Rack- or
region-aware policies implement the same two calls. Adding bookies needs no rebalance:
new ensembles simply draw from the larger set.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Protocol

from magnetar.base.rng import Rng
from magnetar.base.types import BookieId
from magnetar.ledger.errors import NotEnoughBookiesError


class BookieDirectory(Protocol):
    async def available_bookies(self) -> list[BookieId]:
        """Bookies currently registered as writable."""


class StaticBookieDirectory:
    """A fixed, mutable list of bookies (tests, simulations, single-process setups)."""

    def __init__(self, bookies: Sequence[BookieId] = ()) -> None:
        self._bookies: list[BookieId] = list(bookies)

    def add(self, bookie: BookieId) -> None:
        if bookie not in self._bookies:
            self._bookies.append(bookie)

    def remove(self, bookie: BookieId) -> None:
        if bookie in self._bookies:
            self._bookies.remove(bookie)

    async def available_bookies(self) -> list[BookieId]:
        return list(self._bookies)


class PlacementPolicy(Protocol):
    """``write_quorum_size`` (default: the ensemble size) tells a rack-aware policy which slots
    form a write set; ``slot`` is the ensemble index being replaced (default: the first excluded)."""

    def new_ensemble(self, available: Sequence[BookieId], ensemble_size: int,
                     write_quorum_size: int | None = None) -> tuple[BookieId, ...]: ...

    def replace_bookie(
        self, available: Sequence[BookieId], ensemble: Sequence[BookieId], excluded: Collection[BookieId],
        write_quorum_size: int | None = None, slot: int | None = None,
    ) -> BookieId: ...


class RandomPlacement:
    """Uniform random placement over the available bookies."""

    def __init__(self, rng: Rng) -> None:
        self._rng = rng

    def new_ensemble(self, available: Sequence[BookieId], ensemble_size: int,
                     write_quorum_size: int | None = None) -> tuple[BookieId, ...]:
        candidates = sorted(set(available))
        if len(candidates) < ensemble_size:
            raise NotEnoughBookiesError(f"need {ensemble_size} bookies, {len(candidates)} available")
        self._rng.shuffle(candidates)
        return tuple(candidates[:ensemble_size])

    def replace_bookie(
        self, available: Sequence[BookieId], ensemble: Sequence[BookieId], excluded: Collection[BookieId],
        write_quorum_size: int | None = None, slot: int | None = None,
    ) -> BookieId:
        avoid = set(ensemble) | set(excluded)
        candidates = sorted(b for b in set(available) if b not in avoid)
        if not candidates:
            raise NotEnoughBookiesError(f"no bookie available outside the ensemble {[str(b) for b in ensemble]}")
        return self._rng.choice(candidates)
