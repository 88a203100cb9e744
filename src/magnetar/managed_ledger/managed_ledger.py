"""``ManagedLedger``: one topic's log as a list of ledgers, with rollover, trimming and cursors.

Protocol (Pulsar's ``ManagedLedgerImpl``, ``shared/seeds/002_*``):

* **Open**: read ``ManagedLedgerInfo`` at ``{root}/{name}``; recover (fence + close) the last two
  listed ledgers, which the previous owner may still be writing (a crash between the rollover CAS
  and the close of the old ledger leaves two open); create a new ledger and CAS the list. A lost
  CAS means another owner took the topic: the open fails with ``ManagedLedgerFencedError``.
* **Append** (``append``, the one append operation; ``add_entry`` is ``wait_for_room`` + it): the
  ``AppendPipeline`` (``managed_ledger/append.py``) queues, starts adds on the current ledger and
  tells callers strictly in position order once the ledger acknowledged them (Qa bookies durable).
  A ``FencedError`` from the ledger or a ``BadVersionError`` on the info means another owner took over:
  the state becomes FENCED and every queued and later append fails.
* **A failed add** (a bookie died or hung and none can replace it) is *undecided*: the pipeline
  asks for a rollover, which recovers the failed ledger (fence + read forward) and hands the
  recovered end to ``AppendPipeline.settle_undecided``: adds at or below it are stored there, the
  others are written again to the next ledger ahead of every add queued meanwhile (Pulsar's
  ``ManagedLedgerImpl`` resubmits pending adds to a new ledger the same way).
* **If that cannot be done** (recovery or the new ledger fails, or an add was written
  ``MANAGED_LEDGER_ADD_ATTEMPTS_COUNT_MAX`` times), the undecided adds and every add queued behind
  them fail, in order, and the managed ledger *refuses every later add* until its owner calls
  ``settle_failed_writes`` (Pulsar's topic fences itself and calls ``readyToCreateNewLedger``):
  that recovers the failed ledger and starts a new one, so entries that did land are in the log
  before the owner rebuilds what it derives from the log (deduplication) and writes again.
* **Rollover** when the pipeline asks (``AppendPipeline.needs_rollover``: the current ledger is
  full and old enough, too old, failed, or a rollover was requested): stop starting adds, let
  in-flight ones finish, create the new ledger, CAS the list (old one with its final count), then
  close the old ledger.
* **Trim**: ledgers wholly at or before the slowest durable cursor's mark-delete position are
  deleted once retention allows (expired by ``retention_time_s`` or the log is over
  ``retention_size_bytes``); the list is CAS'd first, then the ledgers are deleted (and their
  offloaded copies). The current ledger is never deleted.
* **Offload** (``offload``, see ``managed_ledger/offload.py``): sealed ledgers are copied to an
  object store; each listed ledger records its ``OffloadContext``. Reads of an offloaded ledger
  go to the bookies while their copy exists, else (or when the bookies fail) to the object store.

Cursors get a ``CursorContext`` (``cursor_context``): what they read of the log, the store and
ledger manager their state persists to, the clock and the settings; never this object itself.

Invariants: ledger ids in the list strictly grow; acknowledged positions strictly grow; state
changes only along ``TRANSITIONS`` (``managed_ledger/state.py``); time comes only from the
injected ``Clock``.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from typing import Any

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
from magnetar.base.limits import MANAGED_LEDGER_CURSORS_COUNT_MAX, MANAGED_LEDGER_READ_COUNT_MAX
from magnetar.base.types import Position
from magnetar.faults import breaks
from magnetar.ledger.handle import LedgerHandle
from magnetar.ledger.manager import LedgerManager
from magnetar.managed_ledger.append import AppendPipeline
from magnetar.managed_ledger.config import ManagedLedgerConfig, OpenRecovery
from magnetar.managed_ledger.cursor import CursorContext, ManagedCursor, cursor_name_from_node
from magnetar.managed_ledger.entry_reader import CacheBudget, EntryReader
from magnetar.managed_ledger.errors import ManagedLedgerClosedError, ManagedLedgerFencedError
from magnetar.managed_ledger.ledger_list import LedgerList
from magnetar.managed_ledger.offload import LedgerLocation, LedgerOffloader, ManagedLedgerOffload, offloaded
from magnetar.managed_ledger.read_only_cursors import delete_read_only_cursors, read_only_mark_deletes
from magnetar.managed_ledger.retention import trimmable_ledgers
from magnetar.managed_ledger.rollover_timer import RolloverTimer
from magnetar.managed_ledger.state import TRANSITIONS, WRITABLE, MLState, MLStateMachine
from magnetar.metadata.api import MetadataStore
from magnetar.metadata.errors import NodeExistsError
from magnetar.metadata.records import (
    LedgerInfo,
    ManagedLedgerInfo,
    OffloadContext,
    PositionRecord,
    decode,
    encode,
)

__all__ = ["TRANSITIONS", "MLState", "ManagedLedger"]

#: States in which consumed ledgers may be trimmed (a module constant: mypyc has no ``*`` inside
#: an ``in (...)`` literal).
_TRIMMABLE = (*WRITABLE, MLState.TERMINATED)

def _with_offload(info: LedgerInfo, context: OffloadContext) -> LedgerInfo:
    return LedgerInfo(info.ledger_id, info.entries_count, info.size_bytes, info.timestamp_ms, context)


async def _fenced_by(step: Awaitable[None]) -> ManagedLedgerFencedError | None:
    """Await ``step``; the ``ManagedLedgerFencedError`` it raised, or None: the cleanup awaits
    after the handler (compiled, an ``except`` block never awaits; see ``cursor._switch_ledger``
    and ``tests/tooling/test_compiled_coroutines.py``)."""
    try:
        await step
    except ManagedLedgerFencedError as exc:
        return exc
    return None


@mypyc_attr(native_class=False)
class _WeaklyReferenced:
    """A Python base class, so that ``ManagedLedger`` has a ``__weakref__`` when compiled (the
    shared rollover timer holds managed ledgers weakly; mypyc's native classes have no weak
    references unless they derive from a Python class)."""


class ManagedLedger(_WeaklyReferenced):
    """A topic's log. Build through ``ManagedLedgerFactory.open`` (or ``ManagedLedger.open``)."""

    def __init__(
        self,
        name: str,
        path: str,
        *,
        manager: LedgerManager,
        store: MetadataStore,
        clock: Clock,
        config: ManagedLedgerConfig,
        cache_budget: CacheBudget | None = None,
        offloader: LedgerOffloader | None = None,
        rollover_timer: RolloverTimer | None = None,
    ) -> None:
        self.name = name
        self.path = path
        self._manager = manager
        self._store = store
        self._clock = clock
        self.config = config
        self._states = MLStateMachine(name)
        self._list = LedgerList()
        self._info_version = -1
        self._info_lock = asyncio.Lock()
        self._terminated_at: Position | None = None
        self._entries = EntryReader(manager, cache_budget)
        self._entries.offloaded_reader = self._read_offloaded if offloader is not None else None
        self._appends = AppendPipeline(name, config=config, clock=clock, states=self._states, ledgers=self._list,
                                       cache=self._entries, host=self)
        # The pipeline's own methods, unwrapped (called per message): see ``AppendPipeline.append``
        # (the one append operation) and ``AppendPipeline.has_room``.
        self.append = self._appends.append
        self.append_then = self._appends.append_then
        self.append_run = self._appends.append_run
        self.has_room = self._appends.has_room
        self.offload = ManagedLedgerOffload(self, offloader, self._list)
        self._tasks: dict[asyncio.Task[Any], None] = {}  # a set as a dict: an empty one is 64 bytes, not 216
        # The factory's timer, shared by its managed ledgers (one task, not one per topic); a
        # managed ledger opened alone has its own.
        self._own_timer = rollover_timer is None
        self._rollover_timer = RolloverTimer(clock) if rollover_timer is None else rollover_timer
        self.cursors: dict[str, ManagedCursor] = {}
        #: How long ``close`` took to drain the appends, close the cursors, close the ledger (ms).
        self.close_steps_ms: tuple[int, int, int] | None = None
        #: Mark-delete positions of read-only brokers' cursors, as the last trim read them.
        self.read_only_holds: Sequence[Position] = ()  # a list once read (an idle topic shares the empty tuple)
        self._non_durable: dict[ManagedCursor, None] = {}  # a set as a dict (``_tasks``)
        #: What this managed ledger's cursors are given (they never reach into it).
        self.cursor_context = CursorContext(name, path, log=self, store=store, manager=manager, clock=clock,
                                            config=config, forget=self.forget_non_durable_cursor)

    # --- open ------------------------------------------------------------------------------------

    @classmethod
    async def open(
        cls,
        name: str,
        path: str,
        *,
        manager: LedgerManager,
        store: MetadataStore,
        clock: Clock,
        config: ManagedLedgerConfig,
        cache_budget: CacheBudget | None = None,
        offloader: LedgerOffloader | None = None,
        rollover_timer: RolloverTimer | None = None,
    ) -> ManagedLedger:
        """Open (creating if missing) and take ownership: fence the previous owner, start a ledger.
        Managed ledgers given one ``cache_budget`` share its bound on cached entry bytes;
        ``offloader``: the object store sealed ledgers may be offloaded to."""
        ml = cls(name, path, manager=manager, store=store, clock=clock, config=config, cache_budget=cache_budget,
                 offloader=offloader, rollover_timer=rollover_timer)
        await ml._initialize()
        return ml

    async def _initialize(self) -> None:
        info, self._info_version = await self._read_or_create_info()
        ledgers = list(info.ledgers)
        for index in range(max(0, len(ledgers) - 2), len(ledgers)):
            ledgers[index] = await self._recover_ledger(ledgers[index])
        # An empty ledger holds nothing a cursor can point into: drop it from the list.
        empty = [info_.ledger_id for info_ in ledgers[-2:] if info_.entries_count == 0]
        ledgers = [info_ for info_ in ledgers if info_.ledger_id not in empty]
        self._list.set(ledgers)
        appends = self._appends
        appends.last_confirmed = self._list.last_stored_position() or Position(-1, -1)
        if info.terminated_position is not None:
            self._terminated_at = Position(info.terminated_position.ledger_id, info.terminated_position.entry_id)
            await self._cas_info(ledgers)
            self._move(MLState.TERMINATED)
        else:
            handle = await self._create_ledger()
            now_ms = self._clock.now_ms()
            fenced = await _fenced_by(self._cas_info([*ledgers, LedgerInfo(handle.ledger_id, 0, 0, now_ms)]))
            if fenced is not None:
                await self._delete_quietly(handle.ledger_id)  # outside the handler: see ``_fenced_by``
                raise fenced
            appends.install(handle)
            if appends.last_confirmed == Position(-1, -1):
                appends.last_confirmed = Position(handle.ledger_id, -1)
            self._move(MLState.LEDGER_OPENED)
            due_ns = appends.check_age(self._clock.monotonic_ns())  # when the new ledger is old enough
            if due_ns is not None:
                self._rollover_timer.schedule(due_ns, self)
        for ledger_id in empty:
            await self._delete_quietly(ledger_id)
        await self._load_cursors()
        if self.offload.configured:
            self._spawn(self.offload.after_open())

    async def _read_or_create_info(self) -> tuple[ManagedLedgerInfo, int]:
        found = await self._store.get(self.path)
        if found is None:
            info = ManagedLedgerInfo(ledgers=[])
            try:
                return info, await self._store.put(self.path, encode(info), -1)
            except NodeExistsError:
                pass  # created meanwhile: read it (after the handler, see ``_fenced_by``)
            found = await self._store.get(self.path)
            if found is None:
                raise ManagedLedgerFencedError(f"{self.name}: info created and deleted under us") from None
        return decode(ManagedLedgerInfo, found.value), found.version

    async def _recover_ledger(self, info: LedgerInfo) -> LedgerInfo:
        if offloaded(info):
            return info  # sealed before it was offloaded; its bookie copy may be gone
        if self.config.open_recovery is OpenRecovery.FENCE:
            last = (await self._manager.recover_ledger(info.ledger_id)).last_entry_id
        else:
            reader = await self._manager.open_ledger_no_recovery(info.ledger_id)
            last = reader.last_add_confirmed if reader.is_closed else await reader.read_lac()
        return LedgerInfo(info.ledger_id, last + 1, info.size_bytes, info.timestamp_ms or self._clock.now_ms())

    async def _load_cursors(self) -> None:
        """Recover the cursors concurrently: one round trip for all (a topic that moves brings its
        subscriptions and its dedup cursor along), not one per cursor."""
        names = [cursor_name_from_node(node) for node in await self._store.children(self.path)]
        recovered = await asyncio.gather(*(ManagedCursor.recover(self.cursor_context, name) for name in names),
                                         return_exceptions=True)
        failures = [r for r in recovered if isinstance(r, BaseException)]
        self.cursors.update((n, r) for n, r in zip(names, recovered, strict=True) if isinstance(r, ManagedCursor))
        if failures:
            raise failures[0]

    # --- state -----------------------------------------------------------------------------------

    @property
    def state(self) -> MLState:
        return self._states.state

    def _move(self, new: MLState) -> None:
        self._states.move(new)

    def _check_writable(self) -> None:
        self._appends.check_writable()

    def become_fenced(self, cause: MagnetarError) -> None:
        """Another owner took over (``cause``): fail every queued add, fence the cursors."""
        if self._states.state in (MLState.FENCED, MLState.CLOSED):
            return
        self._states.fenced_by = cause
        self._move(MLState.FENCED)
        error = ManagedLedgerFencedError(f"managed ledger {self.name} was taken over: {cause}")
        self._appends.fail_queued(error, write_failure=False)
        for cursor in list(self.cursors.values()):
            cursor.on_ledger_fenced()

    # --- ledger list ------------------------------------------------------------------------------

    async def _cas_info(self, ledgers: list[LedgerInfo]) -> None:
        """Replace the stored list (CAS on the version we hold); BadVersionError: we were taken over."""
        terminated = self._terminated_at
        info = ManagedLedgerInfo(
            ledgers=ledgers,
            terminated_position=None if terminated is None else PositionRecord(terminated.ledger_id, terminated.entry_id),
        )
        try:
            self._info_version = await self._store.put(self.path, encode(info), self._info_version)
        except BadVersionError as exc:
            self.become_fenced(exc)
            raise ManagedLedgerFencedError(f"managed ledger {self.name}: info changed by another owner") from exc
        self._list.set(ledgers)

    # --- positions -------------------------------------------------------------------------------

    @property
    def terminated_position(self) -> Position | None:
        """The last entry when the ledger was terminated (no more appends); None if it is not."""
        return self._terminated_at

    @property
    def last_confirmed_entry(self) -> Position:
        """The last acknowledged entry; ``(ledger, -1)`` before the first entry of an empty log."""
        return self._appends.last_confirmed

    @property
    def current_ledger_id(self) -> int:
        return self._list.last_ledger_id

    @property
    def ledger_ids(self) -> list[int]:
        return list(self._list.ids)

    def ledger_infos(self) -> list[LedgerInfo]:
        """The list with the current ledger's live count and size."""
        return self._list.with_live_stats()

    @property
    def first_position(self) -> Position:
        """The position just before the oldest stored entry (where an 'earliest' cursor starts)."""
        ids = self._list.ids
        return Position(ids[0], -1) if ids else self._appends.last_confirmed

    def first_at_or_after(self, position: Position) -> Position | None:
        """The first stored, acknowledged entry at or after ``position``; None past the end."""
        return self._list.first_at_or_after(position)

    def next_position(self, position: Position) -> Position:
        """The entry after ``position`` in the log (or where the next append would land)."""
        return self._list.next_position(position)

    def count_entries(self, after: Position, upto: Position) -> int:
        """Stored entries ``p`` with ``after < p <= upto``."""
        return self._list.count_entries(after, upto)

    @property
    def number_of_entries(self) -> int:
        """Entries stored (acknowledged and not trimmed)."""
        return self._list.number_of_entries()

    @property
    def total_size_bytes(self) -> int:
        return sum(info.size_bytes for info in self._list.with_live_stats())

    def estimated_size_after(self, position: Position) -> int:
        """Bytes stored after ``position``: whole later ledgers, plus the average entry size times
        the entries left in ``position``'s own ledger (Pulsar's estimated backlog size)."""
        total = 0
        for info in self._list.with_live_stats():
            if info.ledger_id > position.ledger_id:
                total += info.size_bytes
            elif info.ledger_id == position.ledger_id and info.entries_count > 0:
                left = max(0, info.entries_count - 1 - position.entry_id)
                total += info.size_bytes * left // info.entries_count
        return total

    def set_retention(self, retention_time_s: float, retention_size_bytes: int) -> None:
        """Adopt a new retention policy (namespace or topic policy); the next trim applies it."""
        if retention_time_s != self.config.retention_time_s or retention_size_bytes != self.config.retention_size_bytes:
            self.config = dataclasses.replace(
                self.config, retention_time_s=retention_time_s, retention_size_bytes=retention_size_bytes)
            self._appends.config = self.config

    def position_after_n(self, start: Position, n: int) -> Position:
        """The entry ``n`` entries after ``start`` (start excluded), clamped to the last one."""
        return self._list.position_after_n(start, n, self._appends.last_confirmed)

    # --- append (``AppendPipeline``) -------------------------------------------------------------

    async def add_entry(self, data: bytes) -> Position:
        """``wait_for_room`` then ``append``: returns the position once the ledger acknowledged it."""
        appends = self._appends
        appends.check_writable()
        await appends.wait_for_room()
        return await asyncio.shield(appends.append(data))

    @property
    def pending_add_count(self) -> int:
        return self._appends.pending_add_count

    async def wait_for_room(self) -> None:
        """Backpressure: return once ``append`` can take an append (first in, first out), or the
        managed ledger stopped accepting appends (``append`` then raises)."""
        await self._appends.wait_for_room()

    async def settle_failed_writes(self) -> None:
        """Make the log whole after a write failure, then accept adds again.

        If the current ledger failed, roll over now: its recovery puts every entry that reached
        the bookies into the log (its undecided adds are told, the rest written again). When this
        returns, every add that ever failed to its caller is either in the log or never will be,
        so the owner can rebuild what it derives from the log (deduplication) before writing.
        Raises (and keeps refusing adds) if the ledger cannot be recovered or replaced yet.
        """
        await self._appends.settle_failed_writes()

    # --- rollover --------------------------------------------------------------------------------

    async def _create_ledger(self) -> LedgerHandle:
        config = self.config
        return await self._manager.create_ledger(config.ensemble_size, config.write_quorum_size, config.ack_quorum_size)

    async def roll_over(self) -> None:
        """Replace the current ledger (the pipeline asks: ``AppendHost.roll_over``)."""
        appends = self._appends
        old = appends.current
        assert old is not None
        self._move(MLState.CLOSING_LEDGER)
        await appends.wait_drained()
        if self._states.state is not MLState.CLOSING_LEDGER:
            return  # fenced while draining
        try:
            if old.failed:
                last = (await self._manager.recover_ledger(old.handle.ledger_id)).last_entry_id
                appends.settle_undecided(old, last)
            else:
                last = old.handle.last_add_confirmed
            self._move(MLState.CREATING_LEDGER)
            handle = await self._create_ledger()
        except MagnetarError:
            if self._states.state in (MLState.CLOSING_LEDGER, MLState.CREATING_LEDGER):
                self._move(MLState.LEDGER_OPENED)
            raise
        await faults.point("managed_ledger.rollover.after_create")
        now_ms = self._clock.now_ms()
        closed = LedgerInfo(old.handle.ledger_id, last + 1, self._list.live_bytes, now_ms)
        async with self._info_lock:
            invariant(self._list.ids[-1] == old.handle.ledger_id, "the current ledger is listed last")
            fenced = await _fenced_by(
                self._cas_info([*self._list.infos[:-1], closed, LedgerInfo(handle.ledger_id, 0, 0, now_ms)]))
            if fenced is not None:
                await self._delete_quietly(handle.ledger_id)
                raise fenced
        await faults.point("managed_ledger.rollover.after_cas")
        if last >= 0:
            appends.last_confirmed = max(appends.last_confirmed, Position(old.handle.ledger_id, last))
        appends.install(handle)
        appends.rollover_requested = False
        self._move(MLState.LEDGER_OPENED)
        if not old.failed:
            await self._close_old(old.handle)
        self._spawn(self.trim_consumed_ledgers())
        if self.offload.configured:
            self._spawn(self.offload.on_rollover())

    async def _close_old(self, handle: LedgerHandle) -> None:
        try:
            await handle.close()
            return
        except FencedError as exc:
            self.become_fenced(exc)
            raise ManagedLedgerFencedError(f"{self.name}: ledger {handle.ledger_id} fenced at close") from exc
        except MagnetarError:
            pass  # recovered below, after the handler (see ``_fenced_by``)
        # The list already holds its final count; recovery closes it at the same end.
        try:
            await self._manager.recover_ledger(handle.ledger_id)
        except MagnetarError:
            return  # still OPEN: readers fall back to LAC reads; the next owner recovers it

    async def request_rollover(self) -> None:
        """Roll the current ledger over now if it holds entries (tests, admin 'unload')."""
        appends = self._appends
        appends.check_writable()
        current = appends.current
        if current is None or current.started_count == 0:
            return
        appends.rollover_requested = True
        appends.kick()
        await appends.wait_pump()
        appends.check_writable()

    # --- reads -----------------------------------------------------------------------------------

    async def read_entries(self, start: Position, count_max: int) -> list[Entry]:
        """Up to ``count_max`` acknowledged entries from ``start`` on (across ledgers, in order)."""
        if not 1 <= count_max <= MANAGED_LEDGER_READ_COUNT_MAX:
            raise InvalidArgumentError(f"count_max must be 1..{MANAGED_LEDGER_READ_COUNT_MAX}")
        if self._states.state is MLState.CLOSED:
            raise ManagedLedgerClosedError(f"managed ledger {self.name} is closed")
        result: list[Entry] = []
        position = self.first_at_or_after(start)
        appends = self._appends
        while position is not None and position <= appends.last_confirmed and len(result) < count_max:
            lce = appends.last_confirmed
            last = self._list.last_in_ledger(position.ledger_id)
            if position.ledger_id == lce.ledger_id:
                last = min(last, lce.entry_id)
            last = min(last, position.entry_id + count_max - len(result) - 1)
            current = appends.current
            result.extend(await self._entries.read(position.ledger_id, position.entry_id, last,
                                                   current.handle if current else None,
                                                   self._list.info_of(position.ledger_id).offload))
            position = self.first_at_or_after(Position(position.ledger_id, last + 1))
        return result

    def cached_entries(self, ledger_id: int, first: int, last: int) -> list[bytes] | None:
        """Entries ``first..last`` of ``ledger_id`` if all are cached, else None (read-only feed)."""
        return self._entries.cached(ledger_id, first, last)

    def read_cached(self, start: Position, count_max: int) -> list[Entry] | None:
        """``read_entries`` without a suspension, or None (``EntryReader.read_cached``)."""
        return self._entries.read_cached(start, self._appends.last_confirmed, count_max)

    async def read_ledger_from_bookies(self, ledger_id: int, first: int, last: int) -> list[Entry]:
        """Entries ``first..last`` of a sealed ledger from its bookies (what an offload copies)."""
        return await self._entries.read(ledger_id, first, last, None, None)

    async def _read_offloaded(self, ledger_id: int, context: OffloadContext, first: int, last: int) -> list[bytes]:
        offloader = self.offload.offloader
        assert offloader is not None
        return await offloader.read_entries(LedgerLocation(self.name, ledger_id, context.uid), first, last)

    async def read_entry(self, position: Position) -> Entry:
        entries = await self.read_entries(position, 1)
        if not entries or entries[0].position != position:
            raise NotFoundError(f"no entry at {position} in {self.name}")
        return entries[0]

    async def wait_for_entries_after(self, position: Position) -> None:
        """Return once an entry after ``position`` is acknowledged (or the ledger stops)."""
        await self._appends.wait_for_entries_after(position)

    async def find_newest_matching(
        self, predicate: Callable[[Entry], Awaitable[bool] | bool], *, start: Position | None = None
    ) -> Position | None:
        """Binary search: the last entry for which ``predicate`` holds, given it holds on a prefix.

        (Pulsar's ``findNewestMatching``, used by seek-by-publish-time and expiry.) None if it holds
        for no entry.
        """
        before = start if start is not None else self.first_position
        low = self.count_entries(Position(-1, -1), before)
        high = low + self.count_entries(before, self.last_confirmed_entry)
        found: Position | None = None
        origin = Position(-1, -1)
        while low < high:
            middle = (low + high) // 2
            position = self.position_after_n(origin, middle + 1)
            entry = await self.read_entry(position)
            verdict = predicate(entry)
            if isinstance(verdict, Awaitable):
                verdict = await verdict
            if verdict:
                found = position
                low = middle + 1
            else:
                high = middle
        return found

    # --- cursors ---------------------------------------------------------------------------------

    async def open_cursor(self, name: str, *, initial_position: Position | None = None) -> ManagedCursor:
        """The durable cursor ``name`` (created at ``initial_position``, default latest, if new)."""
        if self._states.state is MLState.CLOSED:
            raise ManagedLedgerClosedError(f"managed ledger {self.name} is closed")
        found = self.cursors.get(name)
        if found is not None:
            return found
        if len(self.cursors) >= MANAGED_LEDGER_CURSORS_COUNT_MAX:
            raise LimitExceededError("MANAGED_LEDGER_CURSORS_COUNT_MAX", len(self.cursors) + 1, MANAGED_LEDGER_CURSORS_COUNT_MAX)
        start = self._appends.last_confirmed if initial_position is None else initial_position
        cursor = await ManagedCursor.create(self.cursor_context, name, start)
        self.cursors[name] = cursor
        return cursor

    def new_non_durable_cursor(self, start: Position | None = None) -> ManagedCursor:
        """An in-memory cursor (readers): same API, nothing persisted, does not hold back trimming."""
        cursor = ManagedCursor.non_durable(self.cursor_context, self._appends.last_confirmed if start is None else start)
        if len(self._non_durable) >= MANAGED_LEDGER_CURSORS_COUNT_MAX:
            raise LimitExceededError("MANAGED_LEDGER_CURSORS_COUNT_MAX", len(self._non_durable) + 1, MANAGED_LEDGER_CURSORS_COUNT_MAX)
        self._non_durable[cursor] = None
        return cursor

    def forget_non_durable_cursor(self, cursor: ManagedCursor) -> None:
        self._non_durable.pop(cursor, None)

    async def delete_cursor(self, name: str) -> None:
        cursor = self.cursors.pop(name, None)
        if cursor is not None:
            await cursor.delete_persisted()

    def slowest_mark_delete(self) -> Position:
        durable = [cursor.mark_delete_position for cursor in self.cursors.values()]
        return min(durable) if durable else self._appends.last_confirmed

    # --- trimming --------------------------------------------------------------------------------

    async def trim_consumed_ledgers(self) -> list[int]:
        """Delete ledgers every durable cursor consumed, as retention allows; returns their ids."""
        if self._states.state not in _TRIMMABLE or len(self._list.infos) < 2:
            return []  # the current (last) ledger is never trimmed: nothing to read or do
        # Subscriptions served by read-only brokers hold back trimming like our own cursors.
        holds = await self.refresh_read_only_holds()
        async with self._info_lock:
            doomed = self._trimmable(holds)
            if not doomed:
                return []
            kept = [info for info in self._list.infos if info.ledger_id not in doomed]
            try:
                await self._cas_info(kept)
            except ManagedLedgerFencedError:
                return []
        for ledger_id in doomed:
            self._entries.forget_ledger(ledger_id)
            await self._delete_quietly(ledger_id)
            await self._delete_offloaded_quietly(ledger_id)
        return doomed

    async def refresh_read_only_holds(self) -> list[Position]:
        """Mark-delete positions of the subscriptions read-only brokers serve, read now."""
        holds = self.read_only_holds = await read_only_mark_deletes(self._store, self.name)
        return holds

    def _trimmable(self, holds: list[Position] | None = None) -> list[int]:
        config = self.config
        return trimmable_ledgers(
            self._list.with_live_stats(),
            min([self.slowest_mark_delete(), *(holds or [])]),
            self._clock.now_ms(),
            config.retention_time_s,
            config.retention_size_bytes,
        )

    async def _delete_quietly(self, ledger_id: int) -> None:
        # An orphan ledger only wastes space; failing the caller for it would lose nothing less.
        try:
            await self._manager.delete_ledger(ledger_id)
        except MagnetarError:
            return

    async def _delete_offloaded_quietly(self, ledger_id: int) -> None:
        # Orphan files only waste space; the next pass's orphan collection removes them.
        offloader = self.offload.offloader
        if offloader is not None:
            try:
                await offloader.delete_ledger(self.name, ledger_id)
            except MagnetarError:
                pass

    # --- offload ---------------------------------------------------------------------------------

    def ledger_info(self, ledger_id: int) -> LedgerInfo | None:
        """The listed info of ``ledger_id`` (None: not listed)."""
        return self._list.find(ledger_id)

    async def record_offload(self, ledger_id: int, context: OffloadContext) -> bool:
        """Record ``context`` on ``ledger_id``'s entry of the list (CAS); False if it is no
        longer listed (trimmed). ``ManagedLedgerFencedError`` if another owner took over."""
        async with self._info_lock:
            if self._list.find(ledger_id) is None:
                return False
            infos = [_with_offload(info, context) if info.ledger_id == ledger_id else info
                     for info in self._list.infos]
            await self._cas_info(infos)
        self._entries.forget_ledger(ledger_id)  # a reader of its bookie copy may outlive the copy
        return True

    async def delete_bookie_copy(self, ledger_id: int) -> None:
        """Delete the bookies' copy of an offloaded ledger (already gone is fine)."""
        info = self._list.find(ledger_id)
        invariant(info is not None and offloaded(info), f"ledger {ledger_id} is not offloaded")
        self._entries.forget_ledger(ledger_id)
        try:
            await self._manager.delete_ledger(ledger_id)
        except NotFoundError:
            return

    def spawn(self, coro: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
        """Run ``coro`` as a task of this managed ledger (cancelled when it closes)."""
        return self._spawn(coro)

    # --- terminate, close, delete ----------------------------------------------------------------

    async def terminate(self) -> Position:
        """No more appends: wait for in-flight ones, close the ledger, record the last position.
        Terminating again returns the same position (Pulsar does the same)."""
        if self._states.state is MLState.TERMINATED and self._terminated_at is not None:
            return self._terminated_at
        appends = self._appends
        appends.check_writable()
        await appends.finish_queued()
        appends.check_writable()
        await appends.wait_drained()
        current = appends.current
        assert current is not None
        self._move(MLState.TERMINATED)
        self._terminated_at = appends.last_confirmed
        await current.handle.close()
        async with self._info_lock:
            self._list.infos[-1] = LedgerInfo(
                current.handle.ledger_id, current.handle.last_add_confirmed + 1, self._list.live_bytes, self._clock.now_ms()
            )
            await self._cas_info(list(self._list.infos))
        appends.notify_entry_waiters()
        return appends.last_confirmed

    @property
    def is_terminated(self) -> bool:
        return self._terminated_at is not None

    async def close(self) -> None:
        """Finish in-flight appends, persist cursors, close the current ledger. Idempotent."""
        if self._states.state is MLState.CLOSED:
            return
        appends = self._appends
        begun = self._clock.monotonic_ns()
        if self._states.state in WRITABLE:
            await appends.wait_pump()
        await appends.wait_drained()
        drained = self._clock.monotonic_ns()
        await self._close_cursors()
        cursors = self._clock.monotonic_ns()
        current = appends.current
        if self._states.state is MLState.LEDGER_OPENED and current is not None and not current.failed:
            try:
                await current.handle.close()
            except MagnetarError:
                pass  # fenced or failed: the next owner's recovery decides the end
        ended = self._clock.monotonic_ns()
        self.close_steps_ms = ((drained - begun) // 1_000_000, (cursors - drained) // 1_000_000,
                               (ended - cursors) // 1_000_000)
        appends.fail_queued(ManagedLedgerClosedError(f"managed ledger {self.name} closed"), write_failure=False)
        self._move(MLState.CLOSED)
        self._entries.clear()
        appends.notify_entry_waiters()
        self._cancel_tasks()

    async def _close_cursors(self) -> None:
        """Flush and close the cursors concurrently: one round trip for all, not one per cursor
        (``Break.SERIAL_CLOSE``, a negative control: one after another)."""
        if breaks.active(breaks.Break.SERIAL_CLOSE):  # negative control only
            for cursor in list(self.cursors.values()):
                await cursor.close()
            return
        await asyncio.gather(*(cursor.close() for cursor in list(self.cursors.values())))

    async def delete(self) -> None:
        """Delete every ledger, every cursor and the metadata of this managed ledger."""
        for name in list(self.cursors):
            await self.delete_cursor(name)
        ledger_ids = list(self._list.ids)
        await self.close()
        for ledger_id in ledger_ids:
            await self._delete_quietly(ledger_id)
            await self._delete_offloaded_quietly(ledger_id)
        for node in await self._store.children(self.path):
            await self._store.delete(f"{self.path}/{node}")
        await delete_read_only_cursors(self._store, self.name)  # read-only brokers' subscriptions go too
        await self._store.delete(self.path)

    # --- tasks -----------------------------------------------------------------------------------

    def _spawn(self, coro: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
        task = asyncio.ensure_future(coro)
        self._tasks[task] = None
        task.add_done_callback(self._task_done)
        return task

    def _task_done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.pop(task, None)
        if not task.cancelled():
            task.exception()  # background failures are reflected in state; do not log noise

    def check_age(self, now_ns: int) -> int | None:
        """The rollover timer's call (``AgeChecked``): roll an idle ledger over by age."""
        return self._appends.check_age(now_ns)

    def _cancel_tasks(self) -> None:
        if self._own_timer:
            self._rollover_timer.close()
        current = asyncio.current_task()
        for task in list(self._tasks):
            if task is not current:
                task.cancel()

    # Readers and cursors reach the manager and store through the ledger they belong to.
    @property
    def manager(self) -> LedgerManager:
        return self._manager

    @property
    def store(self) -> MetadataStore:
        return self._store

    @property
    def clock(self) -> Clock:
        return self._clock
