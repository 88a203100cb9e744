"""Every named bound in Magnetar that is not a per-deployment config value.

docs/style.md rule 3: every queue, buffer, batch, retry and in-flight table has a named bound here or in
the config; reaching it means backpressure or a typed ``LimitExceededError``, never growth. Names end
in their unit. Sections belong to layers; add to your layer's section.

Every bound is ``Final``: the compiled modules (``magnetar/_compiled.py``) then read it as a
constant folded into their code, not from this module's dict by name on every use (1.9% of the
loop thread at 2,000 msg/s, issue 22). So a bound is changed here, never patched at run time (a
compiled module would not see the patch): a test that needs another value takes it from a config.
"""

from __future__ import annotations

from typing import Final

KIB: Final = 1024
MIB: Final = 1024 * KIB

# --- names -------------------------------------------------------------------------------------
TOPIC_NAME_BYTES_MAX: Final = 1024

# --- faults ------------------------------------------------------------------------------------
FAULT_SPECS_COUNT_MAX: Final = 64

# --- metadata ----------------------------------------------------------------------------------
# ZooKeeper's default jute.maxbuffer (1 MiB - 1) bounds a whole request: value, path, headers.
METADATA_VALUE_BYTES_MAX: Final = 1000 * KIB
METADATA_PATH_BYTES_MAX: Final = 1024
# A broker watches each loaded topic's policies node (catalog/policies.py): above
# BROKER_TOPICS_LOADED_COUNT_MAX, with room for its namespaces, locks and ownerships.
METADATA_WATCHES_PER_SESSION_MAX: Final = 500_000
METADATA_SESSION_TIMEOUT_MS_DEFAULT: Final = 30_000  # Pulsar's default ZooKeeper session timeout
METADATA_CONNECT_TIMEOUT_MS_MAX: Final = 30_000
METADATA_OPERATION_TIMEOUT_MS_MAX: Final = 30_000  # a ZooKeeper call not answered by then: MetadataUnavailableError
METADATA_RECORD_BYTES_MAX: Final = METADATA_VALUE_BYTES_MAX

# --- bookie protocol and storage --------------------------------------------------------------
ENTRY_BYTES_MAX: Final = 5 * MIB + 64 * KIB  # a 5 MiB Pulsar message plus its metadata
BOOKIE_FRAME_BYTES_MAX: Final = ENTRY_BYTES_MAX + 4 * KIB
BOOKIE_MASTER_KEY_BYTES_MAX: Final = 64  # BookKeeper uses a 20-byte SHA-1 of the ledger password
BOOKIE_CLIENT_INFLIGHT_COUNT_MAX: Final = 65_536  # requests one client connection may have outstanding
BOOKIE_CONNECTION_INFLIGHT_COUNT_MAX: Final = 65_536  # requests a bookie serves at once per connection
BOOKIE_CONNECTIONS_COUNT_MAX: Final = 4096  # open client connections per bookie
BOOKIE_READ_CHUNK_BYTES: Final = 256 * KIB  # one socket read
BOOKIE_LEDGERS_COUNT_MAX: Final = 10_000_000  # ledger states a bookie keeps in memory
BOOKIE_JOURNAL_RECORD_BYTES_MAX: Final = ENTRY_BYTES_MAX + 4 * KIB
#: Answers of synced journal groups run per event-loop pass (``storage.journal_replies``): a
#: group of hundreds of adds (a large ledger window) is answered over several passes, so sockets
#: are read and receipts written between slices (~1 ms each at 20-40 us per answer).
JOURNAL_REPLY_SLICE_COUNT: Final = 32
# A connection holding part of a frame that sends nothing for this long is closed (it pins up to
# a frame of buffer: slow or stuck peers must not hold BOOKIE_CONNECTIONS_COUNT_MAX of those).
BOOKIE_PARTIAL_FRAME_IDLE_MS: Final = 30_000

