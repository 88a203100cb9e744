"""Which life of which simulated node the running task belongs to.

Every task of a node runs in a context where ``current_incarnation`` names that node's current
incarnation. When the node crashes the incarnation dies; a task of the dead incarnation that
still runs (it swallowed its cancellation, or sat in a ``finally``) meets ``SimCrashError`` at its
next simulated disk, key/value, network or clock call. So a crashed node cannot write after its
crash, whatever its code does. Outside a world (plain unit tests) there is no incarnation and
the check passes.
"""

from __future__ import annotations

import contextvars
from dataclasses import dataclass

from magnetar.sim.errors import SimCrashError


@dataclass(slots=True)
class Incarnation:
    node: str
    number: int
    alive: bool = True

    def __str__(self) -> str:
        return f"{self.node}#{self.number}"


current_incarnation: contextvars.ContextVar[Incarnation | None] = contextvars.ContextVar(
    "magnetar_sim_incarnation", default=None
)


def check_alive() -> None:
    """Raise ``SimCrashError`` if the calling task belongs to a crashed incarnation of its node."""
    incarnation = current_incarnation.get()
    if incarnation is not None and not incarnation.alive:
        raise SimCrashError(f"{incarnation} has crashed")
