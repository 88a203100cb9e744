"""``ReadOnlyManagedLedger``: a topic's log opened by a broker that does not own it.

What it never does (a test counts the requests): create, fence, recover, roll or trim a ledger,
open one for writing, or write the managed ledger's record. It reads the ledger list from the
managed ledger's record ``{root}/{name}`` (the owner's ``ManagedLedgerInfo``), opens ledgers with
``LedgerManager.open_ledger_no_recovery`` (non-fencing reads, speculative across the write set),
and learns the LAC of a ledger still open without fencing: once by a quorum LAC read (bookies
answer ``fence=False``), then from the owner. An offloaded ledger is read as the owner reads it:
from its bookie copy while the record says it is there, else (or if that fails) from the tiered
store (``OffloadedEntries``: reads only).

How new entries are learned, without a polling delay (the choice, see docs/read-only-brokers.md):
the owner *notifies*. A ``PositionFeed`` streams the owner's last confirmed position each time it
grows (``follow_managed_ledger`` on the owner: one wake-up per acknowledged add batch, coalesced;
over HTTP between processes), with the fresh entries the owner still caches (``FeedUpdate``),
which go into our cache before the dispatchers wake, so a subscription at the tail is served
from memory as on the owner. A bookie learns a ledger's LAC only with the next entry or an
explicit LAC write, so a reader asking bookies is always one entry behind; the owner knows at once
and every position it reports is on Qa bookies, so ``LedgerReader.learn_lac`` may adopt it.
Rollover, trimming, recovery by a new owner and deletion are followed through a metadata watch on
the record; a position in a ledger not yet listed makes the record be read at once (the owner
lists a ledger before writing to it). When no owner answers (between owners), nothing new is
acknowledged; the new owner's recovery closes the ledger and lists a new one, which the watch
delivers.

Cursors (``ReadOnlyCursor``) are metadata-only, see ``managed_ledger.read_only_cursors``.

Invariants: the last confirmed position only grows; a position is readable only if the owner
acknowledged it (reported by the owner, counted in the record, or at or below a bookie quorum's
LAC); state moves OPEN -> CLOSED only.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol

from magnetar.base.clock import Clock
from magnetar.base.entry import Entry
from magnetar.base.errors import InvalidArgumentError, MagnetarError, NotFoundError
from magnetar.base.invariant import invariant
from magnetar.base.limits import (
    MANAGED_LEDGER_CACHE_BYTES_MAX,
    MANAGED_LEDGER_CURSORS_COUNT_MAX,
    MANAGED_LEDGER_READ_COUNT_MAX,
    MANAGED_LEDGER_READERS_CACHED_COUNT_MAX,
    READ_ONLY_FEED_BYTES_MAX,
    READ_ONLY_FEED_ENTRIES_COUNT_MAX,
)
from magnetar.base.types import Position
from magnetar.ledger.manager import LedgerManager
from magnetar.ledger.reader import LedgerReader
from magnetar.managed_ledger.config import ManagedLedgerConfig
from magnetar.managed_ledger.cursor import CursorContext, ManagedCursor
from magnetar.managed_ledger.entry_reader import CacheBudget, CacheHolder
from magnetar.managed_ledger.errors import ManagedLedgerClosedError, ManagedLedgerFencedError
from magnetar.managed_ledger.ledger_list import LedgerList
from magnetar.managed_ledger.managed_ledger import ManagedLedger, MLState
from magnetar.managed_ledger.offload import LedgerLocation
from magnetar.managed_ledger.read_only_cursors import HolderProbe, ReadOnlyCursor
from magnetar.metadata.api import EventKind, MetadataStore, Watch, WatchEvent
from magnetar.metadata.records import LedgerInfo, ManagedLedgerInfo, decode

log = logging.getLogger(__name__)

#: Wait before asking for the owner's feed again after it ended or failed (no owner, moving),
#: unless the metadata watch says something changed first.
READ_ONLY_FEED_RETRY_MS = 500
#: The owner's compaction cursor node under its managed ledger's (``broker.compaction``'s
#: ``__compaction`` cursor; a managed ledger cannot import the broker layer).
COMPACTION_NODE = "__compaction"


@dataclass(frozen=True, slots=True)
class FeedUpdate:
    """One notification of the owner's feed: every entry up to ``position`` is acknowledged.

    ``payloads`` are the newest of those entries, ``position.ledger_id``'s ``first_entry_id``..
    ``position.entry_id`` (empty when the owner no longer had them cached or they were too many):
    sent along so the read-only broker need not read fresh entries back from the bookies."""

    position: Position
    first_entry_id: int = 0
    payloads: tuple[bytes, ...] = ()


class PositionFeed(Protocol):
    """The owner's last confirmed positions of one topic, as they grow (a capability)."""

    def follow(self, topic: str, after: Position) -> AsyncIterator[FeedUpdate]:
        """Yield the owner's last confirmed position each time it passes ``after`` (coalesced:
        only the newest, with the fresh entries when it has them); end when the owner stops
        serving the topic or cannot be reached."""
        ...

    def owner_url(self, topic: str) -> str | None:
        """The owner's service URL as last learned (for refusals), or None."""
        ...

    async def find_owner_url(self, topic: str) -> str | None:
        """Look the owner's service URL up now (``owner_url`` then knows it), or None: no owner."""
        ...