# --- runtime network (TcpNetwork) ---------------------------------------------------------------
NETWORK_READ_BUFFER_BYTES_MAX: Final = 256 * KIB  # received, not yet read: the socket pauses beyond it
NETWORK_WRITE_BUFFER_BYTES_MAX: Final = 4 * MIB  # queued to send: drain() waits beyond it
# --- runtime disk (LocalDisk) ------------------------------------------------------------------
DISK_DIRECT_ALIGNMENT_BYTES: Final = 4096  # O_DIRECT writes start and end on multiples of this
DISK_DIRECT_BUFFER_BYTES_MAX: Final = 16 * MIB  # largest write copied through a file's aligned buffer (larger: buffered)
DISK_DIRECT_BUFFERS_COUNT_MAX: Final = 4  # idle aligned buffers a file keeps for its next writes
DISK_SYNC_THREADS_COUNT_MAX: Final = 8  # worker threads of ``DiskFile.append_and_sync_then`` (journal groups in flight)
KV_GROUP_COMMIT_BATCHES_MAX: Final = 1024  # concurrent write_durable batches merged into one synced RocksDB write

# --- pulsar protocol ---------------------------------------------------------------------------
PULSAR_FRAME_BYTES_MAX: Final = 5 * MIB + 10 * KIB  # Pulsar's maxMessageSize (5 MiB) + frame overhead
PULSAR_MESSAGE_BYTES_MAX: Final = 5 * MIB  # CONNECTED.max_message_size: metadata + payload of one SEND
PULSAR_READ_CHUNK_BYTES: Final = 256 * KIB  # one socket read fed to a FrameDecoder
#: What the broker takes from one connection's received bytes before other connections get a
#: turn (it yields to the event loop after a full slice): a producer with hundreds of SENDs in
#: flight cannot hold the loop for a whole 256 KiB read (~20 ms of unbatched 1 KiB SENDs) while a
#: light producer's SEND waits (bench/latency_isolation.py, docs/performance.md).
BROKER_READ_SLICE_BYTES: Final = 64 * KIB
#: SENDs of one receive the broker hands over before the other connections get a turn (it yields
#: to the event loop between such runs, round robin): a slice still holds ~60 unbatched SENDs of
#: 1 KiB, and a light producer's SEND read in the same loop pass waited for all of them (issue 22,
#: "Session 12: latency isolation" in docs/performance.md).
BROKER_SENDS_PER_TURN_COUNT_MAX: Final = 16
PULSAR_RECEIVE_BUFFER_BYTES_MAX: Final = PULSAR_FRAME_BYTES_MAX + 4 + PULSAR_READ_CHUNK_BYTES  # a frame + one read
PULSAR_SEND_BUFFER_BYTES_MAX: Final = 4 * PULSAR_FRAME_BYTES_MAX  # queued outbound bytes per connection
#: Unanswered GET_OR_CREATE_SCHEMA requests one connection remembers (the oldest is forgotten).
PULSAR_GET_OR_CREATE_SCHEMA_PENDING_COUNT_MAX: Final = 1024

# --- security ----------------------------------------------------------------------------------
#: Credentials one CONNECT, AUTH_RESPONSE or HTTP ``Authorization`` header may carry; larger is
#: refused as an authentication failure before any parsing (a JWT is usually under 1 KiB).
AUTH_DATA_BYTES_MAX: Final = 16 * KIB
#: Users an htpasswd file may list (bounds the map the basic provider holds).
HTPASSWD_USERS_COUNT_MAX: Final = 100_000
#: Successful basic-auth verifications remembered (bcrypt costs ~0.1 s per check; HTTP clients
#: authenticate every request). Oldest forgotten beyond it.
BASIC_AUTH_CACHE_COUNT_MAX: Final = 1024
#: A TLS client that has not finished its handshake within this is dropped (Pulsar's
#: Netty SslHandler default handshake timeout is 10 s).
TLS_HANDSHAKE_TIMEOUT_S: Final = 10.0
#: How long a connection whose CONNECT failed authentication stays open to be told so (its first
#: request is answered with AuthenticationError and it is closed; silent, it is closed after this).
AUTH_REFUSED_CONNECTION_LINGER_S: Final = 5.0
#: How long an expired connection has to answer AUTH_CHALLENGE with a valid AUTH_RESPONSE, at most
#: (the broker also never waits longer than ``auth_refresh_check_interval_s``).
AUTH_CHALLENGE_RESPONSE_TIMEOUT_S_MAX: Final = 60.0

