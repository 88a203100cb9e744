"""The error hierarchy for operating errors.

Every error a caller can meet at run time (bad input, a missing thing, a version conflict, a
fenced ledger, a limit reached) is a ``MagnetarError`` subclass. Each layer translates the errors
of the layer below at its boundary; programmer errors are ``InvariantViolationError`` instead.
"""

from __future__ import annotations


class MagnetarError(Exception):
    """Base of all operating errors."""


class InvalidArgumentError(MagnetarError, ValueError):
    """The caller passed a value that can never be valid (malformed name, negative id, ...)."""


class LimitExceededError(MagnetarError):
    """A named bound from ``magnetar.base.limits`` or the config was reached."""

    def __init__(self, limit_name: str, value: int, limit: int) -> None:
        super().__init__(f"{limit_name} exceeded: {value} > {limit}")
        self.limit_name = limit_name
        self.value = value
        self.limit = limit


class NotFoundError(MagnetarError, KeyError):
    """The named object does not exist."""

    def __str__(self) -> str:  # KeyError quotes its message; we do not want that.
        return str(self.args[0]) if self.args else "not found"


class AlreadyExistsError(MagnetarError):
    """The object was to be created but exists already."""


class BadVersionError(MagnetarError):
    """A compare-and-set lost: the stored version is not the expected one."""


class FencedError(MagnetarError):
    """The ledger is fenced: a new owner took over and this writer may not add to it."""


class ClosedError(MagnetarError):
    """The object was closed (connection, ledger, store) and cannot serve the call."""


class OperationTimeoutError(MagnetarError):
    """An operation did not complete within its deadline."""


class ChecksumMismatchError(MagnetarError):
    """Stored or received bytes do not match their CRC32C."""


class CorruptDataError(MagnetarError):
    """Bytes could not be decoded: wrong magic, wrong version, truncated record."""
