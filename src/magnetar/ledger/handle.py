"""The ledger writer: ``LedgerHandle`` with its bounded table of ``PendingAdd``s.

Protocol (``shared/reference/bookkeeper_replication.md`` 1.3-1.6):

* Entry ids are assigned in call order; entry e goes to its write set in the current (last)
  ensemble and carries the LAC known when it was built.
* An add completes once Qa bookies *of its write set in the current ensemble* acknowledged it
  **and** every lower entry completed: callers are told strictly in entry-id order, and the LAC
  moves with them. Nothing completes while an ensemble change is under way.
* A failed or slow bookie is replaced: the new fragment starts at the first entry not yet
  acknowledged to a caller (LAC + 1), the metadata is changed by CAS only, then unacknowledged
  entries are resent to the replacement. Acks from a replaced bookie stop counting.
* A ``FencedError`` from any bookie fails the handle and every pending add (the outcome of those
  adds is indeterminate, as for a timeout). So does a CAS that finds the ledger no longer OPEN.
* ``close`` stops new adds, waits for pending ones, then CASes CLOSED with lastEntry = LAC.

Invariants: ``lac`` only grows; every pending entry id is > ``lac``; the pending table holds
at most ``config.pending_adds_count_max`` adds; the metadata cached here is the version this
writer last read or wrote.
"""

from __future__ import annotations

import asyncio
import enum
from collections import deque
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from magnetar import faults
from magnetar.base.clock import Clock
from magnetar.base.errors import BadVersion, ClosedError, FencedError, LimitExceeded, MagnetarError
from magnetar.base.invariant import invariant
from magnetar.base.limits import LEDGER_ENSEMBLE_CHANGES_COUNT_MAX, LEDGER_METADATA_CAS_RETRY_COUNT_MAX
from magnetar.base.types import NO_ENTRY, BookieId
from magnetar.ledger._deadline import with_deadline
from magnetar.ledger.config import LedgerClientConfig
from magnetar.ledger.errors import LedgerStateError
from magnetar.ledger.ledger_metadata import LedgerMetadata, LedgerState
from magnetar.ledger.metadata_ops import LedgerMetadataStore, VersionedMetadata
from magnetar.ledger.placement import BookieDirectory, PlacementPolicy
from magnetar.ledger.quorum import write_set
from magnetar.ledger.transport import BookieTransport, PipelinedAdds
from magnetar.protocol.bookie.codec import Entry


class WriterState(enum.Enum):
    OPEN = "open"  # accepting adds
    CLOSING = "closing"  # no new adds; pending ones finish, then the CLOSED CAS
    CLOSED = "closed"
    FAILED = "failed"  # fenced, or the ledger left OPEN under us, or no bookies: all adds failed


WRITER_TRANSITIONS: dict[WriterState, frozenset[WriterState]] = {
    WriterState.OPEN: frozenset({WriterState.CLOSING, WriterState.FAILED}),
    WriterState.CLOSING: frozenset({WriterState.CLOSED, WriterState.FAILED}),
    WriterState.CLOSED: frozenset(),
    WriterState.FAILED: frozenset(),
}


#: Fault points on the reply path of an add; while one is armed adds take the task path (``_send_one``).
_REPLY_POINTS = frozenset({"ledger.after_reply_before_count", "ledger.after_quorum_before_ack"})
#: The points ``add_entry`` passes before it returns: ``add_entry_nowait`` declines while one is armed.
_SEND_POINTS = frozenset({"ledger.before_send_next_entry", "ledger.before_send", "ledger.after_send_before_reply"})


@dataclass(eq=False, slots=True)
class PendingAdd:
    """One in-flight add: which bookies acknowledged it and which requests are outstanding."""

    entry: Entry
    future: asyncio.Future[int]
    acked: set[BookieId] = field(default_factory=set)
    inflight: set[BookieId] = field(default_factory=set)

    @property
    def entry_id(self) -> int:
        return self.entry.entry_id


