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
    AlreadyExistsError,
    BadVersionError,
    ChecksumMismatchError,
    ClosedError,
    CorruptDataError,
    FencedError,
    InvalidArgumentError,
    LimitExceededError,
    MagnetarError,
    NotFoundError,
    OperationTimeoutError,
)
from magnetar.base.invariant import InvariantViolationError, invariant
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
    "AlreadyExistsError",
    "BadVersionError",
    "BookieId",
    "ChecksumMismatchError",
    "Clock",
    "ClosedError",
    "Connection",
    "ConnectionHandler",
    "CorruptDataError",
    "Disk",
    "DiskFile",
    "EntryId",
    "FencedError",
    "InvalidArgumentError",
    "InvariantViolationError",
    "KeyValueStore",
    "LedgerId",
    "LimitExceededError",
    "Listener",
    "MagnetarError",
    "Network",
    "NotFoundError",
    "OperationTimeoutError",
    "Position",
    "Rng",
    "SeededRng",
    "TopicDomain",
    "TopicName",
    "crc32c",
    "crc32c_update",
    "invariant",
]
