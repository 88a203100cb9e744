"""Every named bound in Magnetar that is not a per-deployment config value.

STYLE rule 3: every queue, buffer, batch, retry and in-flight table has a named bound here or in
the config; reaching it means backpressure or a typed ``LimitExceeded``, never growth. Names end
in their unit. Sections belong to layers; add to your layer's section.
"""

from __future__ import annotations

KIB = 1024
MIB = 1024 * KIB

# --- names -------------------------------------------------------------------------------------
TOPIC_NAME_BYTES_MAX = 1024

# --- faults ------------------------------------------------------------------------------------
FAULT_SPECS_COUNT_MAX = 64

# --- metadata ----------------------------------------------------------------------------------
# ZooKeeper's default jute.maxbuffer (1 MiB - 1) bounds a whole request: value, path, headers.
METADATA_VALUE_BYTES_MAX = 1000 * KIB
METADATA_PATH_BYTES_MAX = 1024
METADATA_WATCHES_PER_SESSION_MAX = 100_000
METADATA_SESSION_TIMEOUT_MS_DEFAULT = 30_000  # Pulsar's default ZooKeeper session timeout
METADATA_CONNECT_TIMEOUT_MS_MAX = 30_000
METADATA_OPERATION_TIMEOUT_MS_MAX = 30_000  # a ZooKeeper call not answered by then: MetadataUnavailable
METADATA_RECORD_BYTES_MAX = METADATA_VALUE_BYTES_MAX

# --- bookie protocol and storage --------------------------------------------------------------
ENTRY_BYTES_MAX = 5 * MIB + 64 * KIB  # a 5 MiB Pulsar message plus its metadata
BOOKIE_FRAME_BYTES_MAX = ENTRY_BYTES_MAX + 4 * KIB
BOOKIE_MASTER_KEY_BYTES_MAX = 64  # BookKeeper uses a 20-byte SHA-1 of the ledger password
BOOKIE_CLIENT_INFLIGHT_COUNT_MAX = 65_536  # requests one client connection may have outstanding
BOOKIE_CONNECTION_INFLIGHT_COUNT_MAX = 65_536  # requests a bookie serves at once per connection
BOOKIE_CONNECTIONS_COUNT_MAX = 4096  # open client connections per bookie
BOOKIE_READ_CHUNK_BYTES = 256 * KIB  # one socket read
BOOKIE_LEDGERS_COUNT_MAX = 10_000_000  # ledger states a bookie keeps in memory
BOOKIE_JOURNAL_RECORD_BYTES_MAX = ENTRY_BYTES_MAX + 4 * KIB

# --- pulsar protocol ---------------------------------------------------------------------------
PULSAR_FRAME_BYTES_MAX = 5 * MIB + 10 * KIB  # Pulsar's maxMessageSize (5 MiB) + frame overhead
PULSAR_MESSAGE_BYTES_MAX = 5 * MIB  # CONNECTED.max_message_size: metadata + payload of one SEND
PULSAR_READ_CHUNK_BYTES = 256 * KIB  # one socket read fed to a FrameDecoder
PULSAR_RECEIVE_BUFFER_BYTES_MAX = PULSAR_FRAME_BYTES_MAX + 4 + PULSAR_READ_CHUNK_BYTES  # a frame + one read
PULSAR_SEND_BUFFER_BYTES_MAX = 4 * PULSAR_FRAME_BYTES_MAX  # queued outbound bytes per connection

# --- simulation --------------------------------------------------------------------------------
SIM_STEPS_MAX = 10_000_000  # a scenario that runs longer than this is a livelock
SIM_LINK_QUEUE_BYTES_MAX = 16 * MIB
SIM_DISK_SECTOR_BYTES = 512  # the unit a torn write garbles
SIM_NODES_MAX = 1_000
SIM_KV_PENDING_BATCHES_MAX = 10_000  # unsynced batches a simulated store buffers before flushing
SIM_CONNECTIONS_PER_NODE_MAX = 10_000
SIM_LISTENERS_PER_NODE_MAX = 1_000

# --- ledger client -----------------------------------------------------------------------------
#: Attempts to CAS the ledger-id counter before giving up (contention between creators).
LEDGER_ID_ALLOC_RETRY_COUNT_MAX = 100
#: Ledger ids one listing returns.
LEDGER_LIST_COUNT_MAX = 10_000_000
#: Attempts at one metadata compare-and-set loop (ensemble change, close, recovery state).
LEDGER_METADATA_CAS_RETRY_COUNT_MAX = 64
#: Ensemble changes one handle makes before failing (BookKeeper: unbounded; we bound it).
LEDGER_ENSEMBLE_CHANGES_COUNT_MAX = 1024
#: Entries one recovery reads forward before failing (a livelock guard, far above real tails).
LEDGER_RECOVERY_ENTRIES_COUNT_MAX = 10_000_000
#: Fragments one ledger may have.
LEDGER_FRAGMENTS_COUNT_MAX = 4096
