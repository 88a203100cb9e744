"""Read-only brokers: serve reads of topics this broker does not own, straight from the bookies.

A read-only broker (``magnetar broker --read-only``) runs the same ``BrokerService``, sessions,
subscriptions and dispatchers as an owner; only its storage port differs: ``ReadOnlyLogStore``
opens each topic's managed ledger with ``managed_ledger.read_only`` (never creating, fencing,
recovering, rolling or trimming a ledger). So all four subscription types, cumulative,
individual and batch-index acks, redelivery, seek, readers, delayed delivery, partitioned topics
and regex subscriptions work as on the owner, through the same code.

* LOOKUP answers "connect here" (``SingleBrokerLookup``): a client pointed at a read-only broker
  (its service URL, or a listener name that maps to it) reads there.
* A producer is refused with ``NotAllowedError`` naming the owner's URL (``refuse_producer``):
  forwarding every publish through a second hop would hide where writes go and double their
  cost; a refused application is pointed at the owner explicitly.
* A durable subscription is served by one broker at a time (``ReadOnlyCursor``'s ephemeral lock):
  a consumer arriving at a second read-only broker gets ``ConsumerBusy`` naming the broker serving
  it, until that broker closes the subscription, or its metadata session ends, or it is shown
  not to serve it any more (``HolderProbe``: its process is gone or it restarted); then it
  resumes from the persisted position. The owner and the read-only brokers keep separate cursors: a
  subscription name used on the owner and on a read-only broker names two subscriptions.
* ``ReadOnlyRegistration`` registers the broker at ``/read-only-brokers/{id}`` (ephemeral: service
  URL and HTTP URL) for ``magnetar cluster status`` and sets ``session_lost`` when the metadata
  session ends, so the node restarts on a new session like an owner does.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable, Sequence
from urllib.parse import unquote

from magnetar.base.clock import Clock
from magnetar.base.errors import MagnetarError, NotFoundError
from magnetar.base.types import Position, TopicName
from magnetar.broker.compacted_ledgers import (
    BookieCompactedLedgers,
    CompactedReader,
    CompactedWriter,
    _BookieReader,
)
from magnetar.broker.compaction import COMPACTION_CURSOR_NAME
from magnetar.broker.dedup import DEDUP_CURSOR_NAME
from magnetar.broker.errors import BrokerError
from magnetar.broker.log import AppendCallback
from magnetar.broker.managed_log import ManagedSubscriptionCursor, ManagedTopicLog
from magnetar.ledger.manager import LedgerManager
from magnetar.managed_ledger import ManagedLedgerConfig, ManagedLedgerFactory
from magnetar.managed_ledger.cursor import ManagedCursor, cursor_node_name
from magnetar.managed_ledger.entry_reader import CacheBudget
from magnetar.managed_ledger.errors import ManagedLedgerFencedError
from magnetar.managed_ledger.factory import DEFAULT_ROOT
from magnetar.managed_ledger.read_only import OffloadedEntries, PositionFeed, ReadOnlyManagedLedger
from magnetar.managed_ledger.read_only_cursors import HolderProbe
from magnetar.metadata.api import MetadataStore, SessionState
from magnetar.metadata.records import CursorInfo, decode
from magnetar.protocol.pulsar import pb

log = logging.getLogger(__name__)

READ_ONLY_BROKERS_ROOT = "/read-only-brokers"


class ReadOnlyTopicLog(ManagedTopicLog):
    """The ``TopicLog`` port over a ``ReadOnlyManagedLedger``: reads and cursors, no appends."""

    def __init__(self, name: str, ml: ReadOnlyManagedLedger, owner_url: Callable[[], str | None]) -> None:
        super().__init__(name, ml)  # type: ignore[arg-type]
        self._rml = ml
        self._owner_url = owner_url
        self._compaction_snapshot: ManagedCursor | None = None

    @property
    def read_only_ledger(self) -> ReadOnlyManagedLedger:
        return self._rml

    @property
    def compaction_version(self) -> int:
        """Changes when the owner records a new compaction (``TopicCompaction`` reads it again)."""
        return self._rml.compaction_version

    def on_entries_added(self, listener: Callable[[], None]) -> None:
        self._rml.on_entries_added(listener)

    def _refusal(self) -> BrokerError:
        owner = self._owner_url() or "the topic's owner (look the topic up on a read-write broker)"
        return BrokerError(pb.NotAllowedError,
                           f"this broker serves {self.name} read-only; publish through its owner {owner}")

    def refuse_producer(self) -> None:
        raise self._refusal()

    def _appender(self) -> Callable[[Sequence[tuple[bytes, AppendCallback]]], None]:
        return self._refuse_run

    def _refuse_run(self, run: Sequence[tuple[bytes, AppendCallback]]) -> None:
        raise self._refusal()

    async def terminate(self) -> Position:
        raise BrokerError(pb.NotAllowedError, f"this broker serves {self.name} read-only: terminate it on its owner")

    @property
    def compacted_ledgers(self) -> ReadOnlyCompactedLedgers:
        return ReadOnlyCompactedLedgers(self._rml.manager, self.name)

    def cursor_names(self) -> list[str]:
        names = set(self._rml.cursors)
        if COMPACTION_CURSOR_NAME in self._rml.owner_cursor_names:
            names.add(COMPACTION_CURSOR_NAME)
        return sorted(names)

    async def settle_failed_writes(self) -> None:
        return None

    async def open_cursor(self, name: str, *, durable: bool,
                          initial_mark_delete: Position) -> ManagedSubscriptionCursor:
        if name == COMPACTION_CURSOR_NAME:  # the owner's: where its compacted ledger is recorded
            return await self._owner_compaction_cursor()
        if name == DEDUP_CURSOR_NAME:  # only a producer needs it (dedup recovery): refused here
            raise self._refusal()
        if not durable:
            return await super().open_cursor(name, durable=False, initial_mark_delete=initial_mark_delete)
        try:
            cursor = await self._rml.open_cursor(name, initial_position=initial_mark_delete)
        except ManagedLedgerFencedError as error:
            raise BrokerError(pb.ConsumerBusy, str(error)) from error
        return ManagedSubscriptionCursor(cursor, name, True)

    async def release_cursor(self, name: str) -> None:
        """The subscription has no consumer left: persist it and let another broker serve it."""
        await self._rml.release_cursor(name)

    async def apply_retention(self, retention_time_s: float, retention_size_bytes: int) -> list[int]:
        return []  # the owner trims, counting our cursors' persisted positions

    def retention_may_trim(self, retention_time_s: float, retention_size_bytes: int) -> bool:
        return False  # the owner trims

    async def _owner_compaction_cursor(self) -> ManagedSubscriptionCursor:
        """A snapshot of the owner's ``__compaction`` cursor (read, never written)."""
        found = await self._rml.store.get(f"{self._rml.path}/{cursor_node_name(COMPACTION_CURSOR_NAME)}")
        if found is None:
            raise BrokerError(pb.NotAllowedError, f"{self.name} has not been compacted by its owner")
        info = decode(CursorInfo, found.value)
        if self._compaction_snapshot is not None:
            self._rml.forget_non_durable_cursor(self._compaction_snapshot)
        cursor = self._rml.new_non_durable_cursor(Position(info.mark_delete.ledger_id, info.mark_delete.entry_id))
        cursor.properties = dict(info.properties)
        self._compaction_snapshot = cursor
        return ManagedSubscriptionCursor(cursor, COMPACTION_CURSOR_NAME, False)


