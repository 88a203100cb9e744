"""Typed errors of the metadata store.

They reuse the base hierarchy so callers can catch either the precise metadata error or the
general one: ``NodeExistsError`` is an ``AlreadyExistsError`` *and* a ``BadVersionError`` (a ``put`` with
``expected_version=-1`` lost a compare-and-set), ``NoNodeError`` is a ``NotFoundError`` *and* a
``BadVersionError`` (a ``put`` expecting a version found nothing). Every store (memory, embedded,
ZooKeeper) raises exactly these; the ZooKeeper adapter translates kazoo's exceptions at its
boundary.
"""

from __future__ import annotations

from magnetar.base.errors import (
    AlreadyExistsError,
    BadVersionError,
    ClosedError,
    CorruptDataError,
    InvalidArgumentError,
    MagnetarError,
    NotFoundError,
)

__all__ = [
    "BadVersionError",
    "MetadataError",
    "MetadataUnavailableError",
    "NoChildrenForEphemeralsError",
    "NoNodeError",
    "NodeExistsError",
    "NodeNotEmptyError",
    "SessionClosedError",
    "SessionExpiredError",
    "UnknownRecordVersionError",
]


class MetadataError(MagnetarError):
    """Base of errors that only the metadata store raises."""


class NodeExistsError(AlreadyExistsError, BadVersionError):
    """A create (``put(..., -1)``) found the node already there."""


class NoNodeError(NotFoundError, BadVersionError):
    """The node does not exist (update with an expected version, delete)."""


class NodeNotEmptyError(MetadataError):
    """``delete`` of a node that still has children."""


class NoChildrenForEphemeralsError(InvalidArgumentError):
    """Ephemeral nodes cannot have children (as in ZooKeeper)."""


class SessionExpiredError(MetadataError):
    """The client's session expired: its ephemeral nodes and locks are gone; open a new client."""


class SessionClosedError(ClosedError):
    """The client was closed; it serves no more calls."""


class MetadataUnavailableError(MetadataError):
    """The store could not be reached in time; a write's outcome is unknown (re-read, then retry)."""


class UnknownRecordVersionError(CorruptDataError):
    """A stored record carries a version byte this code does not know."""

    def __init__(self, record: str, version: int) -> None:
        super().__init__(f"{record}: unknown record version {version}")
        self.record = record
        self.version = version
