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

# --- pulsar protocol ---------------------------------------------------------------------------
PULSAR_FRAME_BYTES_MAX = 5 * MIB + 10 * KIB  # Pulsar's maxMessageSize (5 MiB) + frame overhead

# --- simulation --------------------------------------------------------------------------------
SIM_STEPS_MAX = 10_000_000  # a scenario that runs longer than this is a livelock
SIM_LINK_QUEUE_BYTES_MAX = 16 * MIB
