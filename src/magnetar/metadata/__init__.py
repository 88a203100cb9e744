"""Metadata: the versioned tree where ledger lists, ledger metadata, cursors, topic ownership,
policies and bookie registrations live.

Owns: the ``MetadataStore`` interface (``api``), its three implementations — ``memory`` (the
reference, for unit tests and the simulator), ``embedded`` (durable over an injected
``KeyValueStore``, for ``magnetar standalone``) and ``zookeeper`` (kazoo; imported only there) —
the ``MetadataLock`` / leader-election helper (``lock``), path rules (``paths``), typed errors
(``errors``) and the typed records with their one versioned encoding (``records``). Stores are
built from a URL by ``magnetar.runtime.metadata.open_metadata_store``.
"""

from magnetar.metadata.api import (
    EventKind,
    GetResult,
    MetadataStore,
    Session,
    SessionListener,
    SessionState,
    Watch,
    WatchCallback,
    WatchEvent,
)
from magnetar.metadata.embedded import EmbeddedMetadataServer, EmbeddedMetadataStore
from magnetar.metadata.errors import (
    MetadataError,
    MetadataUnavailableError,
    NoChildrenForEphemeralsError,
    NodeExistsError,
    NodeNotEmptyError,
    NoNodeError,
    SessionClosedError,
    SessionExpiredError,
    UnknownRecordVersionError,
)
from magnetar.metadata.lock import LockLostError, LockState, MetadataLock
from magnetar.metadata.memory import MemoryMetadataServer, MemoryMetadataStore

__all__ = [
    "EmbeddedMetadataServer",
    "EmbeddedMetadataStore",
    "EventKind",
    "GetResult",
    "LockLostError",
    "LockState",
    "MemoryMetadataServer",
    "MemoryMetadataStore",
    "MetadataError",
    "MetadataLock",
    "MetadataStore",
    "MetadataUnavailableError",
    "NoChildrenForEphemeralsError",
    "NoNodeError",
    "NodeExistsError",
    "NodeNotEmptyError",
    "Session",
    "SessionClosedError",
    "SessionExpiredError",
    "SessionListener",
    "SessionState",
    "UnknownRecordVersionError",
    "Watch",
    "WatchCallback",
    "WatchEvent",
]
