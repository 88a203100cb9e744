"""Replicated subscriptions (PIP-33) of one topic, with convergence when idle and individual acks.

A subscription is replicated when a consumer asked for it (``replicate_subscription_state``; the
cursor keeps the property ``pulsar.replicated.subscription``). The controller of a topic keeps its
replicated subscriptions in step with the same subscription in every remote cluster, through
marker entries written into the topic and carried by the geo-replicators
(``protocol/pulsar/markers.py``):

1. Snapshot round (here, cluster L): write SNAPSHOT_REQUEST {id, L} (``replicate_to`` = remotes).
2. A remote R, seeing the request arrive in its copy of the topic, writes SNAPSHOT_RESPONSE {id,
   (R, its topic's last position P_R)} with ``replicate_to`` = [L].
3. When every remote answered, L writes SNAPSHOT {id, local position S = the position where the last
   response landed here, [(R, P_R)]} locally (``replicate_to`` = [L]) and caches (S, {R: P_R}) for
   each replicated subscription (at most ``REPLICATED_SUBSCRIPTIONS_SNAPSHOTS_CACHED_MAX`` each).
   Why it is right (two clusters): every entry R held at P_R was in L before S (R's own entries
   were carried before its response; L's entries reached R after L stored them), so a subscription
   that acknowledged everything up to S here has acknowledged everything up to P_R there.
4. When a subscription's mark-delete position M passes a cached S, write UPDATE {name, [(R, P_R)]}
   (``replicate_to`` = remotes); R then acknowledges cumulatively up to P_R (creating the
   subscription at the earliest position if it has none).

Beyond Pulsar:

* **Convergence when idle.** A round starts whenever a subscription's acknowledgements changed (or
  data was written) since the last round, even if nothing is published any more; markers count
  as acknowledged when deciding whether M passed S (the "effective" mark-delete skips markers). So
  once acknowledgements stop, the next round (within one tick) ends with S after M and the update
  moves every remote to the same place: the backlogs become equal.
* **Individual acknowledgements.** Each entry the controller sees has an origin: the cluster where
  it was produced and its position there (``replicated_from`` + the source-position property for
  replicated entries, the local cluster and position otherwise). An update also lists the origins
  of the entries acknowledged since the last update (cumulatively or individually); a remote maps
  each to its own copy and acknowledges it. A consumer that fails over gets back only
  what it really has not acknowledged.
* **Markers never stall the mark-delete position.** Dispatchers acknowledge markers they pass, and
  the controller acknowledges the markers it saw after each replicated subscription's mark-delete
  position on every tick, with or without consumers (and before delayed delivery could hold them).

The controller sees every entry of the topic once, in log order, through the replicators
(``observe``, called as they read; a gap left by a replicator reading ahead of the others is read
from the topic). Its memory (entries seen with their origins, snapshots) is rebuilt from the topic
rather than written anywhere: on load (``recover``: the stored replicated subscriptions and the
entries after their positions, with this cluster's SNAPSHOT markers) and whenever a subscription
lies before the range it has seen (``_backfill``). It never treats an entry it has not seen as
acknowledged. With more than two clusters one round is taken where Pulsar takes two, so a
remote's position can run ahead of what was acknowledged here by entries in flight between remotes.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from magnetar.base.clock import Clock
from magnetar.base.limits import (
    REPLICATED_SUBSCRIPTIONS_RECOVER_ENTRIES_MAX,
    REPLICATED_SUBSCRIPTIONS_SEEN_ENTRIES_MAX,
    REPLICATED_SUBSCRIPTIONS_SEEN_IDLE_MAX,
    REPLICATED_SUBSCRIPTIONS_SNAPSHOT_TIMEOUT_MS,
    REPLICATED_SUBSCRIPTIONS_SNAPSHOTS_CACHED_MAX,
    REPLICATED_SUBSCRIPTIONS_TICK_MS,
    REPLICATED_SUBSCRIPTIONS_UPDATE_ACKED_MAX,
    REPLICATED_SUBSCRIPTIONS_UPDATE_PARTIAL_MAX,
    REPLICATION_READ_COUNT_MAX,
)
from magnetar.base.types import EARLIEST, Position
from magnetar.broker.dedup import is_system_cursor
from magnetar.broker.replicated import (
    decode_source_position,
    encode_source_position,
    is_replicated_subscription,
    mark_replicated_subscription,
    replicated_source,
)
from magnetar.broker.subscription import Subscription
from magnetar.broker.topic import Topic
from magnetar.protocol.pulsar import pb
from magnetar.protocol.pulsar.markers import MarkerType, cluster_position, marker_entry, mpb
from magnetar.protocol.pulsar.stored import split_stored_entry

log = logging.getLogger(__name__)

Origin = tuple[str, int]  # (cluster where the entry was produced, its encoded position there)


@dataclass(slots=True)
class _Seen:
    position: Position
    marker: bool
    origin: Origin | None
    batch_size: int  # messages in the entry (1 unless it is a batch of several)


@dataclass(frozen=True, slots=True)
class Snapshot:
    snapshot_id: str
    local: Position
    remotes: dict[str, Position]


@dataclass(slots=True)
class _Round:
    snapshot_id: str
    started_ms: int
    waiting: set[str]
    responses: dict[str, Position] = field(default_factory=dict)


def _before(position: Position) -> Position:
    """A position just before ``position`` (no entry lies between them)."""
    return Position(position.ledger_id, position.entry_id - 1)


def _position(message_id: mpb.MarkersMessageIdData) -> Position:
    return Position(int(message_id.ledger_id), int(message_id.entry_id))


class SubscriptionsController:
    def __init__(self, topic: Topic, local: str, remotes: Callable[[], list[str]],
                 connected: Callable[[], bool], clock: Clock) -> None:
        self.topic = topic
        self.local = local
        self._remotes = remotes
        self._connected = connected
        self._clock = clock
        self._seen: deque[_Seen] = deque()
        self._by_origin: dict[Origin, Position] = {}
        self._last_seen: Position | None = None
        self._last_data: Position | None = None
        self._trimmed_last_data: Position | None = None  # the last data entry forgotten by ``_trim``
        #: Every entry of the topic after this position, up to ``_last_seen``, is in ``_seen``
        #: (None: only from ``_seen[0]`` on). Below it the controller knows nothing until it reads.
        self._complete_after: Position | None = None
        self._backfill_tried: Position | None = None  # the lowest position a backfill gave up at
        self._round: _Round | None = None
        self._rounds_started = 0
        self._round_state: object = None
        self._caches: dict[str, deque[Snapshot]] = {}
        self._sent_updates: dict[str, object] = {}
        self._task: asyncio.Task[None] | None = None
        self._lock = asyncio.Lock()
        self._observing = asyncio.Lock()  # reports of entries are taken one at a time, in log order
        self.snapshots_completed = 0
        self.updates_written = 0
        self.updates_applied = 0
        self.recovered_entries = 0

    # --- lifecycle -------------------------------------------------------------------------

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._loop(), name=f"repl-subs:{self.topic.name}")

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    async def _loop(self) -> None:
        while True:
            await self._clock.sleep(REPLICATED_SUBSCRIPTIONS_TICK_MS / 1000)
            try:
                await self.tick()
            except asyncio.CancelledError:
                raise
            except Exception as error:  # the log closed under us, a remote left: the next tick tries again
                log.warning("replicated subscriptions of %s: %s", self.topic.name, error)

    def replicated(self) -> list[Subscription]:
        return [s for s in self.topic.subscriptions.values() if s.durable and is_replicated_subscription(s.cursor)]

    # --- what the replicators read -----------------------------------------------------------

    async def observe(self, position: Position, metadata: pb.MessageMetadata, payload: bytes | memoryview) -> None:
        """Every entry of the topic, in log order. Several replicators report the same entries, each
        from its own cursor: the first report of a position counts. One that reads ahead of the
        others (made later, or its remote was faster) would leave a gap behind it; the controller
        reads the gap from the topic first, so no entry is ever passed over."""
        async with self._observing:
            if self._last_seen is not None and position <= self._last_seen:
                return
            if self._last_seen is not None and position != self._last_seen.next():
                await self._fill_gap(position)
                if self._last_seen is not None and position <= self._last_seen:
                    return
            await self._take(position, metadata, payload)

    async def _take(self, position: Position, metadata: pb.MessageMetadata, payload: bytes | memoryview) -> None:
        # The marker is acted on before it is remembered: if acting fails (the replicator then
        # starts again from its cursor), the entry is reported again and acted on then.
        if metadata.marker_type and metadata.replicated_from:
            async with self._lock:  # not in the middle of a tick's acknowledgements and updates
                await self._remote_marker(position, metadata.marker_type, metadata.replicated_from, bytes(payload))
        self._remember(position, metadata)

    async def _fill_gap(self, upto: Position) -> None:
        """Take the entries between the last one seen and ``upto`` (excluded), read from the topic;
        a gap across a ledger change may be empty. Bounded by ``REPLICATED_SUBSCRIPTIONS_SEEN_ENTRIES_MAX``."""
        budget = REPLICATED_SUBSCRIPTIONS_SEEN_ENTRIES_MAX
        while self._last_seen is not None:
            if budget <= 0:  # too far behind: what is remembered no longer runs up to what comes next
                while self._seen:
                    self._forget(self._seen.popleft())
                self._complete_after = None
                return
            entries = [e for e in await self.topic.log.read(self._last_seen.next(), REPLICATION_READ_COUNT_MAX)
                       if e.position < upto]
            if not entries:
                return
            for entry in entries:
                metadata, payload = split_stored_entry(entry.payload)
                await self._take(entry.position, metadata, payload)
            budget -= len(entries)

    def _remember(self, position: Position, metadata: pb.MessageMetadata) -> None:
        self._last_seen = position
        seen = self._seen_entry(position, metadata)
        if seen.origin is not None:
            self._last_data = position
        self._seen.append(seen)
        while len(self._seen) > REPLICATED_SUBSCRIPTIONS_SEEN_ENTRIES_MAX:
            self._forget(self._seen.popleft())

    def _seen_entry(self, position: Position, metadata: pb.MessageMetadata) -> _Seen:
        marker = metadata.marker_type != 0
        origin: Origin | None = None
        if not marker:
            origin = replicated_source(metadata) or (self.local, encode_source_position(position.ledger_id,
                                                                                        position.entry_id))
            self._by_origin.setdefault(origin, position)
        batch_size = metadata.num_messages_in_batch if metadata.HasField("num_messages_in_batch") else 1
        return _Seen(position, marker, origin, batch_size)

    async def recover(self, replicators_read_after: Position) -> None:
        """Rebuild what a restart lost from what the topic stores, before the replicators start.

        The replicated subscriptions are the stored cursors flagged ``pulsar.replicated.subscription``
        (opened here, with no consumer yet). The entries after the oldest one's mark-delete position,
        up to ``replicators_read_after`` (the furthest replicator cursor: a replicator reports an
        entry before sending it and its cursor moves only on the remote's receipt, so the markers up
        to there were acted on before the restart), are remembered again without acting on their
        markers: origins for carrying and applying individual and batch acks, and this cluster's own
        SNAPSHOT markers, which refill every subscription's snapshot cache. Replicators behind that
        position read those entries again and are ignored; the entries after it are reported and
        acted on as usual (from there on a gap is read from the topic, see ``observe``). At most
        ``REPLICATED_SUBSCRIPTIONS_RECOVER_ENTRIES_MAX`` entries are read (the oldest ones: where
        the acknowledgement holes are)."""
        async with self._lock:
            for name in self.topic.log.cursor_names():
                if is_system_cursor(name) or name in self.topic.subscriptions:
                    continue
                cursor = await self.topic.log.open_cursor(name, durable=True,
                                                          initial_mark_delete=self.topic.log.last_position)
                if is_replicated_subscription(cursor):
                    await self.topic.subscription(name, durable=True, initial_mark_delete=cursor.mark_delete_position)
            if self._last_seen is not None:
                return
            self._last_seen = self._complete_after = replicators_read_after
            subscriptions = self.replicated()
            if subscriptions:
                self.recovered_entries = await self._backfill(min(s.cursor.mark_delete_position for s in subscriptions))

    def _known_after(self, position: Position) -> bool:
        """Whether every entry after ``position`` (up to the last one seen) is in ``_seen``."""
        if self._complete_after is not None and position >= self._complete_after:
            return True
        return bool(self._seen) and position >= self._seen[0].position

    async def _backfill(self, floor: Position) -> int:
        """Read the entries after ``floor`` that come before what is remembered (entries the
        controller already acted on, before a restart or before they were forgotten) and remember
        them first, without acting on their markers; this cluster's SNAPSHOT markers among them go
        to the snapshot caches. A subscription that became replicated only now (its flag was lost
        with an unflushed cursor and set again by its consumer, or an update from a remote made it
        on an old topic) needs this as much as a restart does. At most
        ``REPLICATED_SUBSCRIPTIONS_RECOVER_ENTRIES_MAX`` entries: beyond, nothing is read (and not
        again for a floor as old). Returns the entries remembered."""
        if self._known_after(floor) or (self._backfill_tried is not None and floor >= self._backfill_tried):
            return 0
        if self._complete_after is not None:
            bound = self._complete_after  # up to it, included
        elif self._seen:
            bound = _before(self._seen[0].position)
        else:
            return 0
        found: list[tuple[Position, pb.MessageMetadata, bytes]] = []
        position = floor.next()
        while True:
            entries = [e for e in await self.topic.log.read(position, REPLICATION_READ_COUNT_MAX) if e.position <= bound]
            if not entries:
                break
            if len(found) + len(entries) > REPLICATED_SUBSCRIPTIONS_RECOVER_ENTRIES_MAX:
                self._backfill_tried = floor
                return 0
            for entry in entries:
                metadata, payload = split_stored_entry(entry.payload)
                found.append((entry.position, metadata, bytes(payload)))
            position = entries[-1].position.next()
        self._prepend(found)
        self._complete_after = floor
        return len(found)

    def _prepend(self, entries: list[tuple[Position, pb.MessageMetadata, bytes]]) -> None:
        older: list[_Seen] = []
        snapshots: list[Snapshot] = []
        for position, metadata, payload in entries:
            older.append(self._seen_entry(position, metadata))
            if metadata.marker_type == MarkerType.SNAPSHOT and not metadata.replicated_from:
                marker = mpb.ReplicatedSubscriptionsSnapshot.FromString(payload)
                remotes = {c.cluster: _position(c.message_id) for c in marker.clusters}
                snapshots.append(Snapshot(marker.snapshot_id, _position(marker.local_message_id), remotes))
        self._seen.extendleft(reversed(older))
        for snapshot in snapshots:
            self._add_snapshot(snapshot)

    def _add_snapshot(self, snapshot: Snapshot) -> None:
        """Cache ``snapshot`` for every replicated subscription not yet past it, in log order (a
        backfill finds older ones than those cached), the newest ``..._SNAPSHOTS_CACHED_MAX`` kept."""
        for subscription in self.replicated():
            if snapshot.local <= subscription.cursor.mark_delete_position:
                continue
            cache = self._caches.setdefault(subscription.name, deque(maxlen=REPLICATED_SUBSCRIPTIONS_SNAPSHOTS_CACHED_MAX))
            if not cache or cache[-1].local < snapshot.local:
                cache.append(snapshot)
            elif all(c.snapshot_id != snapshot.snapshot_id for c in cache):
                ordered = sorted([*cache, snapshot], key=lambda c: c.local)
                cache.clear()
                cache.extend(ordered[-REPLICATED_SUBSCRIPTIONS_SNAPSHOTS_CACHED_MAX:])

    async def _remote_marker(self, position: Position, kind: int, origin: str, payload: bytes) -> None:
        if kind == MarkerType.SNAPSHOT_REQUEST:
            request = mpb.ReplicatedSubscriptionsSnapshotRequest.FromString(payload)
            last = self.topic.log.last_position
            response = mpb.ReplicatedSubscriptionsSnapshotResponse(
                snapshot_id=request.snapshot_id, cluster=cluster_position(self.local, last.ledger_id, last.entry_id))
            await self._write(MarkerType.SNAPSHOT_RESPONSE, response.SerializeToString(),
                              [request.source_cluster or origin])
        elif kind == MarkerType.SNAPSHOT_RESPONSE:
            answer = mpb.ReplicatedSubscriptionsSnapshotResponse.FromString(payload)
            current = self._round
            if current is None or answer.snapshot_id != current.snapshot_id:
                return  # an old round's answer (timed out, or read again after a restart)
            current.responses[answer.cluster.cluster] = _position(answer.cluster.message_id)
            current.waiting.discard(answer.cluster.cluster)
            if not current.waiting:
                await self._complete(current, position)
        elif kind == MarkerType.UPDATE:
            await self._apply(mpb.ReplicatedSubscriptionsUpdate.FromString(payload))

    # --- snapshots ---------------------------------------------------------------------------

    async def _write(self, kind: MarkerType, payload: bytes, replicate_to: list[str]) -> Position:
        return await self.topic.publish(marker_entry(kind, payload, replicate_to=replicate_to,
                                                     publish_time_ms=self._clock.now_ms()))

    async def _complete(self, done: _Round, local: Position) -> None:
        self._round = None
        snapshot = Snapshot(done.snapshot_id, local, dict(done.responses))
        marker = mpb.ReplicatedSubscriptionsSnapshot(
            snapshot_id=done.snapshot_id,
            local_message_id=mpb.MarkersMessageIdData(ledger_id=local.ledger_id, entry_id=local.entry_id))
        for cluster, remote in sorted(done.responses.items()):
            marker.clusters.append(cluster_position(cluster, remote.ledger_id, remote.entry_id))
        await self._write(MarkerType.SNAPSHOT, marker.SerializeToString(), [self.local])
        self._add_snapshot(snapshot)
        self.snapshots_completed += 1

    def _effective_mark_delete(self, subscription: Subscription) -> Position:
        """The mark-delete position moved over the markers (and acknowledged entries) after it."""
        cursor = subscription.cursor
        effective = cursor.mark_delete_position
        if not self._known_after(effective):
            return effective  # entries never seen lie after it: they may be unacknowledged
        for seen in self._seen:  # complete after ``effective``: consecutive entries of the topic
            if seen.position <= effective:
                continue
            if not (seen.marker or cursor.is_acked(seen.position)):
                break
            effective = seen.position
        return effective

    def _data_state(self, subscription: Subscription) -> tuple[Position | None, int]:
        """What a round is for: the last data entry acknowledged and how many after it are."""
        effective = self._effective_mark_delete(subscription)
        last_data = self._trimmed_last_data
        acked_after = 0
        for seen in self._seen:
            if seen.marker:
                continue
            if seen.position <= effective:
                last_data = seen.position
            elif subscription.cursor.is_acked(seen.position):
                acked_after += 1
        return last_data, acked_after

    async def tick(self) -> None:
        """Acknowledge markers, send updates, and start a snapshot round if anything changed."""
        async with self._lock:
            subscriptions = self.replicated()
            if not subscriptions:
                # Nothing to keep in step here yet (an update from a remote creates the subscription):
                # remember only the recent entries its first updates may name.
                while len(self._seen) > REPLICATED_SUBSCRIPTIONS_SEEN_IDLE_MAX:
                    self._forget(self._seen.popleft())
                return
            carried: list[Position] = []
            for subscription in subscriptions:
                await self._backfill(subscription.cursor.mark_delete_position)
                await self._ack_markers(subscription)
                carried.append(await self._maybe_update(subscription))
            # Only what an update carried may be forgotten: acknowledgements that came while the
            # update was being written moved the mark-delete position past entries it did not name.
            self._trim(min(carried))
            now_ms = self._clock.now_ms()
            current = self._round
            if current is not None and now_ms - current.started_ms < REPLICATED_SUBSCRIPTIONS_SNAPSHOT_TIMEOUT_MS:
                return
            self._round = None
            remotes = self._remotes()
            if not remotes or not self._connected():
                return  # no snapshot while a remote is unreachable: its answer could not come
            state = (self._last_data, tuple((s.name, self._data_state(s)) for s in subscriptions))
            if state == self._round_state:
                return
            self._round_state = state
            self._rounds_started += 1
            snapshot_id = f"{self.local}-{self._clock.now_ms()}-{self._rounds_started}"
            self._round = _Round(snapshot_id, now_ms, set(remotes))
            request = mpb.ReplicatedSubscriptionsSnapshotRequest(snapshot_id=snapshot_id, source_cluster=self.local)
            await self._write(MarkerType.SNAPSHOT_REQUEST, request.SerializeToString(), remotes)

    def _trim(self, floor: Position) -> None:
        """Forget the entries every replicated subscription here has acknowledged."""
        seen = self._seen
        while seen and seen[0].position <= floor:
            self._forget(seen.popleft())

    def _forget(self, old: _Seen) -> None:
        self._complete_after = old.position if self._complete_after is None else max(self._complete_after,
                                                                                       old.position)
        if old.origin is not None:
            self._trimmed_last_data = old.position
            if self._by_origin.get(old.origin) == old.position:
                del self._by_origin[old.origin]

    async def _ack_markers(self, subscription: Subscription) -> None:
        md = subscription.cursor.mark_delete_position
        markers = [s.position for s in self._seen
                   if s.marker and s.position > md and not subscription.cursor.is_acked(s.position)]
        if markers:
            await subscription.acknowledge(False,
                                           [(p, []) for p in markers])

    def _acked_origins(self, subscription: Subscription) -> tuple[list[Origin], list[tuple[Origin, int, list[int]]]]:
        """The origins of every acknowledged entry still remembered (``_trim`` forgets them only
        after the update ran; cumulatively acknowledged ones too, since the snapshot may map to a
        position before them), and of the batches acknowledged in part, with their ack sets."""
        acked: list[Origin] = []
        partial: list[tuple[Origin, int, list[int]]] = []
        cursor = subscription.cursor
        md = cursor.mark_delete_position
        for seen in self._seen:
            if seen.origin is None:
                continue
            if seen.position <= md or cursor.is_acked(seen.position):
                if len(acked) < REPLICATED_SUBSCRIPTIONS_UPDATE_ACKED_MAX:
                    acked.append(seen.origin)
            elif seen.batch_size > 1 and len(partial) < REPLICATED_SUBSCRIPTIONS_UPDATE_PARTIAL_MAX:
                ack_set = cursor.batch_ack_set(seen.position, seen.batch_size)
                if ack_set is not None:
                    partial.append((seen.origin, seen.batch_size, ack_set))
        return acked, partial

    async def _maybe_update(self, subscription: Subscription) -> Position:
        """Write an update if the subscription's state changed since the last one; returns the
        mark-delete position every entry up to which has been named in an update."""
        md = subscription.cursor.mark_delete_position
        cache = self._caches.get(subscription.name)
        effective = self._effective_mark_delete(subscription)
        chosen: Snapshot | None = None
        while cache and cache[0].local <= effective:
            chosen = cache.popleft()
        if chosen is not None and cache is not None:
            cache.appendleft(chosen)  # it stays the newest one passed until a newer one is
        acked, partial = self._acked_origins(subscription)
        if chosen is None and not acked and not partial:
            return md
        state = (chosen.snapshot_id if chosen else None, tuple(acked),
                 tuple((origin, tuple(ack_set)) for origin, _, ack_set in partial))
        if self._sent_updates.get(subscription.name) == state:
            return md
        update = mpb.ReplicatedSubscriptionsUpdate(subscription_name=subscription.name)
        if chosen is not None:
            for cluster, remote in sorted(chosen.remotes.items()):
                update.clusters.append(cluster_position(cluster, remote.ledger_id, remote.entry_id))
        for cluster, encoded in acked:
            ledger_id, entry_id = decode_source_position(encoded)
            update.acked.append(cluster_position(cluster, ledger_id, entry_id))
        for (cluster, encoded), batch_size, ack_set in partial:
            ledger_id, entry_id = decode_source_position(encoded)
            update.partial.append(mpb.PartialBatchAck(origin=cluster_position(cluster, ledger_id, entry_id),
                                                      batch_size=batch_size, ack_set=ack_set))
        await self._write(MarkerType.UPDATE, update.SerializeToString(), self._remotes())
        self._sent_updates[subscription.name] = state
        self.updates_written += 1
        return md

    # --- updates from the other clusters -------------------------------------------------------

    def _local_copy(self, subscription: Subscription, origin: mpb.ClusterMessageId) -> Position | None:
        """This cluster's copy of the entry named by ``origin``, if remembered and not yet acknowledged."""
        found = self._by_origin.get((origin.cluster, encode_source_position(
            int(origin.message_id.ledger_id), int(origin.message_id.entry_id))))
        if found is None or found <= subscription.cursor.mark_delete_position or subscription.cursor.is_acked(found):
            return None
        return found

    async def _apply(self, update: mpb.ReplicatedSubscriptionsUpdate) -> None:
        name = update.subscription_name
        subscription = self.topic.subscriptions.get(name)
        if subscription is None:
            subscription = await self.topic.subscription(name, durable=True, initial_mark_delete=EARLIEST)
        await mark_replicated_subscription(subscription.cursor)
        await self._backfill(subscription.cursor.mark_delete_position)  # a new one starts at the earliest
        for entry in update.clusters:
            if entry.cluster == self.local:
                target = _position(entry.message_id)
                if target <= self.topic.log.last_position:
                    await subscription.acknowledge_up_to(target)
        positions = sorted({p for p in (self._local_copy(subscription, e) for e in update.acked) if p is not None})
        # A batch acknowledged in part there: the same members here (the copy is the same batch).
        partial = [(p, list(ack.ack_set)) for ack in update.partial
                   if (p := self._local_copy(subscription, ack.origin)) is not None and any(ack.ack_set)]
        if positions or partial:
            await subscription.acknowledge(False,
                                           [*((p, []) for p in positions), *sorted(partial)])
        await self._ack_markers(subscription)
        self.updates_applied += 1
