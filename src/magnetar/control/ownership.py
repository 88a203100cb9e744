"""Topic ownership in a cluster: brokers own namespace bundles through ephemeral locks.

A broker serves a topic only while it holds the lock of the topic's bundle (``control.bundles``):
the ephemeral node ``/namespace/{tenant}/{ns}/{0xLOWER_0xUPPER}`` holding JSON
``{"nativeUrl", "httpUrl", "disabled"}`` (Pulsar's ownership data), created by the owner's
metadata session (``MetadataLock``). What is true at every moment:

* LOOKUP (``OwnershipLookup``) answers Connect (authoritative) only for a bundle this broker holds
  (or has just acquired). A bundle held by another broker is answered Redirect to its owner's
  ``nativeUrl`` (authoritative=false: the owner confirms). A free bundle is acquired here when the
  request is authoritative (an earlier broker chose us) or when this broker is the least loaded
  by load report (``control.load``); otherwise the answer is Redirect, authoritative=true, to the
  least-loaded broker, which then acquires it.
* A topic is loaded only while its bundle is held (``OwnedLogStore`` checks before and after the
  open), and a topic's managed ledger is opened by the owner, which fences and recovers the
  previous owner's ledger before the first write is accepted.
* When a bundle's lock is lost (session expired or closed, node deleted behind our back), the
  broker stops serving its topics at once, in the callback: the topics leave the service's table
  and their producers and consumers get CLOSE_PRODUCER / CLOSE_CONSUMER (the client looks up
  again), then the topics close. A SEND still on the wire for a closed producer makes the session
  close that connection, so nothing more is written through this broker for the topic.
* ``session_lost`` is set when the metadata session ends: the runtime then rebuilds the broker on
  a new session (``runtime.broker_node``).
* ``unload`` stops serving a bundle's topics and then releases its lock; ``split`` takes the locks
  of both halves, then swaps the boundaries (compare-and-set), then releases the parent, so the
  topics stay served without a gap and no other broker can take either half meanwhile. Whoever
  acquires a bundle re-reads the boundaries and gives the lock back if the bundle was split.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import enum
import json
import logging
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from magnetar.base.clock import Clock
from magnetar.base.errors import BadVersionError, InvalidArgumentError, NotFoundError
from magnetar.base.invariant import invariant
from magnetar.base.limits import (
    LOAD_REPORT_CHECK_MS,
    LOAD_REPORT_INTERVAL_MS,
    NAMESPACE_BUNDLES_COUNT_DEFAULT,
)
from magnetar.base.types import TopicName
from magnetar.broker.errors import BrokerError
from magnetar.broker.log import LogStore, TopicLog
from magnetar.broker.service import BrokerService
from magnetar.broker.topic import Topic
from magnetar.catalog.lookup import LookupAnswer, LookupKind
from magnetar.control.bundles import BundleRange, NamespaceBundles, local_policies_path, topic_hash
from magnetar.control.load import BundleStats, LoadReport, LoadReports, least_loaded
from magnetar.metadata.api import EventKind, MetadataStore, SessionState, Watch, WatchEvent
from magnetar.metadata.errors import MetadataError, SessionClosedError
from magnetar.metadata.lock import LockState, MetadataLock
from magnetar.protocol.pulsar import pb

log = logging.getLogger(__name__)

OWNERSHIP_ROOT = "/namespace"


def owner_path(namespace: str, bundle: BundleRange) -> str:
    return f"{OWNERSHIP_ROOT}/{namespace}/{bundle.name}"


#: How long a lookup on the broker a bundle is assigned to waits for the previous owner to let go.
ASSIGNED_RELEASE_WAIT_MS = 10_000
#: Topics of a moved bundle its new owner loads at once (the rest when their clients come back).
PRELOAD_TOPICS_MAX = 1000
#: Bundles let go of toward a target that lookups are redirected for without a metadata read.
MOVES_REMEMBERED_MAX = 1000
#: Where the load balancer's leader writes the broker a bundle should go to when it is free.
ASSIGNMENTS_ROOT = "/loadbalance/assignments"


def assignment_path(namespace: str, bundle: BundleRange) -> str:
    return f"{ASSIGNMENTS_ROOT}/{namespace}/{bundle.name}"


@dataclass(frozen=True, slots=True)
class Assignment:
    """JSON ``{"broker": service URL, "from": service URL, "reason", "time": ms, "topics": [...]}``;
    ``topics`` are the topics the previous owner had loaded, which the target loads at once."""

    broker: str
    source: str = ""
    reason: str = ""
    time_ms: int = 0
    topics: tuple[str, ...] = ()

    def encode(self) -> bytes:
        return json.dumps({"broker": self.broker, "from": self.source, "reason": self.reason,
                           "time": self.time_ms, "topics": list(self.topics)}).encode()

    @staticmethod
    def decode(value: bytes) -> Assignment:
        try:
            data = json.loads(value)
            return Assignment(str(data["broker"]), str(data.get("from", "")), str(data.get("reason", "")),
                              int(data.get("time", 0)), tuple(str(t) for t in data.get("topics", ())))
        except (ValueError, KeyError, TypeError) as error:
            raise InvalidArgumentError(f"bad bundle assignment: {error}") from None


def bundle_stats(owned: Sequence[OwnedBundle], topics: Sequence[Topic]) -> tuple[tuple[str, BundleStats], ...]:
    """Per owned bundle: its loaded topics' rates (last samples), producers, consumers, count."""
    out = []
    for bundle in owned:
        mine = [t for t in topics if bundle.serves(t.name)]
        subscriptions = [s for t in mine for s in t.subscriptions.values()]
        out.append((bundle.key, BundleStats(
            sum(t.published.msg_rate for t in mine), sum(s.dispatched.msg_rate for s in subscriptions),
            sum(t.published.byte_rate for t in mine), sum(s.dispatched.byte_rate for s in subscriptions),
            sum(len(t.producers) for t in mine), sum(len(s.consumers) for s in subscriptions), len(mine))))
    return tuple(out)