# --- simulation --------------------------------------------------------------------------------
SIM_STEPS_MAX: Final = 10_000_000  # a scenario that runs longer than this is a livelock
SIM_LINK_QUEUE_BYTES_MAX: Final = 16 * MIB
SIM_DISK_SECTOR_BYTES: Final = 512  # the unit a torn write garbles
SIM_NODES_MAX: Final = 1_000
SIM_KV_PENDING_BATCHES_MAX: Final = 10_000  # unsynced batches a simulated store buffers before flushing
SIM_CONNECTIONS_PER_NODE_MAX: Final = 10_000
SIM_LISTENERS_PER_NODE_MAX: Final = 1_000

# --- ledger client -----------------------------------------------------------------------------
#: Attempts to CAS the ledger-id counter before giving up (contention between creators).
LEDGER_ID_ALLOC_RETRY_COUNT_MAX: Final = 100
#: Ledger ids one CAS on the id counter reserves for the callers waiting at once (ledger/metadata_ops.py).
LEDGER_ID_ALLOC_BATCH_COUNT_MAX: Final = 10_000
#: Ledger ids one listing returns.
LEDGER_LIST_COUNT_MAX: Final = 10_000_000
#: Attempts at one metadata compare-and-set loop (ensemble change, close, recovery state).
LEDGER_METADATA_CAS_RETRY_COUNT_MAX: Final = 64
#: Ensemble changes one handle makes before failing (BookKeeper: unbounded; we bound it).
LEDGER_ENSEMBLE_CHANGES_COUNT_MAX: Final = 1024
#: Entries one recovery reads forward before failing (a livelock guard, far above real tails).
LEDGER_RECOVERY_ENTRIES_COUNT_MAX: Final = 10_000_000
#: Fragments one ledger may have.
LEDGER_FRAGMENTS_COUNT_MAX: Final = 4096
#: Bookie connections one ledger client keeps open (the least recently used idle one is closed).
LEDGER_BOOKIE_CONNECTIONS_COUNT_MAX: Final = 1024
#: Entry bytes of adds one bookie connection may have in flight; beyond it an add waits (in call
#: order, inside the transport's one add operation) for answers to make room.
LEDGER_PIPELINED_ADD_BYTES_MAX: Final = 4 * MIB
#: An add found overdue is failed only if it is still unanswered this much later: after a
#: process pause (SIGSTOP, a long GC) every deadline has passed at once, and the answers already
#: received must be counted before anything is declared timed out (the bookie client's own tick).
LEDGER_ADD_TIMEOUT_CONFIRM_MS: Final = 20
#: Write sets remembered (one per (first index, E, Qw): E of them per ensemble shape).
LEDGER_WRITE_SETS_CACHED_COUNT_MAX: Final = 4096
#: Bookie registrations one directory listing accepts.
LEDGER_DIRECTORY_BOOKIES_COUNT_MAX: Final = 100_000
#: Under-replication markers one replication-worker round looks at (the rest wait a round).
AUTORECOVERY_MARKERS_SCAN_COUNT_MAX: Final = 10_000
#: Entries one re-replication batch may read and copy in parallel (config may ask for fewer).
AUTORECOVERY_BATCH_COUNT_MAX: Final = 1_000

