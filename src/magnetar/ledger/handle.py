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

One add path (BookKeeper's ``asyncAddEntry``): ``append_then`` takes a plain callback (``append`` wraps it
in a future for callers that await) and the add moves on through callbacks, passing its fault points as
gates (``faults.unarmed`` then the continuation called natively, else ``faults.gate1``: held by a hang or
delay; the same code runs after the point either way). Backpressure is an explicit wait: ``wait_for_room``
before ``append``. A bookie that does not answer within ``add_timeout_ms`` fails (``AddTimeouts``: one timer
per ledger client, shared by its writers; nothing per add).

Invariants: ``lac`` only grows; every pending entry id is > ``lac``; the pending table holds
at most ``config.pending_adds_count_max`` adds (up to ``ledger.window.LARGE_WINDOW_FACTOR`` times
that for large adds while its writer is the only busy one); the metadata cached here is the
version this writer last read or wrote.
"""

from __future__ import annotations

import asyncio
import enum
from collections.abc import Callable, Coroutine, Sequence
from functools import partial
from typing import Any

from magnetar import faults
from magnetar.base.clock import Clock
from magnetar.base.errors import BadVersionError, ClosedError, FencedError, LimitExceededError, MagnetarError
from magnetar.base.invariant import InvariantViolationError, invariant
from magnetar.base.lazy_event import LazyEvent
from magnetar.base.limits import (
    LEDGER_ADD_TIMEOUT_CONFIRM_MS,
    LEDGER_ENSEMBLE_CHANGES_COUNT_MAX,
    LEDGER_METADATA_CAS_RETRY_COUNT_MAX,
)
from magnetar.base.types import NO_ENTRY, BookieId
from magnetar.ledger._deadline import with_deadline
from magnetar.ledger.add_timeouts import AddTimeouts
from magnetar.ledger.config import LedgerClientConfig
from magnetar.ledger.errors import BookieUnavailableError, LedgerStateError
from magnetar.ledger.ledger_metadata import LedgerMetadata, LedgerState
from magnetar.ledger.metadata_ops import LedgerMetadataStore, VersionedMetadata
from magnetar.ledger.pending_add import AddCallback, CallbackAdd, PendingAdd, settle
from magnetar.ledger.placement import BookieDirectory, PlacementPolicy
from magnetar.ledger.quorum import write_set
from magnetar.ledger.transport import BookieTransport
from magnetar.ledger.window import WindowShare
from magnetar.protocol.bookie.codec import EncodedEntry


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


#: A writer's empty sets (failed and excluded bookies, timeout suspects): shared, replaced on a change.
_NONE: frozenset[Any] = frozenset()


class RunReplies:
    """How a writer hears one bookie's answers to one ``add_run``: an ``AddReplyCallback``
    (``self(index, error)``, once per entry) that also takes the entries of the run stored
    together in one call, ``stored(indexes)`` (a local bookie's journal answer: one call per run
    and bookie instead of one per entry, and the writer's in-order completion once per call)."""

    __slots__ = ("bookie", "handle", "run", "slot")

    def __init__(self, handle: LedgerHandle, run: list[PendingAdd], slot: int, bookie: BookieId) -> None:
        self.handle = handle
        self.run = run
        self.slot = slot
        self.bookie = bookie

    def __call__(self, index: int, error: BaseException | None) -> None:
        self.handle._on_reply(self, index, error)

    def stored(self, indexes: Sequence[int]) -> None:
        self.handle._on_stored(self, indexes)

    def count(self, error: BaseException | None, op: PendingAdd) -> None:
        """Past ``ledger.after_reply_before_count`` while it is armed (``faults.gate1``)."""
        self.handle._count_reply(error, op, self.slot, self.bookie)


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
        window: WindowShare | None = None,
        timeouts: AddTimeouts | None = None,
    ) -> None:
        invariant(metadata.metadata.state is LedgerState.OPEN, "a writer needs an OPEN ledger")
        self._meta = metadata
        self._store = store
        self._transport = transport
        self._directory = directory
        self._placement = placement
        self._clock = clock
        self._config = config
        self._master_key = master_key
        # Fixed for the ledger's life, read per add (not walked to through interpreted dataclasses).
        self._ledger_id = metadata.metadata.ledger_id
        self._ack_quorum_size = metadata.metadata.ack_quorum_size
        self._write_quorum_size = metadata.metadata.write_quorum_size
        self._add_timeout_ns = config.add_timeout_ms * 1_000_000
        self._pending_count_max = config.pending_adds_count_max  # a native read per run, not the config's attribute
        self._state = WriterState.OPEN
        #: ``_state`` is OPEN; ``_state`` is OPEN or CLOSING (adds in flight still count): kept by
        #: ``_move``, read per add and per reply instead of comparing enum members.
        self._open = True
        self._live = True
        self._failure: MagnetarError | None = None
        self._ensemble: tuple[BookieId, ...] = metadata.metadata.last_fragment.ensemble
        self._lac: int = NO_ENTRY
        self._last_add_pushed: int = NO_ENTRY
        self._pending: dict[int, PendingAdd] = {}
        self._pending_bytes = 0  # the payload bytes of ``_pending`` (``WindowShare.window_for``)
        #: Waiters for room, None while no one waits (read per run and per completion: None is
        #: read on this object alone, an empty list is one more object per ledger to touch).
        self._admission: list[asyncio.Future[None]] | None = None
        #: The window this writer shares with the other writers of its ledger client (alone: a
        #: share of its own, always the whole ``pending_adds_count_max``); ``_occupying`` while
        #: it counts as busy there (its table holds adds).
        self._window = window if window is not None else WindowShare(config.pending_adds_count_max,
                                                                      config.pending_adds_share_count_min)
        self._occupying = False
        self._failed_bookies: frozenset[BookieId] = _NONE  # replaced, not changed: none per idle ledger
        self._excluded_bookies: frozenset[BookieId] = _NONE
        self._ensemble_change: asyncio.Task[None] | None = None
        self._ensemble_changes_count = 0
        self._batch: list[PendingAdd] | None = None  # while ``append_run`` gathers its sends
        #: While ``_on_stored`` counts a run's replies: completions wait for its end (``_completed``).
        self._counting_run = False
        self._complete_after_run = False
        #: What ``close`` waits on while adds are in flight (set and dropped once the table is empty).
        self._drained: LazyEvent | None = None
        self._tasks: set[asyncio.Task[Any]] | None = None  # made by the first ``_spawn``
        #: The add timeout: the client's one timer for all its writers (alone: one of its own).
        self._timeouts = timeouts if timeouts is not None else AddTimeouts(clock)
        self._watched = False  # in ``_timeouts``' watch (adds in flight since it last looked)
        self._timeout_suspects: set[tuple[int, int]] | frozenset[tuple[int, int]] = _NONE
        self._lac_flusher: asyncio.Task[None] | None = None
        self._explicit_lac_sent: int = NO_ENTRY
        if config.explicit_lac_interval_ms > 0:
            self._lac_flusher = self._spawn(self._flush_lac_periodically())

    # --- public view -----------------------------------------------------------------------------

    @property
    def ledger_id(self) -> int:
        return self._ledger_id

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

    @property
    def clock(self) -> Clock:  # the managed ledger's read of the same clock serves a run (``append_adds``)
        return self._clock

    # --- adds ------------------------------------------------------------------------------------

    def has_room(self) -> bool:
        """Whether ``append`` can take an add now: fewer adds in flight than this writer's share
        of the window (``ledger.window``) and no one waiting for room before us."""
        return len(self._pending) < self._window_now() and self._admission is None

    async def wait_for_room(self) -> None:
        """Backpressure: return once ``append`` can take an add (waiters go first in, first out),
        or the handle is no longer open (``append`` then raises)."""
        if self.has_room():
            return
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        line = self._admission = self._admission if self._admission is not None else []
        line.append(waiter)
        self._window.wait(self)  # a writer going idle grows the share: it wakes us then
        try:
            while True:
                await waiter
                if len(self._pending) < self._window_now() or self._state is not WriterState.OPEN:
                    return
                # Woken, but the room went to an earlier waiter: wait again in the same place.
                fresh: asyncio.Future[None] = asyncio.get_running_loop().create_future()
                line[line.index(waiter)] = fresh
                waiter = fresh
        finally:
            # Waiters leave the line only here: while one is in it, ``has_room`` is False, so no
            # caller that did not wait takes the room a woken waiter is about to use.
            if waiter in line:
                line.remove(waiter)
            if not line:
                if self._admission is line:
                    self._admission = None
                self._window.done_waiting(self)

    async def add_entry(self, payload: bytes) -> int:
        """``wait_for_room`` then ``append``: returns the entry id once Qa bookies stored it and
        all lower ids did (see ``append`` for the errors)."""
        self._check_open()
        await self.wait_for_room()
        return await asyncio.shield(self.append(payload))

    def append(self, payload: bytes) -> asyncio.Future[int]:
        """``append_then`` told through a future (for callers that await one add). Do not cancel it."""
        future: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self.append_then(payload, partial(settle, future))
        return future

    def append_then(self, payload: bytes, on_done: AddCallback) -> None:
        """``append_run`` of one add."""
        self.append_adds((CallbackAdd(payload, on_done),))

    def room(self) -> int:
        """How many adds to start now: this writer's share of the window (``ledger.window``) less
        its adds in flight (0 while someone waits for room). ``append_run`` refuses only beyond
        the whole window."""
        if self._admission is not None:
            return 0
        room = self._window_now() - len(self._pending)
        return room if room > 0 else 0

    def _window_now(self) -> int:
        """This writer's window now (``WindowShare.window_for``: its share, or more for large adds
        while it is alone)."""
        return self._window.window_for(len(self._pending), self._pending_bytes)

    def append_run(self, adds: Sequence[tuple[bytes, AddCallback]]) -> None:
        """``append_adds`` of ``(payload, on_done)`` pairs (``CallbackAdd``s)."""
        self.append_adds([CallbackAdd(payload, on_done) for payload, on_done in adds])

    def append_adds(self, adds: Sequence[PendingAdd], now_ns: int = -1) -> None:
        """The one add operation (BookKeeper's ``asyncAddEntry``), for a run of adds in order: take
        the next entry ids now (``PendingAdd.start``), keep each add in the table as it is and
        call its ``done(entry_id, None)`` once Qa bookies of its write set stored the entry and
        every lower id completed (strictly in id order), or ``done(None, error)`` with
        ``FencedError`` if another client fenced the ledger (the entry may or may not survive),
        or the error that failed the handle. ``done`` is called once per start, from the
        handle's own reply processing (no future, no extra loop pass per add); it may call
        ``append_adds`` again. Raises ``ClosedError`` (or the failure) when the handle is not open
        and ``LimitExceededError`` when it has no room for the whole run (nothing is added then):
        see ``room`` and ``wait_for_room``. ``now_ns``: the caller's read of ``clock`` (one per run across
        the layers), or -1 (read here). The adds of a run that pass their send gates together go to each
        bookie in one transport call (``BookieTransport.add_run``: one write, one hand-off per bookie), each
        carrying the LAC known then. Each add passes ``ledger.before_send_next_entry`` (after the first
        entry), ``ledger.before_send`` and ``ledger.after_send_before_reply`` as gates (``faults.gate1``),
        its replies ``ledger.after_reply_before_count`` and, once, ``ledger.after_quorum_before_ack``. An
        ``error`` at a gate of the send fails the handle; at a reply's gate, that bookie.
        """
        if not self._open:
            self._check_open()
        # Refused only beyond the whole window: the count window, or more for large adds
        # while this writer is alone (``WindowShare.window_for``).
        count_max = self._pending_count_max
        window_now = self._window_now()
        if window_now > count_max:
            count_max = window_now
        if len(self._pending) + len(adds) > count_max:
            raise LimitExceededError("pending_adds_count_max", len(self._pending) + len(adds), count_max)
        if now_ns < 0:
            now_ns = self._clock.monotonic_ns()  # the run's one read: the watch's and the sends' time
        if not self._watched and self._add_timeout_ns > 0:
            self._watched = True  # watched by the client's one timer until nothing is in flight
            self._timeouts.watch(self, now_ns + self._add_timeout_ns)
        if not self._occupying and adds:
            self._occupying = True
            self._window.occupy()
        batch: list[PendingAdd] = []
        self._batch = batch  # ``_send`` gathers the adds that pass their gates now
        try:
            for op in adds:
                entry_id = self._last_add_pushed + 1
                self._last_add_pushed = entry_id
                op.start(self, entry_id)
                self._pending[entry_id] = op
                self._pending_bytes += len(op.payload)
                if entry_id > 0 and not faults.unarmed("ledger.before_send_next_entry"):
                    faults.gate1("ledger.before_send_next_entry", self._before_send, op)
                else:
                    self._before_send(None, op)
        finally:
            self._batch = None
        if batch:
            self._send_batch(batch, now_ns)

    def _before_send(self, error: BaseException | None, op: PendingAdd) -> None:
        if error is not None:
            self._fail_by(error)
            return
        if faults.unarmed("ledger.before_send"):
            self._send(None, op)  # the gate's continuation, called natively (``faults.unarmed``)
        else:
            faults.gate1("ledger.before_send", self._send, op)

    def _send(self, error: BaseException | None, op: PendingAdd) -> None:
        if error is not None:
            self._fail_by(error)
            return
        if self._batch is not None:
            self._batch.append(op)  # ``append_run`` sends it with the rest of its run
        else:
            self._send_batch([op], self._clock.monotonic_ns())  # held by a gate: alone

    def _send_batch(self, ops: list[PendingAdd], now_ns: int) -> None:
        """Build the entries of ``ops`` (with the LAC known now) and send them; then each passes
        ``ledger.after_send_before_reply``."""
        if not self._live:
            return
        ledger_id, lac = self._ledger_id, self._lac
        ready = ops
        for op in ops:
            if op.told:  # failed meanwhile (a gate held it): not sent
                ready = [op for op in ops if not op.told]
                break
        for op in ready:
            op.entry = EncodedEntry.build(ledger_id, op.entry_id, lac, op.payload)
        if self._write_quorum_size == len(self._ensemble) and not self._failed_bookies:
            self._send_to_ensemble(ready, now_ns)  # never sent before: every bookie gets every one
        else:
            self._send_to_write_sets(ready, now_ns)
        for op in ready:
            if faults.unarmed("ledger.after_send_before_reply"):
                self._after_send(None, op)
            else:
                faults.gate1("ledger.after_send_before_reply", self._after_send, op)

    def _after_send(self, error: BaseException | None, op: PendingAdd) -> None:
        if op.owner is not self:
            return  # started again on another ledger while a gate held it here
        if error is not None:
            self._fail_by(error)
            return
        op.sent = True
        if op.quorum_passed:  # its replies came while a gate held it: it may complete now
            self._complete_in_order()

    def _fail_by(self, error: BaseException) -> None:
        self._fail(error if isinstance(error, MagnetarError) else MagnetarError(str(error)))

    def _check_open(self) -> None:
        if self._state is WriterState.FAILED:
            invariant(self._failure is not None, "a failed handle records its failure")
            raise self._failure  # type: ignore[misc]
        if self._state is not WriterState.OPEN:
            raise ClosedError(f"ledger {self.ledger_id} is {self._state.value}")

    def wake_admission(self) -> None:
        """Wake as many waiters (from the head of the line) as there is room for."""
        line = self._admission
        if line is None:
            return
        room = self._window_now() - len(self._pending)
        for waiter in line:
            if room <= 0:
                return
            if not waiter.done():
                waiter.set_result(None)
            room -= 1

    def _write_set(self, entry_id: int) -> tuple[int, ...]:
        meta = self._meta.metadata
        return write_set(entry_id, meta.ensemble_size, meta.write_quorum_size)

    def _send_to_ensemble(self, ops: list[PendingAdd], now_ns: int) -> None:
        """``_send_to_write_sets`` of adds never sent, when every write set is the whole ensemble
        (Qw == E) and no bookie failed: one run of all of them to each bookie, the lists shared
        (read only), no write set looked up per add."""
        ensemble = self._ensemble
        everyone = (1 << len(ensemble)) - 1
        entries: list[EncodedEntry] = []
        for op in ops:
            entry = op.entry
            if entry is None or op.acked or op.inflight:  # no call per add (the message: a constant)
                raise InvariantViolationError("sent to the ensemble once, built")
            op.sent_ns = now_ns
            op.inflight = everyone
            entries.append(entry)
        if not entries:
            return
        for slot, bookie in enumerate(ensemble):
            self._transport.add_run(bookie, entries, False, self._master_key, RunReplies(self, ops, slot, bookie))

    def _send_to_write_sets(self, ops: Sequence[PendingAdd], now_ns: int) -> None:
        """Send each of ``ops`` (those built) to the slots of its write set that neither stored it
        nor were asked yet, skipping failed bookies: one ``add_run`` per bookie, in entry order."""
        runs: dict[int, tuple[list[PendingAdd], list[EncodedEntry]]] = {}  # slot -> its adds, entries
        failed = self._failed_bookies
        ensemble = self._ensemble
        for op in ops:
            entry = op.entry
            if entry is None:
                continue  # not past its send gates yet: ``_send`` sends it
            op.sent_ns = now_ns
            asked = op.acked | op.inflight
            for slot in self._write_set(op.entry_id):
                bit = 1 << slot
                if asked & bit or (failed and ensemble[slot] in failed):
                    continue
                op.inflight |= bit
                run = runs.get(slot)
                if run is None:
                    runs[slot] = ([op], [entry])
                else:
                    run[0].append(op)
                    run[1].append(entry)
        for slot, (sent, entries) in runs.items():
            bookie = ensemble[slot]
            self._transport.add_run(bookie, entries, False, self._master_key, RunReplies(self, sent, slot, bookie))

    def _on_stored(self, replies: RunReplies, indexes: Sequence[int]) -> None:
        """``_on_reply(index, None)`` for each of ``indexes`` (``RunReplies.stored``), completing
        in order once, after the last (each reply still passes its own gates)."""
        self._counting_run = True
        try:
            for index in indexes:
                self._on_reply(replies, index, None)
        finally:
            self._counting_run = False
        if self._complete_after_run:
            self._complete_after_run = False
            self._complete_in_order()

    def _on_reply(self, replies: RunReplies, index: int, error: BaseException | None) -> None:
        op = replies.run[index]
        slot, bookie = replies.slot, replies.bookie
        bit = 1 << slot
        if op.owner is not self or not op.inflight & bit or self._ensemble[slot] is not bookie:
            return  # timed out, replaced, the handle ended or the add was started again elsewhere
        op.inflight &= ~bit
        if error is not None:
            self._on_add_error(op, slot, error if isinstance(error, MagnetarError)
                               else BookieUnavailableError(f"add to {bookie}: {error!r}"))
            return
        if faults.unarmed("ledger.after_reply_before_count"):
            self._count_reply(None, op, slot, bookie)
        else:
            faults.gate1("ledger.after_reply_before_count", replies.count, op)

    def _on_add_error(self, op: PendingAdd, slot: int, exc: BaseException) -> None:
        """The bookie at ``slot`` did not store ``op``: fenced fails the ledger, anything else
        replaces the bookie."""
        op.inflight &= ~(1 << slot)
        bookie = self._ensemble[slot]
        if isinstance(exc, FencedError):
            self._fail(FencedError(f"ledger {self.ledger_id} fenced by bookie {bookie}: {exc}"))
        else:
            self._on_bookie_failure(bookie)

    def _count_reply(self, error: BaseException | None, op: PendingAdd, slot: int, bookie: BookieId) -> None:
        """``bookie`` (at ``slot``) stored ``op``: count it and complete what reached its ack quorum."""
        if op.owner is not self or self._ensemble[slot] is not bookie:
            return  # replaced by an ensemble change meanwhile: its copy no longer counts
        if error is not None:
            self._on_add_error(op, slot, error)  # the reply is lost at this point
            return
        if op.told or not self._live:
            return
        op.acked |= 1 << slot
        if not op.quorum_gated and self._has_ack_quorum(op):
            op.quorum_gated = True
            if not faults.unarmed("ledger.after_quorum_before_ack"):
                faults.gate1("ledger.after_quorum_before_ack", self._quorum_passed, op)
                return
            op.quorum_passed = True  # ``_quorum_passed(None, op)``, unarmed: the owner checked above
        self._completed()

    def _quorum_passed(self, error: BaseException | None, op: PendingAdd) -> None:
        if op.owner is not self:
            return  # started again on another ledger while the gate held it here
        if error is not None:
            self._fail_by(error)
            return
        op.quorum_passed = True
        self._completed()

    def _completed(self) -> None:
        """A reply counted: complete in order now, or once ``_on_stored`` counted its whole run."""
        if self._counting_run:
            self._complete_after_run = True
        else:
            self._complete_in_order()

    def check_add_deadlines(self, now_ns: int) -> int | None:
        """The add timeout (BookKeeper's timeout monitor), called by the client's ``AddTimeouts``
        (one timer for all its writers, nothing per add): a bookie that has not answered an add
        ``add_timeout_ms`` after it was sent counts as failed (it is replaced). An add is failed
        only when it was overdue at two checks ``LEDGER_ADD_TIMEOUT_CONFIRM_MS`` apart (see the
        limit). Returns when to be checked next, or None (nothing in flight: it leaves the watch
        until its next add)."""
        if self._pending and self._state in (WriterState.OPEN, WriterState.CLOSING):
            timeout_ns = self._config.add_timeout_ms * 1_000_000
            wake_ns = now_ns + timeout_ns
            suspects = self._timeout_suspects  # (entry id, sent_ns) overdue at the last check
            overdue: set[tuple[int, int]] = set()
            for op in list(self._pending.values()):
                if not op.inflight:
                    continue
                if op.sent_ns + timeout_ns > now_ns:
                    wake_ns = min(wake_ns, op.sent_ns + timeout_ns)
                elif (op.entry_id, op.sent_ns) not in suspects:
                    overdue.add((op.entry_id, op.sent_ns))
                else:
                    ensemble = self._ensemble
                    asked = [slot for slot in range(len(ensemble)) if op.inflight & (1 << slot)]
                    for slot in sorted(asked, key=ensemble.__getitem__):
                        bookie = ensemble[slot]
                        self._on_add_error(op, slot, BookieUnavailableError(
                            f"add {self.ledger_id}:{op.entry_id} to {bookie} took longer than "
                            f"{self._config.add_timeout_ms} ms"))
            self._timeout_suspects = overdue
            if self._pending and self._state in (WriterState.OPEN, WriterState.CLOSING):
                return now_ns + LEDGER_ADD_TIMEOUT_CONFIRM_MS * 1_000_000 if overdue else wake_ns
        self._timeout_suspects = _NONE
        self._watched = False
        return None

    def _has_ack_quorum(self, op: PendingAdd) -> bool:
        # ``acked``: slots of its write set whose bookie still is the one that stored it (see ``_count_reply``).
        bits, count, quorum = op.acked, 0, self._ack_quorum_size
        while bits and count < quorum:  # compiled: native int steps (``int.bit_count`` is a call by name)
            bits, count = bits & (bits - 1), count + 1
        return count >= quorum

    def _complete_in_order(self) -> None:
        while self._pending and self._ensemble_change is None and self._live:
            head_id = self._lac + 1  # the table holds exactly LAC + 1 .. last pushed (no iterator per add)
            op = self._pending.get(head_id)
            if op is None or len(self._pending) != self._last_add_pushed - self._lac:
                raise InvariantViolationError(f"pending {sorted(self._pending)[:3]}... must follow LAC {self._lac}")
            if not (op.sent and op.quorum_passed and self._has_ack_quorum(op)):
                break
            del self._pending[head_id]
            self._pending_bytes -= len(op.payload)
            self._lac = head_id
            if self._admission is not None:
                self.wake_admission()
            if not op.told:
                op.told = True
                op.done(head_id, None)  # may add again: the loop re-reads the table
        if not self._pending:
            self._set_drained()
            self._release_window()

    def _set_drained(self) -> None:
        drained, self._drained = self._drained, None
        if drained is not None:
            drained.set()

    def _release_window(self) -> None:
        """The table is empty: this writer no longer counts as busy (the others' share grows)."""
        if self._occupying:
            self._occupying = False
            self._window.release()

    # --- ensemble change -------------------------------------------------------------------------

    def _on_bookie_failure(self, bookie: BookieId) -> None:
        if self._state not in (WriterState.OPEN, WriterState.CLOSING) or bookie not in self._ensemble:
            return
        self._failed_bookies = self._failed_bookies | {bookie}
        self._excluded_bookies = self._excluded_bookies | {bookie}
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
        self._failed_bookies = _NONE
        self._send_to_write_sets(list(self._pending.values()), self._clock.monotonic_ns())
        self._complete_in_order()

    async def _replace_failed_bookies(self) -> None:
        self._ensemble_changes_count += 1
        if self._ensemble_changes_count > LEDGER_ENSEMBLE_CHANGES_COUNT_MAX:
            raise LimitExceededError(
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
        kept = 0  # the slots whose bookie stays: acks and requests of the others stop counting
        for slot, (before, after) in enumerate(zip(self._ensemble, ensemble, strict=True)):
            if before is after or before == after:
                kept |= 1 << slot
        self._ensemble = ensemble
        self._failed_bookies -= replaced
        for op in self._pending.values():
            op.acked &= kept
            op.inflight &= kept

    async def _cas(self, change: Callable[[LedgerMetadata], LedgerMetadata]) -> None:
        for _ in range(LEDGER_METADATA_CAS_RETRY_COUNT_MAX):
            new = change(self._meta.metadata)
            try:
                self._meta = await self._store.cas(self._meta, new)
                return
            except BadVersionError:
                pass  # re-read after the handler: compiled (mypyc), an except block never awaits
            self._meta = await self._store.read(self.ledger_id)
        raise LimitExceededError(
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
        if self._pending:  # drained once the table is empty (``_complete_in_order``, ``_fail``)
            drained = self._drained = self._drained if self._drained is not None else LazyEvent()
            await drained.wait()
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
            except BadVersionError:
                pass  # re-read after the handler (see ``_cas``)
            self._meta = await self._store.read(self.ledger_id)
        else:
            raise LimitExceededError(
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
        self._open = new is WriterState.OPEN
        self._live = new is WriterState.OPEN or new is WriterState.CLOSING

    def _fail(self, error: MagnetarError) -> None:
        if self._state in (WriterState.FAILED, WriterState.CLOSED):
            return
        self._move(WriterState.FAILED)
        self._failure = error
        failed = list(self._pending.values())
        self._pending.clear()
        self._pending_bytes = 0
        self._set_drained()
        self._release_window()
        self._wake_all_admission()
        self._cancel_tasks()
        for op in failed:  # told once the handle is consistent: a callback may call back in
            if not op.told:
                op.told = True
                op.done(None, error)

    def _wake_all_admission(self) -> None:
        for waiter in self._admission or ():
            if not waiter.done():
                waiter.set_result(None)

    def _spawn(self, coro: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
        task = asyncio.ensure_future(coro)
        tasks = self._tasks = self._tasks if self._tasks is not None else set()
        tasks.add(task)
        task.add_done_callback(tasks.discard)
        return task

    def _cancel_tasks(self) -> None:
        current = asyncio.current_task()
        for task in list(self._tasks or ()):
            if task is not current and task is not self._ensemble_change:
                task.cancel()

