"""Operating errors of the ledger client (all ``MagnetarError``s).

Transport adapters translate bookie statuses into these at the layer boundary:
``NoSuchEntryError`` is a *valid negative* answer (the bookie is sure it never stored the entry),
``BookieUnavailableError`` is anything that tells nothing (refused, timed out, overloaded, bad digest).
A fenced bookie raises the base ``FencedError``.
"""

from __future__ import annotations

from magnetar.base.errors import MagnetarError, NotFoundError


class NoSuchEntryError(NotFoundError):
    """A bookie answered that it has no such entry (or no such ledger): a valid negative."""


class BookieUnavailableError(MagnetarError):
    """A bookie did not answer usefully (connection error, timeout, overload, corrupt reply)."""


class NotEnoughBookiesError(MagnetarError):
    """Placement found too few live bookies outside the current ensemble."""


class LedgerStateError(MagnetarError):
    """The ledger's metadata state forbids the operation (e.g. closing a ledger in recovery)."""


class RecoveryIncompleteError(MagnetarError):
    """Recovery could not decide the ledger's end now (too few bookies answered); retry later."""
