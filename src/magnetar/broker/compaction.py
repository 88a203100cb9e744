"""Topic compaction: the latest message of each key, kept in a compacted ledger (Pulsar's model).

A compaction (``TopicCompaction.start``, at most one at a time per topic) reads the topic's
*compacted view* (``CompactedView``: the previous compacted ledger up to its horizon, then the
topic after it) from the start to ``end``, the last position when it began, twice:

1. **Pass 1** records, for each key, the id of its latest message (position and batch index).
   A message whose payload is empty or whose metadata says ``null_value`` is a *tombstone*: its
   key is forgotten.
2. **Pass 2** reads the same range again and writes the survivors, in order, to a NEW ledger
   (``CompactedLedgers``; the topic's quorum settings): a message survives if it has no key
   (keyless messages are kept, as Pulsar keeps them) or is its key's latest and not a tombstone.
   Chunks of a chunked message are kept as keyless messages are; an encrypted batch is judged
   as one message by the entry's key (the broker cannot read inside it). A batch is rewritten
   with only its surviving messages (same entry position, the batch
   metadata kept, compressed again with its codec); a batch with no survivor is left out. The
   official client (3.x, C++ core) does not skip ``compacted_out`` messages, Java-style markers
   would reach applications as empty messages: so a surviving message of a rewritten batch has
   its entry's ledger and entry id and its index *within the rewritten batch*, the id a client
   reading the compacted data acknowledges and seeks with (entry-level acks, the client default,
   are exact; batch-index acks of a rewritten batch are not supported).
3. The new ledger is sealed, then **recorded**: the ``__compaction`` durable cursor is moved to
   ``end`` (the *horizon*) with the property ``CompactedTopicLedger`` = the ledger's id, in one
   cursor write. Being a durable cursor at the horizon, it also keeps the topic's data above the
   horizon from being trimmed.
4. Only then is the previous compacted ledger deleted.

Crash safety: a crash before step 3 leaves the previous ledger and horizon recorded (the new
ledger is an orphan that only wastes space); a crash between 3 and 4 leaves the new ones recorded
(the previous ledger is the orphan). Either way a ``read_compacted`` reader sees each key's
latest value exactly once. The fault points ``broker.compaction.after_write_before_record`` and
``broker.compaction.after_record_before_delete`` sit at those two moments.

Consumers with ``read_compacted`` (Exclusive and Failover subscriptions of persistent topics, as
Pulsar allows) dispatch through a ``CompactedView``: below the horizon they read the compacted
ledger, above it the topic; with no compaction recorded, or its ledger missing, the topic. Entries
of the compacted ledger carry their topic position, so acks and seeks use topic positions.

Automatic compaction: ``check_threshold`` starts one when the bytes stored after the horizon exceed
the ``compactionThreshold`` policy (topic, else namespace; 0 or unset: never), called from the
broker's periodic policy pass (the injected clock paces it).

Bounds: ``COMPACTION_KEYS_COUNT_MAX`` keys per compaction (beyond: the compaction fails with
``LimitExceededError``), ``COMPACTION_READ_COUNT_MAX`` entries per read, ``COMPACTED_POSITION_HINTS_COUNT_MAX``
remembered (position -> compacted entry id) lookups per topic.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from magnetar import faults
from magnetar.base.entry import Entry
from magnetar.base.errors import LimitExceededError, NotFoundError
from magnetar.base.types import EARLIEST, Position, TopicName
from magnetar.broker.compacted_ledgers import (
    CompactedLedgers,
    CompactedReader,
    decode_compacted,
    encode_compacted,
)
from magnetar.broker.consumer import SubType
from magnetar.broker.errors import BrokerError
from magnetar.broker.ids import before
from magnetar.broker.log import AppendCallback, StorageStats, SubscriptionCursor, TopicLog
from magnetar.protocol.pulsar import pb
from magnetar.protocol.pulsar.batch import NONE, decode_entry, encode_entry, is_batch
from magnetar.protocol.pulsar.frames import headers_and_payload
from magnetar.protocol.pulsar.stored import split_stored_entry

log = logging.getLogger(__name__)

COMPACTION_CURSOR_NAME = "__compaction"
COMPACTED_LEDGER_PROPERTY = "CompactedTopicLedger"
AFTER_WRITE_POINT = "broker.compaction.after_write_before_record"
AFTER_RECORD_POINT = "broker.compaction.after_record_before_delete"

#: Distinct keys one compaction may track (pass 1 holds each key's latest id in memory).
COMPACTION_KEYS_COUNT_MAX = 5_000_000
#: Entries per read while compacting.
COMPACTION_READ_COUNT_MAX = 1_000
#: (topic position -> compacted entry id) lookups remembered per topic, so that consecutive reads
#: of a compacted ledger do not binary-search it again.
COMPACTED_POSITION_HINTS_COUNT_MAX = 65_536


class CompactionStatus(enum.Enum):
    NOT_RUN = "NOT_RUN"
    RUNNING = "RUNNING"
    SUCCESS = "SUCCESS"
    ERROR = "ERROR"


_TRANSITIONS = {
    (CompactionStatus.NOT_RUN, CompactionStatus.RUNNING),
    (CompactionStatus.SUCCESS, CompactionStatus.RUNNING),
    (CompactionStatus.ERROR, CompactionStatus.RUNNING),
    (CompactionStatus.RUNNING, CompactionStatus.SUCCESS),
    (CompactionStatus.RUNNING, CompactionStatus.ERROR),
}


class CompactionRunningError(BrokerError):
    def __init__(self, topic: str) -> None:
        super().__init__(pb.NotAllowedError, f"compaction of {topic} is already in progress")


@runtime_checkable
class HasCompactedLedgers(Protocol):
    """A topic log that can store compacted ledgers (both ``TopicLog`` implementations can)."""

    @property
    def compacted_ledgers(self) -> CompactedLedgers: ...


@dataclass(frozen=True, slots=True)
class CompactedState:
    ledger_id: int
    horizon: Position  # the last topic position the compacted ledger covers


@dataclass(frozen=True, slots=True)
class _Message:
    index: int  # batch index, -1 for a message that is not in a batch
    key: str | None
    tombstone: bool
    compacted_out: bool


def _opaque(metadata: pb.MessageMetadata) -> bool:
    """An entry compaction keeps or drops whole: an encrypted batch (its messages cannot be read
    without the key) or a chunk of a chunked message."""
    return (is_batch(metadata) and len(metadata.encryption_keys) > 0) or metadata.num_chunks_from_msg > 1


def _messages(data: bytes) -> list[_Message]:
    metadata, payload = split_stored_entry(data)
    if metadata.num_chunks_from_msg > 1:
        return [_Message(-1, None, False, False)]  # chunks are kept (one chunk is not a value)
    if not is_batch(metadata) or _opaque(metadata):
        key = metadata.partition_key if metadata.HasField("partition_key") else None
        empty = (metadata.uncompressed_size == 0) if metadata.compression != NONE else len(payload) == 0
        return [_Message(-1, key, metadata.null_value or empty, False)]
    out = []
    for index, single in enumerate(decode_entry(metadata, payload)):
        md = single.metadata
        assert md is not None
        key = md.partition_key if md.HasField("partition_key") else None
        out.append(_Message(index, key, md.null_value or not single.payload, md.compacted_out))
    return out


def _survivor(entry: Entry, latest: dict[str, tuple[Position, int]]) -> bytes | None:
    """The entry as the compacted ledger keeps it, or None if nothing of it survives."""
    position = entry.position
    metadata, payload = split_stored_entry(entry.payload)
    if not is_batch(metadata) or _opaque(metadata):
        message = _messages(entry.payload)[0]
        if message.key is None or (not message.tombstone and latest.get(message.key) == (position, -1)):
            return entry.payload
        return None
    singles = decode_entry(metadata, payload)
    parts: list[tuple[pb.SingleMessageMetadata, bytes]] = []
    for index, single in enumerate(singles):
        md = single.metadata
        assert md is not None
        key = md.partition_key if md.HasField("partition_key") else None
        tombstone = md.null_value or not single.payload
        if not md.compacted_out and (key is None or (not tombstone and latest.get(key) == (position, index))):
            parts.append((md, single.payload))
    if not parts:
        return None
    if len(parts) == len(singles):
        return entry.payload
    base = pb.MessageMetadata()
    base.CopyFrom(metadata)
    base.ClearField("compression")
    base.ClearField("uncompressed_size")
    new_metadata, new_payload = encode_entry(base, messages=parts, codec=metadata.compression)
    return headers_and_payload(new_metadata, new_payload)


class TopicCompaction:
    """One topic's compaction state: status, the recorded compacted ledger, readers of it."""

    def __init__(self, topic_log: TopicLog) -> None:
        self._log = topic_log
        self._ledgers: CompactedLedgers | None = (
            topic_log.compacted_ledgers if isinstance(topic_log, HasCompactedLedgers) else None)
        self._status = CompactionStatus.NOT_RUN
        self.last_error: str | None = None
        self._state: CompactedState | None = None
        self._loaded = False
        self._loaded_version = 0  # the log's compaction_version when the state was read
        self._load_lock_made: asyncio.Lock | None = None  # made by the first load (most topics never read one)
        self._task: asyncio.Task[None] | None = None
        self._reader: tuple[int, CompactedReader] | None = None
        self._hints: dict[Position, int] = {}  # topic position -> first compacted entry id at or after it
        self._hints_ledger = -1
        #: Told when a compaction ends (tests, metrics); called with the final status.
        self.on_done: Callable[[CompactionStatus], None] | None = None

    # --- status ---------------------------------------------------------------------------------

    @property
    def status(self) -> CompactionStatus:
        return self._status

    def _move(self, new: CompactionStatus) -> None:
        if (self._status, new) not in _TRANSITIONS:
            raise BrokerError(pb.UnknownError, f"compaction status {self._status.value} -> {new.value}")
        self._status = new

    @property
    def _load_lock(self) -> asyncio.Lock:
        if self._load_lock_made is None:
            self._load_lock_made = asyncio.Lock()
        return self._load_lock_made

    @property
    def supported(self) -> bool:
        return self._ledgers is not None

    async def state(self) -> CompactedState | None:
        """The recorded compacted ledger and horizon (read from the ``__compaction`` cursor once;
        again whenever a log that follows another broker's compactions says they changed: a
        read-only broker's ``compaction_version``, broker/read_only.py)."""
        version = getattr(self._log, "compaction_version", 0)
        if self._loaded and version == self._loaded_version:
            return self._state
        async with self._load_lock:
            if self._loaded and version != self._loaded_version:
                self._loaded, self._state = False, None  # the owner compacted again: read it anew
            self._loaded_version = version
            if not self._loaded:
                if COMPACTION_CURSOR_NAME in self._log.cursor_names():
                    cursor = await self._cursor()
                    ledger_id = cursor.properties.get(COMPACTED_LEDGER_PROPERTY)
                    if ledger_id is not None:
                        self._state = CompactedState(ledger_id, cursor.mark_delete_position)
                self._loaded = True
        return self._state

    async def _cursor(self) -> SubscriptionCursor:
        return await self._log.open_cursor(COMPACTION_CURSOR_NAME, durable=True, initial_mark_delete=EARLIEST)

    # --- running --------------------------------------------------------------------------------

    def start(self) -> asyncio.Task[None]:
        """Start a compaction in the background; ``CompactionRunningError`` if one is in progress."""
        if self._ledgers is None:
            raise BrokerError(pb.NotAllowedError, f"topic {self._log.name} cannot be compacted")
        if getattr(self._ledgers, "read_only", False):
            raise BrokerError(pb.NotAllowedError, f"topic {self._log.name} is served read-only here: "
                              "compact it on its owner")
        if self._status is CompactionStatus.RUNNING:
            raise CompactionRunningError(self._log.name)
        self._move(CompactionStatus.RUNNING)
        self.last_error = None
        self._task = asyncio.get_running_loop().create_task(self._run(), name=f"compaction:{self._log.name}")
        return self._task

    async def _run(self) -> None:
        try:
            await self._compact()
        except asyncio.CancelledError:
            self._move(CompactionStatus.ERROR)
            self.last_error = "compaction was cancelled (topic unloaded)"
            raise
        except Exception as error:
            log.warning("compaction of %s failed: %s", self._log.name, error)
            self._move(CompactionStatus.ERROR)
            self.last_error = f"{type(error).__name__}: {error}"
        else:
            self._move(CompactionStatus.SUCCESS)
        finally:
            if self.on_done is not None:
                self.on_done(self._status)

    async def check_threshold(self, threshold_bytes: int) -> bool:
        """Start a compaction if more than ``threshold_bytes`` (> 0) are stored after the horizon."""
        if threshold_bytes <= 0 or self._ledgers is None or self._status is CompactionStatus.RUNNING:
            return False
        if getattr(self._ledgers, "read_only", False):  # a read-only broker: the owner compacts
            return False
        state = await self.state()
        after = state.horizon if state is not None else EARLIEST
        if self._log.backlog_bytes(after) <= threshold_bytes:
            return False
        self.start()
        return True

    async def _scan(self, view: CompactedView, end: Position) -> AsyncIterator[Entry]:
        start = EARLIEST
        while True:
            entries = await view.read(start, COMPACTION_READ_COUNT_MAX)
            for entry in entries:
                if entry.position > end:
                    return
                yield entry
            if not entries or entries[-1].position >= end:
                return
            start = entries[-1].position.next()

    async def _compact(self) -> None:
        ledgers = self._ledgers
        assert ledgers is not None
        previous = await self.state()
        end = self._log.last_position
        if end.entry_id < 0 or (previous is not None and end <= previous.horizon):
            return  # nothing new since the last compaction
        cursor = await self._cursor()  # a durable cursor from now on: nothing being compacted is trimmed
        view = CompactedView(self._log, self)
        latest: dict[str, tuple[Position, int]] = {}
        async for entry in self._scan(view, end):  # pass 1
            for message in _messages(entry.payload):
                if message.key is None or message.compacted_out:
                    continue
                if message.tombstone:
                    latest.pop(message.key, None)
                    continue
                latest[message.key] = (entry.position, message.index)
                if len(latest) > COMPACTION_KEYS_COUNT_MAX:
                    raise LimitExceededError("COMPACTION_KEYS_COUNT_MAX", len(latest), COMPACTION_KEYS_COUNT_MAX)
        writer = await ledgers.create()
        recording = False
        try:
            async for entry in self._scan(view, end):  # pass 2
                kept = _survivor(entry, latest)
                if kept is not None:
                    await writer.add(encode_compacted(entry.position, kept))
            await writer.close()
            await faults.point("broker.compaction.after_write_before_record")
            recording = True
            await cursor.mark_delete(end, {COMPACTED_LEDGER_PROPERTY: writer.ledger_id})
            managed = getattr(cursor, "managed_cursor", None)
            if managed is not None:  # persisted before SUCCESS: read-only brokers and a next owner see it
                await managed.flush()
        except BaseException:
            if not recording:  # never recorded: nobody will read it
                await writer.abandon()
            raise
        self._state = CompactedState(writer.ledger_id, end)
        self._loaded = True
        await faults.point("broker.compaction.after_record_before_delete")
        if previous is not None and previous.ledger_id != writer.ledger_id:
            try:
                await ledgers.delete(previous.ledger_id)
            except NotFoundError:
                pass

    async def delete_compacted_ledger(self) -> None:
        """The topic is being deleted: stop a running compaction and delete the recorded ledger."""
        await self.close()
        state = await self.state()
        if state is not None and self._ledgers is not None:
            with contextlib.suppress(NotFoundError):
                await self._ledgers.delete(state.ledger_id)

    async def close(self) -> None:
        task, self._task = self._task, None
        if task is not None and not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    # --- reading the compacted ledger -----------------------------------------------------------

    async def _open(self, ledger_id: int) -> CompactedReader:
        ledgers = self._ledgers
        assert ledgers is not None
        if self._reader is None or self._reader[0] != ledger_id:
            self._reader = (ledger_id, await ledgers.open(ledger_id))
        if self._hints_ledger != ledger_id:
            self._hints.clear()
            self._hints_ledger = ledger_id
        return self._reader[1]

    async def _position_at(self, reader: CompactedReader, entry_id: int) -> Position:
        return decode_compacted((await reader.read(entry_id, entry_id))[0])[0]

    async def _first_at_or_after(self, reader: CompactedReader, start: Position) -> int:
        hint = self._hints.get(start)
        if hint is not None:
            return hint
        low, high = 0, reader.entries_count
        while low < high:
            middle = (low + high) // 2
            if await self._position_at(reader, middle) < start:
                low = middle + 1
            else:
                high = middle
        return low

    def _remember(self, position: Position, entry_id: int) -> None:
        if len(self._hints) >= COMPACTED_POSITION_HINTS_COUNT_MAX:
            self._hints.clear()
        self._hints[position] = entry_id

    async def compacted_position_at_or_after(self, state: CompactedState, start: Position) -> Position | None:
        """The topic position of the first compacted entry at or after ``start`` (None: none left)."""
        reader = await self._open(state.ledger_id)
        entry_id = await self._first_at_or_after(reader, start)
        if entry_id >= reader.entries_count:
            return None
        return await self._position_at(reader, entry_id)

    async def read_compacted(self, state: CompactedState, start: Position, count_max: int) -> list[Entry]:
        """Up to ``count_max`` compacted entries at or after ``start`` (all at or below the horizon)."""
        reader = await self._open(state.ledger_id)
        first = await self._first_at_or_after(reader, start)
        last = min(reader.entries_count - 1, first + count_max - 1)
        if first > last:
            return []
        out = []
        for offset, raw in enumerate(await reader.read(first, last)):
            position, data = decode_compacted(raw)
            out.append(Entry(position, data))
            self._remember(position.next(), first + offset + 1)
        return out


