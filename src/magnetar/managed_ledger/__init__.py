"""The managed ledger: a topic's log as a list of ledgers, and its cursors.

Owns: ``ManagedLedgerFactory`` (open/cache/delete by name), ``ManagedLedger`` (open with fencing
of the previous owner, bounded append queue, rollover by entries/size/time, reads across ledgers,
retention and trimming), ``ManagedCursor`` (mark-delete position, individually deleted ranges,
batch-index acks, persistence to a cursor ledger plus a metadata snapshot, recovery) and the
non-durable cursors readers use. Uses ``ledger`` for ledgers and ``metadata`` for the ledger list
and cursor snapshots; knows nothing of the Pulsar protocol.

Invariants (``docs/faults.md`` 5 and 9): ledger ids of a managed ledger only grow; an
append is acknowledged only after its ledger acknowledged it, at a strictly growing position; a
fenced (taken-over) managed ledger never acknowledges again; a cursor never goes back except by
an explicit reset, and what it persists is a state it really had.
"""

from magnetar.managed_ledger.config import CursorRecovery, ManagedLedgerConfig, OpenRecovery
from magnetar.managed_ledger.cursor import CursorState, ManagedCursor
from magnetar.managed_ledger.entry import ManagedEntry
from magnetar.managed_ledger.errors import (
    CursorNotFoundError,
    InvalidCursorPositionError,
    ManagedLedgerClosedError,
    ManagedLedgerFencedError,
    ManagedLedgerTerminatedError,
)
from magnetar.managed_ledger.factory import ManagedLedgerFactory
from magnetar.managed_ledger.managed_ledger import ManagedLedger, MLState
from magnetar.managed_ledger.ranges import PositionRangeSet

__all__ = [
    "CursorNotFoundError",
    "CursorRecovery",
    "CursorState",
    "InvalidCursorPositionError",
    "MLState",
    "ManagedCursor",
    "ManagedEntry",
    "ManagedLedger",
    "ManagedLedgerClosedError",
    "ManagedLedgerConfig",
    "ManagedLedgerFactory",
    "ManagedLedgerFencedError",
    "ManagedLedgerTerminatedError",
    "OpenRecovery",
    "PositionRangeSet",
]
