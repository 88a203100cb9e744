"""The journal's submission side (issue 22): what callers hand the journal, and when it looks for
a group to start. ``storage.journal`` writes, syncs and answers the groups (``Journal``, a
``JournalSubmitter``); this module holds the queue and the decisions made per submission.

* **Submissions**: ``submit`` (one record), ``submit_run`` (one run: its records always share a
  group, one callback answers them) and ``submit_runs`` (the runs of several ledgers handed over
  in one call, ``Bookie.add_entries_runs``: one arrival for the group wait, one look at the
  queue's room and one decision to wake, each run still its own item with its own callback and
  reply lane). The caller names each run's ledger and the other ledgers its records hold, so the
  journal never reads them back from the framing (a run without them names its lane by its
  first record and, while queued, blocks every express group: ``journal_express``).
* **Arrivals and the group wait** (``journal_wait``): one arrival per submission call; a wait
  counts the arrivals since it began (``gained_enough``, with the queued bytes), not the items.
* **Waking the writer**: ``_wake`` schedules the journal's ``_look`` once per loop pass, only when
  a group can start (a free slot, an ended wait, or a lone record and a free express slot).
* **A lone record at once** (session 20): a lone record (``journal_express``) queued alone while
  another ledger is at work (it queued an item lately) starts its express group from its own submission (``_lone_now``),
  not from the look at the pass's end, which took it with the busy ledger's adds read after it.

Invariant: ``_queued_bytes`` is the sum of the queued items' sizes; ``_room`` is clear exactly
while it is at least ``journal_queue_bytes_max``.
"""

from __future__ import annotations

import asyncio
import collections
import enum
from collections.abc import Callable, Sequence
from collections.abc import Set as AbstractSet
from typing import Final

from magnetar.base.clock import Clock, Timer
from magnetar.base.errors import ClosedError
from magnetar.base.invariant import invariant
from magnetar.base.io import Bytes
from magnetar.base.lazy_event import LazyEvent
from magnetar.faults import breaks
from magnetar.storage import journal_express
from magnetar.storage.config import BookieConfig
from magnetar.storage.journal_replies import NO_LEDGER, queued_lane
from magnetar.storage.journal_wait import GroupWaitPolicy

Callback = Callable[[BaseException | None], None]
#: A framed record, whole or as (framing + prefix, entry): an add's entry is then copied once,
#: into the group's write, instead of once per concatenation.
Record = bytes | tuple[bytes, bytes]
#: No ledger besides a run's own (``submit_run``'s default ``others``).
NO_OTHERS: Final[frozenset[int]] = frozenset()
#: The break asked per queued item (``_queue_item``), looked up once: compiled, an attribute of an
#: ``Enum`` class is a Python attribute lookup per read.
_ACK_BEFORE_FSYNC: Final = breaks.Break.ACK_BEFORE_FSYNC
#: A lone item goes in an express group at its submission (``JournalSubmitter._lone_now``) only when
#: another ledger queued an item at most this long before: another ledger is then at work, and the
#: rest of the loop pass (its adds) or a group wait would gather its adds, not the lone item's
#: ledger's. One ledger's own stream (a producer's e2e) meets it only within this long after
#: another ledger's item (a cursor's flush, once per second by default).
OTHERS_ACTIVE_NS: Final = 10_000_000
#: One run of ``submit_runs``: its records' parts (framing, then the entry, per record), their
#: bytes, its callback, its ledger (its reply lane), its records, the other ledgers its records hold.
Run = tuple[list[Bytes], int, Callback, int, int, AbstractSet[int]]


def _answered(_error: BaseException | None) -> None:
    """The callback of a record whose caller was already answered (the ack-before-fsync break)."""


def record_bytes(record: Record) -> int:
    return len(record) if isinstance(record, bytes) else len(record[0]) + len(record[1])


class JournalStatus(enum.Enum):
    CREATED = "created"
    RUNNING = "running"
    STOPPED = "stopped"
    FAILED = "failed"


