"""The storage parts a ``Bookie`` composes, built one by one on the simulated disk and store, so
a test can drive one part (the checkpointer, replay) through its own interface."""

from __future__ import annotations

import dataclasses

from magnetar.protocol.bookie import Entry
from magnetar.sim import SimClock, SimDisk, SimDiskConfig, SimKeyValueStore
from magnetar.storage import BookieConfig, BookieLedger, BookieStats
from magnetar.storage.checkpointer import Checkpointer
from magnetar.storage.entry_log import EntryLogger
from magnetar.storage.index import Index
from magnetar.storage.journal import Journal, add_record, journal_file_ids

KEY = b"secret"
CONFIG = BookieConfig(
    write_cache_bytes_max=16 * 1024 * 1024,
    entry_bytes_max=1024 * 1024,
    journal_queue_bytes_max=4 * 1024 * 1024,
    journal_file_bytes_max=1024 * 1024,
    entry_log_bytes_max=256 * 1024,
    checkpoint_interval_ms=1_000_000,
    disk_free_bytes_min=0,
)
#: Small chunks and index batches: a paced flush of a few hundred entries takes many steps.
PACED = dataclasses.replace(CONFIG, flush_chunk_entries_max=16, index_batch_keys_max=32, flush_pause_ms=5)


def entry(ledger: int, entry_id: int, payload: bytes | None = None, lac: int = -1) -> Entry:
    return Entry.build(ledger, entry_id, lac, payload if payload is not None else f"{ledger}:{entry_id}".encode() * 20)


class Parts:
    """One incarnation's entry log, index, ledger states and checkpointer over a disk and store
    that outlive it (``again`` builds the next incarnation, as a restart does)."""

    def __init__(self, config: BookieConfig = CONFIG, *, disk: SimDisk | None = None, kv: SimKeyValueStore | None = None,
                 clock: SimClock | None = None) -> None:
        self.config = config
        self.disk = disk if disk is not None else SimDisk(SimDiskConfig())
        self.kv = kv if kv is not None else SimKeyValueStore()
        self.clock = clock if clock is not None else SimClock()
        self.index = Index(self.kv.reopen())
        self.entry_log = EntryLogger(self.disk, config.entry_log_bytes_max)
        self.ledgers: dict[int, BookieLedger] = {}
        self.log_ledgers: dict[int, set[int]] = {}
        self.stats = BookieStats()
        self.checkpointer = Checkpointer(
            self.entry_log, self.index, self.clock, config,
            ledgers=self.ledgers, log_ledgers=self.log_ledgers, stats=self.stats,
        )
        self.journal: Journal | None = None

    def again(self, config: BookieConfig | None = None) -> Parts:
        return Parts(config or self.config, disk=self.disk, kv=self.kv, clock=self.clock)

    async def start(self) -> Journal:
        """Open the entry log and a new journal file; the checkpointer uses that journal."""
        await self.entry_log.start()
        existing = journal_file_ids(self.disk)
        self.journal = Journal(self.disk, self.clock, self.config, (existing[-1] + 1) if existing else 1)
        await self.journal.start()
        self.checkpointer.use_journal(self.journal)
        return self.journal

    async def add(self, e: Entry) -> None:
        """What the bookie's add path does with an accepted entry: ledger state, write cache,
        journal (awaited here until durable)."""
        assert self.journal is not None
        state = self.ledgers.get(e.ledger_id)
        if state is None:
            state = self.ledgers[e.ledger_id] = BookieLedger(e.ledger_id, master_key=KEY)
        state.note_entry(e.entry_id, e.lac)
        self.checkpointer.put(e.ledger_id, e.entry_id, e.raw)
        await self.journal.append(add_record(KEY, e.raw))

    def indexed(self, ledger: int, entry_id: int) -> bool:
        return self.index.location(ledger, entry_id) is not None

    async def stop(self) -> None:
        if self.journal is not None:
            await self.journal.stop()
        self.entry_log.close()
