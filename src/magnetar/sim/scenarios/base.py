"""What every scenario takes and returns: ``ScenarioOptions`` in, ``Verdict`` out."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from magnetar.sim.world import SimWorld


@dataclass(frozen=True, slots=True)
class ScenarioOptions:
    #: Operations per client (records each client writes in durable-log).
    ops_count: int = 50
    #: Negative controls: names of mechanisms to break on purpose (e.g. ``ack-before-fsync``).
    breaks: frozenset[str] = field(default_factory=frozenset)


@dataclass(frozen=True, slots=True)
class Verdict:
    ok: bool
    summary: str
    violations: tuple[str, ...] = ()

    def text(self) -> str:
        head = f"verdict: {'OK' if self.ok else 'VIOLATION'}: {self.summary}"
        return "\n".join([head, *(f"  - {line}" for line in self.violations)])


Scenario = Callable[[SimWorld, ScenarioOptions], Verdict]
