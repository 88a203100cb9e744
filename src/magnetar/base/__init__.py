"""Value types, errors, limits, invariants, checksums and the capability interfaces.

Owns: the vocabulary every layer shares (``LedgerId``, ``EntryId``, ``Position``, ``BookieId``,
``TopicName``), the error hierarchy, the named limits, ``invariant()``, CRC32C, and the
interfaces through which cores reach the world (``Clock``, ``Rng``, ``Disk``, ``KeyValueStore``,
``Network``). Standard library only (plus the ``crc32c`` extension for checksums); imports
nothing else from Magnetar.
"""

from magnetar.base.checksum import crc32c, crc32c_update
from magnetar.base.clock import Clock
from magnetar.base.errors import (
    AlreadyExists,
    BadVersion,
    ChecksumMismatch,
    ClosedError,
    CorruptData,
    FencedError,
    InvalidArgument,
    LimitExceeded,
    MagnetarError,
    NotFound,
    TimeoutError_,
)
from magnetar.base.invariant import InvariantViolation, invariant
from magnetar.base.io import Connection, ConnectionHandler, Disk, DiskFile, KeyValueStore, Listener, Network
from magnetar.base.rng import Rng, SeededRng
from magnetar.base.types import (
    EARLIEST,
    NO_ENTRY,
    BookieId,
    EntryId,
    LedgerId,
    Position,
    TopicDomain,
    TopicName,
)

__all__ = [
    "EARLIEST",
    "NO_ENTRY",
    "AlreadyExists",
    "BadVersion",
    "BookieId",
    "ChecksumMismatch",
    "Clock",
    "ClosedError",
    "Connection",
    "ConnectionHandler",
    "CorruptData",
    "Disk",
    "DiskFile",
    "EntryId",
    "FencedError",
    "InvalidArgument",
    "InvariantViolation",
    "KeyValueStore",
    "LedgerId",
    "LimitExceeded",
    "Listener",
    "MagnetarError",
    "Network",
    "NotFound",
    "Position",
    "Rng",
    "SeededRng",
    "TimeoutError_",
    "TopicDomain",
    "TopicName",
    "crc32c",
    "crc32c_update",
    "invariant",
]
