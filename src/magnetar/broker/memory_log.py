"""In-memory reference implementation of the ``LogStore``/``TopicLog``/``SubscriptionCursor`` ports.

Data lives in a ``MemoryLogStore`` that outlives brokers: a broker that is closed and started again
over the same store sees every acknowledged entry and cursor, the way a broker restart over the
same bookies does. Each ``open_log`` starts a new ledger id, as a managed ledger does on reopen.

Bounds: a store holds at most ``entries_bytes_max`` bytes of entries (``LimitExceededError`` beyond);
cursors hold at most ``MANAGED_CURSOR_RANGES_COUNT_MAX`` individual acks.
"""

from __future__ import annotations

import asyncio
import bisect
from collections.abc import Sequence
from dataclasses import dataclass, field

from magnetar.base.entry import Entry
from magnetar.base.errors import LimitExceededError, NotFoundError
from magnetar.base.limits import MANAGED_CURSOR_RANGES_COUNT_MAX, MIB
from magnetar.base.types import Position, TopicName
from magnetar.broker.compacted_ledgers import MemoryCompactedLedgers
from magnetar.broker.errors import BrokerError
from magnetar.broker.log import AppendCallback, LedgerStats, StorageStats, ack_set_words, acked_indexes
from magnetar.protocol.pulsar import pb


@dataclass
class _CursorState:
    mark_delete: Position
    acked: set[Position] = field(default_factory=set)
    batch_acks: dict[Position, set[int]] = field(default_factory=dict)
    properties: dict[str, int] = field(default_factory=dict)


@dataclass
class _LogState:
    positions: list[Position] = field(default_factory=list)
    data: list[bytes] = field(default_factory=list)
    cursors: dict[str, _CursorState] = field(default_factory=dict)
    ledger_id: int = -1
    terminated_at: Position | None = None  # the last entry once terminated: no more appends


class MemoryCursor:
    """A cursor over a ``MemoryTopicLog``; non-durable cursors are not kept in the store."""

    def __init__(self, log: MemoryTopicLog, name: str, durable: bool, state: _CursorState) -> None:
        self._log = log
        self._name = name
        self._durable = durable
        self._state = state

    @property
    def name(self) -> str:
        return self._name

    @property
    def durable(self) -> bool:
        return self._durable

    @property
    def mark_delete_position(self) -> Position:
        return self._state.mark_delete

    def is_acked(self, position: Position) -> bool:
        return position <= self._state.mark_delete or position in self._state.acked

    def batch_ack_set(self, position: Position, batch_size: int) -> list[int] | None:
        found = self._state.batch_acks.get(position)
        return ack_set_words(found, batch_size) if found is not None else None

    @property
    def properties(self) -> dict[str, int]:
        return dict(self._state.properties)

    async def mark_delete(self, position: Position, properties: dict[str, int] | None = None) -> None:
        state = self._state
        if properties is not None:
            state.properties = dict(properties)
        if position <= state.mark_delete:
            return
        state.mark_delete = position
        state.acked = {p for p in state.acked if p > position}
        state.batch_acks = {p: s for p, s in state.batch_acks.items() if p > position}
        self._advance()

    async def delete(self, positions: Sequence[Position]) -> None:
        state = self._state
        for position in positions:
            if position > state.mark_delete:
                if len(state.acked) >= MANAGED_CURSOR_RANGES_COUNT_MAX:
                    raise LimitExceededError("MANAGED_CURSOR_RANGES_COUNT_MAX", len(state.acked) + 1,
                                        MANAGED_CURSOR_RANGES_COUNT_MAX)
                state.acked.add(position)
                state.batch_acks.pop(position, None)
        self._advance()

    async def delete_batch_indexes(self, position: Position, ack_set: Sequence[int], batch_size: int) -> None:
        if self.is_acked(position):
            return
        merged = self._state.batch_acks.get(position, set()) | acked_indexes(ack_set, batch_size)
        if len(merged) >= batch_size:
            await self.delete([position])
            return
        self._state.batch_acks[position] = merged

    async def reset(self, mark_delete: Position) -> None:
        self._state.mark_delete = mark_delete
        self._state.acked = {p for p in self._state.acked if p > mark_delete}
        self._state.batch_acks = {p: s for p, s in self._state.batch_acks.items() if p > mark_delete}
        self._advance()

    def backlog_entries(self) -> int:
        positions = self._log.positions_after(self._state.mark_delete)
        return len(positions) - sum(1 for p in self._state.acked if p > self._state.mark_delete)

    def _advance(self) -> None:
        """Fold individual acks that directly follow the mark-delete position into it."""
        state = self._state
        while state.acked:
            following = self._log.position_after(state.mark_delete)
            if following is None or following not in state.acked:
                return
            state.acked.discard(following)
            state.mark_delete = following


