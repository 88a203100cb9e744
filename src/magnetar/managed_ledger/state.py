"""The one state of a managed ledger, and its one table of transitions.

``ManagedLedger`` and its ``AppendPipeline`` share one ``MLStateMachine``: the managed ledger moves
it (open, rollover, fencing, termination, close); the pipeline reads it to decide whether an add
may start. Every transition goes through ``move`` and is checked against ``TRANSITIONS``.
"""

from __future__ import annotations

import enum
from typing import Final

from magnetar.base.errors import MagnetarError
from magnetar.base.invariant import invariant


class MLState(enum.Enum):
    INITIALIZING = "initializing"
    LEDGER_OPENED = "ledger_opened"  # appends go to the current ledger
    CLOSING_LEDGER = "closing_ledger"  # rollover: waiting for in-flight adds of the old ledger
    CREATING_LEDGER = "creating_ledger"  # rollover: new ledger being created and listed
    FENCED = "fenced"  # another owner took over; no more appends
    TERMINATED = "terminated"  # no more appends by request; reads go on
    CLOSED = "closed"


TRANSITIONS: dict[MLState, frozenset[MLState]] = {
    MLState.INITIALIZING: frozenset({MLState.LEDGER_OPENED, MLState.TERMINATED, MLState.FENCED, MLState.CLOSED}),
    MLState.LEDGER_OPENED: frozenset(
        {MLState.CLOSING_LEDGER, MLState.FENCED, MLState.TERMINATED, MLState.CLOSED}
    ),
    # Back to LEDGER_OPENED when a rollover failed for a reason other than fencing (retried later).
    MLState.CLOSING_LEDGER: frozenset(
        {MLState.CREATING_LEDGER, MLState.LEDGER_OPENED, MLState.FENCED, MLState.CLOSED}
    ),
    MLState.CREATING_LEDGER: frozenset({MLState.LEDGER_OPENED, MLState.FENCED, MLState.CLOSED}),
    MLState.FENCED: frozenset({MLState.CLOSED}),
    MLState.TERMINATED: frozenset({MLState.FENCED, MLState.CLOSED}),  # a new owner took it over
    MLState.CLOSED: frozenset(),
}

#: States in which appends are accepted (started at once in LEDGER_OPENED, queued during a rollover).
#: ``Final``: compiled, a C static, not a lookup in the module's dict per append run.
WRITABLE: Final = (MLState.LEDGER_OPENED, MLState.CLOSING_LEDGER, MLState.CREATING_LEDGER)


class MLStateMachine:
    """The state of managed ledger ``name``; ``fenced_by``: what made it FENCED."""

    __slots__ = ("fenced_by", "name", "state")

    def __init__(self, name: str) -> None:
        self.name = name
        self.state = MLState.INITIALIZING
        self.fenced_by: MagnetarError | None = None

    def move(self, new: MLState) -> None:
        invariant(new in TRANSITIONS[self.state], f"managed ledger {self.name}: {self.state} -> {new}")
        self.state = new

    def is_fenced(self) -> bool:
        return self.state is MLState.FENCED
