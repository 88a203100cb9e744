"""The bookie's storage core: journal with group commit, write cache, sorted entry-log flush,
(ledger, entry) index, read cache with read-ahead, fencing state, checkpoints, restart replay,
garbage collection of dead entry logs, read-only mode and the instance cookie.

Owns: everything a bookie keeps on its disk. Uses only the injected ``Disk``, ``KeyValueStore``,
``Clock`` and ``Rng`` (runtime passes real files and RocksDB, the simulator its simulated twins).
Invariant: an add is acknowledged only after the journal fsync that covers it; a fence only
after its journal record is durable; nothing acknowledged is lost by a crash at any point.
"""

from magnetar.storage.bookie import Bookie, BookieStatus, ReadResult
from magnetar.storage.bookie_ledger import BookieLedger, LedgerStatus
from magnetar.storage.config import BookieConfig
from magnetar.storage.cookie import Cookie, CookieMismatchError, CookieRegistry, verify_or_create_cookie
from magnetar.storage.stats import BookieStats

__all__ = [
    "Bookie",
    "BookieConfig",
    "BookieLedger",
    "BookieStats",
    "BookieStatus",
    "Cookie",
    "CookieMismatchError",
    "CookieRegistry",
    "LedgerStatus",
    "ReadResult",
    "verify_or_create_cookie",
]