class LedgerHandle:
    """The single writer of one OPEN ledger. Create through ``LedgerManager.create_ledger``."""

    def __init__(
        self,
        metadata: VersionedMetadata,
        *,
        store: LedgerMetadataStore,
        transport: BookieTransport,
        directory: BookieDirectory,
        placement: PlacementPolicy,
        clock: Clock,
        config: LedgerClientConfig,
        master_key: bytes = b"",
    ) -> None:
        invariant(metadata.metadata.state is LedgerState.OPEN, "a writer needs an OPEN ledger")
        self._meta = metadata
        self._store = store
        self._transport = transport
        # Checked once: isinstance against a runtime Protocol costs microseconds per call.
        self._pipelined: PipelinedAdds | None = transport if isinstance(transport, PipelinedAdds) else None
        self._directory = directory
        self._placement = placement
        self._clock = clock
        self._config = config
        self._master_key = master_key
        self._state = WriterState.OPEN
        self._failure: MagnetarError | None = None
        self._ensemble: tuple[BookieId, ...] = metadata.metadata.last_fragment.ensemble
        self._lac: int = NO_ENTRY
        self._last_add_pushed: int = NO_ENTRY
        self._pending: dict[int, PendingAdd] = {}
        self._admission: deque[asyncio.Future[None]] = deque()
        self._failed_bookies: set[BookieId] = set()
        self._excluded_bookies: set[BookieId] = set()
        self._ensemble_change: asyncio.Task[None] | None = None
        self._ensemble_changes_count = 0
        self._drained = asyncio.Event()
        self._drained.set()
        self._tasks: set[asyncio.Task[Any]] = set()
        self._lac_flusher: asyncio.Task[None] | None = None
        self._explicit_lac_sent: int = NO_ENTRY
        if config.explicit_lac_interval_ms > 0:
            self._lac_flusher = self._spawn(self._flush_lac_periodically())

    # --- public view -----------------------------------------------------------------------------

    @property
    def ledger_id(self) -> int:
        return self._meta.metadata.ledger_id

    @property
    def metadata(self) -> LedgerMetadata:
        return self._meta.metadata

    @property
    def last_add_confirmed(self) -> int:
        """The highest entry acknowledged to a caller (every lower one was too)."""
        return self._lac

    @property
    def last_add_pushed(self) -> int:
        return self._last_add_pushed

    @property
    def state(self) -> WriterState:
        return self._state

    @property
    def pending_count(self) -> int:
        return len(self._pending)

    @property
    def ensemble(self) -> tuple[BookieId, ...]:
        return self._ensemble

    # --- adds ------------------------------------------------------------------------------------

    async def add_entry(self, payload: bytes) -> int:
        """Append ``payload``; returns its entry id once Qa bookies stored it and all lower ids did.

        Waits (backpressure) while ``pending_adds_count_max`` adds are in flight. Raises
        ``FencedError`` if another client fenced the ledger (the entry may or may not survive),
        ``ClosedError`` after ``close``, or the error that failed the handle.
        """
        self._check_open()
        await self._admit()
        self._check_open()
        if self._last_add_pushed >= 0:
            await faults.point("ledger.before_send_next_entry")
            self._check_open()
        entry_id = self._last_add_pushed + 1
        self._last_add_pushed = entry_id
        entry = Entry.build(self.ledger_id, entry_id, self._lac, payload)
        op = PendingAdd(entry, asyncio.get_running_loop().create_future())
        self._pending[entry_id] = op
        self._drained.clear()
        await faults.point("ledger.before_send")
        if self._state in (WriterState.OPEN, WriterState.CLOSING):
            self._send_to_write_set(op)
            await faults.point("ledger.after_send_before_reply")
        return await asyncio.shield(op.future)

    def add_entry_nowait(self, payload: bytes) -> asyncio.Future[int] | None:
        """``add_entry`` without a task: the add is sent at once and the returned future completes
        as ``add_entry`` would return or raise (do not cancel it). Returns None, having done
        nothing, when ``add_entry`` would have to wait (backpressure), a send fault point is armed
        or the handle is not open: then call ``add_entry``."""
        if (self._state is not WriterState.OPEN or self._admission
                or len(self._pending) >= self._config.pending_adds_count_max or faults.any_armed(_SEND_POINTS)):
            return None
        entry_id = self._last_add_pushed + 1
        self._last_add_pushed = entry_id
        op = PendingAdd(Entry.build(self.ledger_id, entry_id, self._lac, payload),
                        asyncio.get_running_loop().create_future())
        self._pending[entry_id] = op
        self._drained.clear()
        self._send_to_write_set(op)
        return op.future

    def _check_open(self) -> None:
        if self._state is WriterState.FAILED:
            invariant(self._failure is not None, "a failed handle records its failure")
            raise self._failure  # type: ignore[misc]
        if self._state is not WriterState.OPEN:
            raise ClosedError(f"ledger {self.ledger_id} is {self._state.value}")

    async def _admit(self) -> None:
        # FIFO admission so entry ids follow call order even under backpressure.
        if len(self._pending) < self._config.pending_adds_count_max and not self._admission:
            return
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._admission.append(waiter)
        try:
            await waiter
        finally:
            if waiter in self._admission:
                self._admission.remove(waiter)

    def _wake_admission(self) -> None:
        while self._admission and len(self._pending) < self._config.pending_adds_count_max:
            waiter = self._admission.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return

    def _write_set_bookies(self, entry_id: int) -> list[BookieId]:
        meta = self._meta.metadata
        return [self._ensemble[i] for i in write_set(entry_id, meta.ensemble_size, meta.write_quorum_size)]

    def _send_to_write_set(self, op: PendingAdd) -> None:
        for bookie in self._write_set_bookies(op.entry_id):
            if bookie in op.acked or bookie in op.inflight or bookie in self._failed_bookies:
                continue
            op.inflight.add(bookie)
            future = self._send_pipelined(op, bookie)
            if future is None:
                self._spawn(self._send_one(op, bookie))
            else:
                future.add_done_callback(partial(self._on_pipelined_reply, op, bookie))

    def _send_pipelined(self, op: PendingAdd, bookie: BookieId) -> asyncio.Future[Any] | None:
        """The add on the transport's task-free path, or None (then ``_send_one``). Skipped while
        a fault point of the reply path is armed, so fault tests see every point."""
        if self._pipelined is None or faults.any_armed(_REPLY_POINTS):
            return None
        return self._pipelined.add_nowait(bookie, op.entry, master_key=self._master_key)

    def _on_pipelined_reply(self, op: PendingAdd, bookie: BookieId, future: asyncio.Future[Any]) -> None:
        transport = self._pipelined
        assert transport is not None
        try:
            stored = transport.add_outcome(bookie, op.entry, future)
        except MagnetarError as exc:
            self._on_add_error(op, bookie, exc)
            return
        if not stored:  # the connection was lost: the slow path reconnects and sends again
            if self._state in (WriterState.OPEN, WriterState.CLOSING):
                self._spawn(self._send_one(op, bookie))
            else:
                op.inflight.discard(bookie)
            return
        op.inflight.discard(bookie)
        self._count_reply(op, bookie)

    def _on_add_error(self, op: PendingAdd, bookie: BookieId, exc: MagnetarError) -> None:
        """``bookie`` did not store ``op``: fenced fails the ledger, anything else replaces the bookie."""
        op.inflight.discard(bookie)
        if isinstance(exc, FencedError):
            self._fail(FencedError(f"ledger {self.ledger_id} fenced by bookie {bookie}: {exc}"))
        else:
            self._on_bookie_failure(bookie)

    def _count_reply(self, op: PendingAdd, bookie: BookieId) -> None:
        """``bookie`` stored ``op``: count it and complete what reached its ack quorum."""
        if op.future.done() or self._state not in (WriterState.OPEN, WriterState.CLOSING):
            return
        if bookie not in self._write_set_bookies(op.entry_id):
            return  # replaced by an ensemble change meanwhile: its copy no longer counts
        op.acked.add(bookie)
        self._complete_in_order()

    async def _send_one(self, op: PendingAdd, bookie: BookieId) -> None:
        try:
            await with_deadline(
                self._clock,
                self._config.add_timeout_ms,
                self._transport.add(bookie, op.entry, recovery=False, master_key=self._master_key),
                f"add {self.ledger_id}:{op.entry_id} to {bookie}",
            )
        except MagnetarError as exc:
            self._on_add_error(op, bookie, exc)
            return
        op.inflight.discard(bookie)
        await faults.point("ledger.after_reply_before_count")
        if op.future.done() or self._state not in (WriterState.OPEN, WriterState.CLOSING):
            return
        if bookie not in self._write_set_bookies(op.entry_id):
            return  # replaced by an ensemble change meanwhile: its copy no longer counts
        op.acked.add(bookie)
        if self._has_ack_quorum(op):
            await faults.point("ledger.after_quorum_before_ack")
        self._complete_in_order()

    def _has_ack_quorum(self, op: PendingAdd) -> bool:
        counted = op.acked.intersection(self._write_set_bookies(op.entry_id))
        return len(counted) >= self._meta.metadata.ack_quorum_size

    def _complete_in_order(self) -> None:
        while self._pending and self._ensemble_change is None and self._state in (
            WriterState.OPEN,
            WriterState.CLOSING,
        ):
            head_id = next(iter(self._pending))
            invariant(head_id == self._lac + 1, f"pending head {head_id} must follow LAC {self._lac}")
            op = self._pending[head_id]
            if not self._has_ack_quorum(op):
                break
            del self._pending[head_id]
            self._lac = head_id
            if not op.future.done():
                op.future.set_result(head_id)
            self._wake_admission()
        if not self._pending:
            self._drained.set()

    # --- ensemble change -------------------------------------------------------------------------

    def _on_bookie_failure(self, bookie: BookieId) -> None:
        if self._state not in (WriterState.OPEN, WriterState.CLOSING) or bookie not in self._ensemble:
            return
        self._failed_bookies.add(bookie)
        self._excluded_bookies.add(bookie)
        if self._ensemble_change is None:
            self._ensemble_change = self._spawn(self._change_ensemble())

    async def _change_ensemble(self) -> None:
        try:
            while self._failed_bookies & set(self._ensemble):
                await self._replace_failed_bookies()
        except MagnetarError as exc:
            self._ensemble_change = None
            self._fail(exc)
            return
        self._ensemble_change = None
        self._failed_bookies.clear()
        for op in list(self._pending.values()):
            self._send_to_write_set(op)
        self._complete_in_order()

    async def _replace_failed_bookies(self) -> None:
        self._ensemble_changes_count += 1
        if self._ensemble_changes_count > LEDGER_ENSEMBLE_CHANGES_COUNT_MAX:
            raise LimitExceeded(
                "LEDGER_ENSEMBLE_CHANGES_COUNT_MAX", self._ensemble_changes_count, LEDGER_ENSEMBLE_CHANGES_COUNT_MAX
            )
        available = await self._directory.available_bookies()
        new_ensemble = list(self._ensemble)
        for index, bookie in enumerate(self._ensemble):
            if bookie in self._failed_bookies:
                new_ensemble[index] = self._placement.replace_bookie(
                    available, new_ensemble, self._excluded_bookies,
                    write_quorum_size=self._meta.metadata.write_quorum_size, slot=index,
                )
        # Completion is paused while we change, so LAC + 1 is still the first unacknowledged entry.
        first_entry_id = self._lac + 1
        ensemble = tuple(new_ensemble)
        await faults.point("ledger.ensemble_change.before_cas")

        def change(meta: LedgerMetadata) -> LedgerMetadata:
            if meta.state is not LedgerState.OPEN:
                raise FencedError(f"ledger {meta.ledger_id} is {meta.state.value}: another client is recovering it")
            return meta.with_ensemble(first_entry_id, ensemble)

        await self._cas(change)
        await faults.point("ledger.ensemble_change.after_cas")
        replaced = set(self._ensemble) - set(ensemble)
        self._ensemble = ensemble
        self._failed_bookies -= replaced

    async def _cas(self, change: Callable[[LedgerMetadata], LedgerMetadata]) -> None:
        for _ in range(LEDGER_METADATA_CAS_RETRY_COUNT_MAX):
            new = change(self._meta.metadata)
            try:
                self._meta = await self._store.cas(self._meta, new)
                return
            except BadVersion:
                self._meta = await self._store.read(self.ledger_id)
        raise LimitExceeded(
            "LEDGER_METADATA_CAS_RETRY_COUNT_MAX",
            LEDGER_METADATA_CAS_RETRY_COUNT_MAX + 1,
            LEDGER_METADATA_CAS_RETRY_COUNT_MAX,
        )

    # --- explicit LAC ----------------------------------------------------------------------------

    async def send_explicit_lac(self) -> int:
        """Store the current LAC on every bookie of the ensemble; returns how many accepted.

        Needed for idle ledgers: normally the LAC rides on the next entry, which may never come.
        """
        lac = self._lac
        accepted = 0
        for bookie in self._ensemble:
            try:
                await with_deadline(
                    self._clock,
                    self._config.add_timeout_ms,
                    self._transport.write_lac(bookie, self.ledger_id, lac, master_key=self._master_key),
                    f"write_lac {bookie}",
                )
                accepted += 1
            except MagnetarError:
                continue
        self._explicit_lac_sent = max(self._explicit_lac_sent, lac)
        return accepted

    async def _flush_lac_periodically(self) -> None:
        while self._state is WriterState.OPEN:
            await self._clock.sleep(self._config.explicit_lac_interval_ms / 1000)
            if self._state is WriterState.OPEN and self._lac > self._explicit_lac_sent and not self._pending:
                await self.send_explicit_lac()

    # --- close and failure -----------------------------------------------------------------------

    async def close(self) -> LedgerMetadata:
        """Finish pending adds and CAS the ledger CLOSED at the LAC; idempotent once CLOSED.

        Raises ``FencedError`` if recovery started (the recoverer decides the end), or
        ``LedgerStateError`` if the ledger was closed at another entry.
        """
        if self._state is WriterState.CLOSED:
            return self._meta.metadata
        self._check_open()
        self._move(WriterState.CLOSING)
        self._wake_all_admission()
        await self._drained.wait()
        if self._state is WriterState.FAILED:
            invariant(self._failure is not None, "a failed handle records its failure")
            raise self._failure  # type: ignore[misc]
        await faults.point("ledger.close.before_cas")
        lac = self._lac
        for _ in range(LEDGER_METADATA_CAS_RETRY_COUNT_MAX):
            meta = self._meta.metadata
            if meta.state is LedgerState.IN_RECOVERY:
                self._fail(FencedError(f"ledger {self.ledger_id} went into recovery before close"))
                raise self._failure  # type: ignore[misc]
            if meta.state is LedgerState.CLOSED:
                if meta.last_entry_id != lac:
                    self._fail(LedgerStateError(
                        f"ledger {self.ledger_id} closed at {meta.last_entry_id}, writer's LAC is {lac}"
                    ))
                    raise self._failure  # type: ignore[misc]
                break
            try:
                self._meta = await self._store.cas(self._meta, meta.to_closed(lac))
                break
            except BadVersion:
                self._meta = await self._store.read(self.ledger_id)
        else:
            raise LimitExceeded(
                "LEDGER_METADATA_CAS_RETRY_COUNT_MAX",
                LEDGER_METADATA_CAS_RETRY_COUNT_MAX + 1,
                LEDGER_METADATA_CAS_RETRY_COUNT_MAX,
            )
        self._move(WriterState.CLOSED)
        self._cancel_tasks()
        return self._meta.metadata

    def _move(self, new: WriterState) -> None:
        invariant(new in WRITER_TRANSITIONS[self._state], f"writer may not go {self._state} -> {new}")
        self._state = new

    def _fail(self, error: MagnetarError) -> None:
        if self._state in (WriterState.FAILED, WriterState.CLOSED):
            return
        self._move(WriterState.FAILED)
        self._failure = error
        for op in self._pending.values():
            if not op.future.done():
                op.future.set_exception(error)
                op.future.exception()  # retrieved here: a caller that gave up must not log noise
        self._pending.clear()
        self._drained.set()
        self._wake_all_admission()
        self._cancel_tasks()

    def _wake_all_admission(self) -> None:
        while self._admission:
            waiter = self._admission.popleft()
            if not waiter.done():
                waiter.set_result(None)

    def _spawn(self, coro: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    def _cancel_tasks(self) -> None:
        current = asyncio.current_task()
        for task in list(self._tasks):
            if task is not current and task is not self._ensemble_change:
                task.cancel()
