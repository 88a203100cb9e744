"""``ManagedCursor``: a subscription's position in a managed ledger, and its persistence.

State: the mark-delete position (every entry at or before it is acknowledged), individually
deleted ranges after it (a ``PositionRangeSet``), batch-index acks (per batch entry, a bit set of
acknowledged indexes: bit i set = index i acknowledged), properties, and the read position.

Persistence (Pulsar's ``ManagedCursorInfo``/``PositionInfo`` scheme, ``shared/seeds/002_*``): a
flush appends the whole state as one ``CursorInfo`` entry to the cursor's own ledger, then CASes
the same record (naming that ledger) into ``{managed ledger path}/{cursor}``. Flushes are
throttled to one per ``cursor_flush_interval_ms``; more than ``cursor_unpersisted_changes_max``
unpersisted acks make acks wait for a flush. The cursor ledger rolls over after
``cursor_ledger_entries_max`` entries, or when a write to it fails.

Close (Pulsar's ``persistPositionWhenClosing`` into ``ManagedCursorInfo``): the closing state is
CAS'd into the snapshot alone, naming no cursor ledger (``cursor_ledger_id`` -1), and the cursor
ledger is deleted: no ledger is created, written or read for it. The snapshot always carries the
whole state (every flush CASes the same record it appended), so this loses nothing; the ledger
only matters when a flush was cut between its append and its CAS.

Recovery: read the snapshot; if it names a cursor ledger (the previous owner did not close the
cursor), open that ledger *with recovery* (this fences a previous owner still flushing) and take
its last entry. That entry is never older than the snapshot: every snapshot is CAS'd after the
entry it describes was written, and a snapshot is only ever CAS'd with the ledger whose entry was
written just before. Then the recovered state is CAS'd into the snapshot, naming no ledger: that
bumps the node's version, so a previous owner's next flush or close loses its CAS (two owners
never both advance the cursor), and the named ledger is deleted. The first flush after it creates
a cursor ledger.

Context: a cursor is given a ``CursorContext`` by its managed ledger (the log it reads, the store
and ledger manager its state persists to, the clock, the settings) and reaches for nothing else.

Invariants: the mark-delete position never goes back, except by an explicit ``reset``; every
individually deleted range lies after the mark-delete position and the first one does not start
at the entry right after it; the persisted state is a state the cursor really had (never ahead
of the acks).
"""

from __future__ import annotations

import asyncio
import enum
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import NoReturn, Protocol
from urllib.parse import quote, unquote

from mypy_extensions import mypyc_attr

from magnetar import faults
from magnetar.base.clock import Clock
from magnetar.base.entry import Entry
from magnetar.base.errors import (
    BadVersionError,
    FencedError,
    InvalidArgumentError,
    LimitExceededError,
    MagnetarError,
    NotFoundError,
)
from magnetar.base.invariant import invariant
from magnetar.base.limits import (
    MANAGED_CURSOR_BATCH_ACKS_COUNT_MAX,
    MANAGED_CURSOR_BATCH_SIZE_MAX,
    MANAGED_CURSOR_RANGES_COUNT_MAX,
)
from magnetar.base.types import Position
from magnetar.faults import breaks
from magnetar.ledger.handle import LedgerHandle
from magnetar.ledger.manager import LedgerManager
from magnetar.managed_ledger.config import CursorRecovery, ManagedLedgerConfig
from magnetar.managed_ledger.errors import (
    InvalidCursorPositionError,
    ManagedLedgerClosedError,
    ManagedLedgerFencedError,
)
from magnetar.managed_ledger.ranges import PositionRangeSet
from magnetar.metadata.api import MetadataStore
from magnetar.metadata.records import BatchIndexAck, CursorInfo, PositionRange, PositionRecord, decode, encode

_WORD_BITS = 64
#: CASes a close tries when its own flushes keep landing first (each moves the version it holds).
CLOSE_CAS_ATTEMPTS_MAX = 3
_WORD_MASK = (1 << _WORD_BITS) - 1


def cursor_node_name(name: str) -> str:
    """The metadata node name of cursor ``name`` (URL-encoded, as Pulsar's subscription names are)."""
    if not name:
        raise InvalidArgumentError("cursor name must not be empty")
    return quote(name, safe="")


def cursor_name_from_node(node: str) -> str:
    return unquote(node)


