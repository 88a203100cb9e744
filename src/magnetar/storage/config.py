"""``BookieConfig``: every tunable of a bookie, as a frozen dataclass with unit-suffixed names."""

from __future__ import annotations

from dataclasses import dataclass

from magnetar.base.errors import InvalidArgumentError
from magnetar.base.limits import ENTRY_BYTES_MAX, KIB, MIB


@dataclass(frozen=True, slots=True)
class BookieConfig:
    host: str = "127.0.0.1"
    port: int = 3181
    data_dir: str = "data/bookie"
    metadata_url: str = "memory://"
    #: Rack (``/rack`` or ``/region/rack``) recorded for this bookie in ``/bookies`` at start
    #: (``ledger.racks``, Pulsar's racks-info); empty leaves the stored rack as it is.
    rack: str = ""
    #: Region recorded with the rack (stored as ``/region/rack``, ``ledger.racks.rack_with_region``);
    #: placement spreads each write set over regions first, then racks.
    region: str = ""

    # Group commit: a group is written and fsynced once its oldest add waited this long or it
    # holds this many bytes (BookKeeper's journalMaxGroupWaitMSec, 1 in Pulsar's reference
    # deployments). At a modest rate the adds of one such wait share one write and sync instead
    # of one each (docs/performance.md, sessions 8-9); at a high rate the queued adds are already
    # older than this and go at once. The wait is adaptive (``storage.journal``): the journal
    # waits only while adds arrive closer together than the bound, so a lone synchronous
    # producer does not pay it. 0 means "write as soon as the journal task is free": groups then
    # form only from the adds that arrive while the previous fsync runs.
    journal_group_wait_ms_max: int = 1
    journal_group_bytes_max: int = 4 * MIB
    journal_queue_bytes_max: int = 64 * MIB  # adds waiting for the journal; beyond it, reads pause
    journal_file_bytes_max: int = 512 * MIB  # rotate to a new journal file beyond this
    # Groups written and synced at once (the next one's write overlaps the previous fsync).
    journal_groups_in_flight_max: int = 2

    write_cache_bytes_max: int = 128 * MIB  # both halves together; a checkpoint starts at half
    entry_log_bytes_max: int = 1024 * MIB  # rotate to a new entry log beyond this
    read_cache_bytes_max: int = 64 * MIB
    read_ahead_count_max: int = 64  # entries read together on a read-cache miss
    read_ahead_bytes_max: int = 1 * MIB
    checkpoint_interval_ms: int = 10_000
    # A checkpoint writes the entry log in chunks (a buffered log syncs each). The background
    # checkpoint is paced while the adds come in at under half the rate a paced flush writes:
    # small chunks (``flush_chunk_bytes_min``, at most ``flush_chunk_entries_max`` entries: the
    # flush's loop work is per entry, about 2 us each) with a pause of ``flush_pause_ms``
    # before each, and index batches of ``index_batch_keys_max`` keys each synced off the event
    # loop, then a pause: its writes are spread out instead of a burst that every journal
    # fsync meets. Otherwise (adds would wait for it; and the start-up checkpoint) it runs at
    # full speed: ``flush_chunk_bytes_max`` chunks (each a worker-thread round trip, slow
    # through a busy loop's GIL), unsynced index batches with a yield between them, and the
    # last batch and the checkpoint mark synced (on the loop while adds wait for them).
    flush_chunk_bytes_min: int = 256 * KIB
    flush_chunk_bytes_max: int = 4 * MIB
    flush_chunk_entries_max: int = 256
    flush_pause_ms: int = 5
    index_batch_keys_max: int = 512

    entry_bytes_max: int = ENTRY_BYTES_MAX
    # Read-only mode below this much free disk; writable again above twice as much.
    disk_free_bytes_min: int = 256 * MIB
    disk_check_interval_ms: int = 1_000
    # Every this often the bookie asks the metadata store which ledgers still exist, deletes
    # the others and removes entry logs holding only deleted ledgers; 0 disables GC.
    gc_interval_ms: int = 60_000
    # A GC round also compacts entry logs whose live bytes are below this percent of their size
    # (copies the live entries to the current log, removes the old one); 0 disables compaction.
    compaction_live_percent_max: int = 50

    # TLS for the bookie protocol (PEM files, read by the runtime): set the certificate and key to
    # serve TLS; with a trusted CA, clients may (or, with tls_require_client_cert, must) present
    # a certificate it signed. Unset: plain TCP.
    tls_certificate_file_path: str | None = None
    tls_key_file_path: str | None = None
    tls_trust_certs_file_path: str | None = None
    tls_require_client_cert: bool = False

    def __post_init__(self) -> None:
        checks = {
            "journal_group_wait_ms_max": self.journal_group_wait_ms_max >= 0,
            "journal_group_bytes_max": self.journal_group_bytes_max >= 4 * KIB,
            "journal_queue_bytes_max": self.journal_queue_bytes_max >= self.entry_bytes_max,
            # A group larger than this still goes into one file; the journal rotates after it.
            "journal_file_bytes_max": self.journal_file_bytes_max >= 64 * KIB,
            "journal_groups_in_flight_max": 1 <= self.journal_groups_in_flight_max <= 8,
            "write_cache_bytes_max": self.write_cache_bytes_max >= 2 * self.entry_bytes_max,
            "entry_log_bytes_max": self.entry_log_bytes_max >= 64 * KIB,
            "read_cache_bytes_max": self.read_cache_bytes_max >= 0,
            "read_ahead_count_max": self.read_ahead_count_max >= 1,
            "checkpoint_interval_ms": self.checkpoint_interval_ms > 0,
            "flush_chunk_bytes_min": self.flush_chunk_bytes_min >= 64 * KIB,
            "flush_chunk_bytes_max": self.flush_chunk_bytes_max >= self.flush_chunk_bytes_min,
            "flush_chunk_entries_max": self.flush_chunk_entries_max >= 1,
            "flush_pause_ms": self.flush_pause_ms >= 0,
            "index_batch_keys_max": self.index_batch_keys_max >= 1,
            "entry_bytes_max": 0 < self.entry_bytes_max <= ENTRY_BYTES_MAX,
            "disk_free_bytes_min": self.disk_free_bytes_min >= 0,
            "gc_interval_ms": self.gc_interval_ms >= 0,
            "compaction_live_percent_max": 0 <= self.compaction_live_percent_max <= 100,
            "port": 0 <= self.port < 65536,
        }
        bad = [name for name, ok in checks.items() if not ok]
        if bad:
            raise InvalidArgumentError(f"invalid bookie config values: {', '.join(bad)}")
