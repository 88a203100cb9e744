"""Open-with-recovery: ``LedgerRecovery`` fences a ledger, finds its true end and closes it.

Steps (``shared/reference/bookkeeper_replication.md`` 1.7, followed literally):

1. CAS the metadata OPEN -> IN_RECOVERY (a ledger already IN_RECOVERY is recovered again:
   recovery is idempotent, so a recoverer that died midway is simply redone; CLOSED returns).
2. Fencing LAC read to every bookie of the last ensemble until every write set has
   ``Qw - Qa + 1`` valid answers. From then on the old writer cannot complete any add.
3. Start after ``max(highest LAC answered, first entry of the last fragment - 1)``: earlier
   fragments are immutable and everything before the last fragment was acknowledged
   (BookKeeper 2615).
4. Read forward one entry at a time with **fencing** reads (BookKeeper 2614: a "no such entry"
   from a fenced bookie is stable, the bookie can never accept that entry from the old writer
   afterwards). One digest-valid copy means the entry exists; ``Qw - Qa + 1`` negatives in its
   write set mean it was never acknowledged and the ledger ends before it.
5. Write every entry found back to its whole write set with the recovery flag (fenced bookies
   accept recovery adds); at least Qa must store it.
6. CAS IN_RECOVERY -> CLOSED with the last entry found. A concurrent recoverer that closed first
   wins; its record is returned.

Fault points: ``ledger.recovery.after_fence`` (R1), ``.after_writeback`` (R2),
``.before_close_cas`` (R3).

Negative-control switches (``RecoveryMode``) exist only so the simulation's checkers can prove
they detect the loss each mechanism prevents; production code never sets them.
"""

from __future__ import annotations

import asyncio
import enum

from magnetar import faults
from magnetar.base.clock import Clock
from magnetar.base.errors import BadVersionError, LimitExceededError, MagnetarError
from magnetar.base.invariant import invariant
from magnetar.base.limits import LEDGER_METADATA_CAS_RETRY_COUNT_MAX, LEDGER_RECOVERY_ENTRIES_COUNT_MAX
from magnetar.base.types import NO_ENTRY, BookieId
from magnetar.faults import breaks
from magnetar.ledger._deadline import keep_in_background, with_deadline
from magnetar.ledger.config import LedgerClientConfig
from magnetar.ledger.errors import NoSuchEntryError, RecoveryIncompleteError
from magnetar.ledger.lac import read_lac_quorum
from magnetar.ledger.ledger_metadata import LedgerMetadata, LedgerState
from magnetar.ledger.metadata_ops import LedgerMetadataStore, VersionedMetadata
from magnetar.ledger.quorum import ack_quorum_reached, entry_missing, write_set
from magnetar.ledger.reader import verified
from magnetar.ledger.transport import BookieTransport
from magnetar.protocol.bookie.codec import EncodedEntry


class RecoveryMode(enum.Enum):
    CORRECT = "correct"
    #: Negative control: recovery reads do not fence (the pre-2616 BookKeeper behaviour).
    READS_WITHOUT_FENCING = "reads_without_fencing"
    #: Negative control: no fencing at all, end taken from the LAC answers alone.
    NO_FENCING = "no_fencing"
    #: Negative control: close at the highest LAC seen instead of reading forward.
    TRUNCATE_TO_LAC = "truncate_to_lac"


class RecoveryStep(enum.Enum):
    START = "start"
    FENCING = "fencing"
    READING = "reading"
    CLOSING = "closing"
    DONE = "done"


RECOVERY_TRANSITIONS: dict[RecoveryStep, frozenset[RecoveryStep]] = {
    RecoveryStep.START: frozenset({RecoveryStep.FENCING, RecoveryStep.DONE}),
    RecoveryStep.FENCING: frozenset({RecoveryStep.READING}),
    RecoveryStep.READING: frozenset({RecoveryStep.CLOSING}),
    RecoveryStep.CLOSING: frozenset({RecoveryStep.DONE}),
    RecoveryStep.DONE: frozenset(),
}