# --- managed ledger ----------------------------------------------------------------------------
#: Appends one managed ledger holds queued or in flight; a full queue makes ``add_entry`` wait.
MANAGED_LEDGER_ADD_QUEUE_COUNT_MAX: Final = 10_000
#: Ledgers one managed ledger may list (Pulsar has no bound; a topic beyond this is misconfigured).
MANAGED_LEDGER_LEDGERS_COUNT_MAX: Final = 100_000
#: Readers of closed ledgers kept open per managed ledger (LRU).
MANAGED_LEDGER_READERS_CACHED_COUNT_MAX: Final = 64
#: Bytes of recently appended entries kept for tail reads, per managed ledger.
MANAGED_LEDGER_CACHE_BYTES_MAX: Final = 64 * MIB
#: Bytes of entry cache all managed ledgers of one broker hold together (Pulsar:
#: managedLedgerCacheSizeMB); the least recently written topic's oldest entries go first.
MANAGED_LEDGER_CACHE_TOTAL_BYTES_MAX: Final = 256 * MIB
#: Entries one ``read_entries`` call returns at most.
MANAGED_LEDGER_READ_COUNT_MAX: Final = 10_000
#: Entries an owner sends along with one notification of its read-only position feed (the
#: newest ones of the wake-up; older ones the read-only broker reads from the bookies).
READ_ONLY_FEED_ENTRIES_COUNT_MAX: Final = 1_000
#: Bytes of entries an owner sends along with one notification of its position feed.
READ_ONLY_FEED_BYTES_MAX: Final = 1 * MIB
#: Cursors one managed ledger may have.
MANAGED_LEDGER_CURSORS_COUNT_MAX: Final = 10_000
#: Entries an offload reads from the bookies at a time (and hands its driver as one chunk).
OFFLOAD_READ_CHUNK_ENTRIES_COUNT: Final = 200
#: A Parquet row group of an offloaded ledger is cut once its stored entries reach this size.
OFFLOAD_ROW_GROUP_BYTES_MAX: Final = 32 * MIB
#: Decoded row groups of offloaded ledgers kept for reads (a consumer reads one row group in
#: many small reads); the least recently used goes first.
OFFLOAD_READ_CACHE_BYTES_MAX: Final = 64 * MIB
#: Entries a Spark task asks the lakehouse for at a time (whole row groups are decoded and kept).
SPARK_LAKEHOUSE_READ_ENTRIES_COUNT: Final = 1000
#: Offloaded files whose row-group index (entry range of each row group) is kept for reads.
OFFLOAD_FILES_INDEXED_COUNT_MAX: Final = 1024
#: Attempts at one managed-ledger-info compare-and-set before giving up.
MANAGED_LEDGER_CAS_RETRY_COUNT_MAX: Final = 16
#: Ledgers one add may be written to: after a ledger failure the adds recovery did not find are
#: written again to the next ledger; past this many attempts they fail to their callers.
MANAGED_LEDGER_ADD_ATTEMPTS_COUNT_MAX: Final = 5
#: Individually deleted ranges one cursor persists (Pulsar's maxUnackedRangesToPersist); the
#: rest are dropped from the persisted state and are redelivered after a reload.
MANAGED_CURSOR_RANGES_PERSIST_COUNT_MAX: Final = 10_000
#: Individually deleted ranges one cursor holds in memory; beyond it an ack raises LimitExceededError.
MANAGED_CURSOR_RANGES_COUNT_MAX: Final = 1_000_000
#: Batch entries with partial index acks one cursor holds (and persists).
MANAGED_CURSOR_BATCH_ACKS_COUNT_MAX: Final = 100_000
#: Indexes one batch entry may have (Pulsar's batch size bound is in messages per batch).
MANAGED_CURSOR_BATCH_SIZE_MAX: Final = 65_536
#: Cursor-ledger entries before the cursor ledger is rolled over to a new one.
MANAGED_CURSOR_LEDGER_ENTRIES_COUNT_MAX: Final = 10_000

