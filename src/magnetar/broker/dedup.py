"""Message deduplication per producer name, persisted in the topic's ``pulsar.dedup`` cursor.

What is true:
* ``highest`` maps a producer name to the highest sequence id *persisted* on this topic by a
  producer of that name (a batch counts its highest id: ``highest_sequence_id`` if stored, else
  first + messages - 1; of a chunked message only the last chunk counts). Only ids that are really
  in the log count, which is what the 4.2.0 client's sequence-id reuse quirk needs (fact sheet §4).
* Persistence is Pulsar's: the dedup cursor's mark-delete position P and its properties
  ``{producer_name: highest}`` are written together (a *snapshot*) every ``snapshot_interval``
  persisted entries and on close. The map of a snapshot covers every entry at or before P (P is
  the low watermark of appends: every append started before the one at P has finished).
* Recovery (``ready``, before the first producer is admitted): read the snapshot, then replay the
  stored metadata of every entry after P. So a broker killed with -9 loses no sequence id that was
  persisted, whether or not its last snapshot made it.
* A SEND whose sequence id is at or below ``highest`` is a duplicate (answered with a (-1,-1)
  receipt by the producer). One above ``highest`` but at or below an id still being appended for
  that name (``pushed``: a resend after a reconnect overtaking the original) is *unknown*: the
  caller waits for those appends (``wait_in_flight``) and asks again.
* Reporting only persisted ids is not enough for that quirk: a resend no broker had stored carries
  id L+1 (L = the reported last_sequence_id) and so does the re-based client's next new message.
  The producer (``Producer._reused_after_rebase``) recognises such a reconnected session and does
  not ask ``check`` about the new messages' reused ids (docs/elastic.md, "2 values lost").
* At most ``BROKER_DEDUP_PRODUCER_NAMES_COUNT_MAX`` names are kept (oldest update forgotten).

* After a failed write (``rebuild``, called by the blocked topic once every append started has
  ended and the log has settled the failure): READY -> NEW, then recovery as above. ``highest``
  then holds exactly the ids the log holds: an id of a failed append is in it iff its entry landed.
  ``pushed`` is empty then (no append in flight): Pulsar's ``resetHighestSequenceIdPushed``.
* Invariant the write path keeps for this to be right: the entries of one producer name are stored
  in send order (the managed ledger never stores an add after one that failed to its caller), so
  the highest persisted id covers every lower id that producer sent.

States (one enum): NEW -> RECOVERING -> READY; READY/NEW -> DISABLED when the switch is off at a
``ready`` (the cursor is deleted so it holds no ledgers back), DISABLED -> RECOVERING when it is on
again; READY -> NEW on ``rebuild``; any -> CLOSED. The switch is one callable (``enabled``), by default ``config.deduplication``
(off under the ``no-dedup`` negative control, ``MAGNETAR_BREAK``).
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
from collections.abc import Callable

from magnetar.base.errors import CorruptDataError
from magnetar.base.fifo import fifo_advance
from magnetar.base.invariant import invariant
from magnetar.base.limits import (
    BROKER_DEDUP_PRODUCER_NAMES_COUNT_MAX,
    BROKER_DEDUP_REPLAY_READ_COUNT,
    BROKER_DEDUP_SNAPSHOT_INTERVAL_ENTRIES,
)
from magnetar.base.types import Position
from magnetar.broker.config import BrokerConfig
from magnetar.broker.log import SubscriptionCursor, TopicLog
from magnetar.faults import breaks
from magnetar.protocol.pulsar import message_count, pb, stored_entry_metadata

log = logging.getLogger(__name__)

DEDUP_CURSOR_NAME = "pulsar.dedup"  # Pulsar's name; not a subscription (admin listings leave it out)
#: Geo-replication's cursors: ``pulsar.repl.<remote cluster>`` (one per replicator, Pulsar's name)
#: and ``pulsar.repl.dedup`` (the receiving side's deduplication by source position).
REPLICATION_CURSOR_PREFIX = "pulsar.repl."
REPL_DEDUP_CURSOR_NAME = "pulsar.repl.dedup"


def is_system_cursor(name: str) -> bool:
    """Cursors the broker keeps for itself, which are not subscriptions."""
    return name == DEDUP_CURSOR_NAME or name.startswith(REPLICATION_CURSOR_PREFIX)


ReplayKey = Callable[[pb.MessageMetadata], "tuple[str, int] | None"]


class DedupStatus(enum.Enum):
    NOT_DUPLICATE = "not_duplicate"
    DUPLICATE = "duplicate"
    UNKNOWN = "unknown"  # an append of an id at least this high is in flight for that name


class DedupState(enum.Enum):
    NEW = "new"
    RECOVERING = "recovering"
    READY = "ready"
    DISABLED = "disabled"
    CLOSED = "closed"


_TRANSITIONS = {
    (DedupState.NEW, DedupState.RECOVERING),
    (DedupState.NEW, DedupState.DISABLED),
    (DedupState.RECOVERING, DedupState.READY),
    (DedupState.RECOVERING, DedupState.NEW),  # recovery failed: the next producer tries again
    (DedupState.READY, DedupState.DISABLED),
    (DedupState.READY, DedupState.NEW),  # rebuild after a failed write
    (DedupState.DISABLED, DedupState.RECOVERING),
    *((state, DedupState.CLOSED) for state in DedupState),
}


def entry_highest_sequence(metadata: pb.MessageMetadata) -> int | None:
    """The highest sequence id a stored entry persisted, None for a chunk that is not the last."""
    if metadata.HasField("num_chunks_from_msg") and metadata.chunk_id != metadata.num_chunks_from_msg - 1:
        return None
    if metadata.HasField("highest_sequence_id") and metadata.highest_sequence_id >= metadata.sequence_id:
        return metadata.highest_sequence_id
    return metadata.sequence_id + max(1, message_count(metadata)) - 1


class DedupAppend:
    """One append in flight, in the order appends were started (``begin``). A plain class, one per
    message (compiled, a dataclass's ``__init__`` runs interpreted; docs/performance.md, session 13)."""

    __slots__ = ("done", "finished", "highest_sequence_id", "position", "producer_name", "records_sequence")

    def __init__(self, producer_name: str, highest_sequence_id: int, records_sequence: bool) -> None:
        self.producer_name = producer_name
        self.highest_sequence_id = highest_sequence_id
        self.records_sequence = records_sequence
        self.position: Position | None = None
        self.done = False
        self.finished: asyncio.Event | None = None  # made only when someone waits (a racing resend)


class MessageDeduplication:
    def __init__(self, topic_log: TopicLog, config: BrokerConfig, *,
                 enabled: Callable[[], bool] | None = None,
                 snapshot_interval: int = BROKER_DEDUP_SNAPSHOT_INTERVAL_ENTRIES,
                 cursor_name: str = DEDUP_CURSOR_NAME, replay_key: ReplayKey | None = None,
                 negative_control: breaks.Break = breaks.Break.NO_DEDUP) -> None:
        """``cursor_name``, ``replay_key`` and ``negative_control`` make another instance with the
        same mechanism: geo-replication's deduplication by source position keys the map by source
        cluster, recovers it from the entries' ``replicated_from`` and source-position property
        (``replay_key(metadata)`` -> (key, value) or None) and persists it in its own cursor."""
        invariant(snapshot_interval >= 1, "snapshot interval is at least one entry")
        self._cursor_name = cursor_name
        self._replay_key = replay_key
        self._negative_control = negative_control
        self._log = topic_log
        self._enabled = enabled if enabled is not None else (lambda: config.deduplication)
        self._snapshot_interval = snapshot_interval
        self._state = DedupState.NEW
        self._cursor: SubscriptionCursor | None = None
        self.highest: dict[str, int] = {}
        self._pushed: dict[str, int] = {}  # name -> highest id of an append in flight
        self._in_flight_by_name: dict[str, int] = {}  # name -> appends in flight
        # ``_in_flight[_in_flight_head:]``, in the order started (base/fifo.py: no deque per idle topic).
        self._in_flight: list[DedupAppend] = []
        self._in_flight_head = 0
        self._safe: Position | None = None  # every append started up to the one here has finished
        self._since_snapshot = 0
        self._snapshot_task: asyncio.Task[None] | None = None
        # Made while a ``ready`` or ``rebuild`` runs or waits, dropped when none does (``_enter``).
        self._lock: asyncio.Lock | None = None
        self._lock_users = 0
        # Made only while someone waits for the appends in flight to end (not per topic: an Event
        # holds a 64-slot deque, ~0.7 KiB, and 100,000 topics kept one each; issue 22).
        self._idle: asyncio.Event | None = None
        self.snapshots_taken = 0
        self.rebuilds = 0

    @property
    def state(self) -> DedupState:
        return self._state

    def _move(self, new: DedupState) -> None:
        invariant((self._state, new) in _TRANSITIONS, f"dedup state {self._state} -> {new}")
        self._state = new

    @property
    def active(self) -> bool:
        return self._state is DedupState.READY

    # --- recovery -------------------------------------------------------------------------------

    def _enter(self) -> asyncio.Lock:
        """The lock that keeps one ``ready`` or ``rebuild`` at a time, in arrival order; made for
        the first user, dropped by ``_leave`` of the last (an idle topic holds none)."""
        if self._lock is None:
            self._lock = asyncio.Lock()
        self._lock_users += 1
        return self._lock

    def _leave(self) -> None:
        self._lock_users -= 1
        if not self._lock_users:
            self._lock = None

    async def ready(self) -> None:
        """Recover (first call) or follow the switch; call before admitting a producer."""
        lock = self._enter()
        try:
            async with lock:
                await self._follow_switch()
        finally:
            self._leave()

    async def _follow_switch(self) -> None:
        enabled = self._enabled() and not breaks.active(self._negative_control)
        if self._state in (DedupState.NEW, DedupState.DISABLED) and enabled:
            self._move(DedupState.RECOVERING)
            try:
                await self._recover()
            except BaseException:
                self._move(DedupState.NEW)
                raise
            self._move(DedupState.READY)
        elif self._state in (DedupState.NEW, DedupState.READY) and not enabled:
            await self._disable()

    async def _recover(self) -> None:
        cursor = await self._log.open_cursor(self._cursor_name, durable=True,
                                             initial_mark_delete=self._log.last_position)
        self._cursor = cursor
        self.highest = dict(cursor.properties)
        start = cursor.mark_delete_position.next()
        replayed = 0
        while start <= self._log.last_position:
            entries = await self._log.read(start, BROKER_DEDUP_REPLAY_READ_COUNT)
            if not entries:
                break
            for entry in entries:
                try:
                    metadata = stored_entry_metadata(entry.payload)
                except CorruptDataError as error:
                    log.error("dedup replay: unreadable entry %s on %s: %s", entry.position, self._log.name, error)
                    continue
                if self._replay_key is not None:
                    found = self._replay_key(metadata)
                    if found is not None:
                        self._record(*found)
                    continue
                highest = entry_highest_sequence(metadata)
                if highest is not None:
                    self._record(metadata.producer_name, highest)
            replayed += len(entries)
            start = entries[-1].position.next()
        self._safe = self._log.last_position
        self._since_snapshot = replayed
        if replayed:
            log.info("dedup of %s: replayed %d entries after the snapshot at %s", self._log.name, replayed,
                     cursor.mark_delete_position)

    async def rebuild(self) -> None:
        """Recompute the map from the snapshot and the log (after a failed write; see the module
        docstring). Call only when no append is in flight (``wait_appends_finished``)."""
        lock = self._enter()
        try:
            async with lock:
                invariant(not self._in_flight, "dedup is rebuilt with no append in flight")
                if self._state is DedupState.READY:
                    self._move(DedupState.NEW)
                    self._pushed.clear()
                    self.rebuilds += 1
        finally:
            self._leave()
        await self.ready()

    async def wait_appends_finished(self) -> None:
        """Return once every append registered with ``begin`` has ended (``finish``)."""
        if not self._in_flight:
            return
        if self._idle is None:
            self._idle = asyncio.Event()
        await self._idle.wait()

    async def _disable(self) -> None:
        self._move(DedupState.DISABLED)
        await self._stop_snapshots()
        self.highest.clear()
        self._cursor = None
        if self._cursor_name in self._log.cursor_names():
            await self._log.delete_cursor(self._cursor_name)

    # --- the producer's questions ---------------------------------------------------------------

    def last_sequence_id(self, producer_name: str) -> int:
        """What PRODUCER_SUCCESS reports: the highest id persisted for the name, -1 if none (or off)."""
        return self.highest.get(producer_name, -1) if self.active else -1

    def check(self, producer_name: str, sequence_id: int) -> DedupStatus:
        if not self.active:
            return DedupStatus.NOT_DUPLICATE
        if sequence_id <= self.highest.get(producer_name, -1):
            return DedupStatus.DUPLICATE
        if sequence_id <= self._pushed.get(producer_name, -1):
            return DedupStatus.UNKNOWN
        return DedupStatus.NOT_DUPLICATE

    async def wait_in_flight(self, producer_name: str, sequence_id: int) -> None:
        """Wait until no append of ``producer_name`` with an id >= ``sequence_id`` is in flight."""
        for append in [a for a in self._in_flight[self._in_flight_head:]
                       if a.producer_name == producer_name and a.highest_sequence_id >= sequence_id]:
            if append.done:
                continue
            if append.finished is None:
                append.finished = asyncio.Event()
            await append.finished.wait()

    # --- appends --------------------------------------------------------------------------------

    def begin(self, producer_name: str, highest_sequence_id: int, *, records_sequence: bool = True) -> DedupAppend:
        """Register an append about to start; call in the order appends are started."""
        append = DedupAppend(producer_name, highest_sequence_id, records_sequence)
        self._in_flight.append(append)
        self._in_flight_by_name[producer_name] = self._in_flight_by_name.get(producer_name, 0) + 1
        if records_sequence and highest_sequence_id > self._pushed.get(producer_name, -1):
            self._pushed[producer_name] = highest_sequence_id
        return append

    def finish(self, append: DedupAppend, position: Position | None) -> None:
        """The append ended: at ``position``, or failed (None). Records its id if it persisted."""
        append.position = position
        append.done = True
        if position is not None and append.records_sequence:
            self._record(append.producer_name, append.highest_sequence_id)
        while self._in_flight and self._in_flight[self._in_flight_head].done:
            head = self._in_flight[self._in_flight_head]
            self._in_flight_head = fifo_advance(self._in_flight, self._in_flight_head)
            done_at = head.position
            if done_at is not None:
                if self._safe is None or done_at > self._safe:  # Position's own comparison, not ``max``'s generic one
                    self._safe = done_at
                self._since_snapshot += 1
        if not self._in_flight and self._idle is not None:
            self._idle.set()
            self._idle = None
        name = append.producer_name
        left = self._in_flight_by_name[name] - 1
        if left:
            self._in_flight_by_name[name] = left
        else:
            del self._in_flight_by_name[name]
            self._pushed.pop(name, None)
        if append.finished is not None:
            append.finished.set()
        if self.active and self._since_snapshot >= self._snapshot_interval:
            self._start_snapshot()

    def _record(self, producer_name: str, highest_sequence_id: int) -> None:
        table = self.highest
        previous = table.pop(producer_name, -1)
        table[producer_name] = max(previous, highest_sequence_id)
        while len(table) > BROKER_DEDUP_PRODUCER_NAMES_COUNT_MAX:
            del table[next(iter(table))]

    # --- snapshots ------------------------------------------------------------------------------

    def _start_snapshot(self) -> None:
        if self._snapshot_task is not None and not self._snapshot_task.done():
            return  # the running one is followed by another if entries keep coming
        self._snapshot_task = asyncio.get_running_loop().create_task(self._snapshot_loop(),
                                                                     name=f"dedup-snapshot:{self._log.name}")

    async def _snapshot_loop(self) -> None:
        while self.active and self._since_snapshot >= self._snapshot_interval:
            try:
                await self.take_snapshot()
            except Exception as error:  # bookies or metadata down: the next interval tries again
                log.warning("dedup snapshot of %s failed: %s", self._log.name, error)
                return

    async def take_snapshot(self) -> None:
        """Persist (low watermark, map) in the dedup cursor now."""
        cursor, safe = self._cursor, self._safe
        if cursor is None or safe is None or not self.active:
            return
        counted = self._since_snapshot
        position = safe if safe.entry_id >= 0 else cursor.mark_delete_position
        await cursor.mark_delete(max(position, cursor.mark_delete_position), dict(self.highest))
        self._since_snapshot = max(0, self._since_snapshot - counted)
        self.snapshots_taken += 1

    async def _stop_snapshots(self) -> None:
        task, self._snapshot_task = self._snapshot_task, None
        if task is not None and not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def close(self) -> None:
        """Take a last snapshot (so the next owner replays little), then stop."""
        if self._state is DedupState.CLOSED:
            return
        task = self._snapshot_task
        if task is not None and not task.done():
            with contextlib.suppress(Exception):
                await task
        if self.active and self._since_snapshot and not self._in_flight:
            try:
                await self.take_snapshot()
            except Exception as error:
                log.warning("final dedup snapshot of %s failed: %s", self._log.name, error)
        self._move(DedupState.CLOSED)
