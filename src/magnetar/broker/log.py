"""What the broker needs from a topic's storage: the ``TopicLog`` / ``SubscriptionCursor`` ports.

The managed ledger (``magnetar.managed_ledger``) provides these through an adapter; ``memory_log``
is the in-memory reference implementation used by unit tests and by brokers run without bookies.

Contracts every implementation keeps:
* ``append`` returns positions in call order: a later call never gets a smaller position, and a
  returned position is durable (on the ack quorum for the managed ledger).
* ``read(start, n)`` returns up to ``n`` entries (``base.entry.Entry``: the payload is the stored
  ``headers_and_payload``) with position >= ``start``, in log order.
* ``last_position`` is the position of the last appended entry, or ``(current ledger, -1)`` when
  the log holds no entry.
* A cursor's ``mark_delete_position`` only moves forward except through ``reset``; positions at or
  before it count as acknowledged, as do those passed to ``delete``.
* Batch-index acks: an ack set is a list of 64-bit words, bit i = 1 meaning message i of the batch
  is *still unacknowledged* (the wire meaning). An all-zero set deletes the entry.
  ``acked_indexes``/``ack_set_words`` convert between that and sets of acknowledged indexes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from magnetar.base.entry import Entry
from magnetar.base.types import Position


@dataclass(frozen=True, slots=True)
class LedgerStats:
    ledger_id: int
    entries_count: int
    size_bytes: int
    timestamp_ms: int


@dataclass(frozen=True, slots=True)
class StorageStats:
    """What a topic's log stores now (admin stats, metrics, backlog quota)."""

    entries_count: int
    size_bytes: int
    ledgers: tuple[LedgerStats, ...]


class SubscriptionCursor(Protocol):
    @property
    def name(self) -> str: ...

    @property
    def durable(self) -> bool: ...

    @property
    def mark_delete_position(self) -> Position: ...

    def is_acked(self, position: Position) -> bool: ...

    def batch_ack_set(self, position: Position, batch_size: int) -> list[int] | None:
        """The wire ack set of a batch entry of ``batch_size`` messages, or None if none was acked alone."""

    @property
    def properties(self) -> dict[str, int]:
        """Named numbers stored with the mark-delete position (the dedup cursor's snapshot)."""

    async def mark_delete(self, position: Position, properties: dict[str, int] | None = None) -> None:
        """Cumulative ack: everything at or before ``position`` is acknowledged.

        ``properties`` (when given) replace the stored ones, persisted together with the position.
        """

    async def delete(self, positions: Sequence[Position]) -> None:
        """Individual acks."""

    async def delete_batch_indexes(self, position: Position, ack_set: Sequence[int], batch_size: int) -> None:
        """Acknowledge the members whose bit in the wire ``ack_set`` is 0."""

    async def reset(self, mark_delete: Position) -> None:
        """Seek: set the mark-delete position (backwards too) and forget individual acks after it."""

    def backlog_entries(self) -> int:
        """Stored entries after the mark-delete position that are not individually acknowledged."""


#: How an append is told its outcome: ``(position, None)`` or ``(None, error)``, once.
AppendCallback = Callable[[Position | None, BaseException | None], None]


class TopicLog(Protocol):
    @property
    def name(self) -> str: ...

    @property
    def last_position(self) -> Position: ...

    def append_run(self, run: Sequence[tuple[bytes, AppendCallback]]) -> None:
        """The one append operation, for a run of entries in order (the SENDs of one receive):
        for each ``(data, on_done)``, later ``on_done(position, None)`` once ``data`` is stored,
        or ``on_done(None, error)``; a plain callback, called once and never before this returned
        unless the append failed at once. Raises at once, nothing appended, when the log refuses
        the run (closed, terminated, taken over, a write failure not yet settled, or no room for
        all of it: see ``has_room``, ``wait_for_room``)."""

    def has_room(self, count: int = 1) -> bool:
        """Whether ``append_run`` can take ``count`` entries now."""

    async def wait_for_room(self) -> None:
        """Backpressure: return once ``append`` can take an entry (or will refuse it)."""

    async def read(self, start: Position, count_max: int) -> list[Entry]: ...

    async def open_cursor(self, name: str, *, durable: bool, initial_mark_delete: Position) -> SubscriptionCursor:
        """The cursor ``name``; a durable one keeps its stored state and ignores ``initial_mark_delete``."""

    async def delete_cursor(self, name: str) -> None: ...

    def cursor_names(self) -> list[str]: ...

    def storage_stats(self) -> StorageStats:
        """Entries, bytes and ledgers stored now."""

    def backlog_bytes(self, after: Position) -> int:
        """Bytes stored after ``after`` (an estimate from ledger sizes where entries are not counted)."""

    async def apply_retention(self, retention_time_s: float, retention_size_bytes: int) -> list[int]:
        """Adopt the retention policy (-1: unbounded) and delete what every durable cursor consumed
        and retention lets go; returns the ids of the ledgers deleted."""

    def retention_may_trim(self, retention_time_s: float, retention_size_bytes: int) -> bool:
        """Whether ``apply_retention`` with this policy could delete anything now (False: the
        broker's policy pass skips the call, ``broker/topic_passes.py``); a log that cannot tell
        cheaply answers True and lets ``apply_retention`` decide."""

    async def close(self) -> None: ...


@runtime_checkable
class Terminable(Protocol):
    """A log that can be terminated (Pulsar's ``terminate``): no more appends, ever; an append
    then fails with a ``BrokerError`` TopicTerminatedError. The state is kept with the log."""

    @property
    def terminated_position(self) -> Position | None: ...

    async def terminate(self) -> Position:
        """Stop appends (after the in-flight ones) and return the last entry's position."""
        ...


# A compiled module cannot define a runtime-checkable Protocol (``typing`` refuses the native
# class), so the ones ``Topic`` (compiled) checks with ``isinstance`` live here.
@runtime_checkable
class SettlesFailedWrites(Protocol):
    """A log whose failed appends may still surface (a managed ledger: the entry may be on the
    bookies). ``settle_failed_writes`` returns once each of them is in the log or never will be,
    and lets appends through again."""

    async def settle_failed_writes(self) -> None: ...


class LogStore(Protocol):
    """Opens topic logs (the managed-ledger factory, seen from the broker)."""

    async def open_log(self, topic: str, *, create: bool) -> TopicLog:
        """Open ``topic``'s log; raises ``NotFoundError`` when it does not exist and ``create`` is false."""

    async def list_logs(self, namespace: str) -> list[str]:
        """Full names of the persistent topics stored in ``namespace`` (``tenant/ns``)."""

    async def delete_log(self, topic: str) -> None:
        """Delete ``topic``'s log, its entries and cursors (the caller closed it first); NotFoundError if absent."""


def acked_indexes(ack_set: Sequence[int], batch_size: int) -> set[int]:
    """Indexes < ``batch_size`` whose bit is 0 in the wire ``ack_set`` (words are signed int64)."""
    out = set()
    for index in range(batch_size):
        word = index // 64
        bits = ack_set[word] & 0xFFFF_FFFF_FFFF_FFFF if word < len(ack_set) else 0
        if not bits >> (index % 64) & 1:
            out.add(index)
    return out


def ack_set_words(acked: set[int] | frozenset[int], batch_size: int) -> list[int]:
    """The wire ack set (signed int64 words, bit = 1 still unacknowledged) for ``acked`` indexes."""
    words = [0] * ((batch_size + 63) // 64)
    for index in range(batch_size):
        if index not in acked:
            words[index // 64] |= 1 << (index % 64)
    return [w - (1 << 64) if w >= 1 << 63 else w for w in words]
