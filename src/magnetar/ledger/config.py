"""Tunable configuration of the ledger client (units last in every name).

Hard bounds live in the ledger section of ``magnetar.base.limits``. Defaults follow BookKeeper's
client defaults where they exist.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class LedgerClientConfig:
    #: In-flight adds per ledger handle; a full table makes ``add_entry`` wait (backpressure).
    pending_adds_count_max: int = 10_000
    #: The least of that window a handle keeps while other handles of the same client have adds
    #: in flight too (``ledger.window.WindowShare``: alone, a handle has the whole window; beside
    #: ``k - 1`` busy others, ``max(this, pending_adds_count_max // k)``).
    pending_adds_share_count_min: int = 4
    #: Deadline of one bookie add; a bookie slower than this is replaced (ensemble change).
    add_timeout_ms: int = 5_000
    #: Deadline of one bookie read (normal or recovery).
    read_timeout_ms: int = 5_000
    #: After this long without an answer a read is also sent to the next bookie; 0 disables.
    speculative_read_timeout_ms: int = 2_000
    #: Interval of explicit LAC flushes on an idle ledger; 0 disables them.
    explicit_lac_interval_ms: int = 0
    #: Deadline of fencing plus LAC reads during recovery, per attempt.
    recovery_fence_timeout_ms: int = 5_000