class OffloadedEntries(Protocol):
    """The one thing a read-only broker asks of the tiered store (``LedgerOffloader`` without the
    writes): stored entries of an offloaded ledger, byte for byte as written."""

    async def read_entries(self, location: LedgerLocation, first: int, last: int) -> list[bytes]: ...


def fresh_entries(ml: ManagedLedger, after: Position, last: Position) -> FeedUpdate:
    """The update for ``last``, with the entries after ``after`` in ``last``'s ledger that the
    owner still caches, newest first kept within ``READ_ONLY_FEED_*_MAX``."""
    first = after.entry_id + 1 if after.ledger_id == last.ledger_id else 0
    first = max(first, last.entry_id - READ_ONLY_FEED_ENTRIES_COUNT_MAX + 1)
    payloads = ml.cached_entries(last.ledger_id, first, last.entry_id)
    if payloads is None:
        return FeedUpdate(last, last.entry_id + 1)
    size = sum(len(p) for p in payloads)
    dropped = 0
    while size > READ_ONLY_FEED_BYTES_MAX and dropped < len(payloads):
        size -= len(payloads[dropped])
        dropped += 1
    return FeedUpdate(last, first + dropped, tuple(payloads[dropped:]))


async def follow_managed_ledger(ml: ManagedLedger, after: Position) -> AsyncIterator[FeedUpdate]:
    """The owner side of a ``PositionFeed``: ``ml``'s last confirmed position as it grows, with
    the entries it still caches. One update per wake-up: the adds completed meanwhile coalesce.

    Ends when ``ml`` stops accepting appends (closed, fenced by a new owner, terminated)."""
    while True:
        await ml.wait_for_entries_after(after)
        last = ml.last_confirmed_entry
        if last <= after:
            return
        update = fresh_entries(ml, after, last)
        after = last
        yield update
        if ml.state in (MLState.FENCED, MLState.CLOSED):
            return


class ReadOnlyState(enum.Enum):
    OPEN = "open"
    CLOSED = "closed"