# --- broker ------------------------------------------------------------------------------------
#: SENDs one producer may have persisting at once (the client's default max_pending_messages is 1000).
BROKER_PENDING_SENDS_PER_PRODUCER_COUNT_MAX: Final = 100_000
#: Entries one dispatcher read may ask for.
BROKER_DISPATCH_READ_COUNT_MAX: Final = 10_000
#: Dispatched, unacknowledged entries one subscription tracks (Pulsar: maxUnackedMessagesPerSubscription).
BROKER_PENDING_ACKS_PER_SUBSCRIPTION_COUNT_MAX: Final = 1_000_000
#: Positions with a redelivery count one subscription remembers.
BROKER_REDELIVERY_TRACKER_COUNT_MAX: Final = 1_000_000
#: Entries a timestamp seek scans before giving up (it reads forward from the oldest entry).
BROKER_SEEK_SCAN_ENTRIES_COUNT_MAX: Final = 10_000_000
#: Open client connections one broker serves.
BROKER_CONNECTIONS_COUNT_MAX: Final = 10_000
#: Producers plus consumers one connection may open.
BROKER_HANDLES_PER_CONNECTION_COUNT_MAX: Final = 10_000
#: Requests of one connection answered concurrently (creations, lookups: broker/requests.py); at
#: the bound the connection stops reading until one is answered. The Java client's
#: ``concurrentLookupRequest`` default is 5,000.
BROKER_REQUESTS_IN_FLIGHT_PER_CONNECTION_COUNT_MAX: Final = 5_000
#: Topics one broker keeps loaded.
BROKER_TOPICS_LOADED_COUNT_MAX: Final = 150_000  # issue 22's 100,000 and room (~25-33 KiB of RSS each)
#: Producer names whose highest persisted sequence id one topic remembers (oldest forgotten beyond it).
BROKER_DEDUP_PRODUCER_NAMES_COUNT_MAX: Final = 10_000
#: Persisted entries between two dedup snapshots (Pulsar: brokerDeduplicationEntriesInterval); it
#: also bounds what a topic load replays after a crash.
BROKER_DEDUP_SNAPSHOT_INTERVAL_ENTRIES: Final = 1_000
#: Entries one read of the dedup replay (topic load) asks for.
BROKER_DEDUP_REPLAY_READ_COUNT: Final = 500
#: A topic blocked after a failed write retries settling its log and rebuilding deduplication this
#: often, at most this many times (then only a producer asking to be admitted starts a new round).
BROKER_TOPIC_UNBLOCK_RETRY_INTERVAL_MS: Final = 1_000
BROKER_TOPIC_UNBLOCK_ATTEMPTS_COUNT_MAX: Final = 60
#: Delayed messages one subscription's in-memory index holds (about 56 bytes each); beyond it the
#: rest stay unacknowledged in the log and are indexed again when the index has room.
BROKER_DELAYED_INDEX_ENTRIES_MAX: Final = 100_000
#: Bytes of memory the delayed-delivery index of one subscription may use at its entry bound.
BROKER_DELAYED_INDEX_BYTES_MAX: Final = 8 * MIB
#: Entries one rebuild pass of the delayed index reads (the next pass goes on).
BROKER_DELAYED_REBUILD_READ_COUNT: Final = 1_000
#: Schema versions one topic may register.
SCHEMA_VERSIONS_PER_TOPIC_COUNT_MAX: Final = 1_000
#: Bytes of one schema definition (Avro/JSON/protobuf text).
SCHEMA_DATA_BYTES_MAX: Final = 512 * 1024
#: Namespace and topic policy nodes one broker caches and watches (the oldest is forgotten beyond it):
#: one topic-policies node per loaded topic (``BROKER_TOPICS_LOADED_COUNT_MAX``) plus the namespaces',
#: so a broker at its topic bound does not evict (and re-read) a namespace node on every lookup.
POLICY_CACHE_NODES_COUNT_MAX: Final = 2 * 100_000
#: Entries one TTL-expiry or backlog-eviction pass of a subscription reads (the next pass goes on).
BROKER_EXPIRY_SCAN_ENTRIES_COUNT_MAX: Final = 100_000
#: Message ids of one ACK command a subscription applies per event-loop pass (individual acks;
#: the rest follow in the next passes, in order). The official client sends its grouped acks every
#: 100 ms, ~200 ids at 2,000 msg/s and thousands at its top rate: one pass over all of them held
#: the loop for 1-2 ms (issue 22, "Session 13: the acknowledgement pass" in docs/performance.md).
BROKER_ACK_SLICE_IDS_COUNT_MAX: Final = 256
#: Entries a dispatch pass (one read, up to ``dispatch_read_count_max``) must have sent for the
#: dispatcher to give the event loop one pass before its next read: a consumer's permits over a
#: backlog otherwise went out in one callback (reads from the entry cache do not suspend); passes
#: of a few entries, the steady state, go on without it (issue 22, session 13).
BROKER_DISPATCH_YIELD_ENTRIES_COUNT: Final = 16
#: Entries one admin ``skip/{n}`` may skip.
ADMIN_SKIP_ENTRIES_COUNT_MAX: Final = 1_000_000
#: Partitions one partitioned topic may have (Pulsar: maxNumPartitionsPerPartitionedTopic, 0 = none).
ADMIN_PARTITIONS_COUNT_MAX: Final = 10_000
#: Tenants, namespaces per tenant, and topics one admin listing returns.
ADMIN_LIST_COUNT_MAX: Final = 100_000
#: Bytes of one admin request body.
ADMIN_BODY_BYTES_MAX: Final = 1 * MIB
#: Entries one admin peek (``subscription/{sub}/position/{n}``) may look through past the
#: mark-delete position: ``n`` and the individually acknowledged entries it skips.
ADMIN_PEEK_SCAN_ENTRIES_COUNT_MAX: Final = 100_000

