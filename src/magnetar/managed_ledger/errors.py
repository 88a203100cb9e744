"""Operating errors of the managed ledger (all ``MagnetarError``s).

``ManagedLedgerFenced`` means another owner took the topic over (its metadata CAS or fencing won):
this object can never write again. ``ledger`` layer errors reaching a caller are translated here.
"""

from __future__ import annotations

from magnetar.base.errors import ClosedError, FencedError, InvalidArgument, MagnetarError, NotFound


class ManagedLedgerFenced(FencedError):
    """Another owner took over the managed ledger (BadVersion on its info, or its ledger fenced)."""


class ManagedLedgerClosed(ClosedError):
    """The managed ledger or cursor was closed."""


class ManagedLedgerTerminated(MagnetarError):
    """The managed ledger was terminated: no more appends."""


class ManagedLedgerWriteFailed(MagnetarError):
    """Adds failed after a ledger failure; no add is accepted until ``settle_failed_writes``."""


class CursorNotFound(NotFound):
    """No cursor of that name."""


class InvalidCursorPosition(InvalidArgument):
    """A position a cursor cannot take (beyond the end of the log, or malformed)."""


__all__ = [
    "CursorNotFound",
    "InvalidCursorPosition",
    "ManagedLedgerClosed",
    "ManagedLedgerFenced",
    "ManagedLedgerTerminated",
    "ManagedLedgerWriteFailed",
]