class CursorLog(Protocol):
    """The log as a cursor reads it (its managed ledger's, owned or read-only)."""

    @property
    def last_confirmed_entry(self) -> Position:
        """The last acknowledged entry."""
        ...

    def next_position(self, position: Position) -> Position:
        """The entry after ``position`` in the log (or where the next append would land)."""
        ...

    def first_at_or_after(self, position: Position) -> Position | None:
        """The first stored, acknowledged entry at or after ``position``; None past the end."""
        ...

    def count_entries(self, after: Position, upto: Position) -> int:
        """Stored entries ``p`` with ``after < p <= upto``."""
        ...

    async def read_entries(self, start: Position, count_max: int) -> list[Entry]:
        """Up to ``count_max`` acknowledged entries from ``start`` on."""
        ...


@dataclass(frozen=True, slots=True)
class CursorContext:
    """What a cursor needs of its managed ledger, handed to it once (it reaches for nothing else).

    ``ml_name``: for messages; ``ml_path``: cursor snapshots are its children; ``log``: entries and
    positions; ``store``/``manager``: where its state persists (snapshot, cursor ledgers);
    ``config``: the ``cursor_*`` settings and the cursor ledgers' quorum; ``forget``: a closed
    non-durable cursor leaves its managed ledger's set.
    """

    ml_name: str
    ml_path: str
    log: CursorLog
    store: MetadataStore
    manager: LedgerManager
    clock: Clock
    config: ManagedLedgerConfig
    forget: Callable[[ManagedCursor], None]


class CursorState(enum.Enum):
    ACTIVE = "active"
    FENCED = "fenced"  # another owner took the cursor (or its managed ledger) over
    CLOSED = "closed"


CURSOR_TRANSITIONS: dict[CursorState, frozenset[CursorState]] = {
    CursorState.ACTIVE: frozenset({CursorState.FENCED, CursorState.CLOSED}),
    CursorState.FENCED: frozenset({CursorState.CLOSED}),
    CursorState.CLOSED: frozenset(),
}


def _ascending(positions: list[Position]) -> bool:
    """Whether ``positions`` are in order (repeats allowed): an ACK's ids usually are."""
    previous = positions[0]
    for position in positions:
        if position < previous:
            return False
        previous = position
    return True


def _mask_to_words(mask: int) -> list[int]:
    words = []
    while mask:
        words.append(mask & _WORD_MASK)
        mask >>= _WORD_BITS
    return words


def _words_to_mask(words: list[int]) -> int:
    mask = 0
    for i, word in enumerate(words):
        mask |= (word & _WORD_MASK) << (i * _WORD_BITS)
    return mask


