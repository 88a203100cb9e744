"""Typed errors of the metadata store.

They reuse the base hierarchy so callers can catch either the precise metadata error or the
general one: ``NodeExists`` is an ``AlreadyExists`` *and* a ``BadVersion`` (a ``put`` with
``expected_version=-1`` lost a compare-and-set), ``NoNode`` is a ``NotFound`` *and* a
``BadVersion`` (a ``put`` expecting a version found nothing). Every store (memory, embedded,
ZooKeeper) raises exactly these; the ZooKeeper adapter translates kazoo's exceptions at its
boundary.
"""

from __future__ import annotations

from magnetar.base.errors import (
    AlreadyExists,
    BadVersion,
    ClosedError,
    CorruptData,
    InvalidArgument,
    MagnetarError,
    NotFound,
)

__all__ = [
    "BadVersion",
    "MetadataError",
    "MetadataUnavailable",
    "NoChildrenForEphemerals",
    "NoNode",
    "NodeExists",
    "NotEmpty",
    "SessionClosed",
    "SessionExpired",
    "UnknownRecordVersion",
]


class MetadataError(MagnetarError):
    """Base of errors that only the metadata store raises."""


class NodeExists(AlreadyExists, BadVersion):
    """A create (``put(..., -1)``) found the node already there."""


class NoNode(NotFound, BadVersion):
    """The node does not exist (update with an expected version, delete)."""


class NotEmpty(MetadataError):
    """``delete`` of a node that still has children."""


class NoChildrenForEphemerals(InvalidArgument):
    """Ephemeral nodes cannot have children (as in ZooKeeper)."""


class SessionExpired(MetadataError):
    """The client's session expired: its ephemeral nodes and locks are gone; open a new client."""


class SessionClosed(ClosedError):
    """The client was closed; it serves no more calls."""


class MetadataUnavailable(MetadataError):
    """The store could not be reached in time; a write's outcome is unknown (re-read, then retry)."""


class UnknownRecordVersion(CorruptData):
    """A stored record carries a version byte this code does not know."""

    def __init__(self, record: str, version: int) -> None:
        super().__init__(f"{record}: unknown record version {version}")
        self.record = record
        self.version = version