class ReadOnlyCompactedLedgers(BookieCompactedLedgers):
    """Reads the owner's compacted ledgers (closed when recorded) without fencing; writes nothing."""

    read_only = True  # ``TopicCompaction`` never starts a compaction over these

    def __init__(self, manager: LedgerManager, topic: str) -> None:
        super().__init__(manager, 1, 1, 1)
        self._topic = topic

    async def create(self) -> CompactedWriter:
        raise BrokerError(pb.NotAllowedError, f"this broker serves {self._topic} read-only: compaction is the owner's")

    async def open(self, ledger_id: int) -> CompactedReader:
        return _BookieReader(await self._manager.open_ledger_no_recovery(ledger_id))

    async def delete(self, ledger_id: int) -> None:
        raise BrokerError(pb.NotAllowedError, f"this broker serves {self._topic} read-only: compaction is the owner's")


class ReadOnlyLogStore:
    """The ``LogStore`` port of a read-only broker: opens logs, never creates or deletes them."""

    def __init__(self, *, manager: LedgerManager, metadata: MetadataStore, clock: Clock,
                 config: ManagedLedgerConfig | None = None, feed: PositionFeed | None,
                 holder: Callable[[], str], root: str = DEFAULT_ROOT,
                 offloaded: OffloadedEntries | None = None, holder_http: Callable[[], str] = lambda: "",
                 probe: HolderProbe | None = None) -> None:
        self._manager = manager
        self._offloaded = offloaded
        self._holder_http = holder_http
        self._probe = probe
        self._cache_budget = CacheBudget()  # every topic's entry cache together, as on an owner
        self._metadata = metadata
        self._clock = clock
        self._config = config or ManagedLedgerConfig()
        self._feed = feed
        self._holder = holder
        self._root = root.rstrip("/")

    async def open_log(self, topic: str, *, create: bool) -> ReadOnlyTopicLog:
        name = ManagedLedgerFactory.name_of(TopicName.parse(topic))
        path = f"{self._root}/{name}"
        try:
            ml = await ReadOnlyManagedLedger.open(
                topic, name, path, manager=self._manager, store=self._metadata, clock=self._clock,
                config=self._config, feed=self._feed, holder=self._holder(), offloaded=self._offloaded,
                holder_http=self._holder_http(), probe=self._probe, cache_budget=self._cache_budget)
        except NotFoundError as error:
            raise NotFoundError(f"topic {topic} does not exist (a read-only broker never creates topics: "
                           f"create it through its owner)") from error
        feed = self._feed
        if feed is not None:  # a producer refused right away is told where to publish
            try:
                await feed.find_owner_url(topic)
            except MagnetarError as error:
                log.info("read-only %s: the owner is not known yet: %s", topic, error)
        return ReadOnlyTopicLog(topic, ml, (lambda: feed.owner_url(topic)) if feed is not None else (lambda: None))

    async def list_logs(self, namespace: str) -> list[str]:
        parent = f"{self._root}/{namespace}/persistent"
        if not await self._metadata.exists(parent):
            return []
        return sorted(f"persistent://{namespace}/{unquote(child)}" for child in await self._metadata.children(parent))

    async def delete_log(self, topic: str) -> None:
        raise BrokerError(pb.NotAllowedError, f"a read-only broker does not delete topics ({topic})")