# --- cluster (bundle ownership, load reports) --------------------------------------------------
#: Bundles a namespace starts with (Pulsar: defaultNumberOfNamespaceBundles).
NAMESPACE_BUNDLES_COUNT_DEFAULT: Final = 4
#: Bundles one namespace may be split into (Pulsar: loadBalancerNamespaceMaximumBundles).
NAMESPACE_BUNDLES_COUNT_MAX: Final = 128
#: A broker republishes its load report at least this often.
LOAD_REPORT_INTERVAL_MS: Final = 5_000
#: How often the load reporter checks whether the owned bundles changed (then it publishes at once).
LOAD_REPORT_CHECK_MS: Final = 200

# --- client ------------------------------------------------------------------------------------
#: Requests one client connection may have awaiting a reply (lookups, subscribes, seeks, ...).
CLIENT_PENDING_REQUESTS_COUNT_MAX: Final = 10_000
#: LOOKUP redirects followed before a lookup fails (the official client's maxLookupRedirects).
CLIENT_LOOKUP_REDIRECTS_COUNT_MAX: Final = 20
#: Broker connections one client pool holds.
CLIENT_CONNECTIONS_COUNT_MAX: Final = 1_000
#: Upper bound of ``ProducerConfig.max_pending_messages`` (messages sent and not yet receipted).
CLIENT_PRODUCER_PENDING_COUNT_MAX: Final = 100_000
#: Upper bound of ``ProducerConfig.batch_max_messages``.
CLIENT_BATCH_MESSAGES_COUNT_MAX: Final = 10_000
#: Upper bound of ``ConsumerConfig.receiver_queue_size`` (flow permits one consumer grants).
CLIENT_RECEIVER_QUEUE_COUNT_MAX: Final = 100_000
#: Messages a consumer buffers at most; above it the broker ignored our permits and the
#: connection is dropped (a batch may overshoot the permits, never by this much).
CLIENT_RECEIVE_QUEUE_HARD_COUNT_MAX: Final = 2 * CLIENT_RECEIVER_QUEUE_COUNT_MAX + CLIENT_BATCH_MESSAGES_COUNT_MAX
#: Individual acks grouped into one ACK command before it is sent.
CLIENT_ACK_GROUP_COUNT_MAX: Final = 1_000
#: Negatively acked messages awaiting redelivery per consumer.
CLIENT_NACK_PENDING_COUNT_MAX: Final = 100_000
#: Batch entries with members still unacked that a consumer tracks.
CLIENT_BATCH_TRACKER_COUNT_MAX: Final = 100_000
#: Reconnect attempts of one producer or consumer before it fails (with the 60 s backoff cap,
#: more than a day).
CLIENT_RECONNECT_ATTEMPTS_MAX: Final = 2_000
CLIENT_BACKOFF_INITIAL_MS: Final = 100
CLIENT_BACKOFF_MAX_MS: Final = 60_000
#: Period of the timers that expire requests and sends, flush acks and redeliver nacks.
CLIENT_TIMER_TICK_MS: Final = 100
#: Partitions of one topic a client produces to or consumes from.
CLIENT_PARTITIONS_COUNT_MAX: Final = 10_000

# --- perf tool (cli/perf/) --------------------------------------------------------------------
#: Topics one ``magnetar perf`` run addresses (x partitions each).
PERF_TOPICS_COUNT_MAX: Final = 100_000
#: Partitions per topic of one perf run.
PERF_PARTITIONS_COUNT_MAX: Final = 1_000
#: Producers (and consumers) per topic of one perf run.
PERF_CLIENTS_PER_TOPIC_MAX: Final = 100
#: A perf run is always bounded: at most this long, and at most this many messages.
PERF_DURATION_S_MAX: Final = 3_600
PERF_MESSAGES_COUNT_MAX: Final = 1_000_000_000
#: After the producers stop, consumers get this long to receive what was acknowledged.
PERF_DRAIN_S_MAX: Final = 30
#: ``magnetar perf --processes``: client processes of one run.
PERF_PROCESSES_COUNT_MAX: Final = 64
#: Latency histogram range: 1 us .. 60 s, 3 significant digits.
PERF_LATENCY_US_MAX: Final = 60_000_000