_TRANSITIONS: dict[JournalStatus, frozenset[JournalStatus]] = {
    JournalStatus.CREATED: frozenset({JournalStatus.RUNNING, JournalStatus.STOPPED}),
    JournalStatus.RUNNING: frozenset({JournalStatus.STOPPED, JournalStatus.FAILED}),
    JournalStatus.FAILED: frozenset({JournalStatus.STOPPED}),
    JournalStatus.STOPPED: frozenset(),
}


class Group:
    """One group in flight: the callbacks of its queued items and the ledger of each
    (its lane in the reply lanes, and how many records it answers), whether its sync returned,
    and whether its records were answered (queued to the reply lanes, or answered with an error
    by a failure or ``stop``). A plain class, not a dataclass: one per journal group, and
    compiled (mypyc) a dataclass's generated ``__init__`` runs interpreted (session 17)."""

    __slots__ = ("answered", "callbacks", "express", "lanes", "on_synced", "synced")

    def __init__(self, callbacks: list[Callback], lanes: list[tuple[int, int]], express: bool = False,
                 on_synced: Callable[[Group, BaseException | None], None] | None = None) -> None:
        self.callbacks = callbacks
        self.lanes = lanes
        self.express = express  # a lone record's group (``journal_express``), beside the ordinary slots
        self.synced = False
        self.answered = False
        self.on_synced = on_synced  # the journal's completion of its write and sync (``__call__``)

    def __call__(self, error: BaseException | None) -> None:
        """The group's write and sync returned (``DiskFile.append_and_sync_then``'s ``done``):
        ``on_synced(self, error)``. The group is its own callback, where a ``functools.partial``
        was one more object and one more generic call per group (session 23)."""
        on_synced = self.on_synced
        invariant(on_synced is not None, "a group written without its completion")
        assert on_synced is not None  # narrowing for the type checker; the invariant above holds
        on_synced(self, error)


