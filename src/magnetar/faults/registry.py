"""Every fault point in Magnetar, with its code and one-line meaning.

Codes: W = writer (ledger client in the broker), B = bookie, R = recovery, M = managed ledger,
P = broker (Pulsar protocol side), D = metadata store, A = AutoRecovery. The seed's crash timings C1-C5 map onto
these as ``docs/faults.md`` describes. A test checks that every ``faults.point(...)``
in the source names an entry here, so the chaos harness can cover every one.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class FaultPoint:
    name: str
    code: str
    meaning: str
    seed_timing: str = ""


_POINTS = (
    # --- writer (ledger client) -----------------------------------------------------------------
    FaultPoint("ledger.before_send", "W1", "writer has the entry, no bookie has been sent it"),
    FaultPoint("ledger.after_send_before_reply", "W2", "entry sent to its write set, no reply processed"),
    FaultPoint("ledger.after_reply_before_count", "W3", "a bookie's add reply arrived, not yet counted", "C1/C2"),
    FaultPoint("ledger.after_quorum_before_ack", "W4", "Qa replies counted, caller not yet told"),
    FaultPoint("ledger.before_send_next_entry", "W5", "writer knows of the acks, next entry not sent", "C3"),
    FaultPoint("ledger.ensemble_change.before_cas", "W6", "replacement bookie chosen, metadata not updated"),
    FaultPoint("ledger.ensemble_change.after_cas", "W7", "new fragment in metadata, in-flight entries not resent"),
    FaultPoint("ledger.close.before_cas", "W8", "writer closing the ledger, CLOSED not yet written"),
    # --- bookie ---------------------------------------------------------------------------------
    FaultPoint("bookie.before_journal_append", "B1", "add received, nothing stored", "C4"),
    FaultPoint("bookie.after_write_before_fsync", "B2", "add written to the journal file, not fsynced"),
    FaultPoint("bookie.after_fsync_before_reply", "B3", "add durable in the journal, no reply sent", "C1/C2/C5"),
    FaultPoint("bookie.after_reply", "B4", "add reply sent"),
    FaultPoint("bookie.entrylog.mid_flush", "B5", "write cache partly flushed to the entry log"),
    FaultPoint("bookie.index.before_checkpoint_mark", "B6", "entry log and index flushed, checkpoint mark not persisted"),
    FaultPoint("bookie.fence.before_journal", "B7", "fence request received, fenced state not yet journaled"),
    FaultPoint("bookie.journal.mid_write", "B8", "a journal group partly written (torn tail)"),
    # --- recovery -------------------------------------------------------------------------------
    FaultPoint("ledger.recovery.after_fence", "R1", "recoverer fenced the ensemble, has not read forward"),
    FaultPoint("ledger.recovery.after_writeback", "R2", "recovered entries written back, ledger not closed"),
    FaultPoint("ledger.recovery.before_close_cas", "R3", "recovery knows the last entry, CLOSED not yet written"),
    # --- autorecovery (replication worker) -----------------------------------------------------
    FaultPoint("autorecovery.after_copy", "A1", "fragment copied to the new bookie, ledger metadata not yet changed"),
    # --- managed ledger -------------------------------------------------------------------------
    FaultPoint("managed_ledger.rollover.after_create", "M1", "new ledger created, not yet in the topic's ledger list"),
    FaultPoint("managed_ledger.rollover.after_cas", "M2", "new ledger listed, old one not yet closed"),
    FaultPoint("managed_ledger.cursor.mid_flush", "M3", "cursor state written to its ledger, snapshot not updated"),
    FaultPoint("managed_ledger.offload.after_write_files", "M4",
               "a ledger's Parquet files written to the object store, table manifest not yet committed"),
    FaultPoint("managed_ledger.offload.after_manifest", "M5",
               "table manifest commits the ledger's files, the offload not yet recorded in the ledger list"),
    FaultPoint("managed_ledger.offload.after_record", "M6",
               "offload recorded complete in the ledger list, the bookies' copy not yet deleted"),
    FaultPoint("managed_ledger.offload.after_delete_bookie_copy", "M7",
               "the bookies' copy of an offloaded ledger deleted, the deletion not yet recorded"),
    # --- broker ---------------------------------------------------------------------------------
    FaultPoint("broker.after_persist_before_receipt", "P1", "message durable on Qa bookies, SEND_RECEIPT not sent"),
    FaultPoint("broker.after_receipt", "P2", "SEND_RECEIPT sent"),
    FaultPoint("broker.compaction.after_write_before_record", "P3",
               "compacted ledger written and sealed, not yet recorded on the __compaction cursor"),
    FaultPoint("broker.compaction.after_record_before_delete", "P4",
               "new compacted ledger and horizon recorded, previous compacted ledger not yet deleted"),
    # --- metadata -------------------------------------------------------------------------------
    FaultPoint("metadata.embedded.after_write_before_reply", "D1", "metadata write durable, caller not yet told"),
)

REGISTRY: dict[str, FaultPoint] = {p.name: p for p in _POINTS}
