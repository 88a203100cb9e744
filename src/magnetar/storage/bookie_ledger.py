"""``BookieLedger``: what one bookie knows of one ledger: fenced or not, the known LAC, the highest
entry, the master key. Not the ledger's metadata state (``metadata.records.LedgerState``: OPEN,
IN_RECOVERY, CLOSED, which the writer and recovery move in the metadata store): that is the
cluster's view of the ledger, this is one bookie's, kept in its index and journal.

One enum of states and one transition table: ``OPEN -> FENCED -> DELETED`` (and ``OPEN ->
DELETED``). A fenced ledger never accepts a normal add again, also after a restart (the fence
is journaled before it is acknowledged and lands in the index at the next checkpoint). A deleted
ledger keeps a tombstone so a late add or a journal replay cannot resurrect it
(apache/bookkeeper#4462).
"""

from __future__ import annotations

import enum
import struct
from dataclasses import dataclass

from magnetar.base.errors import CorruptDataError
from magnetar.base.invariant import invariant


class LedgerStatus(enum.IntEnum):
    OPEN = 0
    FENCED = 1
    DELETED = 2


_TRANSITIONS: dict[LedgerStatus, frozenset[LedgerStatus]] = {
    LedgerStatus.OPEN: frozenset({LedgerStatus.FENCED, LedgerStatus.DELETED}),
    LedgerStatus.FENCED: frozenset({LedgerStatus.DELETED}),
    LedgerStatus.DELETED: frozenset(),
}

_STATE = struct.Struct(">BqqB")


@dataclass(slots=True)
class BookieLedger:
    ledger_id: int
    status: LedgerStatus = LedgerStatus.OPEN
    lac: int = -1
    # The highest entry id accepted into storage (write cache or index). After a crash it may
    # name an entry that never became durable; ``Bookie`` repairs that at start.
    last_entry: int = -1
    master_key: bytes = b""
    dirty: bool = True

    def transition(self, to: LedgerStatus) -> None:
        if to is self.status:
            return
        invariant(to in _TRANSITIONS[self.status], f"ledger {self.ledger_id}: illegal {self.status.name} -> {to.name}")
        self.status = to
        self.dirty = True

    def note_entry(self, entry_id: int, lac: int) -> None:
        if entry_id > self.last_entry:
            self.last_entry = entry_id
            self.dirty = True
        if lac > self.lac:
            self.lac = lac
            self.dirty = True

    def encode(self) -> bytes:
        return _STATE.pack(self.status, self.lac, self.last_entry, len(self.master_key)) + self.master_key

    @classmethod
    def decode(cls, ledger_id: int, value: bytes) -> BookieLedger:
        if len(value) < _STATE.size:
            raise CorruptDataError(f"ledger state of {ledger_id} is {len(value)} bytes")
        status, lac, last_entry, mk_len = _STATE.unpack_from(value, 0)
        master_key = value[_STATE.size : _STATE.size + mk_len]
        if len(master_key) != mk_len:
            raise CorruptDataError(f"ledger state of {ledger_id} has a short master key")
        return cls(ledger_id, LedgerStatus(status), lac, last_entry, master_key, dirty=False)
