"""The storage ports over ``magnetar.managed_ledger``: what a broker with bookies runs on.

``ManagedLogStore`` opens one managed ledger per topic through a ``ManagedLedgerFactory`` (named
``tenant/ns/persistent/<encoded local name>``, as Pulsar names them) and lists topics from the
metadata store under the factory's root. Durable subscriptions are managed cursors (persisted);
readers get non-durable cursors, forgotten when deleted. Positions and batch acks are translated:
the port speaks mark-delete positions and wire ack sets, the managed cursor "next position to
read" on reset and sets of acknowledged indexes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from urllib.parse import unquote

from magnetar.base.entry import Entry
from magnetar.base.errors import NotFoundError
from magnetar.base.types import Position, TopicName
from magnetar.broker.compacted_ledgers import BookieCompactedLedgers
from magnetar.broker.log import AppendCallback, LedgerStats, StorageStats, ack_set_words, acked_indexes
from magnetar.broker.managed_append import ManagedRunAppend
from magnetar.managed_ledger import ManagedCursor, ManagedLedger, ManagedLedgerFactory
from magnetar.managed_ledger.factory import DEFAULT_ROOT
from magnetar.metadata.api import MetadataStore


class ManagedSubscriptionCursor:
    def __init__(self, cursor: ManagedCursor, name: str, durable: bool) -> None:
        self._cursor = cursor
        self._name = name
        self._durable = durable

    @property
    def name(self) -> str:
        return self._name

    @property
    def durable(self) -> bool:
        return self._durable

    @property
    def mark_delete_position(self) -> Position:
        return self._cursor.mark_delete_position

    def is_acked(self, position: Position) -> bool:
        return self._cursor.is_deleted(position)

    def batch_ack_set(self, position: Position, batch_size: int) -> list[int] | None:
        acked = self._cursor.batch_acked_indexes(position)
        return ack_set_words(acked, batch_size) if acked else None

    @property
    def properties(self) -> dict[str, int]:
        return dict(self._cursor.properties)

    async def mark_delete(self, position: Position, properties: dict[str, int] | None = None) -> None:
        await self._cursor.mark_delete(position, properties)

    async def delete(self, positions: Sequence[Position]) -> None:
        await self._cursor.delete(positions)

    async def delete_batch_indexes(self, position: Position, ack_set: Sequence[int], batch_size: int) -> None:
        await self._cursor.delete_batch_indexes(position, acked_indexes(ack_set, batch_size), batch_size)

    async def reset(self, mark_delete: Position) -> None:
        await self._cursor.reset(mark_delete.next())

    def backlog_entries(self) -> int:
        return self._cursor.get_number_of_entries_in_backlog()

    @property
    def managed_cursor(self) -> ManagedCursor:
        return self._cursor


class ManagedTopicLog:
    #: The port's one append, for a run of entries (``TopicLog.append_run``): the managed ledger's
    #: ``append_run``, a terminated topic refused as ``TopicTerminatedError`` (``ManagedRunAppend``).
    #: An attribute holding a compiled callable, not a method: this class runs interpreted, and its
    #: frame was paid once per publish run (docs/performance.md, session 17).
    append_run: Callable[[Sequence[tuple[bytes, AppendCallback]]], None]

    def __init__(self, name: str, ml: ManagedLedger) -> None:
        self._name = name
        self._ml = ml
        self._non_durable: dict[str, ManagedCursor] = {}
        self.has_room = ml.has_room  # the port's ``has_room``: the managed ledger's, unwrapped
        self.append_run = self._appender()

    def _appender(self) -> Callable[[Sequence[tuple[bytes, AppendCallback]]], None]:
        """What ``append_run`` is (``ReadOnlyTopicLog``: a refusal)."""
        return ManagedRunAppend(self._name, self._ml)

    @property
    def name(self) -> str:
        return self._name

    @property
    def managed_ledger(self) -> ManagedLedger:
        return self._ml

    @property
    def compacted_ledgers(self) -> BookieCompactedLedgers:
        """Compacted ledgers of this topic: ledgers of their own with the topic's quorum settings."""
        config = self._ml.config
        return BookieCompactedLedgers(self._ml.manager, config.ensemble_size, config.write_quorum_size,
                                      config.ack_quorum_size)

    @property
    def last_position(self) -> Position:
        return self._ml.last_confirmed_entry

    @property
    def read_only_holds(self) -> list[Position]:
        """Mark-delete positions of the subscriptions read-only brokers serve (last trim's view)."""
        return list(getattr(self._ml, "read_only_holds", ()))

    async def refresh_read_only_holds(self) -> None:
        """Read the read-only brokers' subscription positions now (backlog quotas count them)."""
        await self._ml.refresh_read_only_holds()

    async def wait_for_room(self) -> None:
        await self._ml.wait_for_room()

    @property
    def terminated_position(self) -> Position | None:
        return self._ml.terminated_position

    async def terminate(self) -> Position:
        return await self._ml.terminate()

    async def settle_failed_writes(self) -> None:
        """After a failed append: the failed ledger is recovered (entries that landed join the
        log), a new one started, appends accepted again (``Topic``'s ``SettlesFailedWrites``)."""
        await self._ml.settle_failed_writes()

    async def read(self, start: Position, count_max: int) -> list[Entry]:
        return await self._ml.read_entries(start, count_max)  # the one Entry type: passed as is

    def read_cached(self, start: Position, count_max: int) -> list[Entry] | None:
        """The entries from ``start`` on if the entry cache holds them (None: ``read``)."""
        return self._ml.read_cached(start, count_max)

    async def open_cursor(self, name: str, *, durable: bool,
                          initial_mark_delete: Position) -> ManagedSubscriptionCursor:
        if durable:
            cursor = await self._ml.open_cursor(name, initial_position=initial_mark_delete)
        else:
            previous = self._non_durable.pop(name, None)
            if previous is not None:
                self._ml.forget_non_durable_cursor(previous)
            cursor = self._ml.new_non_durable_cursor(initial_mark_delete)
            self._non_durable[name] = cursor
        return ManagedSubscriptionCursor(cursor, name, durable)

    async def delete_cursor(self, name: str) -> None:
        cursor = self._non_durable.pop(name, None)
        if cursor is not None:
            self._ml.forget_non_durable_cursor(cursor)
            return
        if name in self._ml.cursors:
            await self._ml.delete_cursor(name)

    def cursor_names(self) -> list[str]:
        return sorted(self._ml.cursors)

    def storage_stats(self) -> StorageStats:
        infos = self._ml.ledger_infos()
        ledgers = tuple(LedgerStats(i.ledger_id, i.entries_count, i.size_bytes, i.timestamp_ms) for i in infos)
        return StorageStats(self._ml.number_of_entries, sum(i.size_bytes for i in infos), ledgers)

    def backlog_bytes(self, after: Position) -> int:
        return self._ml.estimated_size_after(after)

    async def apply_retention(self, retention_time_s: float, retention_size_bytes: int) -> list[int]:
        self._ml.set_retention(retention_time_s, retention_size_bytes)
        return await self._ml.trim_consumed_ledgers()

    def retention_may_trim(self, retention_time_s: float, retention_size_bytes: int) -> bool:
        """Adopt the retention policy (as ``apply_retention`` does: the trim after a rollover
        applies it) and say whether a trim now could delete a ledger: not with fewer than two
        (the current ledger is never trimmed). The broker's policy pass skips the trim of a log
        that says no (``broker/topic_passes.py``)."""
        self._ml.set_retention(retention_time_s, retention_size_bytes)
        return len(self._ml.ledger_ids) >= 2

    async def close(self) -> None:
        for cursor in self._non_durable.values():
            self._ml.forget_non_durable_cursor(cursor)
        self._non_durable.clear()
        await self._ml.close()


class ManagedLogStore:
    def __init__(self, factory: ManagedLedgerFactory, metadata: MetadataStore, root: str = DEFAULT_ROOT) -> None:
        self._factory = factory
        self._metadata = metadata
        self._root = root.rstrip("/")

    async def open_log(self, topic: str, *, create: bool) -> ManagedTopicLog:
        name = ManagedLedgerFactory.name_of(TopicName.parse(topic))
        if not create and not await self._metadata.exists(self._factory.path_of(name)):
            raise NotFoundError(f"topic {topic} does not exist")
        return ManagedTopicLog(topic, await self._factory.open(name))

    async def list_logs(self, namespace: str) -> list[str]:
        parent = f"{self._root}/{namespace}/persistent"
        if not await self._metadata.exists(parent):
            return []
        return sorted(f"persistent://{namespace}/{unquote(child)}" for child in await self._metadata.children(parent))

    async def delete_log(self, topic: str) -> None:
        await self._factory.delete(ManagedLedgerFactory.name_of(TopicName.parse(topic)))
