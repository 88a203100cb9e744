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
METADATA_VALUE_BYTES_MAX = 1 * MIB  # ZooKeeper's default jute.maxbuffer is just under 1 MiB
METADATA_PATH_BYTES_MAX = 1024
METADATA_WATCHES_PER_SESSION_MAX = 100_000

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
