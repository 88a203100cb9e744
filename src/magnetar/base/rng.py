"""The ``Rng`` capability and its seeded implementation.

Cores draw every random choice (placement shuffles, jitter, ids) from an injected ``Rng`` so one
seed replays one run. ``SeededRng`` is deterministic; ``runtime`` seeds it from the OS.
"""

from __future__ import annotations

import random as _random
from collections.abc import MutableSequence, Sequence
from typing import Protocol, TypeVar

T = TypeVar("T")


class Rng(Protocol):
    def random(self) -> float:
        """Uniform float in [0, 1)."""

    def randint(self, low: int, high: int) -> int:
        """Uniform integer in [low, high], both included."""

    def choice(self, items: Sequence[T]) -> T: ...

    def shuffle(self, items: MutableSequence[T]) -> None: ...

    def randbytes(self, count: int) -> bytes: ...

    def expovariate(self, rate: float) -> float: ...

    def fork(self, label: str) -> Rng:
        """An independent stream derived deterministically from this one and ``label``."""


class SeededRng:
    """A deterministic ``Rng`` over ``random.Random``: equal seeds give equal streams."""

    __slots__ = ("_random", "seed")

    def __init__(self, seed: int) -> None:
        self.seed = seed
        self._random = _random.Random(seed)

    def random(self) -> float:
        return self._random.random()

    def randint(self, low: int, high: int) -> int:
        return self._random.randint(low, high)

    def choice(self, items: Sequence[T]) -> T:
        return self._random.choice(items)

    def shuffle(self, items: MutableSequence[T]) -> None:
        self._random.shuffle(items)

    def randbytes(self, count: int) -> bytes:
        return self._random.randbytes(count)

    def expovariate(self, rate: float) -> float:
        return self._random.expovariate(rate)

    def fork(self, label: str) -> SeededRng:
        # Derived from the parent's seed and the label only (not from how much the parent has
        # drawn), so adding a draw in one component does not reshuffle every other one.
        derived = _random.Random(f"{self.seed}/{label}").getrandbits(63)
        return SeededRng(derived)