class ReadOnlyRegistration:
    """This broker's entry under ``/read-only-brokers`` and the end of its metadata session."""

    def __init__(self, store: MetadataStore, *, broker_id: str, service_url: str, http_url: str) -> None:
        self.store = store
        self.broker_id = broker_id
        self.service_url = service_url
        self.http_url = http_url
        self.session_lost = asyncio.Event()
        self._path = f"{READ_ONLY_BROKERS_ROOT}/{broker_id}"

    async def register(self) -> None:
        self.store.session.add_listener(self._on_session)
        value = json.dumps({"serviceUrl": self.service_url, "httpUrl": self.http_url, "readOnly": True}).encode()
        try:
            await self.store.create(self._path, value, ephemeral=True)
        except Exception:  # a previous generation's node not yet expired: replace it
            await self.store.delete(self._path)
            await self.store.create(self._path, value, ephemeral=True)

    def _on_session(self, state: SessionState) -> None:
        if state in (SessionState.EXPIRED, SessionState.CLOSED):
            self.session_lost.set()

    async def close(self) -> None:
        self.store.session.remove_listener(self._on_session)
        try:
            await self.store.delete(self._path)
        except Exception:
            return


async def read_only_brokers(store: MetadataStore) -> list[dict[str, object]]:
    """Registered read-only brokers (``magnetar cluster status``, admin)."""
    out: list[dict[str, object]] = []
    for child in await store.children(READ_ONLY_BROKERS_ROOT):
        found = await store.get(f"{READ_ONLY_BROKERS_ROOT}/{child}")
        if found is None:
            continue
        try:
            record = json.loads(found.value)
        except ValueError:
            continue
        out.append({"id": child, **record})
    return out