class CompactedView:
    """The topic as a ``read_compacted`` consumer sees it: the compacted ledger up to the horizon,
    then the topic. Everything but ``read`` is the topic log's."""

    def __init__(self, topic_log: TopicLog, compaction: TopicCompaction) -> None:
        self._log = topic_log
        self._compaction = compaction

    @property
    def name(self) -> str:
        return self._log.name

    @property
    def last_position(self) -> Position:
        return self._log.last_position

    async def read(self, start: Position, count_max: int) -> list[Entry]:
        state = await self._compaction.state()
        if state is None or start > state.horizon:
            return await self._log.read(start, count_max)
        try:
            out = await self._compaction.read_compacted(state, start, count_max)
        except NotFoundError:  # the compacted ledger is gone: the topic is all there is
            return await self._log.read(start, count_max)
        if len(out) < count_max:
            out.extend(await self._log.read(state.horizon.next(), count_max - len(out)))
        return out

    async def skip_compacted_out(self, cursor: SubscriptionCursor, steps_max: int) -> Position | None:
        """Move ``cursor``'s mark-delete position over what compaction removed below the horizon.

        A subscription reading compacted data is never sent the messages compaction removed, so
        its acks alone would leave its mark-delete position stuck before the first of them (and
        the topic's ledgers retained for it). After each ack the mark-delete position moves on to
        just before the next compacted entry, past it when that entry is acknowledged too, and to
        the horizon when no compacted entry is left. At most ``steps_max`` steps per call; returns
        the new mark-delete position, or None if it did not move."""
        state = await self._compaction.state()
        if state is None:
            return None
        moved: Position | None = None
        for _ in range(steps_max):
            mark_delete = cursor.mark_delete_position
            if mark_delete >= state.horizon:
                break
            try:
                following = await self._compaction.compacted_position_at_or_after(state, mark_delete.next())
            except NotFoundError:
                break
            if following is None:
                target = state.horizon
            elif cursor.is_acked(following):
                target = following
            else:
                target = before(following)
            if target <= mark_delete:
                break
            await cursor.mark_delete(target)
            moved = target
        return moved

    def append_run(self, run: Sequence[tuple[bytes, AppendCallback]]) -> None:
        self._log.append_run(run)

    def has_room(self, count: int = 1) -> bool:
        return self._log.has_room(count)

    async def wait_for_room(self) -> None:
        await self._log.wait_for_room()

    async def open_cursor(self, name: str, *, durable: bool, initial_mark_delete: Position) -> SubscriptionCursor:
        return await self._log.open_cursor(name, durable=durable, initial_mark_delete=initial_mark_delete)

    async def delete_cursor(self, name: str) -> None:
        await self._log.delete_cursor(name)

    def cursor_names(self) -> list[str]:
        return self._log.cursor_names()

    def storage_stats(self) -> StorageStats:
        return self._log.storage_stats()

    def backlog_bytes(self, after: Position) -> int:
        return self._log.backlog_bytes(after)

    async def apply_retention(self, retention_time_s: float, retention_size_bytes: int) -> list[int]:
        return await self._log.apply_retention(retention_time_s, retention_size_bytes)

    def retention_may_trim(self, retention_time_s: float, retention_size_bytes: int) -> bool:
        return self._log.retention_may_trim(retention_time_s, retention_size_bytes)

    async def close(self) -> None:
        return None  # the topic owns its log


def compacted_view(topic_log: TopicLog, compaction: TopicCompaction, topic: TopicName,
                   sub_type: SubType) -> CompactedView:
    """The log a ``read_compacted`` consumer dispatches from; refused where Pulsar refuses it."""
    if not topic.is_persistent or not compaction.supported:
        raise BrokerError(pb.NotAllowedError, "Read compacted can only be used with persistent topics")
    if sub_type not in (SubType.EXCLUSIVE, SubType.FAILOVER):
        raise BrokerError(pb.NotAllowedError,
                          "Read compacted can only be used with exclusive or failover persistent subscriptions")
    return CompactedView(topic_log, compaction)


__all__ = [
    "AFTER_RECORD_POINT",
    "AFTER_WRITE_POINT",
    "COMPACTED_LEDGER_PROPERTY",
    "COMPACTION_CURSOR_NAME",
    "CompactedState",
    "CompactedView",
    "CompactionRunningError",
    "CompactionStatus",
    "TopicCompaction",
    "compacted_view",
]
