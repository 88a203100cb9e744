"""The replicated ledger client: write sets (E/Qw/Qa striping), in-order acknowledgements, LAC,
ensemble changes, fencing and recovery, speculative reads, placement — over bookies.

Owns: everything a writer or reader of a ledger does across several bookies, and
``bookie_client`` (one pipelined connection to one bookie: request ids, futures, per-request
deadlines, digest checks on reads). Meets ``storage`` only through ``protocol.bookie`` messages;
never imports it. Invariant: an entry is acknowledged to the caller only once Qa bookies of its
write set stored it durably and every lower entry was acknowledged.
"""

from magnetar.ledger.bookie_transport import BookieClientTransport
from magnetar.ledger.config import LedgerClientConfig
from magnetar.ledger.directory import MetadataBookieDirectory
from magnetar.ledger.errors import (
    BookieUnavailableError,
    LedgerStateError,
    NoSuchEntryError,
    NotEnoughBookiesError,
    RecoveryIncompleteError,
)
from magnetar.ledger.handle import LedgerHandle, WriterState
from magnetar.ledger.manager import LedgerManager
from magnetar.ledger.placement import BookieDirectory, PlacementPolicy, RandomPlacement, StaticBookieDirectory
from magnetar.ledger.reader import LedgerReader
from magnetar.ledger.recovery import RecoveryMode
from magnetar.ledger.transport import BookieTransport, LastEntryReply

__all__ = [
    "BookieClientTransport",
    "BookieDirectory",
    "BookieTransport",
    "BookieUnavailableError",
    "LastEntryReply",
    "LedgerClientConfig",
    "LedgerHandle",
    "LedgerManager",
    "LedgerReader",
    "LedgerStateError",
    "MetadataBookieDirectory",
    "NoSuchEntryError",
    "NotEnoughBookiesError",
    "PlacementPolicy",
    "RandomPlacement",
    "RecoveryIncompleteError",
    "RecoveryMode",
    "StaticBookieDirectory",
    "WriterState",
]
