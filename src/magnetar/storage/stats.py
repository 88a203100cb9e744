"""``BookieStats``: the counters of one bookie, shared by the parts that count into them (the
``Bookie`` facade, the ``Checkpointer``, journal replay and the ``GarbageCollector``)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True)
class BookieStats:
    adds_count: int = 0
    add_rejects_count: int = 0
    reads_count: int = 0
    checkpoints_count: int = 0
    entries_flushed_count: int = 0
    replayed_records_count: int = 0
    logs_collected_count: int = 0
    ledgers_collected_count: int = 0
    gc_rounds_count: int = 0
    gc_rounds_skipped_count: int = 0
    logs_compacted_count: int = 0
    compacted_bytes_count: int = 0