# --- chaos harness (magnetar.chaos) -----------------------------------------------------------
#: Ops (sends, receives, acks, drained messages) one chaos history may hold.
CHAOS_HISTORY_OPS_COUNT_MAX: Final = 5_000_000
#: Fault injections one chaos run may schedule.
CHAOS_INJECTIONS_COUNT_MAX: Final = 10_000
#: Producers (and consumers) of one chaos workload.
CHAOS_CLIENTS_COUNT_MAX: Final = 64
#: Messages one chaos producer sends at most (a run is bounded in count as well as in time).
CHAOS_MESSAGES_PER_PRODUCER_MAX: Final = 1_000_000
#: Sends one chaos producer keeps in flight.
CHAOS_PRODUCER_PENDING_COUNT_MAX: Final = 1_000
#: Retries of one unknown send by a deduplicating chaos producer (same sequence id).
CHAOS_SEND_RETRIES_MAX: Final = 3
#: Messages one drain pass reads from one topic before it gives up.
CHAOS_DRAIN_MESSAGES_COUNT_MAX: Final = 10_000_000
#: A whole chaos run is always bounded in time.
CHAOS_RUN_S_MAX: Final = 6 * 3600

# --- spark connector (magnetar.connectors.spark) ----------------------------------------------
#: Topic partitions one Spark query reads (all topics together).
SPARK_PARTITIONS_COUNT_MAX: Final = 10_000
#: Spark input partitions one planned read is cut into.
SPARK_SLICES_COUNT_MAX: Final = 100_000
#: Entries one task asks of the bookies at once (pipelined over one connection per bookie).
SPARK_READ_ENTRIES_CHUNK_COUNT_MAX: Final = 1_000
#: Rows of one Arrow record batch a task yields.
SPARK_ARROW_BATCH_ROWS_MAX: Final = 65_536
#: Value bytes at which a task cuts the Arrow record batch it is building (it may exceed by one entry).
#: Kept well under glibc's largest mmap threshold (32 MiB): buffers that size are reused from the
#: heap, while every fresh 64 MiB buffer costs ~1 ms/MB of page faults on the VM (docs/spark.md).
SPARK_ARROW_BATCH_BYTES_MAX: Final = 8 * 1024 * 1024
#: Entry reads one task keeps in flight to the bookies (read-ahead window, in entries)...
SPARK_READ_AHEAD_ENTRIES_MAX: Final = 512
#: ...and in bytes, estimated from the largest entry read so far.
SPARK_READ_AHEAD_BYTES_MAX: Final = 32 * 1024 * 1024
#: The read-ahead window aims at this many bytes (at least 2 entries, never over
#: SPARK_READ_AHEAD_BYTES_MAX): small enough that an entry is still in the CPU's caches when the task
#: gets to it (checked at receipt, then copied into rows); 32 MiB cost ~10% more CPU (docs/spark.md).
SPARK_READ_AHEAD_CACHED_BYTES: Final = 4 * 1024 * 1024
#: Pipelined read connections one connector process opens (one per bookie); reads of further
#: bookies go through the ledger's transport.
SPARK_BOOKIE_READ_CONNECTIONS_COUNT_MAX: Final = 64
#: What a pipelined read connection's entry buffer starts with; it grows to the largest entry read
#: (at most BOOKIE_FRAME_BYTES_MAX) and is reused for every entry.
SPARK_BOOKIE_READ_BUFFER_BYTES: Final = 256 * 1024
#: Entries the driver scans ahead to count records for maxRecordsPerTrigger/minRecordsPerTrigger.
SPARK_ADMISSION_SCAN_ENTRIES_MAX: Final = 100_000
#: Broker fallback: a reader that gets nothing for this long while rows are still due fails the task.
SPARK_BROKER_READ_IDLE_MS_MAX: Final = 30_000
#: Rows one writer task keeps in flight to the broker.
SPARK_WRITE_PENDING_COUNT_MAX: Final = 1_000
#: One admin REST call of the connector (advancing the named subscription on commit).
SPARK_ADMIN_REQUEST_MS_MAX: Final = 30_000