class BundleState(enum.Enum):
    OWNED = "owned"  # lock held, topics served
    UNLOADING = "unloading"  # lock held, topics being closed; lookups answer ServiceNotReady
    RELEASED = "released"  # given up (unload, split); lock deleted
    LOST = "lost"  # lock lost (session ended, node deleted); topics no longer served


_BUNDLE_TRANSITIONS: dict[BundleState, frozenset[BundleState]] = {
    BundleState.OWNED: frozenset({BundleState.UNLOADING, BundleState.RELEASED, BundleState.LOST}),
    BundleState.UNLOADING: frozenset({BundleState.RELEASED, BundleState.LOST}),
    BundleState.RELEASED: frozenset(),
    BundleState.LOST: frozenset(),
}


@dataclass(eq=False)
class OwnedBundle:
    namespace: str
    range: BundleRange
    lock: MetadataLock
    state: BundleState = BundleState.OWNED
    moving_to: str | None = None  # the broker the load balancer moves it to (while UNLOADING)
    moving_to_tls: str | None = None

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.range.name}"

    def serves(self, topic: TopicName) -> bool:
        return topic.namespace == self.namespace and self.range.contains(topic_hash(topic))

    def move(self, new: BundleState) -> None:
        invariant(new in _BUNDLE_TRANSITIONS[self.state], f"bundle {self.key}: {self.state} -> {new}")
        self.state = new


@dataclass(frozen=True, slots=True)
class OwnerData:
    native_url: str
    http_url: str
    disabled: bool = False
    native_url_tls: str | None = None  # Pulsar's nativeUrlTls: the owner's pulsar+ssl:// listener
    listeners: str = ""  # the owner's advertised listeners (a Redirect names the client's one)

    def encode(self) -> bytes:
        return json.dumps({"nativeUrl": self.native_url, "httpUrl": self.http_url,
                           "disabled": self.disabled, "nativeUrlTls": self.native_url_tls,
                           "advertisedListeners": self.listeners}).encode()

    @staticmethod
    def decode(value: bytes) -> OwnerData:
        try:
            data = json.loads(value)
            return OwnerData(str(data["nativeUrl"]), str(data.get("httpUrl", "")), bool(data.get("disabled")),
                             data.get("nativeUrlTls") or None, str(data.get("advertisedListeners", "")))
        except (ValueError, KeyError, TypeError) as error:
            raise InvalidArgumentError(f"bad ownership data: {error}") from None


class OwnershipState(enum.Enum):
    ACTIVE = "active"
    SESSION_LOST = "session_lost"
    CLOSED = "closed"


def _not_ready(message: str) -> BrokerError:
    return BrokerError(pb.ServiceNotReady, message)


