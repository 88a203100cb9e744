"""Operating errors of the managed ledger (all ``MagnetarError``s).

``ManagedLedgerFencedError`` means another owner took the topic over (its metadata CAS or fencing won):
this object can never write again. ``ledger`` layer errors reaching a caller are translated here.
"""

from __future__ import annotations

from magnetar.base.errors import ClosedError, FencedError, InvalidArgumentError, MagnetarError, NotFoundError


class ManagedLedgerFencedError(FencedError):
    """Another owner took over the managed ledger (BadVersionError on its info, or its ledger fenced)."""


class ManagedLedgerClosedError(ClosedError):
    """The managed ledger or cursor was closed."""


class ManagedLedgerTerminatedError(MagnetarError):
    """The managed ledger was terminated: no more appends."""


class ManagedLedgerWriteFailedError(MagnetarError):
    """Adds failed after a ledger failure; no add is accepted until ``settle_failed_writes``."""


class CursorNotFoundError(NotFoundError):
    """No cursor of that name."""


class InvalidCursorPositionError(InvalidArgumentError):
    """A position a cursor cannot take (beyond the end of the log, or malformed)."""


__all__ = [
    "CursorNotFoundError",
    "InvalidCursorPositionError",
    "ManagedLedgerClosedError",
    "ManagedLedgerFencedError",
    "ManagedLedgerTerminatedError",
    "ManagedLedgerWriteFailedError",
]
