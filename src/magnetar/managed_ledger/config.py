"""Tunable configuration of a managed ledger and its cursors (units last in every name).

Hard bounds live in the managed-ledger section of ``magnetar.base.limits``. Defaults follow
Pulsar's broker defaults (``managedLedger*``) where they exist. Retention: ``-1`` keeps forever,
``0`` deletes consumed ledgers at once.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from magnetar.base.errors import InvalidArgumentError
from magnetar.base.limits import (
    MANAGED_CURSOR_LEDGER_ENTRIES_COUNT_MAX,
    MANAGED_CURSOR_RANGES_PERSIST_COUNT_MAX,
    MANAGED_LEDGER_ADD_QUEUE_COUNT_MAX,
)


class OpenRecovery(enum.Enum):
    """How ``open`` treats the ledgers the previous owner may still be writing."""

    FENCE = "fence"
    #: Negative control only: read the LAC without fencing, so the previous owner keeps writing.
    NO_FENCE = "no_fence"


class CursorRecovery(enum.Enum):
    """Where a cursor's state is recovered from on load."""

    NEWEST = "newest"
    #: Negative control only: trust the metadata snapshot and ignore the cursor ledger.
    SNAPSHOT_ONLY = "snapshot_only"


@dataclass(frozen=True, slots=True)
class ManagedLedgerConfig:
    ensemble_size: int = 2
    write_quorum_size: int = 2
    ack_quorum_size: int = 2
    #: Roll the current ledger over once it holds this many entries (Pulsar: 50000).
    max_entries_per_ledger: int = 50_000
    #: ... or this many payload bytes (Pulsar: 2 GiB).
    max_size_bytes_per_ledger: int = 2 * 1024 * 1024 * 1024
    #: A full ledger is rolled over only once it is at least this old (Pulsar: 10 min).
    rollover_time_s_min: float = 0.0
    #: A ledger with entries is rolled over once it is this old, full or not (Pulsar: 4 h).
    rollover_time_s_max: float = 4 * 3600.0
    #: Consumed ledgers younger than this are kept; -1 keeps them forever.
    retention_time_s: float = 0.0
    #: Consumed ledgers are kept while all ledgers together are at most this big; -1: no bound.
    retention_size_bytes: int = 0
    #: Appends queued or in flight; beyond it ``add_entry`` waits.
    add_queue_count_max: int = MANAGED_LEDGER_ADD_QUEUE_COUNT_MAX
    #: A cursor persists its state at most this often (Pulsar: markDeleteRateLimit, 1 s); 0: at once.
    cursor_flush_interval_ms: int = 1000
    #: Acks not yet persisted before ``mark_delete``/``delete`` wait for a flush (backpressure).
    cursor_unpersisted_changes_max: int = 10_000
    #: Individually deleted ranges persisted per cursor (Pulsar: maxUnackedRangesToPersist).
    cursor_ranges_persist_count_max: int = MANAGED_CURSOR_RANGES_PERSIST_COUNT_MAX
    #: Entries in a cursor ledger before it is rolled over.
    cursor_ledger_entries_max: int = MANAGED_CURSOR_LEDGER_ENTRIES_COUNT_MAX
    #: Negative controls (tests only): break fencing on open / cursor recovery on purpose.
    open_recovery: OpenRecovery = OpenRecovery.FENCE
    cursor_recovery: CursorRecovery = CursorRecovery.NEWEST

    def __post_init__(self) -> None:
        if not 1 <= self.ack_quorum_size <= self.write_quorum_size <= self.ensemble_size:
            raise InvalidArgumentError("managed ledger needs 1 <= ack quorum <= write quorum <= ensemble")
        if self.max_entries_per_ledger < 1 or self.max_size_bytes_per_ledger < 1:
            raise InvalidArgumentError("max_entries_per_ledger and max_size_bytes_per_ledger must be >= 1")
        if not 0 <= self.rollover_time_s_min <= self.rollover_time_s_max or self.rollover_time_s_max <= 0:
            raise InvalidArgumentError("need 0 <= rollover_time_s_min <= rollover_time_s_max, max > 0")
        if not 1 <= self.add_queue_count_max <= MANAGED_LEDGER_ADD_QUEUE_COUNT_MAX:
            raise InvalidArgumentError(f"add_queue_count_max must be 1..{MANAGED_LEDGER_ADD_QUEUE_COUNT_MAX}")
        if self.cursor_flush_interval_ms < 0 or self.cursor_unpersisted_changes_max < 1:
            raise InvalidArgumentError("cursor_flush_interval_ms >= 0 and cursor_unpersisted_changes_max >= 1")
        if not 0 <= self.cursor_ranges_persist_count_max <= MANAGED_CURSOR_RANGES_PERSIST_COUNT_MAX:
            raise InvalidArgumentError("cursor_ranges_persist_count_max out of range")
        if not 1 <= self.cursor_ledger_entries_max <= MANAGED_CURSOR_LEDGER_ENTRIES_COUNT_MAX:
            raise InvalidArgumentError("cursor_ledger_entries_max out of range")
        if self.retention_time_s < -1 or self.retention_size_bytes < -1:
            raise InvalidArgumentError("retention values must be >= -1")
