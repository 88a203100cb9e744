"""Which consumed ledgers may be deleted: a pure function of the list, the slowest cursor and time.

Pulsar's rule (``ManagedLedgerImpl.internalTrimLedgers``): walk the ledgers oldest first, never the
current (last) one; stop at the first ledger not wholly at or before the slowest durable cursor's
mark-delete position; delete a consumed ledger if it is older than ``retention_time_s`` *or* the
log is bigger than ``retention_size_bytes`` without it. ``-1`` disables either criterion (keep
forever when both are -1); ``0`` deletes at once.
"""

from __future__ import annotations

from magnetar.base.types import Position
from magnetar.metadata.records import LedgerInfo


def trimmable_ledgers(
    infos: list[LedgerInfo],
    slowest: Position,
    now_ms: int,
    retention_time_s: float,
    retention_size_bytes: int,
) -> list[int]:
    """Ids of the oldest ledgers that may go; ``infos`` carry live counts and sizes."""
    total_bytes = sum(info.size_bytes for info in infos)
    deleted_bytes = 0
    doomed: list[int] = []
    for info in infos[:-1]:  # never the current (last) ledger
        consumed = info.ledger_id < slowest.ledger_id or (
            info.ledger_id == slowest.ledger_id and slowest.entry_id >= info.entries_count - 1
        )
        if not consumed:
            break
        expired = retention_time_s >= 0 and now_ms - info.timestamp_ms >= retention_time_s * 1000
        over_size = retention_size_bytes >= 0 and total_bytes - deleted_bytes > retention_size_bytes
        if not (expired or over_size):
            break
        doomed.append(info.ledger_id)
        deleted_bytes += info.size_bytes
    return doomed