def _broken(mode: RecoveryMode) -> RecoveryMode:
    """A real process started with ``MAGNETAR_BREAK`` (negative control, faults/breaks.py) recovers wrongly."""
    if mode is RecoveryMode.CORRECT and breaks.active(breaks.Break.NO_FENCING):
        return RecoveryMode.NO_FENCING
    if mode is RecoveryMode.CORRECT and breaks.active(breaks.Break.TRUNCATE_TO_LAC):
        return RecoveryMode.TRUNCATE_TO_LAC
    return mode


def _own_reads(tasks: dict[asyncio.Task[EncodedEntry], int]) -> None:
    """Consume the outcome of every finished read of one recovery read.

    Answers arrive together: one ``asyncio.wait`` batch can hold the valid copy and the "no such
    entry" of the other bookies. Returning on the copy leaves the rest of the batch unread, and
    asyncio then reports "Task exception was never retrieved" for each. Those answers no longer
    change the outcome (the entry exists, or the end is already decided), so they are retrieved
    here; reads still running are handed to ``keep_in_background`` by the caller.
    """
    for task in tasks:
        if task.done() and not task.cancelled():
            task.exception()


class LedgerRecovery:
    """One recovery attempt of one ledger; ``run()`` returns the CLOSED metadata."""

    def __init__(
        self,
        ledger_id: int,
        *,
        store: LedgerMetadataStore,
        transport: BookieTransport,
        clock: Clock,
        config: LedgerClientConfig,
        master_key: bytes = b"",
        mode: RecoveryMode = RecoveryMode.CORRECT,
    ) -> None:
        self.ledger_id = ledger_id
        self._store = store
        self._transport = transport
        self._clock = clock
        self._config = config
        self._master_key = master_key
        self._mode = _broken(mode)
        self.step = RecoveryStep.START
        self.recovered_entries: list[int] = []
        self._background: set[asyncio.Task[object]] = set()

    def _move(self, step: RecoveryStep) -> None:
        invariant(step in RECOVERY_TRANSITIONS[self.step], f"recovery may not go {self.step} -> {step}")
        self.step = step

    async def run(self) -> LedgerMetadata:
        current = await self._mark_in_recovery()
        if current.metadata.state is LedgerState.CLOSED:
            self._move(RecoveryStep.DONE)
            return current.metadata
        meta = current.metadata
        self._move(RecoveryStep.FENCING)
        fence = self._mode is not RecoveryMode.NO_FENCING
        lac_result = await read_lac_quorum(
            self._transport,
            self._clock,
            meta,
            fence=fence,
            timeout_ms=self._config.recovery_fence_timeout_ms,
            master_key=self._master_key,
            background=self._background,
        )
        await faults.point("ledger.recovery.after_fence")
        self._move(RecoveryStep.READING)
        last = max(lac_result.lac, meta.last_fragment.first_entry_id - 1)
        if self._mode is not RecoveryMode.TRUNCATE_TO_LAC:
            last = await self._read_forward(meta, last)
        await faults.point("ledger.recovery.after_writeback")
        self._move(RecoveryStep.CLOSING)
        closed = await self._close(current, last)
        self._move(RecoveryStep.DONE)
        return closed

    async def _mark_in_recovery(self) -> VersionedMetadata:
        current = await self._store.read(self.ledger_id)
        for _ in range(LEDGER_METADATA_CAS_RETRY_COUNT_MAX):
            if current.metadata.state is not LedgerState.OPEN:
                return current
            try:
                return await self._store.cas(current, current.metadata.to_recovery())
            except BadVersionError:
                current = await self._store.read(self.ledger_id)
        raise LimitExceededError(
            "LEDGER_METADATA_CAS_RETRY_COUNT_MAX", LEDGER_METADATA_CAS_RETRY_COUNT_MAX + 1,
            LEDGER_METADATA_CAS_RETRY_COUNT_MAX,
        )

    async def _read_forward(self, meta: LedgerMetadata, last: int) -> int:
        for _ in range(LEDGER_RECOVERY_ENTRIES_COUNT_MAX):
            entry_id = last + 1
            entry = await self._recovery_read(meta, entry_id)
            if entry is None:
                return last
            await self._write_back(meta, entry)
            self.recovered_entries.append(entry_id)
            last = entry_id
        raise LimitExceededError("LEDGER_RECOVERY_ENTRIES_COUNT_MAX", LEDGER_RECOVERY_ENTRIES_COUNT_MAX + 1,
                            LEDGER_RECOVERY_ENTRIES_COUNT_MAX)

    def _write_set(self, meta: LedgerMetadata, entry_id: int) -> list[tuple[int, BookieId]]:
        ensemble = meta.ensemble_for(entry_id)
        return [(i, ensemble[i]) for i in write_set(entry_id, meta.ensemble_size, meta.write_quorum_size)]

    async def _recovery_read(self, meta: LedgerMetadata, entry_id: int) -> EncodedEntry | None:
        """The entry if any bookie has a valid copy; ``None`` once enough bookies are sure it is absent."""
        fence = self._mode is RecoveryMode.CORRECT

        async def ask(bookie: BookieId) -> EncodedEntry:
            return await with_deadline(
                self._clock,
                self._config.read_timeout_ms,
                self._transport.read(bookie, meta.ledger_id, entry_id, fence=fence, master_key=self._master_key),
                f"recovery read {meta.ledger_id}:{entry_id} from {bookie}",
            )

        tasks = {asyncio.ensure_future(ask(bookie)): index for index, bookie in self._write_set(meta, entry_id)}
        negatives: set[int] = set()
        remaining = set(tasks)
        try:
            while remaining:
                done, remaining = await asyncio.wait(remaining, return_when=asyncio.FIRST_COMPLETED)
                for task in done:
                    try:
                        entry = task.result()
                    except NoSuchEntryError:
                        negatives.add(tasks[task])
                        continue
                    except MagnetarError:
                        continue
                    if verified(entry, meta.ledger_id, entry_id):
                        return entry
                if entry_missing(
                    negatives, entry_id, meta.ensemble_size, meta.write_quorum_size, meta.ack_quorum_size
                ):
                    return None
        finally:
            _own_reads(tasks)
            for task in remaining:
                # Outstanding reads still fence their bookie; let them finish in the background.
                keep_in_background(task, self._background)
        raise RecoveryIncompleteError(
            f"ledger {meta.ledger_id}: cannot tell whether entry {entry_id} exists "
            f"({len(negatives)} negatives of {meta.write_quorum_size})"
        )

    async def _write_back(self, meta: LedgerMetadata, entry: EncodedEntry) -> None:
        members = self._write_set(meta, entry.entry_id)

        async def put(bookie: BookieId) -> None:
            await with_deadline(
                self._clock,
                self._config.add_timeout_ms,
                self._transport.add(bookie, entry, recovery=True, master_key=self._master_key),
                f"recovery add {meta.ledger_id}:{entry.entry_id} to {bookie}",
            )

        results = await asyncio.gather(*(put(bookie) for _, bookie in members), return_exceptions=True)
        stored = {index for (index, _), result in zip(members, results, strict=True) if result is None}
        for result in results:
            if result is not None and not isinstance(result, MagnetarError):
                raise result
        if not ack_quorum_reached(
            stored, entry.entry_id, meta.ensemble_size, meta.write_quorum_size, meta.ack_quorum_size
        ):
            raise RecoveryIncompleteError(
                f"ledger {meta.ledger_id}: entry {entry.entry_id} written back to only {len(stored)} bookies"
            )

    async def _close(self, current: VersionedMetadata, last: int) -> LedgerMetadata:
        await faults.point("ledger.recovery.before_close_cas")
        invariant_last = max(last, NO_ENTRY)
        for _ in range(LEDGER_METADATA_CAS_RETRY_COUNT_MAX):
            meta = current.metadata
            if meta.state is LedgerState.CLOSED:
                return meta  # a concurrent recoverer (or the writer) closed it first
            try:
                return (await self._store.cas(current, meta.to_closed(invariant_last))).metadata
            except BadVersionError:
                current = await self._store.read(self.ledger_id)
        raise LimitExceededError(
            "LEDGER_METADATA_CAS_RETRY_COUNT_MAX", LEDGER_METADATA_CAS_RETRY_COUNT_MAX + 1,
            LEDGER_METADATA_CAS_RETRY_COUNT_MAX,
        )
