"""``AppendPipeline``: a managed ledger's appends, from the queue to the caller's position.

Protocol (Pulsar's ``ManagedLedgerImpl`` add path and ``OpAddEntry``):

* **Append**: ``append`` is the one append operation. It queues the payload in a bounded queue
  (``add_queue_count_max``: callers wait for room first with ``wait_for_room``, first in first
  out); the adds are started on the current ledger in queue order (a pump task only to wait for
  a rollover or for room on the ledger), and callers are told strictly in position order, only
  after the ledger acknowledged the entry (Qa bookies durable). A ``FencedError`` from the ledger
  means another owner took over: the host is told (``AppendHost.become_fenced``).
* **A failed add** (the ledger gave up on it for any reason other than fencing: a bookie died or
  hung and none can replace it) is not told to its caller yet: its outcome is *undecided*, since
  the entry may be on the bookies. Every add started after it on that ledger failed too (the
  ledger completes adds in entry order). Once they have all come back, the failed ledger is
  replaced (``needs_rollover``; the host's ``roll_over``), whose recovery (fence + read forward)
  decides the truth and hands it to ``settle_undecided``: an undecided add whose entry id is at or
  below the recovered end is stored there and succeeds at that position; the others are not
  stored and are written again, in their order and ahead of every add queued meanwhile, to the
  next ledger. So callers never see a failure for an entry that is in the log, and the entries
  of the log are in call order: an add is stored only after every earlier one is.
* **If that cannot be done** (recovery or the new ledger fails, or an add was written
  ``MANAGED_LEDGER_ADD_ATTEMPTS_COUNT_MAX`` times), the undecided adds and every add queued behind
  them fail, in order (``fail_queued``), and every later add is refused until the owner calls
  ``settle_failed_writes``.
* **Rollover is asked for** when the current ledger reached ``max_entries_per_ledger`` or
  ``max_size_bytes_per_ledger`` and is at least ``rollover_time_s_min`` old, or holds entries and
  is ``rollover_time_s_max`` old (``check_age``, by the shared ``RolloverTimer``), or failed, or on request.

The host (``ManagedLedger``) owns the ledger list and the state; the pipeline reads the shared
``MLStateMachine`` and never moves it. Per entry: one ``_OpAdd``, which is also the ledger's ``PendingAdd``,
told through plain callbacks (``append_then``; ``append`` wraps it in a future for callers that
await one); no future, task or await of its own unless it must wait (a rollover, room on the ledger).

Invariants: acknowledged positions strictly grow (``last_confirmed``); an add is started only in
LEDGER_OPENED; callers learn outcomes in position order; an undecided add is told only after the
recovery of its ledger.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Protocol

from magnetar.base.clock import Clock
from magnetar.base.errors import FencedError, LimitExceededError, MagnetarError
from magnetar.base.fifo import fifo_advance
from magnetar.base.invariant import InvariantViolationError, invariant
from magnetar.base.lazy_event import LazyEvent
from magnetar.base.limits import MANAGED_LEDGER_ADD_ATTEMPTS_COUNT_MAX
from magnetar.base.types import Position
from magnetar.ledger.handle import LedgerHandle
from magnetar.ledger.pending_add import PendingAdd, settle
from magnetar.managed_ledger.config import ManagedLedgerConfig
from magnetar.managed_ledger.entry_reader import EntryReader
from magnetar.managed_ledger.errors import (
    ManagedLedgerClosedError,
    ManagedLedgerFencedError,
    ManagedLedgerTerminatedError,
    ManagedLedgerWriteFailedError,
)
from magnetar.managed_ledger.ledger_list import LedgerList
from magnetar.managed_ledger.state import WRITABLE, MLState, MLStateMachine

log = logging.getLogger(__name__)


#: How an append's caller is told its outcome: ``(position, None)`` or ``(None, error)``, once.
AppendCallback = Callable[[Position | None, BaseException | None], None]


class _OpAdd(PendingAdd):
    """One append: queued, then in flight on a ledger, then told to its caller in order. A plain
    class (compiled: a dataclass's generated ``__init__`` runs interpreted, one per message).

    It is also the ledger's add (a ``PendingAdd``: the handle keeps it in its table and tells it
    through ``done``), so one object per append serves both layers. ``current`` is the ledger it
    was last started on and ``entry_id`` its id there (set here before the start, taken as is by
    the handle). An add is started again on a next ledger only after the failed one told it
    (``settle_undecided``), and a handle that ended never touches its adds again, so no answer
    of an earlier start can come after a later start."""

    __slots__ = ("appends", "attempts", "caller_told", "current", "error", "finished", "on_done", "position")

    def __init__(self, appends: AppendPipeline, data: bytes, on_done: AppendCallback) -> None:
        super().__init__(data)
        self.appends = appends
        self.on_done = on_done
        self.caller_told = False
        self.position: Position | None = None
        self.error: MagnetarError | None = None
        self.finished = False
        self.current: CurrentLedger | None = None  # the ledger it was last started on
        self.attempts = 0  # ledgers it was started on

    def done(self, entry_id: int | None, error: BaseException | None) -> None:
        if error is not None and not isinstance(error, MagnetarError):
            return  # not a ledger outcome (a crash unwinding): nothing to tell
        current = self.current
        assert current is not None
        self.appends._finish_add(current, self, entry_id, error)


@dataclass(slots=True)
class CurrentLedger:
    """The ledger appends go to, and what was started and acknowledged on it."""

    handle: LedgerHandle
    created_ns: int
    created_ms: int
    started_count: int = 0
    started_bytes: int = 0
    failed: bool = False  # the handle failed for a reason other than fencing: roll over
    #: The adds started on it and not yet told to their callers, in entry order: ``inflight[inflight_head:]``.
    inflight: list[_OpAdd] = field(default_factory=list)
    inflight_head: int = 0
    #: Adds that failed on this (failed) ledger, in entry-id order: recovery decides their outcome
    #: (a list made by the first one: none per idle ledger).
    undecided: list[_OpAdd] | None = None


class AppendHost(Protocol):
    """What the pipeline asks of the managed ledger it appends for."""

    async def roll_over(self) -> None:
        """Replace the current ledger: wait for ``wait_drained``; recover a failed one and
        ``settle_undecided`` its adds; create and list the next one and ``install`` it. Raises
        ``MagnetarError`` (with the state back in LEDGER_OPENED unless fenced) if it cannot."""
        ...

    def become_fenced(self, cause: MagnetarError) -> None:
        """Another owner took the managed ledger over (``cause``)."""
        ...

    def spawn(self, coro: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
        """Run ``coro`` as a task of the managed ledger (cancelled when it closes)."""
        ...


class AppendPipeline:
    """The appends of managed ledger ``name``; built and driven by its ``ManagedLedger``."""

    def __init__(self, name: str, *, config: ManagedLedgerConfig, clock: Clock, states: MLStateMachine,
                 ledgers: LedgerList, cache: EntryReader, host: AppendHost) -> None:
        self.name = name
        self._config = config
        self._read_config(config)
        self._clock = clock
        self._states = states
        self._list = ledgers
        self._cache = cache
        self._host = host
        self.current: CurrentLedger | None = None
        #: The last acknowledged entry; ``(ledger, -1)`` before the first entry of an empty log.
        self.last_confirmed = Position(-1, -1)
        self._queue: list[_OpAdd] = []  # the adds not started yet: ``_queue[_queue_head:]`` (``base.fifo.fifo_advance``)
        self._queue_head = 0
        #: Waiters for room, None while no one waits. Read per run and per completion: None
        #: (as ``_entry_waiters``, ``_drained_event``) is read on this object alone, while an
        #: empty list is one more object per topic to touch (a cache miss per run at 10,000 topics).
        self._admission: list[asyncio.Future[None]] | None = None
        self._pump_task: asyncio.Task[None] | None = None
        #: Set when adds failed to their callers after a write failure: later adds are refused
        #: until ``settle_failed_writes`` (their order behind the failed ones could not be kept).
        self.write_failure: MagnetarError | None = None
        self.rollover_requested = False
        #: No add in flight on the current ledger (``wait_drained``); the event exists only while
        #: someone waits for it to become True.
        self._drained = True
        self._drained_event: LazyEvent | None = None
        self._kicking = False  # ``kick`` is starting adds (an append from a callback joins it)
        self._entry_waiters: list[tuple[Position, asyncio.Future[None]]] | None = None

    @property
    def config(self) -> ManagedLedgerConfig:
        return self._config

    @config.setter
    def config(self, config: ManagedLedgerConfig) -> None:
        """The managed ledger replaces it when its retention changes."""
        self._config = config
        self._read_config(config)

    def _read_config(self, config: ManagedLedgerConfig) -> None:
        # Read per run: native attributes here, not the config's (an interpreted dataclass).
        self._queue_count_max = config.add_queue_count_max
        self._entries_max = config.max_entries_per_ledger
        self._bytes_max = config.max_size_bytes_per_ledger
        # In nanoseconds (``needs_rollover`` per run: integer compares, no float division).
        self._age_ns_min = round(config.rollover_time_s_min * 1e9)
        self._age_ns_max = round(config.rollover_time_s_max * 1e9)

    # --- admission -------------------------------------------------------------------------------

    def check_writable(self) -> None:
        """Raise the error an append gets now, if any."""
        state = self._states.state
        if state in WRITABLE:
            if self.write_failure is not None:
                raise ManagedLedgerWriteFailedError(
                    f"managed ledger {self.name}: earlier adds failed ({self.write_failure}); "
                    "no add is accepted until the failure is settled")
            return
        if state is MLState.FENCED:
            raise ManagedLedgerFencedError(f"managed ledger {self.name} is fenced: {self._states.fenced_by}")
        if state is MLState.TERMINATED:
            raise ManagedLedgerTerminatedError(f"managed ledger {self.name} is terminated")
        raise ManagedLedgerClosedError(f"managed ledger {self.name} is {state.value}")

    def append(self, data: bytes) -> asyncio.Future[Position]:
        """``append_then`` told through a future (for callers that await one append). Do not cancel it."""
        future: asyncio.Future[Position] = asyncio.get_running_loop().create_future()
        self.append_then(data, partial(settle, future))
        return future

    def append_then(self, data: bytes, on_done: AppendCallback) -> None:
        """``append_run`` of one append."""
        self.append_run(((data, on_done),))

    def append_run(self, run: Sequence[tuple[bytes, AppendCallback]]) -> None:
        """The one append operation (``ManagedLedger.append_run`` is this method), for a run of
        appends in order: queue each ``data``; ``on_done(position, None)`` once the ledger
        acknowledged it (Qa durable); positions grow strictly in call order. The run is started
        on the ledger as one ``LedgerHandle.append_run`` when it has room (one send per bookie).
        ``on_done`` is a plain callback called once from the ledger's completion (no future, no
        loop pass of its own; from inside this call only when the add fails at once, the ledger
        fenced or failed under it); it may append again. Raises at once (nothing queued)
        ``ManagedLedgerFencedError`` once another owner took over,
        ``ManagedLedgerTerminatedError``/``ManagedLedgerClosedError``/``ManagedLedgerWriteFailedError``,
        and ``LimitExceededError`` when the run does not fit in ``add_queue_count_max`` appends
        queued or in flight (see ``has_room`` and ``wait_for_room``). ``on_done(None, error)``
        with the ledger error that failed the add (its outcome is then undecided: it may appear
        in the log after recovery).
        """
        if self._states.state not in WRITABLE or self.write_failure is not None:
            self.check_writable()
        pending = self.pending_add_count + len(run)
        if pending > self._queue_count_max:
            raise LimitExceededError("add_queue_count_max", pending, self._queue_count_max)
        queue = self._queue
        for data, on_done in run:
            queue.append(_OpAdd(self, data if type(data) is bytes else bytes(data), on_done))
        if self._kicking:
            return  # the ``kick`` on the stack (a completion calling back in) takes it
        self.kick()

    @property
    def pending_add_count(self) -> int:
        current = self.current
        if current is None:
            return len(self._queue) - self._queue_head
        started = len(current.inflight) - current.inflight_head
        undecided = current.undecided
        if undecided is not None:  # only a failed ledger has undecided adds (``failed`` is never reset)
            started += len(undecided)
        return len(self._queue) - self._queue_head + started

    def has_room(self, count: int = 1) -> bool:
        """Whether ``append_run`` can take ``count`` appends now (no one waits for room before us)."""
        return self._admission is None and self.pending_add_count + count <= self._queue_count_max

    async def wait_for_room(self) -> None:
        """Backpressure: return once ``append`` can take an append (first in, first out), or the
        managed ledger stopped accepting appends (``append`` then raises)."""
        if self.has_room():
            return
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        line = self._admission
        if line is None:
            line = self._admission = []
        line.append(waiter)
        try:
            while True:
                await waiter
                if (self.pending_add_count < self._queue_count_max
                        or self._states.state not in WRITABLE or self.write_failure is not None):
                    return
                # Woken, but the room went to an earlier waiter: wait again in the same place.
                fresh: asyncio.Future[None] = asyncio.get_running_loop().create_future()
                line[line.index(waiter)] = fresh
                waiter = fresh
        finally:
            # Waiters leave the line only here: while one is in it, ``has_room`` is False, so no
            # caller that did not wait takes the room a woken waiter is about to use. The line
            # is this call's list until it is empty (only then is it dropped, here).
            if waiter in line:
                line.remove(waiter)
            if not line and self._admission is line:
                self._admission = None

    def _wake_admission(self, *, all_waiters: bool = False) -> None:
        """Wake as many waiters (from the head of the line) as there is room for, or all."""
        line = self._admission
        if line is None:
            return
        room = len(line) if all_waiters else self._queue_count_max - self.pending_add_count
        for waiter in line:
            if room <= 0:
                return
            if not waiter.done():
                waiter.set_result(None)
            room -= 1

    # --- the pump --------------------------------------------------------------------------------

    def kick(self) -> None:
        """Start what can start now; a pump task for what must wait (a rollover, room)."""
        if self._pump_task is not None and not self._pump_task.done():
            return  # the running pump takes what was queued
        # What needs no rollover and finds room on the ledger starts here and now; a pump task
        # only to wait (a rollover, or room on the ledger).
        self._kicking = True
        try:
            while len(self._queue) > self._queue_head and self._states.state is MLState.LEDGER_OPENED:
                now_ns = self._clock.monotonic_ns()  # the run's one read, here and in the ledger
                if self.needs_rollover(now_ns):
                    break
                current = self.current
                room = current.handle.room() if current is not None else 0
                if room <= 0:
                    break
                self._start_run(room, now_ns)
        finally:
            self._kicking = False
        if (self._has_work() and self._states.state is MLState.LEDGER_OPENED
                and (self._pump_task is None or self._pump_task.done())):
            self._pump_task = self._host.spawn(self._pump())

    def _has_work(self) -> bool:
        current = self.current
        return bool(len(self._queue) > self._queue_head or self.rollover_requested
                    or (current is not None and current.failed))

    async def _pump(self) -> None:
        while self._has_work() and self._states.state is MLState.LEDGER_OPENED:
            now_ns = self._clock.monotonic_ns()
            if self.needs_rollover(now_ns):
                try:
                    await self._host.roll_over()
                except MagnetarError as exc:
                    self.rollover_requested = False
                    if not self._states.is_fenced():  # the rollover may have moved the state
                        self.fail_queued(exc)
                    return
                continue
            if len(self._queue) == self._queue_head:
                break
            current = self.current
            room = current.handle.room() if current is not None else 0
            if room <= 0:
                assert current is not None
                await current.handle.wait_for_room()  # backpressure from the ledger
                continue
            self._start_run(room, now_ns)

    async def wait_pump(self) -> None:
        """Return once the pump task (if one runs) ended."""
        pump = self._pump_task
        if pump is not None and not pump.done():
            await asyncio.wait([pump])

    async def finish_queued(self) -> None:
        """Wait while adds are queued or a rollover runs, as long as a pump works on them."""
        while self._states.state is not MLState.LEDGER_OPENED or len(self._queue) > self._queue_head:
            pump = self._pump_task
            if pump is None or pump.done():
                break
            await asyncio.wait([pump])

    async def wait_drained(self) -> None:
        """Return once no add is in flight on the current ledger."""
        if self._drained:
            return
        event = self._drained_event
        if event is None:
            event = self._drained_event = LazyEvent()
        await event.wait()

    def needs_rollover(self, now_ns: int = -1) -> bool:
        """Whether the current ledger must be replaced before the next add; ``now_ns``: the
        caller's read of the clock (-1: read here)."""
        current = self.current
        if current is None:
            raise InvariantViolationError("an opened managed ledger has a current ledger")
        if current.failed:
            return True
        if now_ns < 0:
            now_ns = self._clock.monotonic_ns()
        age_ns = now_ns - current.created_ns
        if current.started_count > 0 and age_ns >= self._age_ns_max:
            return True
        if self.rollover_requested:
            if current.started_count > 0:
                return True
            self.rollover_requested = False
        full = current.started_count >= self._entries_max or current.started_bytes >= self._bytes_max
        return full and age_ns >= self._age_ns_min

    def install(self, handle: LedgerHandle) -> None:
        """Appends go to ``handle`` from now on (listed last, none acknowledged yet)."""
        self.current = CurrentLedger(handle, self._clock.monotonic_ns(), self._clock.now_ms())
        self._list.set_live(handle.ledger_id)

    def check_age(self, now_ns: int) -> int | None:
        """Idle ledgers still roll over by age (a busy one is checked on each append): called by
        the shared ``RolloverTimer`` when due; returns when to be called next (None: no longer
        writable)."""
        if self._states.state not in WRITABLE:
            return None
        current = self.current
        assert current is not None
        max_ns = int(self.config.rollover_time_s_max * 1e9)
        due_ns = current.created_ns + max_ns
        if now_ns < due_ns:
            return due_ns
        if self._states.state is MLState.LEDGER_OPENED and current.started_count > 0:
            self.rollover_requested = True
            self.kick()
        return now_ns + max_ns

    # --- starting adds ---------------------------------------------------------------------------

    def _start_run(self, room: int, now_ns: int) -> None:
        """Start up to ``room`` queued adds on the current ledger as one ``append_run``, stopping
        after the add that makes the ledger full (``needs_rollover`` is asked again then).
        ``now_ns`` (the clock read for ``needs_rollover``) serves the ledger too when it reads
        the same clock."""
        current = self.current
        assert current is not None
        queue = self._queue
        handle = current.handle
        entries_max, bytes_max = self._entries_max, self._bytes_max
        if handle.last_add_pushed + 1 != current.started_count:  # the message is formatted only when it fails
            invariant(False, f"ledger {handle.ledger_id} pushed {handle.last_add_pushed}, "
                             f"{current.started_count} adds started on it")
        run: list[_OpAdd] = []
        while len(queue) > self._queue_head and len(run) < room:
            op = queue[self._queue_head]
            self._queue_head = fifo_advance(queue, self._queue_head)
            op.entry_id = current.started_count  # the id the handle gives it (checked above)
            current.started_count += 1
            current.started_bytes += len(op.payload)
            op.position, op.error, op.finished = None, None, False
            op.current = current
            op.attempts += 1
            current.inflight.append(op)
            run.append(op)  # the op is the ledger's add (``_OpAdd.done``)
            if current.started_count >= entries_max or current.started_bytes >= bytes_max:
                break
        self._drained = False  # an event, if one is waited for, is clear already (made while False)
        try:
            handle.append_adds(run, now_ns if handle.clock is self._clock else -1)
        except MagnetarError as exc:  # the handle failed or closed under us: as adds that failed
            for op in run:
                self._finish_add(current, op, None, exc)

    def _finish_add(self, current: CurrentLedger, op: _OpAdd, entry_id: int | None, error: BaseException | None) -> None:
        if error is None and entry_id is not None:  # stored: checked first (no isinstance per add)
            if entry_id != op.entry_id:  # the message is formatted only when it fails
                invariant(False, f"entry id {entry_id}, expected {op.entry_id}")
            op.position = Position(current.handle.ledger_id, entry_id)
        elif isinstance(error, FencedError):
            op.error = ManagedLedgerFencedError(f"managed ledger {self.name}: ledger {current.handle.ledger_id} fenced")
            self._host.become_fenced(error)
        elif isinstance(error, MagnetarError):
            op.error = error
            current.failed = True
        else:
            invariant(False, f"add {op.entry_id} finished with neither an entry id nor a ledger error: {error!r}")
        op.finished = True
        self._deliver_in_order(current)

    def _deliver_in_order(self, current: CurrentLedger) -> None:
        # Callers learn outcomes in position order even if completions interleave.
        inflight = current.inflight  # a callback below may start adds (appended) or deliver (taken)
        while len(inflight) > current.inflight_head and inflight[current.inflight_head].finished:
            op = inflight[current.inflight_head]
            current.inflight_head = fifo_advance(inflight, current.inflight_head)
            if op.position is not None:
                if current.failed and current.undecided:  # ``undecided`` is empty unless it failed
                    invariant(False, "no add of a ledger completes after one that failed")
                self._complete(op)
            elif current.failed and self._states.state in WRITABLE:
                if current.undecided is None:  # the ledger's recovery decides (``settle_undecided``)
                    current.undecided = [op]
                else:
                    current.undecided.append(op)
            elif not op.caller_told:
                invariant(op.error is not None, "a finished add has a position or an error")
                assert op.error is not None
                op.caller_told = True
                op.on_done(None, op.error)
        if len(inflight) == current.inflight_head:
            self._drained = True
            event = self._drained_event
            if event is not None:
                self._drained_event = None
                event.set()
        if self._admission is not None:
            self._wake_admission()
        if self._entry_waiters is not None:
            self.notify_entry_waiters()
        if current.failed and len(inflight) == current.inflight_head and current is self.current:
            self.kick()

    def _complete(self, op: _OpAdd) -> None:
        """``op`` is stored at ``op.position`` in the current (last listed) ledger: tell its caller."""
        assert op.position is not None
        if not op.position > self.last_confirmed:  # the message is formatted only when it fails
            invariant(False, f"position {op.position} not after {self.last_confirmed}")
        self.last_confirmed = op.position
        self._list.live_count += 1
        self._list.live_bytes += len(op.payload)
        self._cache.remember(op.position, op.payload)
        if not op.caller_told:
            op.caller_told = True
            op.on_done(op.position, None)

    # --- settlement ------------------------------------------------------------------------------

    def settle_undecided(self, old: CurrentLedger, last: int) -> None:
        """The failed ledger ``old`` was recovered and closed at ``last``: its undecided adds with
        an entry id up to ``last`` are stored there (each wrote its own entry: one writer, ids in
        start order); the rest are not stored and go back to the head of the queue, in order.
        ``LimitExceededError`` if the first of those was written too often already."""
        undecided, old.undecided = old.undecided or [], None
        invariant(last < old.started_count, f"recovered end {last} beyond the {old.started_count} adds started")
        resend: list[_OpAdd] = []
        for op in undecided:
            if op.entry_id <= last:
                invariant(not resend, "stored undecided adds come before the unstored ones")
                op.position = Position(old.handle.ledger_id, op.entry_id)
                self._complete(op)
            else:
                resend.append(op)
        self._queue[self._queue_head:self._queue_head] = resend
        self.notify_entry_waiters()
        log.info("%s: ledger %d failed; recovery closed it at entry %d: %d failed adds are stored there, "
                 "%d are written again to the next ledger", self.name, old.handle.ledger_id, last,
                 len(undecided) - len(resend), len(resend))
        if resend and resend[0].attempts >= MANAGED_LEDGER_ADD_ATTEMPTS_COUNT_MAX:
            raise LimitExceededError("MANAGED_LEDGER_ADD_ATTEMPTS_COUNT_MAX", resend[0].attempts + 1,
                                MANAGED_LEDGER_ADD_ATTEMPTS_COUNT_MAX)

    def fail_queued(self, error: MagnetarError, *, write_failure: bool = True) -> None:
        """Fail the undecided adds, then every queued one (their order). ``write_failure``: later
        adds are refused until ``settle_failed_writes``."""
        current = self.current
        undecided: list[_OpAdd] = []
        if current is not None:
            undecided, current.undecided = current.undecided or [], None
        failing = [op for op in [*undecided, *self._queue[self._queue_head:]] if not op.caller_told]
        self._queue.clear()
        self._queue_head = 0
        if failing and write_failure and self.write_failure is None:
            self.write_failure = error  # before the callbacks: one that appends again is refused
        for op in failing:
            op.caller_told = True
            op.on_done(None, error)
        self._wake_admission(all_waiters=True)

    async def settle_failed_writes(self) -> None:
        """See ``ManagedLedger.settle_failed_writes``."""
        for _ in range(2):
            if self._states.state not in WRITABLE:
                break
            current = self.current
            if current is None or not current.failed:
                break
            self.kick()
            await self.wait_pump()
        if self._states.state not in WRITABLE:
            self.check_writable()
        current = self.current
        if current is not None and current.failed:
            raise ManagedLedgerWriteFailedError(f"managed ledger {self.name}: ledger {current.handle.ledger_id} "
                                           "failed and could not be recovered and replaced yet")
        self.write_failure = None

    # --- waiting for entries ---------------------------------------------------------------------

    async def wait_for_entries_after(self, position: Position) -> None:
        """Return once an entry after ``position`` is acknowledged (or appends stop)."""
        while self.last_confirmed <= position and self._states.state in WRITABLE:
            waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            waiters = self._entry_waiters
            if waiters is None:
                waiters = self._entry_waiters = []
            waiters.append((position, waiter))
            try:
                await waiter
            finally:
                waiters = self._entry_waiters
                if waiters is not None and (position, waiter) in waiters:
                    waiters.remove((position, waiter))
                    if not waiters:
                        self._entry_waiters = None

    def notify_entry_waiters(self) -> None:
        waiters = self._entry_waiters
        if waiters is None:
            return
        still: list[tuple[Position, asyncio.Future[None]]] = []
        for position, waiter in waiters:
            if (self.last_confirmed > position or self._states.state not in WRITABLE) and not waiter.done():
                waiter.set_result(None)
            elif not waiter.done():
                still.append((position, waiter))
        self._entry_waiters = still if still else None