@mypyc_attr(allow_interpreted_subclasses=True)  # ReadOnlyCursor (managed_ledger/read_only_cursors.py)
class ManagedCursor:
    """Build through ``ManagedLedger.open_cursor`` / ``new_non_durable_cursor``."""

    def __init__(self, context: CursorContext, name: str, mark_delete: Position, *, durable: bool) -> None:
        self._ctx = context
        self._log = context.log
        self.name = name
        self.durable = durable
        self._state = CursorState.ACTIVE
        self._md = mark_delete
        self._ranges = PositionRangeSet(MANAGED_CURSOR_RANGES_COUNT_MAX)
        self._batch: dict[Position, int] = {}
        self.properties: dict[str, int] = {}
        self._read_position = context.log.next_position(mark_delete)
        self._path = f"{context.ml_path}/{cursor_node_name(name)}" if durable else ""
        self._snapshot_version = -1
        self._ledger: LedgerHandle | None = None
        self._ledger_entries = 0
        self._changes = 0  # acks and resets ever applied
        self._persisted_changes = 0
        self._persisted_md = mark_delete
        self._last_flush_ns = context.clock.monotonic_ns()
        self._flush_lock = asyncio.Lock()
        self._dirty = asyncio.Event()
        self._flusher: asyncio.Task[None] | None = None
        self._release_task: asyncio.Task[None] | None = None  # a close's ledger release, after a flush

    # --- construction ----------------------------------------------------------------------------

    @classmethod
    async def create(cls, context: CursorContext, name: str, mark_delete: Position) -> ManagedCursor:
        cursor = cls(context, name, mark_delete, durable=True)
        try:
            cursor._snapshot_version = await context.store.put(cursor._path, encode(cursor._record(-1)), -1)
        except BadVersionError:
            pass  # created meanwhile (or left by a previous owner): recovered after the handler
        else:
            cursor._start_flusher()
            return cursor
        # Compiled (mypyc), an ``except`` block never awaits: see ``_switch_ledger``.
        return await cls.recover(context, name)

    @classmethod
    def non_durable(cls, context: CursorContext, mark_delete: Position) -> ManagedCursor:
        return cls(context, "", mark_delete, durable=False)

    @classmethod
    async def recover(cls, context: CursorContext, name: str) -> ManagedCursor:
        """Load cursor ``name``: its snapshot; if the snapshot names a cursor ledger (the previous
        owner did not close the cursor), the last entry of that ledger, opened with recovery (fenced).
        Then take the node over with one CAS of the recovered state (no cursor ledger yet: the first
        flush creates one), so a previous owner's next flush or close loses its CAS."""
        path = f"{context.ml_path}/{cursor_node_name(name)}"
        found = await context.store.get(path)
        if found is None:
            raise NotFoundError(f"cursor {name} of {context.ml_name} has no snapshot")
        info = decode(CursorInfo, found.value)
        named_ledger = info.cursor_ledger_id
        if named_ledger >= 0 and context.config.cursor_recovery is CursorRecovery.NEWEST:
            info = await cls._newest_from_ledger(context, info)
        cursor = cls(context, name, Position(info.mark_delete.ledger_id, info.mark_delete.entry_id), durable=True)
        cursor._snapshot_version = found.version
        cursor._apply(info)
        await cursor._cas_snapshot(cursor._record(-1))
        cursor._persisted_md = cursor._md
        if named_ledger >= 0:
            await cursor._delete_quietly(named_ledger)  # the snapshot no longer names it
        cursor._start_flusher()
        return cursor

    @staticmethod
    async def _newest_from_ledger(context: CursorContext, info: CursorInfo) -> CursorInfo:
        try:
            reader = await context.manager.open_ledger(info.cursor_ledger_id)
        except NotFoundError:
            return info  # the ledger was already replaced and deleted: the snapshot is newest
        last = reader.last_add_confirmed
        if last < 0:
            return info
        entry = (await reader.read_entries(last, last))[0]
        return decode(CursorInfo, entry.payload)

    def _apply(self, info: CursorInfo) -> None:
        for persisted in info.individually_deleted:
            first = Position(persisted.lower.ledger_id, persisted.lower.entry_id + 1)
            last = Position(persisted.upper.ledger_id, persisted.upper.entry_id)
            first = max(first, self._log.next_position(self._md))
            if first <= last:  # else it names no entry this log still holds
                self._ranges.add_range(first, last, self._log.next_position)
        for ack in info.batch_index_acks or []:
            position = Position(ack.ledger_id, ack.entry_id)
            if position > self._md:
                self._batch[position] = _words_to_mask(ack.ack_set)
        self.properties = dict(info.properties)
        self._advance_over_ranges()
        self._read_position = self._log.next_position(self._md)

    # --- view ------------------------------------------------------------------------------------

    @property
    def state(self) -> CursorState:
        return self._state

    @property
    def mark_delete_position(self) -> Position:
        return self._md

    @property
    def persisted_mark_delete_position(self) -> Position:
        """The mark-delete position of the last complete flush."""
        return self._persisted_md

    @property
    def read_position(self) -> Position:
        return self._read_position

    @property
    def cursor_ledger_id(self) -> int:
        return self._ledger.ledger_id if self._ledger is not None else -1

    def individually_deleted_ranges(self) -> list[tuple[Position, Position]]:
        """Closed ranges ``[first, last]`` of acknowledged entries after the mark-delete position."""
        return list(self._ranges)

    def batch_acked_indexes(self, position: Position) -> frozenset[int]:
        mask = self._batch.get(position, 0)
        return frozenset(i for i in range(mask.bit_length()) if mask >> i & 1)

    def is_deleted(self, position: Position) -> bool:
        return position <= self._md or self._ranges.contains(position)

    def get_number_of_entries_in_backlog(self) -> int:
        """Entries after the mark-delete position not individually acknowledged."""
        lce = self._log.last_confirmed_entry
        backlog = self._log.count_entries(self._md, lce)
        for first, last in self._ranges:
            backlog -= self._log.count_entries(self._before(first), min(last, lce))
        return max(0, backlog)

    def _before(self, position: Position) -> Position:
        return Position(position.ledger_id, position.entry_id - 1)

    def has_more_entries(self) -> bool:
        return self._log.first_at_or_after(self._read_position) is not None and (
            self._read_position <= self._log.last_confirmed_entry
        )

    # --- acks ------------------------------------------------------------------------------------

    def _check_active(self) -> None:
        if self._state is CursorState.FENCED:
            raise ManagedLedgerFencedError(f"cursor {self.name} of {self._ctx.ml_name} was taken over")
        if self._state is CursorState.CLOSED:
            raise ManagedLedgerClosedError(f"cursor {self.name} of {self._ctx.ml_name} is closed")

    def _check_in_log(self, position: Position) -> None:
        if position > self._log.last_confirmed_entry:
            raise InvalidCursorPositionError(f"{position} is after the last entry {self._log.last_confirmed_entry}")

    async def mark_delete(self, position: Position, properties: dict[str, int] | None = None) -> None:
        """Acknowledge every entry up to ``position``. An older position changes nothing (never back)."""
        self._check_active()
        self._check_in_log(position)
        if properties is not None:
            self.properties = dict(properties)
        if position <= self._md and properties is None:
            return
        if position > self._md:
            self._move_md(position)
        await self._after_change()

    async def delete(self, positions: Iterable[Position]) -> None:
        """Acknowledge individual entries; the mark-delete position advances over contiguous ones.

        All of them as one change (issue 22, the acknowledgement pass: an ACK command of the
        official client carries ~200 ids every 100 ms): checked against the log once (none is
        applied if one lies after the last entry), sorted, cut into runs of consecutive entries of
        one ledger, each run one ``add_run`` on the ranges; then one advance of the mark-delete
        position and one persistence decision."""
        self._check_active()
        ordered = list(positions)
        if not ordered:
            return
        if not _ascending(ordered):
            ordered.sort()
        self._check_in_log(ordered[-1])
        if self._add_runs(ordered):
            self._advance_over_ranges()
            await self._after_change()

    def _add_runs(self, ordered: list[Position]) -> bool:
        """Add the sorted positions after the mark-delete position to the ranges, a run at a time;
        True if any was not acknowledged before."""
        md = self._md
        batch = self._batch
        successor = self._log.next_position
        changed = False
        first: Position | None = None
        last = md
        for position in ordered:
            if position <= md:
                continue
            if batch:
                batch.pop(position, None)
            if first is not None and position.ledger_id == last.ledger_id and position.entry_id <= last.entry_id + 1:
                last = position  # the same run (a repeated id changes nothing)
                continue
            if first is not None:
                changed = self._ranges.add_run(first, last, successor) or changed
            first = last = position
        if first is not None:
            changed = self._ranges.add_run(first, last, successor) or changed
        return changed

    async def delete_batch_indexes(self, position: Position, indexes: Iterable[int], batch_size: int) -> None:
        """Acknowledge some messages of batch entry ``position``; all of them acks the entry."""
        self._check_active()
        self._check_in_log(position)
        if not 1 <= batch_size <= MANAGED_CURSOR_BATCH_SIZE_MAX:
            raise InvalidArgumentError(f"batch_size must be 1..{MANAGED_CURSOR_BATCH_SIZE_MAX}")
        if self.is_deleted(position):
            return
        mask = self._batch.get(position, 0)
        for index in indexes:
            if not 0 <= index < batch_size:
                raise InvalidArgumentError(f"batch index {index} outside 0..{batch_size - 1}")
            mask |= 1 << index
        if mask == (1 << batch_size) - 1:
            await self.delete([position])
            return
        if position not in self._batch and len(self._batch) >= MANAGED_CURSOR_BATCH_ACKS_COUNT_MAX:
            raise LimitExceededError("MANAGED_CURSOR_BATCH_ACKS_COUNT_MAX", len(self._batch) + 1, MANAGED_CURSOR_BATCH_ACKS_COUNT_MAX)
        if mask != self._batch.get(position):
            self._batch[position] = mask
            await self._after_change()

    async def reset(self, position: Position) -> None:
        """Seek: the next entry delivered is ``position``; everything from it on is unacknowledged.

        The only way the mark-delete position moves back (invariant 9 allows explicit resets).
        """
        self._check_active()
        self._md = Position(position.ledger_id, position.entry_id - 1) if position.entry_id >= 0 else position
        self._ranges.clear()
        self._batch.clear()
        self._read_position = self._log.next_position(self._md)
        await self._after_change()

    def _move_md(self, position: Position) -> None:
        invariant(position > self._md, "mark-delete only moves forward here")
        self._md = position
        self._ranges.remove_up_to(position, self._log.next_position)
        for acked in [p for p in self._batch if p <= position]:
            del self._batch[acked]
        self._advance_over_ranges()

    def _advance_over_ranges(self) -> None:
        while True:
            first = self._ranges.first()
            if first is None or first[0] != self._log.next_position(self._md):
                break
            self._md = first[1]
            self._ranges.remove_up_to(self._md, self._log.next_position)
        for acked in [p for p in self._batch if p <= self._md]:
            del self._batch[acked]
        if self._read_position <= self._md:
            self._read_position = self._log.next_position(self._md)

    # --- reads -----------------------------------------------------------------------------------

    async def read_entries(self, count_max: int) -> list[Entry]:
        """Up to ``count_max`` entries from the read position on, skipping acknowledged ones."""
        self._check_active()
        entries = await self._log.read_entries(self._read_position, count_max)
        if entries:
            self._read_position = self._log.next_position(entries[-1].position)
        return [entry for entry in entries if not self.is_deleted(entry.position)]

    def seek(self, read_position: Position) -> None:
        """Move the read position (redelivery); never before the entry after the mark-delete position."""
        self._read_position = max(read_position, self._log.next_position(self._md))

    def skip_to(self, first: Position) -> int:
        """Retention removed entries this cursor had not consumed (it is before ``first``, the
        position before the oldest kept entry): move it there, never an error loop. Returns an
        estimate of the entries skipped (exact within one ledger; 1 per ledger gone, whose counts
        are no longer known); 0 if it was not behind or is not active."""
        md = self._md
        if md >= first or self._state is not CursorState.ACTIVE:
            return 0
        skipped = first.entry_id - md.entry_id if first.ledger_id == md.ledger_id else 1
        self._move_md(first)
        self._read_position = max(self._read_position, self._log.next_position(first))
        self._changes += 1
        if self.durable:
            self._dirty.set()
        return max(skipped, 1)

    # --- persistence -----------------------------------------------------------------------------

    def _record(self, ledger_id: int) -> CursorInfo:
        limit = self._ctx.config.cursor_ranges_persist_count_max
        ranges = [
            PositionRange(
                lower=PositionRecord(first.ledger_id, first.entry_id - 1),
                upper=PositionRecord(last.ledger_id, last.entry_id),
            )
            for first, last in list(self._ranges)[:limit]
        ]
        batch = [
            BatchIndexAck(p.ledger_id, p.entry_id, _mask_to_words(mask)) for p, mask in sorted(self._batch.items())
        ]
        return CursorInfo(
            cursor_ledger_id=ledger_id,
            mark_delete=PositionRecord(self._md.ledger_id, self._md.entry_id),
            individually_deleted=ranges,
            batch_index_acks=batch or None,
            properties=dict(self.properties),
            last_active_ms=self._ctx.clock.now_ms(),
        )

    async def _after_change(self) -> None:
        self._changes += 1
        if not self.durable:
            self._persisted_changes = self._changes
            return
        self._dirty.set()
        unpersisted = self._changes - self._persisted_changes
        if self._ctx.config.cursor_flush_interval_ms == 0 or unpersisted >= self._ctx.config.cursor_unpersisted_changes_max:
            await self.flush()

    def _start_flusher(self) -> None:
        if self._ctx.config.cursor_flush_interval_ms > 0:
            self._flusher = asyncio.ensure_future(self._flush_periodically())

    async def _flush_periodically(self) -> None:
        interval_ns = self._ctx.config.cursor_flush_interval_ms * 1_000_000
        while self._state is CursorState.ACTIVE:
            await self._dirty.wait()
            wait_ns = self._last_flush_ns + interval_ns - self._ctx.clock.monotonic_ns()
            if wait_ns > 0:
                await self._ctx.clock.sleep(wait_ns / 1e9)
            try:
                await self.flush()
            except MagnetarError:
                # Fenced: the state says so. Bookies or metadata down: retry after an interval.
                self._last_flush_ns = self._ctx.clock.monotonic_ns()

    async def flush(self) -> None:
        """Persist the current state now (no-op if nothing changed since the last flush)."""
        if not self.durable:
            return
        async with self._flush_lock:
            self._check_active()
            if self._changes == self._persisted_changes:
                return
            changes = self._changes
            md = self._md
            if self._ledger is None or self._ledger_entries >= self._ctx.config.cursor_ledger_entries_max:
                await self._switch_ledger(self._record(-1))
            else:
                await self._append_and_snapshot(self._ledger, self._record(self._ledger.ledger_id))
            self._persisted_changes = changes
            self._persisted_md = md
            self._last_flush_ns = self._ctx.clock.monotonic_ns()
            if self._changes == self._persisted_changes:
                self._dirty.clear()

    async def _append_and_snapshot(self, ledger: LedgerHandle, record: CursorInfo) -> None:
        try:
            await ledger.add_entry(encode(record))
        except FencedError as exc:
            self._fence(exc)
        except MagnetarError:
            failed = True  # this cursor ledger failed: continue in a new one (after the handler)
        else:
            failed = False
        if failed:
            await self._switch_ledger(record)
            return
        self._ledger_entries += 1
        await faults.point("managed_ledger.cursor.mid_flush")
        await self._cas_snapshot(record)

    async def _switch_ledger(self, record: CursorInfo) -> None:
        config = self._ctx.config
        ledger = await self._ctx.manager.create_ledger(config.ensemble_size, config.write_quorum_size, config.ack_quorum_size)
        record = CursorInfo(
            cursor_ledger_id=ledger.ledger_id,
            mark_delete=record.mark_delete,
            individually_deleted=record.individually_deleted,
            batch_index_acks=record.batch_index_acks,
            properties=record.properties,
            last_active_ms=record.last_active_ms,
        )
        # Compiled (mypyc), an ``except`` block never awaits: mypyc keeps the exception being
        # handled in the thread's shared exception state, not per coroutine, and other coroutines
        # change it while this one is suspended. Here a bare ``raise`` after awaiting the delete
        # re-raised whatever was there; ``None`` wrote a traceback over ``NoneType``'s type and
        # cluster brokers crashed (docs/performance.md, session 12). The delete runs after it.
        try:
            await ledger.add_entry(encode(record))
            await faults.point("managed_ledger.cursor.mid_flush")
            await self._cas_snapshot(record)
        except (ManagedLedgerFencedError, ManagedLedgerClosedError) as exc:
            lost: MagnetarError | None = exc
        else:
            lost = None
        if lost is not None:
            await self._delete_quietly(ledger.ledger_id)
            raise lost
        old, self._ledger, self._ledger_entries = self._ledger, ledger, 1
        if old is not None:
            await self._retire(old.ledger_id, old)

    async def _retire(self, ledger_id: int, handle: LedgerHandle) -> None:
        try:
            await handle.close()
        except MagnetarError:
            pass  # failed or fenced: it is deleted anyway, the snapshot no longer names it
        await self._delete_quietly(ledger_id)

    async def _delete_quietly(self, ledger_id: int) -> None:
        try:
            await self._ctx.manager.delete_ledger(ledger_id)
        except MagnetarError:
            return  # an orphan cursor ledger only wastes space

    async def _cas_snapshot(self, record: CursorInfo) -> None:
        # A flush whose add outlived a close must not write its older state over the closing one
        # (the close moved the version this cursor holds; checked here, after the add).
        self._check_active()
        try:
            self._snapshot_version = await self._ctx.store.put(self._path, encode(record), self._snapshot_version)
        except BadVersionError as exc:
            self._fence(exc)

    def _fence(self, cause: MagnetarError) -> NoReturn:
        if self._state is CursorState.ACTIVE:
            self._move(CursorState.FENCED)
        raise ManagedLedgerFencedError(f"cursor {self.name} of {self._ctx.ml_name} was taken over: {cause}") from cause

    def on_ledger_fenced(self) -> None:
        if self._state is CursorState.ACTIVE:
            self._move(CursorState.FENCED)

    def _move(self, new: CursorState) -> None:
        invariant(new in CURSOR_TRANSITIONS[self._state], f"cursor {self.name}: {self._state} -> {new}")
        self._state = new

    # --- close, delete ---------------------------------------------------------------------------

    async def close(self) -> None:
        """Persist the state in the snapshot alone and release the cursor ledger. Idempotent.

        As Pulsar's ``persistPositionWhenClosing``: the closing state goes into the metadata
        snapshot (``cursor_ledger_id`` -1, one CAS on the version this cursor holds), not into the
        cursor ledger, which is then deleted; the next owner recovers from the snapshot without
        opening, fencing or reading a ledger. If the CAS fails (taken over, or the store is down)
        the ledger is left as the snapshot names it, for the next owner to recover from.

        A flush under way is not waited for (its cursor-ledger add can take seconds on a busy
        bookie, and a moved topic's clients wait for this close): the closing state, which holds
        everything the flush writes, is CAS'd at once, and the cursor ledger is released in the
        background once that flush has ended (its own CAS then loses)."""
        if self._state is CursorState.CLOSED:
            return
        released = False
        if self._state is CursorState.ACTIVE and self.durable:
            try:
                released = await self._persist_closing()
            except MagnetarError:
                pass  # fenced (the new owner has it) or storage down: the last flush stands
        flushing = self._flush_lock.locked()
        self._stop()
        if flushing:
            self._release_task = asyncio.ensure_future(self._release_after_flush(released))
        else:
            await self._release_ledger(released)
        if not self.durable:
            self._ctx.forget(self)

    async def _release_after_flush(self, released: bool) -> None:
        async with self._flush_lock:
            await self._release_ledger(released)

    async def _release_ledger(self, released: bool) -> None:
        """Delete the cursor ledger (``released``: the snapshot no longer names it), else close it."""
        ledger, self._ledger = self._ledger, None
        if ledger is None:
            return
        if released:
            await self._retire(ledger.ledger_id, ledger)
            return
        try:
            await ledger.close()
        except MagnetarError:
            pass  # the next owner fences and recovers it

    async def _persist_closing(self) -> bool:
        """CAS the current state as a ledger-less snapshot; True when the cursor ledger is free
        (``Break.CLOSE_WAITS_FOR_FLUSH``, a negative control: queued behind a flush under way)."""
        if self._flush_lock.locked() and not breaks.active(breaks.Break.CLOSE_WAITS_FOR_FLUSH):
            await self._cas_closing()  # not behind the flush under way: see ``close``
            return True
        async with self._flush_lock:
            self._check_active()
            if self._changes == self._persisted_changes and self._ledger is None:
                return True  # the snapshot already holds this state and names no ledger
            await self._cas_closing()
            return True

    async def _cas_closing(self) -> None:
        """CAS the current state naming no ledger on the version this cursor holds. A BadVersion
        after which that version moved was this cursor's own flush landing first (another owner's
        CAS leaves it unchanged): CAS again on the new version, a bounded number of times."""
        changes, md, value = self._changes, self._md, encode(self._record(-1))
        for _ in range(CLOSE_CAS_ATTEMPTS_MAX):
            version = self._snapshot_version
            try:
                self._snapshot_version = await self._ctx.store.put(self._path, value, version)
            except BadVersionError as exc:
                if self._snapshot_version == version:
                    self._fence(exc)
                continue
            self._persisted_changes, self._persisted_md = changes, md
            return
        raise ManagedLedgerFencedError(f"cursor {self.name} of {self._ctx.ml_name}: closing CAS kept losing")

    def _stop(self) -> None:
        if self._state is not CursorState.CLOSED:
            self._move(CursorState.CLOSED)
        if self._flusher is not None and self._flusher is not asyncio.current_task():
            self._flusher.cancel()
        self._dirty.set()

    async def delete_persisted(self) -> None:
        """Stop the cursor and delete its snapshot and cursor ledger."""
        self._stop()
        if self._ledger is not None:
            await self._retire(self._ledger.ledger_id, self._ledger)
        try:
            await self._ctx.store.delete(self._path)
        except NotFoundError:
            return

    def __repr__(self) -> str:
        kind = "durable" if self.durable else "non-durable"
        return f"ManagedCursor({self.name!r}, {kind}, md={self._md}, read={self._read_position})"