class BundleOwnership:
    """The bundles this broker holds, over one metadata session."""

    def __init__(self, store: MetadataStore, service: BrokerService, *, broker_id: str, http_url: str,
                 bundles_count: int = NAMESPACE_BUNDLES_COUNT_DEFAULT) -> None:
        self.store = store
        self.service = service
        self.http_url = http_url
        self.bundles_count = bundles_count
        self.loads = LoadReports(store, broker_id)
        self.session_lost = asyncio.Event()
        self.changed = asyncio.Event()  # set when the owned set changes (the load report is due)
        self._owned: dict[str, OwnedBundle] = {}
        self._bundles: dict[str, NamespaceBundles] = {}
        self._watches: dict[str, Watch] = {}
        self._mutex = asyncio.Lock()  # one split at a time
        #: One acquisition per bundle at a time (bundle key -> lock, number of holders and waiters):
        #: the bundles of a move wave are taken concurrently, not one metadata round trip after another.
        self._bundle_locks: dict[str, tuple[asyncio.Lock, int]] = {}
        #: Bundles this broker just let go of toward a load balancer's target: key -> (target,
        #: its TLS URL, until when in ``_now_s`` seconds). Lookups meanwhile are redirected there
        #: at once, as while UNLOADING, not after reading owners and load reports.
        self._moved: dict[str, tuple[str, str | None, float]] = {}
        self._closing_tasks: set[asyncio.Task[Any]] = set()
        self._state = OwnershipState.ACTIVE
        store.session.add_listener(self._on_session)

    # --- identity and state ---------------------------------------------------------------------

    @property
    def service_url(self) -> str:
        return self.service.config.service_url

    @property
    def service_url_tls(self) -> str | None:
        return self.service.config.service_url_tls

    @property
    def state(self) -> OwnershipState:
        return self._state

    def owned(self) -> list[OwnedBundle]:
        return sorted(self._owned.values(), key=lambda o: (o.namespace, o.range))

    def install(self) -> None:
        """Make the service answer LOOKUP through this ownership and load only owned topics."""
        self.service.lookup = OwnershipLookup(self)
        self.service.log_store = OwnedLogStore(self.service.log_store, self)

    def serves(self, topic: TopicName) -> bool:
        return self._state is OwnershipState.ACTIVE and any(
            o.state is BundleState.OWNED and o.serves(topic) for o in self._owned.values())

    def _check_active(self) -> None:
        if self._state is not OwnershipState.ACTIVE:
            raise _not_ready("broker lost its metadata session; look up again")

    # --- bundles of a namespace -----------------------------------------------------------------

    async def bundles_of(self, namespace: str) -> NamespaceBundles:
        cached = self._bundles.get(namespace)
        if cached is not None:
            return cached
        if namespace not in self._watches:
            def forget(_event: WatchEvent) -> None:
                self._bundles.pop(namespace, None)

            self._watches[namespace] = await self.store.watch(local_policies_path(namespace), forget)
        bundles, _ = await self._read_bundles(namespace)
        self._bundles[namespace] = bundles
        return bundles

    async def current_bundles(self, namespace: str) -> NamespaceBundles:
        """The stored bundles, read now (admin reads: a split on another broker is seen at once,
        where ``bundles_of`` may still hold the cached copy until the watch fires)."""
        bundles, _ = await self._read_bundles(namespace)
        return bundles  # not cached: a watch event between this read and a store would be lost

    async def _read_bundles(self, namespace: str) -> tuple[NamespaceBundles, int]:
        """The stored boundaries and their version; a namespace seen first gets the default bundles."""
        path = local_policies_path(namespace)
        found = await self.store.get(path)
        if found is None:
            initial = NamespaceBundles.equal(namespace, self.bundles_count)
            try:
                await self.store.put(path, initial.encode(), -1)
                return initial, 0
            except BadVersionError:
                found = await self.store.get(path)  # another broker created it first
                if found is None:
                    raise _not_ready(f"bundles of {namespace} are changing; retry") from None
        return NamespaceBundles.decode(namespace, found.value), found.version

    async def owner_of(self, namespace: str, bundle: BundleRange) -> tuple[OwnerData, int] | None:
        found = await self.store.get(owner_path(namespace, bundle))
        if found is None:
            return None
        return OwnerData.decode(found.value), found.version

    def _owner_data(self) -> OwnerData:
        return OwnerData(self.service_url, self.http_url, native_url_tls=self.service_url_tls,
                         listeners=self.service.config.advertised_listeners)

    # --- lookup ---------------------------------------------------------------------------------

    async def lookup(self, topic: TopicName, authoritative: bool) -> LookupAnswer:
        self._check_active()
        bundles = await self.bundles_of(topic.namespace)
        bundle = bundles.find(topic)
        answer = self._answer_if_held(topic.namespace, bundle)
        if answer is not None:
            return answer
        if authoritative:
            await self._await_assigned_release(topic.namespace, bundle)
        async with self._bundle_lock(f"{topic.namespace}/{bundle.name}"):
            answer = self._answer_if_held(topic.namespace, bundle)
            if answer is not None:
                return answer
            return await self._find_or_take(topic.namespace, bundle, authoritative)

    @contextlib.asynccontextmanager
    async def _bundle_lock(self, key: str) -> AsyncIterator[None]:
        lock, users = self._bundle_locks.get(key) or (asyncio.Lock(), 0)
        self._bundle_locks[key] = (lock, users + 1)
        try:
            async with lock:
                yield
        finally:
            lock, users = self._bundle_locks[key]
            if users == 1:
                del self._bundle_locks[key]
            else:
                self._bundle_locks[key] = (lock, users - 1)

    def _answer_if_held(self, namespace: str, bundle: BundleRange) -> LookupAnswer | None:
        owned = self._owned.get(f"{namespace}/{bundle.name}")
        if owned is None:
            return self._answer_if_just_moved(f"{namespace}/{bundle.name}")
        if owned.state is BundleState.OWNED:
            return LookupAnswer(LookupKind.CONNECT, self.service_url, True, self.service_url_tls)
        if owned.moving_to and owned.moving_to != self.service_url:
            # Moving: send the client on to the chosen broker, which takes the bundle once we let go.
            return LookupAnswer(LookupKind.REDIRECT, owned.moving_to, True, owned.moving_to_tls)
        raise _not_ready(f"bundle {owned.key} is being unloaded; retry")

    def _answer_if_just_moved(self, key: str) -> LookupAnswer | None:
        moved = self._moved.get(key)
        if moved is None:
            return None
        target, target_tls, until_s = moved
        if self._now_s() >= until_s:
            del self._moved[key]  # the normal path now: the owner node, or the least loaded broker
            return None
        return LookupAnswer(LookupKind.REDIRECT, target, True, target_tls)

    def _remember_move(self, owned: OwnedBundle) -> None:
        if not owned.moving_to or owned.moving_to == self.service_url:
            return
        self._moved[owned.key] = (owned.moving_to, owned.moving_to_tls,
                                  self._now_s() + ASSIGNED_RELEASE_WAIT_MS / 1000)
        while len(self._moved) > MOVES_REMEMBERED_MAX:
            del self._moved[next(iter(self._moved))]

    async def _find_or_take(self, namespace: str, bundle: BundleRange, authoritative: bool) -> LookupAnswer:
        key = f"{namespace}/{bundle.name}"
        current = await self.owner_of(namespace, bundle)
        if current is not None:
            owner, version = current
            if owner.native_url != self.service_url:
                if owner.disabled:
                    raise _not_ready(f"bundle {key} is being unloaded; retry")
                return LookupAnswer(LookupKind.REDIRECT, owner.native_url, False, owner.native_url_tls,
                                    owner.listeners)
            # Our address, not held by this session: left by our previous life (restart before
            # its session expired). That process is gone (we hold its address now): remove it.
            with contextlib.suppress(BadVersionError):
                await self.store.delete(owner_path(namespace, bundle), version)
        if not authoritative:
            chosen, chosen_tls = await self.choose_owner_urls(namespace, bundle)
            if chosen != self.service_url:
                return LookupAnswer(LookupKind.REDIRECT, chosen, True, chosen_tls)
        if await self._acquire(namespace, bundle) and self.serves_bundle(namespace, bundle):
            acquired_s = self._now_s()
            placed = await self._forget_assignment(namespace, bundle)
            if placed is not None and placed.broker == self.service_url:
                self._preload(placed.topics, key, acquired_s)
            return LookupAnswer(LookupKind.CONNECT, self.service_url, True, self.service_url_tls)
        current = await self.owner_of(namespace, bundle)
        if current is not None and current[0].native_url != self.service_url:
            return LookupAnswer(LookupKind.REDIRECT, current[0].native_url, False, current[0].native_url_tls,
                                current[0].listeners)
        raise _not_ready(f"ownership of bundle {key} is changing; retry")

    async def choose_owner(self) -> str:
        """The service URL of the least-loaded broker (this one when no report is readable)."""
        return (await self.choose_owner_urls())[0]

    async def choose_owner_urls(self, namespace: str | None = None,
                                bundle: BundleRange | None = None) -> tuple[str, str | None]:
        """(pulsar://, pulsar+ssl:// or None) of the broker the load balancer's leader assigned
        the bundle to (``assignment_path``: its "preallocated" owner, while that broker reports
        load), else of the least-loaded broker (this one when no report is readable)."""
        reports = [r for r in await self.loads.all() if r.broker_id != self.loads.broker_id]
        if namespace is not None and bundle is not None:
            found = await self.store.get(assignment_path(namespace, bundle))
            if found is not None:
                target = Assignment.decode(found.value).broker
                if target == self.service_url:
                    return self.service_url, self.service_url_tls
                for report in reports:
                    if report.pulsar_service_url == target:
                        return target, report.pulsar_service_url_tls
        reports.append(self.load_report(self.loads.last.connections if self.loads.last else 0))
        best = least_loaded(reports)
        if best is None:
            return self.service_url, self.service_url_tls
        return best.pulsar_service_url, best.pulsar_service_url_tls

    async def _await_assigned_release(self, namespace: str, bundle: BundleRange) -> None:
        """A bundle the leader assigned to this broker, still held by its previous owner while it
        unloads: hold the client's lookup until the owner lets go (at most
        ``ASSIGNED_RELEASE_WAIT_MS``), so the client connects here without a retry back-off."""
        found = await self.store.get(assignment_path(namespace, bundle))
        try:
            if found is None or Assignment.decode(found.value).broker != self.service_url:
                return
        except InvalidArgumentError:
            return
        released = asyncio.Event()

        def on_event(event: WatchEvent) -> None:
            if event.kind is EventKind.DELETED:
                released.set()

        watch = await self.store.watch(owner_path(namespace, bundle), on_event)
        try:
            current = await self.owner_of(namespace, bundle)
            if current is None or current[0].native_url == self.service_url:
                return
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(released.wait(), ASSIGNED_RELEASE_WAIT_MS / 1000)
        finally:
            watch.cancel()

    async def _forget_assignment(self, namespace: str, bundle: BundleRange) -> Assignment | None:
        """The bundle is placed: its assignment (if any) has done its work; returns it."""
        path = assignment_path(namespace, bundle)
        with contextlib.suppress(NotFoundError, MetadataError, InvalidArgumentError):
            found = await self.store.get(path)
            if found is None:
                return None
            await self.store.delete(path)
            return Assignment.decode(found.value)
        return None

    def _now_s(self) -> float:
        """The broker clock's monotonic seconds (the system's monotonic clock in a real broker,
        which every process of the machine shares), else the event loop's."""
        clock = self.service.clock
        return clock.monotonic_ns() / 1e9 if clock is not None else asyncio.get_running_loop().time()

    def _preload(self, topics: Sequence[str], key: str, acquired_s: float) -> None:
        """Load the topics a moved bundle's previous owner served, concurrently and at once, so
        the clients coming back find them loaded (their PRODUCER/SUBSCRIBE commands would
        otherwise load them one after another on their connection). Each load logs its
        ``move timeline`` (``_now_s``: comparable across the processes of one machine), which
        the elastic test joins with the previous owner's and the clients' to break the pause of a move down."""
        async def load(name: str) -> None:
            try:
                await self.service.get_topic(TopicName.parse(name), create=False)
            except Exception as error:  # the clients' own requests load it (or report why not)
                log.info("preloading %s after a move: %s", name, error)
                return
            log.info("move timeline: topic %s of bundle %s acquired at %.1f ms, loaded at %.1f ms",
                     name, key, acquired_s * 1e3, self._now_s() * 1e3)

        for name in topics[:PRELOAD_TOPICS_MAX]:
            task = asyncio.get_running_loop().create_task(load(name))
            self._closing_tasks.add(task)
            task.add_done_callback(self._closing_tasks.discard)

    async def _note_topics(self, namespace: str, bundle: BundleRange, target: str, topics: Sequence[Topic]) -> None:
        """Tell the target (in the assignment) which topics to load when it takes the bundle."""
        path = assignment_path(namespace, bundle)
        with contextlib.suppress(MetadataError, InvalidArgumentError, BadVersionError):
            found = await self.store.get(path)
            if found is None:
                return
            assignment = Assignment.decode(found.value)
            if assignment.broker == target and topics:
                noted = dataclasses.replace(assignment, topics=tuple(sorted(str(t.name) for t in topics)))
                await self.store.put(path, noted.encode(), found.version)

    async def _acquire(self, namespace: str, bundle: BundleRange) -> bool:
        lock = MetadataLock(self.store, owner_path(namespace, bundle), self._owner_data().encode())
        if not await lock.try_acquire():
            return False
        current, _ = await self._read_bundles(namespace)
        if bundle not in current.ranges:  # split meanwhile: our cached boundaries were stale
            self._bundles[namespace] = current
            await lock.release()
            return False
        self._adopt(namespace, bundle, lock)
        return True

    def _adopt(self, namespace: str, bundle: BundleRange, lock: MetadataLock) -> OwnedBundle:
        owned = OwnedBundle(namespace, bundle, lock)
        self._owned[owned.key] = owned
        self._moved.pop(owned.key, None)
        lock.on_lost(lambda: self._on_bundle_lost(owned))
        if lock.state is not LockState.HELD:  # lost between the create and now
            self._on_bundle_lost(owned)
        log.info("acquired bundle %s", owned.key)
        self.changed.set()
        return owned

    # --- losing, unloading, splitting -----------------------------------------------------------

    def _stop_serving(self, serves: Callable[[TopicName], bool]) -> list[Topic]:
        """Synchronously take the matching topics out of service and disconnect their clients."""
        stopped = []
        for key, topic in list(self.service.topics.items()):
            if serves(topic.name):
                del self.service.topics[key]
                for producer in list(topic.producers.values()):
                    producer.channel.send_close_producer(producer.producer_id)
                for subscription in list(topic.subscriptions.values()):
                    for consumer in subscription.consumers:
                        consumer.channel.send_close_consumer(consumer.consumer_id)
                stopped.append(topic)
        return stopped

    def _close_later(self, topics: Sequence[Topic]) -> None:
        for topic in topics:
            task = asyncio.get_running_loop().create_task(_close_quietly(topic))
            self._closing_tasks.add(task)
            task.add_done_callback(self._closing_tasks.discard)

    def _on_bundle_lost(self, owned: OwnedBundle) -> None:
        if owned.state in (BundleState.RELEASED, BundleState.LOST):
            return
        owned.move(BundleState.LOST)
        if self._owned.get(owned.key) is owned:
            del self._owned[owned.key]
        if self._state is not OwnershipState.CLOSED:
            log.warning("lost bundle %s: its topics are no longer served here", owned.key)
        self._close_later(self._stop_serving(owned.serves))
        self.changed.set()

    def _on_session(self, state: SessionState) -> None:
        if state not in (SessionState.EXPIRED, SessionState.CLOSED) or self._state is not OwnershipState.ACTIVE:
            return
        self._state = OwnershipState.SESSION_LOST
        log.warning("metadata session %s: every bundle is lost", state.value)
        for owned in list(self._owned.values()):
            self._on_bundle_lost(owned)
        self._close_later(self._stop_serving(lambda _topic: True))
        self.session_lost.set()

    def _require_owned(self, namespace: str, bundle_name: str) -> OwnedBundle:
        bundle = BundleRange.parse(bundle_name)
        owned = self._owned.get(f"{namespace}/{bundle.name}")
        if owned is None or owned.state is not BundleState.OWNED:
            raise NotFoundError(f"bundle {namespace}/{bundle.name} is not owned by {self.service_url}")
        return owned

    def serves_bundle(self, namespace: str, bundle: BundleRange) -> bool:
        owned = self._owned.get(f"{namespace}/{bundle.name}")
        return owned is not None and owned.state is BundleState.OWNED

    def owns(self, namespace: str, bundle_name: str) -> bool:
        owned = self._owned.get(f"{namespace}/{BundleRange.parse(bundle_name).name}")
        return owned is not None and owned.state is BundleState.OWNED

    async def unload(self, namespace: str, bundle_name: str, target: str | None = None) -> None:
        """Close the bundle's topics (clients look up again), then give up its lock. With a
        ``target`` (the load balancer's choice), lookups meanwhile are redirected there.

        The topics close concurrently, and the wait for them is bounded by
        ``namespace_bundle_unloading_timeout_ms`` (Pulsar's ``namespaceBundleUnloadingTimeoutMs``):
        past it the lock is released anyway and the closes that have not finished go on behind
        it. That is safe: the topics are out of service and refuse writes already, and the next
        owner fences their ledgers and recovers every acknowledged entry."""
        owned = self._require_owned(namespace, bundle_name)
        loop = asyncio.get_running_loop()
        started = loop.time()
        if target is not None:
            owned.moving_to_tls = next((r.pulsar_service_url_tls for r in await self.loads.all()
                                        if r.pulsar_service_url == target), None)
        owned.moving_to = target
        owned.move(BundleState.UNLOADING)
        topics = self._stop_serving(owned.serves)
        stopped = self._now_s()
        if target is not None:
            await self._note_topics(namespace, owned.range, target, topics)
        noted = loop.time()
        slowest, unfinished = await self._close_bounded(topics)
        closed = loop.time()
        if owned.state is BundleState.UNLOADING:
            owned.move(BundleState.RELEASED)
            if self._owned.get(owned.key) is owned:
                del self._owned[owned.key]
            await owned.lock.release()
            self._remember_move(owned)
            log.info("unloaded bundle %s (%d topics) in %.1f ms: prepare %.1f ms, close %.1f ms "
                     "(slowest topic %.1f ms, %d still closing), release %.1f ms",
                     owned.key, len(topics), (loop.time() - started) * 1e3, (noted - started) * 1e3,
                     (closed - noted) * 1e3, slowest * 1e3, unfinished, (loop.time() - closed) * 1e3)
            log.info("move timeline: bundle %s stopped at %.1f ms, released at %.1f ms",
                     owned.key, stopped * 1e3, self._now_s() * 1e3)
        self.changed.set()

    async def _close_bounded(self, topics: Sequence[Topic]) -> tuple[float, int]:
        """Close ``topics`` concurrently; wait at most the unloading timeout. Returns the slowest
        finished close (seconds) and how many still run (they go on as closing tasks)."""
        if not topics:
            return 0.0, 0
        loop = asyncio.get_running_loop()
        durations: list[float] = []

        async def close_timed(topic: Topic) -> None:
            begun = loop.time()
            await _close_quietly(topic)
            durations.append(loop.time() - begun)
            log.debug("unload: closed %s in %.1f ms", topic.name, durations[-1] * 1e3)

        tasks = [loop.create_task(close_timed(t)) for t in topics]
        for task in tasks:  # tracked, so ``close`` waits for a close the unload stopped waiting for
            self._closing_tasks.add(task)
            task.add_done_callback(self._closing_tasks.discard)
        timeout_s = self.service.config.namespace_bundle_unloading_timeout_ms / 1000
        _, pending = await asyncio.wait(tasks, timeout=timeout_s)
        if pending:
            log.warning("unload: %d of %d topics not closed within %.0f ms; releasing the bundle, "
                        "their closes go on", len(pending), len(topics), timeout_s * 1e3)
        return max(durations, default=0.0), len(pending)

    async def split(self, namespace: str, bundle_name: str) -> tuple[BundleRange, BundleRange]:
        """Halve an owned bundle; this broker owns both halves afterwards, its topics stay loaded."""
        self._check_active()
        async with self._mutex:
            owned = self._require_owned(namespace, bundle_name)
            current, version = await self._read_bundles(namespace)
            if owned.range not in current.ranges:
                raise InvalidArgumentError(f"{owned.key} is no longer a bundle of {namespace}")
            halves = owned.range.halves()
            locks: list[MetadataLock] = []
            try:
                for half in halves:
                    lock = MetadataLock(self.store, owner_path(namespace, half), self._owner_data().encode())
                    locks.append(lock)
                    if not await lock.try_acquire():
                        raise BadVersionError(f"bundle {namespace}/{half.name} is held by another broker")
                split = current.split(owned.range)
                await self.store.put(local_policies_path(namespace), split.encode(), version)
            except BaseException:
                for lock in locks:
                    await lock.release()
                raise
            self._bundles[namespace] = split
            for half, lock in zip(halves, locks, strict=True):
                self._adopt(namespace, half, lock)
            if owned.state is BundleState.OWNED:
                owned.move(BundleState.RELEASED)
                if self._owned.get(owned.key) is owned:
                    del self._owned[owned.key]
                await owned.lock.release()
            log.info("split bundle %s into %s and %s", owned.key, halves[0].name, halves[1].name)
            return halves

    # --- load reports ---------------------------------------------------------------------------

    def load_report(self, connections: int, rate_in: float = 0.0, rate_out: float = 0.0, *,
                    cpu_percent: float = 0.0, now_ms: int = 0) -> LoadReport:
        owned = [o for o in self.owned() if o.state is BundleState.OWNED]
        stats = bundle_stats(owned, list(self.service.topics.values()))
        return LoadReport(
            self.loads.broker_id, self.service_url, self.http_url, tuple(o.key for o in owned),
            len(self.service.topics), connections, rate_in, rate_out, self.service_url_tls,
            cpu_percent, sum(s.msg_throughput_in for _, s in stats), sum(s.msg_throughput_out for _, s in stats),
            now_ms, stats,
        )

    def traffic(self) -> tuple[int, int]:
        """Messages published to and dispatched from the loaded topics, since they were loaded."""
        topics = list(self.service.topics.values())
        published = sum(t.published.msg_count for t in topics)
        dispatched = sum(s.dispatched.msg_count for t in topics for s in t.subscriptions.values())
        return published, dispatched

    async def run_load_reports(self, clock: Clock, connections: Callable[[], int],
                               interval_ms: int = LOAD_REPORT_INTERVAL_MS,
                               cpu_percent: Callable[[], float] | None = None) -> None:
        """Publish the load report now, at every change of the owned set and every ``interval_ms``.

        Rates are message counts over the last interval (never below 0: unloading a topic drops
        its counts from the sums).
        """
        last_ns = clock.monotonic_ns() - interval_ms * 1_000_000  # publish at once
        last_in, last_out = self.traffic()
        rate_in = rate_out = cpu = 0.0
        while self._state is OwnershipState.ACTIVE:
            now = clock.monotonic_ns()
            due = now - last_ns >= interval_ms * 1_000_000
            if self.changed.is_set() or due:
                self.changed.clear()
                if due:
                    seconds = max(1e-3, (now - last_ns) / 1e9)
                    total_in, total_out = self.traffic()
                    rate_in = max(0, total_in - last_in) / seconds
                    rate_out = max(0, total_out - last_out) / seconds
                    last_ns, last_in, last_out = now, total_in, total_out
                    cpu = cpu_percent() if cpu_percent is not None else 0.0
                try:
                    await self.loads.publish(self.load_report(connections(), rate_in, rate_out, cpu_percent=cpu,
                                                              now_ms=clock.now_ms()))
                except Exception as error:  # the session may be ending; the next round retries
                    log.info("load report not published: %s", error)
            await clock.sleep(LOAD_REPORT_CHECK_MS / 1000)

    async def close(self) -> None:
        """Stop reacting to the session (the runtime closes the service and the store)."""
        if self._state is OwnershipState.ACTIVE:
            self._state = OwnershipState.CLOSED
        self.store.session.remove_listener(self._on_session)
        for watch in self._watches.values():
            watch.cancel()
        self._watches.clear()
        if self._closing_tasks:
            await asyncio.gather(*list(self._closing_tasks), return_exceptions=True)