# --- geo-replication (magnetar.replication) --------------------------------------------------------
#: Entries a replicator has sent and not yet had receipted (Pulsar's replicationProducerQueueSize).
REPLICATION_PRODUCER_QUEUE_COUNT_MAX: Final = 1_000
#: Entries one replicator reads from its cursor at a time.
REPLICATION_READ_COUNT_MAX: Final = 100
#: Reconnect backoff of a replicator whose remote producer failed (Pulsar: 100 ms -> 1 min).
REPLICATION_BACKOFF_INITIAL_MS: Final = 100
REPLICATION_BACKOFF_MAX_MS: Final = 60_000
#: How often the replication service re-reads policies, starts/stops replicators and samples rates.
REPLICATION_CHECK_INTERVAL_MS: Final = 1_000
#: A standalone loads the topics of replicated namespaces (a backlog left by a crash drains without
#: a client) on the first pass and then every this many passes.
REPLICATION_LOAD_TOPICS_EVERY_PASSES: Final = 10
#: Every pass reconciles the topics that replicate (or failed to settle); all loaded topics are
#: reconciled on a policy change seen by this broker and every this many passes (a tenant's allowed
#: clusters or a remote's registration may change unseen). At 100,000 topics a pass over all costs
#: ~1 s of CPU: once a second it was the idle standalone's main cost (issue 22).
REPLICATION_FULL_CHECK_EVERY_PASSES: Final = 30
#: Creating a producer on the remote cluster gives up after this (then backoff and retry).
REPLICATION_CONNECT_TIMEOUT_MS: Final = 10_000
#: The remote producers' own reconnect backoff cap (the client's ``backoff_max_ms``; Pulsar keeps
#: its client default, 60 s): after a remote's outage, replication resumes within this of its return.
REPLICATION_REMOTE_BACKOFF_MAX_MS: Final = 5_000
#: Replicators per broker (topics x remote clusters).
REPLICATION_REPLICATORS_COUNT_MAX: Final = 10_000
#: Replicated subscriptions: how often a topic's controller looks at its subscriptions (snapshot
#: rounds, updates); Pulsar's replicatedSubscriptionsSnapshotFrequencyMillis is 1000.
REPLICATED_SUBSCRIPTIONS_TICK_MS: Final = 250
#: A snapshot round not answered by every remote within this is dropped (Pulsar: 30 s).
REPLICATED_SUBSCRIPTIONS_SNAPSHOT_TIMEOUT_MS: Final = 30_000
#: Snapshots cached per replicated subscription (Pulsar: 30).
REPLICATED_SUBSCRIPTIONS_SNAPSHOTS_CACHED_MAX: Final = 30
#: Entries of the topic a controller remembers (marker or not, and each one's origin).
REPLICATED_SUBSCRIPTIONS_SEEN_ENTRIES_MAX: Final = 100_000
#: ...and while the topic has no replicated subscription here (yet).
REPLICATED_SUBSCRIPTIONS_SEEN_IDLE_MAX: Final = 10_000
#: Acknowledged messages one update marker carries by origin (beyond: the mark-delete only).
REPLICATED_SUBSCRIPTIONS_UPDATE_ACKED_MAX: Final = 10_000
#: Batches acknowledged in part that one update marker carries (each with its ack set).
REPLICATED_SUBSCRIPTIONS_UPDATE_PARTIAL_MAX: Final = 1_000
#: Entries a controller reads back from the topic when it starts (after a broker restart or a
#: topic move) to remember the origins and snapshots after the replicated subscriptions' positions.
REPLICATED_SUBSCRIPTIONS_RECOVER_ENTRIES_MAX: Final = 20_000
# --- web console (magnetar.admin.console) ------------------------------------------------------------
#: Rate samples the console keeps per topic and for the broker (a ring: the oldest goes first);
#: at the default 2 s interval, the last 5 minutes.
CONSOLE_SAMPLES_COUNT_MAX: Final = 150
#: Topics whose rate history the console keeps; topics loaded beyond it get none (their stats do).
CONSOLE_TOPICS_TRACKED_COUNT_MAX: Final = 2_000
#: Messages one console peek returns at most...
CONSOLE_PEEK_COUNT_MAX: Final = 100
#: ...and entries it reads to find them (individually acknowledged ones are passed over).
CONSOLE_PEEK_SCAN_ENTRIES_MAX: Final = 1_000
#: Ledgers of one topic the durability view reads the metadata of, newest first.
CONSOLE_LEDGERS_COUNT_MAX: Final = 200
#: Topics (and partitions) the console's tree lists per namespace.
CONSOLE_TREE_TOPICS_COUNT_MAX: Final = 5_000