class JournalSubmitter:
    """The queue of a journal and its submission calls; ``look`` starts the groups (the journal's
    writing side), scheduled by ``_wake`` at most once per loop pass; ``start_lone`` starts an
    express group of lone items from a submission (``_lone_now``), where the writing side can."""

    def __init__(self, clock: Clock, config: BookieConfig, look: Callable[[], None],
                 start_lone: Callable[[], None]) -> None:
        self._clock = clock
        self._config = config
        # The limits read per submission, look and group, as native ints: compiled, a field of the
        # (frozen dataclass) config is a generic attribute lookup per read (session 23).
        self._queue_bytes_max = config.journal_queue_bytes_max
        self._group_bytes_max = config.journal_group_bytes_max
        self._groups_in_flight_max = config.journal_groups_in_flight_max
        self._look_soon = look
        self._start_lone_now = start_lone  # an express group of the lone items now, if one can start from here
        # Queued items: (record or run, bytes, callback, when queued, (reply lane, weight)).
        self._queue: collections.deque[journal_express.QueueItem] = collections.deque()
        self._queued_bytes = 0
        self._arrivals = 0  # submission calls so far (a ``submit_runs`` call is one)
        # Items per ledger queued or in flight, and the express groups in flight (``journal_express``).
        self._load = journal_express.LedgerLoad()
        self._express_inflight = 0
        self.express_groups_max = journal_express.EXPRESS_GROUPS_IN_FLIGHT_MAX  # 0: no express slot
        self.lone_goes_at_once = True  # a lone record beside a group in flight goes in an express group, not in a wait
        # A lone record queued alone while another ledger is at work: its express group starts at its submission
        # (``_lone_now``), not at the loop pass's end behind the other ledger's adds of that pass.
        self.lone_starts_at_submit = True
        self._last_ledger = NO_LEDGER  # the ledger of the item queued last, and when
        self._last_queued_ns = 0
        self._other_ledger = NO_LEDGER  # the ledger queued last before ``_last_ledger``'s items, and when
        self._other_queued_ns = 0
        self._lone_after_other = False  # the last item is lone, alone in the queue, another ledger at work
        # Groups being written and synced, oldest first; they pass their reply gates in order.
        self._inflight: collections.deque[Group] = collections.deque()
        # ``_wake`` schedules one look per loop pass; ``_grouping`` while the group-wait timer runs.
        self._loop: asyncio.AbstractEventLoop | None = None
        self._look_due = False
        self._grouping = False
        self._wait_arrivals = 0  # ``_arrivals`` when the group wait began
        self._waited_due = False  # the wait ended: the next look starts the group at once
        self._timer: Timer | None = None
        self._wait_policy = GroupWaitPolicy(config.journal_group_wait_ms_max * 1_000_000)
        self._room = LazyEvent(is_set=True)  # compiled: ``_take_group`` sets it per group
        self._failure: BaseException | None = None
        self.status = JournalStatus.CREATED
        self.waits_count = 0  # groups that waited for more adds (``journal_wait``)

    def _transition(self, to: JournalStatus) -> None:
        invariant(to in _TRANSITIONS[self.status], f"journal: illegal transition {self.status} -> {to}")
        self.status = to

    @property
    def queued_bytes(self) -> int:
        return self._queued_bytes

    def submit(self, record: Record, callback: Callback) -> None:
        """Queue ``record``; ``callback(None)`` once durable, ``callback(exc)`` if it cannot be."""
        if self._accepts(callback):
            now_ns, pending = self._clock.monotonic_ns(), bool(self._queue) or bool(self._inflight)
            lone = self._queue_item(record, record_bytes(record), callback, queued_lane(record), now_ns)
            self._arrived(now_ns, pending, lone)

    def submit_run(self, parts: list[Bytes], size: int, callback: Callback, ledger_id: int = NO_LEDGER,
                   others: AbstractSet[int] | None = None) -> None:
        """Queue the records of a run as one: ``parts`` is their bytes in order (each record's
        framing, then its entry), ``size`` their total. They go into one group together (a run
        larger than ``journal_group_bytes_max`` makes a group of its own), so one ``callback``
        answers them all: ``None`` once the fsync covering every one of them returned, or the
        error. The caller keeps a run within ``journal_group_bytes_max`` to keep groups bounded.
        ``ledger_id`` is its reply lane and ``others`` the other ledgers its records hold; without
        the ledger, the lane is read from the run's first record and the others are unknown."""
        if not self._accepts(callback):
            return
        if ledger_id == NO_LEDGER:
            lane, known = queued_lane(parts), None
        else:
            lane, known = (ledger_id, max(1, len(parts) // 2)), NO_OTHERS if others is None else others
        now_ns, pending = self._clock.monotonic_ns(), bool(self._queue) or bool(self._inflight)
        self._arrived(now_ns, pending, self._queue_run(parts, size, callback, lane, known, now_ns))

    def submit_runs(self, runs: Sequence[Run]) -> None:
        """Queue several runs (``submit_run`` each: ``(parts, size, callback, ledger, records,
        other ledgers)``), in order, as one submission: one arrival for the group wait, one look
        at the room and one wake. Each run keeps its own callback and its ledger's reply lane."""
        if not runs or not self._accepts_all(runs):
            return
        now_ns, pending = self._clock.monotonic_ns(), bool(self._queue) or bool(self._inflight)
        lone = False
        for parts, size, callback, ledger, records, others in runs:
            if self._queue_run(parts, size, callback, (ledger, records), others, now_ns):
                lone = True
        self._arrived(now_ns, pending, lone)

    def _accepts(self, callback: Callback) -> bool:
        if self.status is not JournalStatus.RUNNING:
            callback(self._failure or ClosedError(f"journal is {self.status.value}"))
            return False
        return True

    def _accepts_all(self, runs: Sequence[Run]) -> bool:
        if self.status is not JournalStatus.RUNNING:
            error = self._failure or ClosedError(f"journal is {self.status.value}")
            for run in runs:
                run[2](error)
            return False
        return True

    def _queue_run(self, parts: list[Bytes], size: int, callback: Callback, lane: tuple[int, int],
                   others: AbstractSet[int] | None, now_ns: int) -> bool:
        """Queue one run; whether it is lone. ``others`` (None: unknown) are counted while it is queued."""
        if others is None or others:  # a run of several ledgers: counted under each while queued
            self._load.queued_mixed(id(parts), others)
        return self._queue_item(parts, size, callback, lane, now_ns)

    def _queue_item(self, record: journal_express.Queued, size: int, callback: Callback, lane: tuple[int, int],
                    now_ns: int) -> bool:
        """Queue one item; whether it is lone (``journal_express``)."""
        answered_early = breaks.active(_ACK_BEFORE_FSYNC)
        if answered_early:  # negative control only (faults/breaks.py):
            callback(None)  # answer when queued, before the write
            callback = _answered
        self._queue.append((record, size, callback, now_ns, lane))
        self._queued_bytes += size
        ledger = lane[0]
        lone = self._load.queued(ledger, lane[1])
        if ledger != self._last_ledger:
            self._other_ledger, self._other_queued_ns = self._last_ledger, self._last_queued_ns
        self._last_ledger, self._last_queued_ns = ledger, now_ns
        # Alone in the queue, and another ledger queued an item lately (that item is in a group).
        # Not for a record the break answered early: its group starting in this very call (inline,
        # synced before the early answer reaches a client) would close the loss window the
        # negative control exists to show (``tests/chaos/test_chaos_run.py``: no loss in 3 of 7
        # runs with it, session 20).
        self._lone_after_other = (not answered_early and lone and len(self._queue) == 1
                                  and self._other_ledger != NO_LEDGER
                                  and now_ns - self._other_queued_ns <= OTHERS_ACTIVE_NS)
        return lone

    def _arrived(self, now_ns: int, pending: bool, lone: bool) -> None:
        """One submission was queued at ``now_ns`` (``pending``: something was queued or in flight
        before it; ``lone``: it holds a lone item): the group wait hears of it, the room is
        checked, and the journal looks for work only if a group can start now: a grouping
        journal by its timer or once its wait gained what the arrivals promise
        (``journal_wait``), one waiting for a free slot from the completion that frees it (a lone
        record: the express slot). A lone record queued alone while another ledger is at work
        starts its express group from here (``_lone_now``)."""
        self._arrivals += 1
        self._wait_policy.arrived(now_ns, pending)
        if self._queued_bytes >= self._queue_bytes_max:
            self._room.clear()
        if lone and self._lone_now():
            self._start_lone_now()
        if (timer := self._timer) is not None and self._wait_policy.gained_enough(
                self._arrivals - self._wait_arrivals, self._queued_bytes):
            timer.cancel()
            self._waited()
        elif len(self._inflight) - self._express_inflight < self._groups_in_flight_max:
            if not self._grouping:
                self._wake()
        elif lone and self._express_inflight < self.express_groups_max:
            self._wake()

    def _lone_now(self) -> bool:
        """Whether the lone item just queued goes in an express group now, from its submission
        (``start_lone``, the writing side's: if it can start a group from here): it is alone in
        the queue, another ledger queued an item lately (``OTHERS_ACTIVE_NS``; the item before it
        may be its own ledger's previous add) and the express slot is free. Otherwise
        the look at the loop pass's end takes it with the other ledgers' adds read in the rest of
        that pass (a synchronous producer beside a busy one waited p50 1.4 ms for them in pure
        Python, the disk idle: docs/performance.md, session 20)."""
        return (self.lone_starts_at_submit and self._lone_after_other and self.lone_goes_at_once
                and self._express_inflight < self.express_groups_max)

    def _wake(self) -> None:
        """Schedule one look for the next loop pass (the adds of this pass join its group)."""
        if self._look_due or self._loop is None or self.status is not JournalStatus.RUNNING:
            return
        self._look_due = True
        self._loop.call_soon(self._look_soon)

    async def append(self, record: Record) -> None:
        """Queue ``record`` and return once it is durable."""
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()

        def _done(error: BaseException | None) -> None:
            if future.done():
                return
            if error is None:
                future.set_result(None)
            else:
                future.set_exception(error)

        self.submit(record, _done)
        await future

    async def wait_for_room(self) -> None:
        """Backpressure: wait while the queue holds ``journal_queue_bytes_max`` or more."""
        await self._room.wait()

    def _take_group(self, express: bool) -> journal_express.Taken:
        """The queue's head up to ``journal_group_bytes_max``, or its lone records (express)."""
        if express:
            taken = journal_express.take_lone(self._queue, self._load)
        else:
            taken = journal_express.take_group(self._queue, self._group_bytes_max, self._load)
        self._queued_bytes -= taken[3]
        if self._queued_bytes < self._queue_bytes_max:
            self._room.set()
        return taken

    def _wait_for_group(self) -> bool:
        """Group commit at a modest rate: when the arrivals say more adds are coming
        (``journal_wait``), a timer of the ``Clock`` (real, simulated or a test's manual time)
        for when the oldest queued record is ``journal_group_wait_ms_max`` old, so the adds that
        arrive meanwhile share the group's write and sync (a submission does not wake a grouping
        journal); whether it set one. Records that already waited that long go at once."""
        if self._wait_policy.bound_ns == 0 or self._queued_bytes >= self._group_bytes_max:
            return False
        wait_ns = self._wait_policy.wait_ns(self._clock.monotonic_ns(), self._queue[0][3])
        if wait_ns <= 0 or self._loop is None:
            return False
        self.waits_count += 1
        self._wait_arrivals = self._arrivals
        self._grouping = True
        self._timer = self._clock.call_later(wait_ns / 1e9, self._waited)
        return True

    def _lone_beside_wait(self) -> bool:
        """A group wait just began: whether its lone records go now, in an express group beside it.
        Only beside another group in flight: the adds the wait gathers are then a busy ledger's,
        and a light ledger's add would pay the wait for them (docs/performance.md, session 15,
        isolation); in an express group it takes no ordinary slot from the busy ledger. One
        producer's stream (e2e) keeps its waits: while its previous add is in flight, its next
        one is not lone."""
        return (self.lone_goes_at_once and bool(self._inflight) and self._express_inflight < self.express_groups_max
                and journal_express.has_lone(self._queue, self._load))

    def _waited(self) -> None:
        self._timer = None
        self._grouping = False
        # Fruitless: no submission arrived during the wait. The records queued before it do not count: a burst
        # handed over in one pass (a ledger's window of adds) is all until its acks: waiting only delays it.
        self._wait_policy.waited(self._arrivals > self._wait_arrivals)
        # The group starts from the next loop pass, not from this timer callback: that pass polls
        # the sockets first, and the adds it reads join the group (started from here, groups
        # were ~25% smaller at 2,000 adds/s: more groups, more CPU; docs/performance.md).
        self._waited_due = True
        self._wake()

    def _fail_queued(self, error: BaseException) -> None:
        """Answer every queued record with ``error`` (the journal failed or stopped)."""
        while self._queue:
            callback = self._queue.popleft()[2]
            callback(error)
        self._queued_bytes = 0
        self._room.set()

    def _stop_driver(self) -> None:
        """No group starts any more: the group-wait timer is cancelled (a look already
        scheduled finds the journal no longer running)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._grouping = False

    async def _drain(self) -> None:
        # An empty marker record: its callback runs once every record queued before it is
        # durable (its group synced after theirs); ``stop`` then answers those still in the lanes.
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()

        def _done(_error: BaseException | None) -> None:
            if not future.done():
                future.set_result(None)

        self._queue.append((b"", 0, _done, self._clock.monotonic_ns(), (NO_LEDGER, 1)))
        self._wake()
        await future