class MemoryTopicLog:
    def __init__(self, store: MemoryLogStore, name: str, state: _LogState) -> None:
        self._store = store
        self._name = name
        self._state = state
        self._ephemeral: dict[str, MemoryCursor] = {}

    @property
    def name(self) -> str:
        return self._name

    @property
    def last_position(self) -> Position:
        positions = self._state.positions
        return positions[-1] if positions else Position(self._state.ledger_id, -1)

    def position_after(self, position: Position) -> Position | None:
        positions = self._state.positions
        index = bisect.bisect_right(positions, position)
        return positions[index] if index < len(positions) else None

    def positions_after(self, position: Position) -> list[Position]:
        positions = self._state.positions
        return positions[bisect.bisect_right(positions, position):]

    def storage_stats(self) -> StorageStats:
        state = self._state
        ledgers: dict[int, tuple[int, int]] = {}
        for position, data in zip(state.positions, state.data, strict=True):
            count, size = ledgers.get(position.ledger_id, (0, 0))
            ledgers[position.ledger_id] = (count + 1, size + len(data))
        stats = tuple(LedgerStats(lid, count, size, 0) for lid, (count, size) in sorted(ledgers.items()))
        return StorageStats(len(state.positions), sum(s.size_bytes for s in stats), stats)

    def backlog_bytes(self, after: Position) -> int:
        index = bisect.bisect_right(self._state.positions, after)
        return sum(len(d) for d in self._state.data[index:])

    @property
    def compacted_ledgers(self) -> MemoryCompactedLedgers:
        return self._store.compacted

    async def apply_retention(self, retention_time_s: float, retention_size_bytes: int) -> list[int]:
        """The reference log keeps every entry: it has no ledgers to delete."""
        return []

    def retention_may_trim(self, retention_time_s: float, retention_size_bytes: int) -> bool:
        return True  # ``apply_retention`` decides (the pass calls it, as it does a managed log's that may trim)

    @property
    def terminated_position(self) -> Position | None:
        return self._state.terminated_at

    async def terminate(self) -> Position:
        if self._state.terminated_at is None:
            self._state.terminated_at = self.last_position
        return self._state.terminated_at

    def append_run(self, run: Sequence[tuple[bytes, AppendCallback]]) -> None:
        """Stored at once; each ``on_done`` runs on the next loop pass (after this returned). A
        terminated topic refuses the run; an entry over the store's byte bound is refused alone
        (its ``on_done`` is told the error)."""
        if self._state.terminated_at is not None:
            raise BrokerError(pb.TopicTerminatedError, f"topic {self._name} is terminated")
        loop = asyncio.get_running_loop()
        for data, on_done in run:
            try:
                position = self._append_now(data)
            except LimitExceededError as error:
                loop.call_soon(on_done, None, error)
                continue
            loop.call_soon(on_done, position, None)

    def has_room(self, count: int = 1) -> bool:
        return True  # an append over the store's byte bound raises LimitExceededError

    async def wait_for_room(self) -> None:
        return None

    def _append_now(self, data: bytes) -> Position:
        if self._state.terminated_at is not None:
            raise BrokerError(pb.TopicTerminatedError, f"topic {self._name} is terminated")
        self._store.charge(len(data))
        state = self._state
        last = state.positions[-1] if state.positions else None
        entry_id = last.entry_id + 1 if last is not None and last.ledger_id == state.ledger_id else 0
        position = Position(state.ledger_id, entry_id)
        state.positions.append(position)
        state.data.append(bytes(data))
        return position

    async def read(self, start: Position, count_max: int) -> list[Entry]:
        return self.read_cached(start, count_max)

    def read_cached(self, start: Position, count_max: int) -> list[Entry]:
        """``read`` without a suspension: everything is in memory (the dispatcher's send at add)."""
        state = self._state
        index = bisect.bisect_left(state.positions, start)
        stop = min(len(state.positions), index + count_max)
        return [Entry(state.positions[i], state.data[i]) for i in range(index, stop)]

    async def open_cursor(self, name: str, *, durable: bool, initial_mark_delete: Position) -> MemoryCursor:
        if durable:
            state = self._state.cursors.get(name)
            if state is None:
                state = self._state.cursors[name] = _CursorState(initial_mark_delete)
            return MemoryCursor(self, name, True, state)
        cursor = MemoryCursor(self, name, False, _CursorState(initial_mark_delete))
        self._ephemeral[name] = cursor
        return cursor

    async def delete_cursor(self, name: str) -> None:
        self._state.cursors.pop(name, None)
        self._ephemeral.pop(name, None)

    def cursor_names(self) -> list[str]:
        return sorted(self._state.cursors)

    async def close(self) -> None:
        self._ephemeral.clear()


class MemoryLogStore:
    """Topic logs in memory, shared by every broker opened over it."""

    def __init__(self, entries_bytes_max: int = 512 * MIB) -> None:
        self._logs: dict[str, _LogState] = {}
        self._next_ledger_id = 1
        self._bytes = 0
        self._bytes_max = entries_bytes_max
        self.compacted = MemoryCompactedLedgers(self._allocate_ledger_id)

    def _allocate_ledger_id(self) -> int:
        ledger_id = self._next_ledger_id
        self._next_ledger_id += 1
        return ledger_id

    def charge(self, size: int) -> None:
        if self._bytes + size > self._bytes_max:
            raise LimitExceededError("MemoryLogStore.entries_bytes_max", self._bytes + size, self._bytes_max)
        self._bytes += size

    async def open_log(self, topic: str, *, create: bool) -> MemoryTopicLog:
        state = self._logs.get(topic)
        if state is None:
            if not create:
                raise NotFoundError(f"topic {topic} does not exist")
            state = self._logs[topic] = _LogState()
        state.ledger_id = self._next_ledger_id  # a reopened log writes to a new ledger
        self._next_ledger_id += 1
        return MemoryTopicLog(self, topic, state)

    async def list_logs(self, namespace: str) -> list[str]:
        return sorted(t for t in self._logs if TopicName.parse(t).namespace == namespace)

    async def delete_log(self, topic: str) -> None:
        state = self._logs.pop(topic, None)
        if state is None:
            raise NotFoundError(f"topic {topic} does not exist")
        self._bytes -= sum(len(d) for d in state.data)


__all__ = ["MemoryCursor", "MemoryLogStore", "MemoryTopicLog"]