async def _close_quietly(topic: Topic) -> None:
    try:
        await topic.close()
    except Exception as error:  # a fenced or expired log fails to close cleanly; the next owner recovers it
        log.info("closing %s after losing it: %s", topic.name, error)


class OwnershipLookup:
    """``TopicLookup`` of a cluster broker."""

    def __init__(self, ownership: BundleOwnership) -> None:
        self.ownership = ownership

    async def lookup(self, topic: TopicName, authoritative: bool) -> LookupAnswer:
        """As ``BundleOwnership.lookup``; a metadata store that cannot answer now (ZooKeeper down,
        session ending) is ServiceNotReady, which the client retries."""
        try:
            return await self.ownership.lookup(topic, authoritative)
        except (MetadataError, SessionClosedError) as error:
            raise _not_ready(f"ownership of {topic} cannot be decided now: {error}") from error


class OwnedLogStore:
    """Opens a topic's log only while this broker owns the topic's bundle."""

    def __init__(self, inner: LogStore, ownership: BundleOwnership) -> None:
        self._inner = inner
        self._ownership = ownership

    def _check(self, topic: str) -> None:
        if not self._ownership.serves(TopicName.parse(topic)):
            raise _not_ready(f"{topic}: its namespace bundle is not served by {self._ownership.service_url}")

    async def open_log(self, topic: str, *, create: bool) -> TopicLog:
        self._check(topic)
        opened = await self._inner.open_log(topic, create=create)
        try:
            self._check(topic)  # the bundle may have been lost while the ledger was being recovered
        except BrokerError:
            await opened.close()
            raise
        return opened

    async def list_logs(self, namespace: str) -> list[str]:
        return await self._inner.list_logs(namespace)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


__all__ = [
    "ASSIGNMENTS_ROOT",
    "Assignment",
    "BundleOwnership",
    "BundleState",
    "OwnedBundle",
    "OwnedLogStore",
    "OwnerData",
    "OwnershipLookup",
    "OwnershipState",
    "assignment_path",
    "owner_path",
]