class ReadOnlyManagedLedger(CacheHolder):
    """A read view of an owner's managed ledger. Build through ``ReadOnlyManagedLedger.open``."""

    def __init__(self, topic: str, name: str, path: str, *, manager: LedgerManager, store: MetadataStore,
                 clock: Clock, config: ManagedLedgerConfig, feed: PositionFeed | None,
                 holder: str, offloaded: OffloadedEntries | None = None, holder_http: str = "",
                 probe: HolderProbe | None = None, cache_budget: CacheBudget | None = None) -> None:
        self.topic = topic
        self.name = name
        self.path = path
        self._manager = manager
        self._store = store
        self._clock = clock
        self.config = config
        self._feed = feed
        self._offloaded = offloaded  # the owner's tiered store, read only
        self.holder = holder  # our service URL, written into the locks we hold
        self.holder_http = holder_http  # our HTTP URL, where a takeover asks whether we still serve
        self.probe = probe
        self.takeovers = 0  # subscriptions taken over from a broker shown not to serve them
        self._state = ReadOnlyState.OPEN
        self._list = LedgerList()
        self._lce = Position(-1, -1)
        self._readers: OrderedDict[int, LedgerReader] = OrderedDict()
        self._cache: OrderedDict[Position, bytes] = OrderedDict()
        self._cache_bytes = 0
        self._budget = cache_budget if cache_budget is not None else CacheBudget()
        self._inflight: dict[Position, asyncio.Future[None]] = {}  # entries being read from bookies
        self._refresh_lock = asyncio.Lock()
        self._changed = asyncio.Event()
        self._watch: Watch | None = None
        self._compaction_watch: Watch | None = None
        #: Grows whenever the owner's compaction cursor changes (``broker.compaction`` reads it again).
        self.compaction_version = 0
        self._tasks: set[asyncio.Task[Any]] = set()
        self._listeners: list[Callable[[], None]] = []
        self.cursors: dict[str, ReadOnlyCursor] = {}
        self._releasing: dict[str, asyncio.Future[None]] = {}  # cursors being persisted and unlocked
        self._opening: set[str] = set()  # cursors whose lock is being taken
        self._non_durable: set[ManagedCursor] = set()
        self._entry_waiters: list[tuple[Position, asyncio.Future[None]]] = []
        self.entries_skipped = 0  # entries read-only cursors skipped because retention removed them
        self.feed_positions = 0  # positions the owner reported
        self.owner_cursor_names: frozenset[str] = frozenset()  # node names of the owner's cursors
        self._terminated_at: Position | None = None
        self.cursor_context = CursorContext(name, path, log=self, store=store, manager=manager, clock=clock,
                                            config=config, forget=self.forget_non_durable_cursor)

    # --- open, follow ----------------------------------------------------------------------------

    @classmethod
    async def open(cls, topic: str, name: str, path: str, *, manager: LedgerManager, store: MetadataStore,
                   clock: Clock, config: ManagedLedgerConfig, feed: PositionFeed | None,
                   holder: str, offloaded: OffloadedEntries | None = None, holder_http: str = "",
                   probe: HolderProbe | None = None, cache_budget: CacheBudget | None = None,
                   ) -> ReadOnlyManagedLedger:
        """Open ``name`` read-only; ``NotFoundError`` when the owner never created it. ``offloaded``:
        the tiered store the owner offloads to (the broker's offload driver), read only."""
        ml = cls(topic, name, path, manager=manager, store=store, clock=clock, config=config, feed=feed,
                 holder=holder, offloaded=offloaded, holder_http=holder_http, probe=probe,
                 cache_budget=cache_budget)
        ml._watch = await store.watch(path, ml._on_watch)
        ml._compaction_watch = await store.watch(f"{path}/{COMPACTION_NODE}", ml._on_compaction_watch)
        try:
            await ml.refresh()
        except BaseException:
            ml._watch.cancel()
            raise
        if feed is not None:
            ml._spawn(ml._follow_loop(feed))
        return ml

    def _on_compaction_watch(self, event: WatchEvent) -> None:
        # The owner recorded a new compacted ledger (or removed its cursor): known at once, before
        # the parent's child-list refresh, so a reader that asks now sees the new state.
        if event.kind is EventKind.DELETED:
            self.owner_cursor_names = self.owner_cursor_names - {COMPACTION_NODE}
        elif event.kind is not EventKind.CHILDREN_CHANGED:
            self.owner_cursor_names = self.owner_cursor_names | {COMPACTION_NODE}
        self.compaction_version += 1

    def _on_watch(self, _event: WatchEvent) -> None:
        if self._state is ReadOnlyState.OPEN:
            self._changed.set()
            self._spawn(self._refresh_quietly())

    async def _refresh_quietly(self) -> None:
        try:
            await self.refresh()
        except MagnetarError as error:
            log.warning("read-only %s: could not re-read the ledger list: %s", self.name, error)

    async def refresh(self) -> None:
        """Re-read the owner's record: rollovers, closes by recovery, trims, deletion."""
        async with self._refresh_lock:
            found = await self._store.get(self.path)
            if found is None:
                if self._list.ids:  # deleted by the owner: stop serving
                    self._spawn(self.close())
                    return
                raise NotFoundError(f"managed ledger {self.name} does not exist")
            info = decode(ManagedLedgerInfo, found.value)
            if info.terminated_position is not None:
                self._terminated_at = Position(info.terminated_position.ledger_id,
                                               info.terminated_position.entry_id)
            self.owner_cursor_names = frozenset(await self._store.children(self.path))
            await self._adopt(info)

    async def _adopt(self, info: ManagedLedgerInfo) -> None:
        ledgers = list(info.ledgers)
        known_live = self._list.live_ledger_id
        known_live_count = self._list.live_count
        infos: list[LedgerInfo] = []
        live_id, live_count = -1, 0
        for index, ledger in enumerate(ledgers):
            last_listed = index == len(ledgers) - 1
            if ledger.entries_count > 0 or not last_listed:
                infos.append(ledger)
                continue
            # The owner's current ledger: count 0 in the record while it is open.
            reader = await self._reader(ledger.ledger_id, refresh=True)
            if reader.is_closed:
                infos.append(LedgerInfo(ledger.ledger_id, reader.last_add_confirmed + 1, ledger.size_bytes,
                                        ledger.timestamp_ms))
                continue
            lac = reader.last_add_confirmed
            if ledger.ledger_id == known_live:
                lac = max(lac, known_live_count - 1)
            if lac < 0:
                lac = await reader.read_lac()  # non-fencing quorum read: the owner keeps writing
            reader.learn_lac(lac)
            infos.append(ledger)
            live_id, live_count = ledger.ledger_id, lac + 1
        dropped = [lid for lid in self._list.ids if lid not in {i.ledger_id for i in infos}]
        self._list.set(infos)
        if live_id >= 0:
            self._list.set_live(live_id)
            self._list.live_count = live_count
        for ledger_id in dropped:
            self._forget_ledger(ledger_id)
        last = self._list.last_stored_position()
        if live_id >= 0 and live_count > 0:
            last = Position(live_id, live_count - 1)
        if last is None:
            last = Position(self._list.last_ledger_id, -1)
        if last > self._lce:
            self._lce = last
            self._entries_added()
        elif self._lce.ledger_id >= 0 and self._lce.ledger_id not in self._list.ids and last.ledger_id >= 0:
            self._lce = max(self._lce, last)
        if dropped:
            self._skip_trimmed()

    async def _follow_loop(self, feed: PositionFeed) -> None:
        """Follow the owner's feed; start again when the record changes (a new owner, a
        rollover) or, after the feed ended, every ``READ_ONLY_FEED_RETRY_MS``."""
        while self._state is ReadOnlyState.OPEN:
            self._changed.clear()
            stream = asyncio.ensure_future(self._consume(feed))
            changed = asyncio.ensure_future(self._changed.wait())
            try:
                await asyncio.wait({stream, changed}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                changed.cancel()
                if not stream.done():
                    stream.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await stream
            if self._state is not ReadOnlyState.OPEN:
                return
            if not self._changed.is_set():
                await self._wait_changed()

    async def _wait_changed(self) -> None:
        waiter = asyncio.ensure_future(self._changed.wait())
        timer = asyncio.ensure_future(self._clock.sleep(READ_ONLY_FEED_RETRY_MS / 1000))
        try:
            await asyncio.wait({waiter, timer}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            waiter.cancel()
            timer.cancel()

    async def _consume(self, feed: PositionFeed) -> None:
        try:
            async for update in feed.follow(self.topic, self._lce):
                self.feed_positions += 1
                await self.advance(update.position, update.first_entry_id, update.payloads)
        except asyncio.CancelledError:
            raise
        except Exception as error:
            log.info("read-only %s: owner feed ended: %s", self.name, error)

    async def advance(self, position: Position, first_entry_id: int = 0, payloads: tuple[bytes, ...] = ()) -> None:
        """The owner acknowledged every entry up to ``position``; ``payloads`` are entries
        ``first_entry_id..position.entry_id`` of its ledger, as the owner stored them."""
        if self._state is not ReadOnlyState.OPEN or position <= self._lce:
            return
        if position.ledger_id not in self._list.ids:
            await self.refresh()  # a ledger the owner listed since we last read the record
            if position.ledger_id not in self._list.ids:
                return  # trimmed or deleted meanwhile
        if payloads:
            invariant(first_entry_id + len(payloads) - 1 == position.entry_id,
                      f"the feed's entries end at {position}")
            ledger_id = position.ledger_id
            for offset, data in enumerate(payloads):
                self._remember(Position(ledger_id, first_entry_id + offset), data)
        if position.ledger_id != self._list.live_ledger_id:
            return  # a closed ledger: its count in the record is what is readable
        reader = self._readers.get(position.ledger_id)
        if reader is not None:
            reader.learn_lac(position.entry_id)
        self._list.live_count = max(self._list.live_count, position.entry_id + 1)
        if position > self._lce:
            self._lce = position
            self._entries_added()

    # --- listeners -------------------------------------------------------------------------------

    def on_entries_added(self, listener: Callable[[], None]) -> None:
        """``listener()`` runs (synchronously) whenever the last confirmed position grows."""
        self._listeners.append(listener)

    def _entries_added(self) -> None:
        for listener in list(self._listeners):
            listener()
        still: list[tuple[Position, asyncio.Future[None]]] = []
        for position, waiter in self._entry_waiters:
            if waiter.done():
                continue
            if self._lce > position:
                waiter.set_result(None)
            else:
                still.append((position, waiter))
        self._entry_waiters = still

    async def wait_for_entries_after(self, position: Position) -> None:
        while self._lce <= position and self._state is ReadOnlyState.OPEN:
            waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._entry_waiters.append((position, waiter))
            await waiter

    # --- the view the cursors and the broker use (same names as ``ManagedLedger``) ----------------

    @property
    def state(self) -> ReadOnlyState:
        return self._state

    @property
    def manager(self) -> LedgerManager:
        return self._manager

    @property
    def store(self) -> MetadataStore:
        return self._store

    @property
    def clock(self) -> Clock:
        return self._clock

    @property
    def last_confirmed_entry(self) -> Position:
        return self._lce

    @property
    def current_ledger_id(self) -> int:
        return self._list.last_ledger_id

    @property
    def ledger_ids(self) -> list[int]:
        return list(self._list.ids)

    def ledger_infos(self) -> list[LedgerInfo]:
        return self._list.with_live_stats()

    @property
    def first_position(self) -> Position:
        if not self._list.ids:
            return self._lce
        return Position(self._list.ids[0], -1)

    def first_at_or_after(self, position: Position) -> Position | None:
        return self._list.first_at_or_after(position)

    def next_position(self, position: Position) -> Position:
        return self._list.next_position(position)

    def count_entries(self, after: Position, upto: Position) -> int:
        return self._list.count_entries(after, upto)

    @property
    def number_of_entries(self) -> int:
        return self._list.number_of_entries()

    def estimated_size_after(self, position: Position) -> int:
        total = 0
        for info in self._list.with_live_stats():
            if info.ledger_id > position.ledger_id:
                total += info.size_bytes
            elif info.ledger_id == position.ledger_id and info.entries_count > 0:
                left = max(0, info.entries_count - 1 - position.entry_id)
                total += info.size_bytes * left // info.entries_count
        return total

    def position_after_n(self, start: Position, n: int) -> Position:
        return self._list.position_after_n(start, n, self._lce)

    def set_retention(self, retention_time_s: float, retention_size_bytes: int) -> None:
        """Retention is the owner's: it trims, counting our cursors; we follow its record."""

    async def trim_consumed_ledgers(self) -> list[int]:
        return []

    # --- reads -----------------------------------------------------------------------------------

    async def read_entries(self, start: Position, count_max: int) -> list[Entry]:
        """Up to ``count_max`` acknowledged entries from ``start`` on (across ledgers, in order);
        ledgers retention removed are skipped."""
        if not 1 <= count_max <= MANAGED_LEDGER_READ_COUNT_MAX:
            raise InvalidArgumentError(f"count_max must be 1..{MANAGED_LEDGER_READ_COUNT_MAX}")
        if self._state is ReadOnlyState.CLOSED:
            raise ManagedLedgerClosedError(f"managed ledger {self.name} is closed")
        result: list[Entry] = []
        position = self.first_at_or_after(start)
        while position is not None and position <= self._lce and len(result) < count_max:
            last = self._list.last_in_ledger(position.ledger_id)
            if position.ledger_id == self._lce.ledger_id:
                last = min(last, self._lce.entry_id)
            last = min(last, position.entry_id + count_max - len(result) - 1)
            try:
                result.extend(await self._read_range(position.ledger_id, position.entry_id, last))
            except NotFoundError:
                if result:
                    return result  # the rest after a re-read of the list
                await self.refresh()  # trimmed under us: the list no longer names it
                if position.ledger_id in self._list.ids:
                    raise  # still listed, yet unreadable here (never an error loop)
                position = self.first_at_or_after(position)
                continue
            position = self.first_at_or_after(Position(position.ledger_id, last + 1))
        return result

    async def read_entry(self, position: Position) -> Entry:
        entries = await self.read_entries(position, 1)
        if not entries or entries[0].position != position:
            raise NotFoundError(f"no entry at {position} in {self.name}")
        return entries[0]

    async def _read_range(self, ledger_id: int, first: int, last: int) -> list[Entry]:
        """Entries ``first..last`` of ``ledger_id``: from the cache, else from the bookies once.
        Many subscriptions ask for the same fresh entries at once: they share one bookie read
        (``_inflight``) instead of each reading them."""
        positions = [Position(ledger_id, e) for e in range(first, last + 1)]
        missing = [p for p in positions if p not in self._cache]
        if missing:
            pending = [self._inflight.get(p) for p in missing]
            if all(future is not None for future in pending):
                await asyncio.gather(*(f for f in pending if f is not None))
            else:
                await self._fetch(ledger_id, missing[0].entry_id, missing[-1].entry_id)
        out = []
        for position in positions:
            data = self._cache.get(position)
            if data is None:  # evicted meanwhile (a tiny cache): read this range directly
                return await self._fetch(ledger_id, first, last)
            out.append(Entry(position, data))
        return out

    async def _fetch(self, ledger_id: int, first: int, last: int) -> list[Entry]:
        loop = asyncio.get_running_loop()
        mine: dict[Position, asyncio.Future[None]] = {}
        for entry_id in range(first, last + 1):
            position = Position(ledger_id, entry_id)
            if position not in self._inflight:
                mine[position] = self._inflight[position] = loop.create_future()
        try:
            out = await self._read_stored(ledger_id, first, last)
        except BaseException as error:
            for position, future in mine.items():
                del self._inflight[position]
                if not future.done():
                    future.set_exception(NotFoundError(f"read of {position} failed: {error}"))
                    future.exception()  # retrieved: a waiter that gave up must not log it
            raise
        for entry in out:
            self._remember(entry.position, entry.payload)
        for position, future in mine.items():
            del self._inflight[position]
            if not future.done():
                future.set_result(None)
        return out

    async def _read_stored(self, ledger_id: int, first: int, last: int) -> list[Entry]:
        """Entries of a listed ledger as the owner reads them: an offloaded ledger from its bookie
        copy while the record says it is there, else (or if the bookies fail) from the tiered store."""
        offload = self._list.info_of(ledger_id).offload
        store = self._offloaded
        if offload is None or not offload.complete or store is None:
            return await self._read_bookie_copy(ledger_id, first, last)
        if not offload.bookie_deleted:
            try:
                return await self._read_bookie_copy(ledger_id, first, last)
            except MagnetarError:  # the owner deleted the copy after its deletion lag
                self._readers.pop(ledger_id, None)
        stored = await store.read_entries(LedgerLocation(self.name, ledger_id, offload.uid), first, last)
        return [Entry(Position(ledger_id, first + i), data) for i, data in enumerate(stored)]

    async def _read_bookie_copy(self, ledger_id: int, first: int, last: int) -> list[Entry]:
        readable = self._list.entries_in(self._list.ids.index(ledger_id)) - 1  # acknowledged by the owner
        reader = await self._reader(ledger_id)
        reader.learn_lac(readable)
        try:
            entries = await reader.read_entries(first, last)
        except InvalidArgumentError as error:
            raise NotFoundError(str(error)) from error
        except MagnetarError:
            # The owner may have replaced a bookie (ensemble change) since we read the ledger's
            # metadata: read it again and ask the new ensemble once.
            reader = await self._reader(ledger_id, refresh=True)
            reader.learn_lac(readable)
            entries = await reader.read_entries(first, last)
        return entries

    def _remember(self, position: Position, data: bytes) -> None:
        # Many subscriptions read the same fresh entries: one bookie read serves them all.
        if position in self._cache:
            return
        self._cache[position] = data
        self._cache_bytes += len(data)
        while self._cache_bytes > MANAGED_LEDGER_CACHE_BYTES_MAX and self._cache:
            _, evicted = self._cache.popitem(last=False)
            self._cache_bytes -= len(evicted)
            self._budget.released(self, len(evicted), empty=False)
        self._budget.charged(self, len(data))  # every topic of the broker together (the owner's bound)

    def evict_oldest(self) -> bool:
        """The broker's cache budget is over: drop our oldest entry (``CacheHolder``)."""
        if not self._cache:
            return False
        _, evicted = self._cache.popitem(last=False)
        self._cache_bytes -= len(evicted)
        self._budget.bytes -= len(evicted)
        return True

    async def _reader(self, ledger_id: int, *, refresh: bool = False) -> LedgerReader:
        reader = self._readers.get(ledger_id)
        if reader is None or refresh:
            opened = await self._manager.open_ledger_no_recovery(ledger_id)  # never fences
            if reader is not None:
                opened.learn_lac(reader.last_add_confirmed)
            reader = opened
            self._readers[ledger_id] = reader
            while len(self._readers) > MANAGED_LEDGER_READERS_CACHED_COUNT_MAX:
                self._readers.popitem(last=False)
        self._readers.move_to_end(ledger_id)
        return reader

    def _forget_ledger(self, ledger_id: int) -> None:
        self._readers.pop(ledger_id, None)
        for position in [p for p in self._cache if p.ledger_id == ledger_id]:
            size = len(self._cache.pop(position))
            self._cache_bytes -= size
            self._budget.released(self, size, empty=not self._cache)

    def _skip_trimmed(self) -> None:
        first = self.first_position
        for cursor in [*self.cursors.values(), *self._non_durable]:
            self.entries_skipped += cursor.skip_to(first)

    # --- cursors ---------------------------------------------------------------------------------

    async def open_cursor(self, name: str, *, initial_position: Position | None = None) -> ReadOnlyCursor:
        """The read-only durable cursor ``name``: its stored record, else new at ``initial_position``.

        Served by one broker at a time: ``ManagedLedgerFencedError`` names the broker serving it."""
        if self._state is ReadOnlyState.CLOSED:
            raise ManagedLedgerClosedError(f"managed ledger {self.name} is closed")
        found = self.cursors.get(name)
        if found is not None:
            return found
        releasing = self._releasing.get(name)
        if releasing is not None:  # our own release of it is under way: its lock goes first
            await asyncio.shield(releasing)
            found = self.cursors.get(name)
            if found is not None:
                return found
        if len(self.cursors) >= MANAGED_LEDGER_CURSORS_COUNT_MAX:
            raise InvalidArgumentError(f"more than {MANAGED_LEDGER_CURSORS_COUNT_MAX} cursors")
        self._opening.add(name)
        try:
            cursor = await ReadOnlyCursor.open(self, name, self._lce if initial_position is None else initial_position)
        finally:
            self._opening.discard(name)
        self.cursors[name] = cursor
        return cursor

    def serves(self, name: str) -> bool:
        """Whether this broker serves subscription ``name`` (opening, open or being released): what
        another broker asks before it takes the subscription's lock over (``HolderProbe``)."""
        return name in self.cursors or name in self._releasing or name in self._opening

    def new_non_durable_cursor(self, start: Position | None = None) -> ManagedCursor:
        cursor = ManagedCursor.non_durable(self.cursor_context, self._lce if start is None else start)
        self._non_durable.add(cursor)
        return cursor

    def forget_non_durable_cursor(self, cursor: ManagedCursor) -> None:
        self._non_durable.discard(cursor)

    async def delete_cursor(self, name: str) -> None:
        cursor = self.cursors.pop(name, None)
        if cursor is not None:
            await cursor.delete_persisted()

    async def release_cursor(self, name: str) -> None:
        """Close cursor ``name`` (persisted, its lock released); the next open reads its record."""
        cursor = self.cursors.pop(name, None)
        if cursor is None:
            return
        releasing = asyncio.ensure_future(cursor.close())
        self._releasing[name] = releasing
        try:
            await asyncio.shield(releasing)
        finally:
            if self._releasing.get(name) is releasing:
                del self._releasing[name]

    def slowest_mark_delete(self) -> Position:
        durable = [cursor.mark_delete_position for cursor in self.cursors.values()]
        return min(durable) if durable else self._lce

    async def find_newest_matching(
        self, predicate: Callable[[Entry], Awaitable[bool] | bool], *, start: Position | None = None
    ) -> Position | None:
        return await ManagedLedger.find_newest_matching(self, predicate, start=start)  # type: ignore[arg-type]

    # --- close -----------------------------------------------------------------------------------

    async def close(self) -> None:
        if self._state is ReadOnlyState.CLOSED:
            return
        self._state = ReadOnlyState.CLOSED
        for watch in (self._watch, self._compaction_watch):
            if watch is not None:
                watch.cancel()
        for cursor in list(self.cursors.values()):
            await cursor.close()
        self.cursors.clear()
        for task in list(self._tasks):
            if task is not asyncio.current_task():
                task.cancel()
        for _, waiter in self._entry_waiters:
            if not waiter.done():
                waiter.set_result(None)
        self._readers.clear()
        self._budget.released(self, self._cache_bytes, empty=True)
        self._cache.clear()
        self._cache_bytes = 0

    def _spawn(self, coro: Any) -> asyncio.Task[Any]:
        task: asyncio.Task[Any] = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    # What a ManagedLedger's owner does and a reader never may: loud if anything asks.
    def append(self, data: bytes) -> asyncio.Future[Position]:
        raise ManagedLedgerFencedError(f"managed ledger {self.name} is opened read-only")

    def has_room(self, count: int = 1) -> bool:
        return True  # ``append`` refuses at once rather than making a caller wait

    async def wait_for_room(self) -> None:
        return None

    @property
    def terminated_position(self) -> Position | None:
        """Where the owner terminated the topic (from its record), or None."""
        return self._terminated_at
