"""AutoRecovery: an elected auditor finds ledgers that lost copies; replication workers restore them.

BookKeeper's AutoRecovery (``shared/reference/bookkeeper_replication.md`` 1.11), in two parts:

* ``Auditor`` — one per cluster, elected through ``MetadataLock`` at
  ``/ledgers/autorecovery/auditor`` (the lock passes on when the holder's session ends). It
  watches ``/ledgers/available``. A bookie that ledger metadata references but that is
  registered neither writable nor read-only is *missing*; once missing for
  ``lost_bookie_recovery_delay_ms`` on the injected ``Clock`` it is *lost*, and every ledger
  with a fragment on it gets the marker ``/ledgers/underreplicated/<ledger id>``. Every
  audit scans all ledger metadata, so a newly elected auditor finds losses nobody audited.
* ``ReplicationWorker`` — any number, anywhere. It takes a marker with an ephemeral lock
  (``/ledgers/autorecovery/locks/<ledger id>``). For every fragment that holds a lost bookie it
  copies the entries whose write set includes that bookie from surviving copies (the reader's
  ``speculative_read``) to a live bookie outside the fragment's ensemble (recovery adds of the
  writer's original wire entries), then CASes that bookie of that fragment in the ledger
  metadata. It deletes the marker, at the version it read, once no fragment holds a lost
  bookie. An OPEN ledger's last fragment has no end yet: the worker first waits
  ``open_ledger_grace_ms`` from the marking (the writer usually replaces the bookie itself),
  then fences and recovers the ledger so no writer can add behind its back.

Invariants:

* Ledger metadata changes only by CAS on a freshly read record, re-validated first: the
  fragment still starts and ends where the copy covered and still holds the lost bookie, and
  the target is still outside its ensemble; otherwise the step is redone or found done.
* Copies are idempotent recovery adds, so a worker that dies mid-copy is simply redone by the
  next one (its lock is ephemeral); the copies it left on an unused target are garbage.
* A marker is deleted only at the version its worker read: one the auditor extended meanwhile
  stays for the next round.
* Bounds: entries copied in parallel (``rereplication_batch_count_max``), markers scanned per
  round (``AUTORECOVERY_MARKERS_SCAN_COUNT_MAX``), metadata CAS attempts
  (``LEDGER_METADATA_CAS_RETRY_COUNT_MAX``); every bookie call has a deadline.

Adding bookies needs no rebalance: new ensembles and replacement targets draw from the
registered bookies as they are.
"""

from __future__ import annotations

import asyncio
import enum
import logging
from dataclasses import dataclass

from magnetar import faults
from magnetar.base.clock import Clock
from magnetar.base.errors import (
    BadVersionError,
    CorruptDataError,
    InvalidArgumentError,
    LimitExceededError,
    MagnetarError,
    NotFoundError,
)
from magnetar.base.invariant import invariant
from magnetar.base.limits import AUTORECOVERY_BATCH_COUNT_MAX, LEDGER_METADATA_CAS_RETRY_COUNT_MAX
from magnetar.base.types import BookieId
from magnetar.ledger._deadline import with_deadline
from magnetar.ledger.config import LedgerClientConfig
from magnetar.ledger.directory import AVAILABLE_PATH
from magnetar.ledger.ledger_metadata import LedgerMetadata, LedgerState
from magnetar.ledger.metadata_ops import LedgerMetadataStore
from magnetar.ledger.placement import BookieDirectory, PlacementPolicy
from magnetar.ledger.quorum import write_set
from magnetar.ledger.reader import speculative_read
from magnetar.ledger.recovery import LedgerRecovery
from magnetar.ledger.transport import BookieTransport
from magnetar.ledger.underreplication import (
    AUDITOR_PATH,
    UNDERREPLICATED_PATH,
    UnderReplicationMarkers,
    registered_bookies,
)
from magnetar.metadata.api import MetadataStore, WatchEvent
from magnetar.metadata.lock import LockLostError, LockState, MetadataLock

log = logging.getLogger(__name__)

__all__ = [
    "Auditor",
    "AuditorState",
    "AutoRecoveryConfig",
    "ReplicationOutcome",
    "ReplicationWorker",
]


@dataclass(frozen=True, slots=True)
class AutoRecoveryConfig:
    #: How long a bookie must stay unregistered before its ledgers are marked (BookKeeper's
    #: lostBookieRecoveryDelay, default 0).
    lost_bookie_recovery_delay_ms: int = 0
    #: Full audit even without bookie changes (BookKeeper checks bookies daily; markers a
    #: worker could not finish are retried by the workers' own poll, so this is a safety net).
    audit_interval_ms: int = 600_000
    #: An OPEN ledger whose last fragment lost a bookie is fenced only this long after it was
    #: marked (BookKeeper's openLedgerRereplicationGracePeriod).
    open_ledger_grace_ms: int = 30_000
    #: Entries read and copied in parallel (BookKeeper's rereplicationEntryBatchSize).
    rereplication_batch_count_max: int = 10
    #: Workers look at the markers at least this often (also after each marker change).
    worker_poll_interval_ms: int = 5_000

    def __post_init__(self) -> None:
        checks = {
            "lost_bookie_recovery_delay_ms": self.lost_bookie_recovery_delay_ms >= 0,
            "audit_interval_ms": self.audit_interval_ms > 0,
            "open_ledger_grace_ms": self.open_ledger_grace_ms >= 0,
            "rereplication_batch_count_max": 1 <= self.rereplication_batch_count_max <= AUTORECOVERY_BATCH_COUNT_MAX,
            "worker_poll_interval_ms": self.worker_poll_interval_ms > 0,
        }
        bad = [name for name, ok in checks.items() if not ok]
        if bad:
            raise InvalidArgumentError(f"bad AutoRecovery settings: {', '.join(bad)}")


async def _wait_any(clock: Clock, timeout_s: float, *events: asyncio.Event) -> None:
    """Return when any event is set or ``timeout_s`` passed on ``clock``."""
    # A list, not a set: tasks are cancelled in creation order, not in the order of their ids,
    # so a simulated run schedules the same callbacks in the same order every time.
    tasks: list[asyncio.Future[object]] = [asyncio.ensure_future(clock.sleep(timeout_s))]
    tasks += [asyncio.ensure_future(e.wait()) for e in events]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()


# --- auditor -------------------------------------------------------------------------------------


class AuditorState(enum.Enum):
    IDLE = "idle"
    CAMPAIGNING = "campaigning"  # waiting for the election lock
    LEADING = "leading"  # holds the lock, audits
    STOPPED = "stopped"  # lost or released the lock; a new Auditor object campaigns again


AUDITOR_TRANSITIONS: dict[AuditorState, frozenset[AuditorState]] = {
    AuditorState.IDLE: frozenset({AuditorState.CAMPAIGNING, AuditorState.STOPPED}),
    AuditorState.CAMPAIGNING: frozenset({AuditorState.LEADING, AuditorState.STOPPED}),
    AuditorState.LEADING: frozenset({AuditorState.STOPPED}),
    AuditorState.STOPPED: frozenset(),
}


class Auditor:
    """One candidate for the auditor role; ``run()`` campaigns, then audits while it leads."""

    def __init__(
        self,
        store: MetadataStore,
        *,
        ledgers: LedgerMetadataStore,
        clock: Clock,
        config: AutoRecoveryConfig,
        owner: str,
    ) -> None:
        self._store = store
        self._ledgers = ledgers
        self._clock = clock
        self._config = config
        self._owner = owner
        self._markers = UnderReplicationMarkers(store)
        self._wake = asyncio.Event()
        self._lock: MetadataLock | None = None
        self.state = AuditorState.IDLE
        #: Bookies referenced by ledgers but unregistered, with the monotonic time first seen so.
        self.missing_since_ns: dict[BookieId, int] = {}
        self.audits_count = 0
        self.marked: set[int] = set()  # ledgers this auditor marked (for tests and logs)

    def _to(self, state: AuditorState) -> None:
        invariant(state in AUDITOR_TRANSITIONS[self.state], f"auditor may not go {self.state} -> {state}")
        self.state = state

    async def run(self) -> None:
        """Campaign, then audit on every bookie change, delay expiry and interval, until the lock goes."""
        lock = MetadataLock(self._store, AUDITOR_PATH, self._owner.encode())
        self._lock = lock
        self._to(AuditorState.CAMPAIGNING)
        try:
            await lock.acquire()
            self._to(AuditorState.LEADING)
            log.info("auditor %s elected", self._owner)
            watch = await self._store.watch(AVAILABLE_PATH, self._on_bookies_changed)
            try:
                while lock.state is LockState.HELD:
                    self._wake.clear()
                    next_s = await self.audit()
                    await _wait_any(self._clock, next_s, self._wake, lock.lost)
            finally:
                watch.cancel()
        finally:
            await lock.release()
            if self.state is not AuditorState.STOPPED:
                self._to(AuditorState.STOPPED)

    def _on_bookies_changed(self, _event: WatchEvent) -> None:
        self._wake.set()

    async def audit(self) -> float:
        """One full audit; returns the seconds until the next one is due."""
        self.audits_count += 1
        registered = await registered_bookies(self._store)
        ledgers: list[LedgerMetadata] = []
        for ledger_id in await self._ledgers.list_ids():
            try:
                ledgers.append((await self._ledgers.read(ledger_id)).metadata)
            except NotFoundError:
                continue  # deleted since the listing
            except CorruptDataError as exc:
                log.error("auditor skips ledger %d: %s", ledger_id, exc)
        referenced = frozenset(b for meta in ledgers for b in meta.bookies())
        now_ns = self._clock.monotonic_ns()
        for bookie in list(self.missing_since_ns):
            if bookie in registered or bookie not in referenced:
                del self.missing_since_ns[bookie]
        for bookie in referenced - registered:
            self.missing_since_ns.setdefault(bookie, now_ns)
        delay_ns = self._config.lost_bookie_recovery_delay_ms * 1_000_000
        lost = frozenset(b for b, since in self.missing_since_ns.items() if now_ns - since >= delay_ns)
        for meta in ledgers:
            hit = meta.bookies() & lost
            if hit and await self._markers.mark(meta.ledger_id, hit, self._clock.now_ms()):
                self.marked.add(meta.ledger_id)
                log.info("ledger %d under-replicated: lost %s", meta.ledger_id, sorted(map(str, hit)))
        waits_ns = [since + delay_ns - now_ns for b, since in self.missing_since_ns.items() if b not in lost]
        return min([self._config.audit_interval_ms * 1_000_000, *waits_ns]) / 1e9


# --- replication worker --------------------------------------------------------------------------


class ReplicationOutcome(enum.Enum):
    REPLICATED = "replicated"  # every fragment is on live bookies; marker deleted
    DEFERRED = "deferred"  # an open ledger's tail waits for its grace period, or the marker changed
    BUSY = "busy"  # another worker holds the ledger's lock
    GONE = "gone"  # no marker (someone finished it) or the ledger was deleted
    FAILED = "failed"  # an operating error (no spare bookie, unreadable entry): retried later


@dataclass(frozen=True, slots=True)
class _Copied:
    """What one copy step covered, so a CAS retry on unchanged ranges need not copy again."""

    first_entry_id: int
    last_entry_id: int
    target: BookieId


class ReplicationWorker:
    """Restores the copies of marked ledgers (see the module docstring)."""

    def __init__(
        self,
        store: MetadataStore,
        *,
        ledgers: LedgerMetadataStore,
        transport: BookieTransport,
        directory: BookieDirectory,
        placement: PlacementPolicy,
        clock: Clock,
        config: AutoRecoveryConfig,
        ledger_config: LedgerClientConfig,
        owner: str,
        master_key: bytes = b"",
    ) -> None:
        self._store = store
        self._ledgers = ledgers
        self._transport = transport
        self._directory = directory
        self._placement = placement
        self._clock = clock
        self._config = config
        self._ledger_config = ledger_config
        self._owner = owner
        self._master_key = master_key
        self._markers = UnderReplicationMarkers(store)
        self._wake = asyncio.Event()
        self._not_before_ms: dict[int, int] = {}  # deferred ledgers: when to look again
        self.entries_copied_count = 0
        self.fragments_replaced_count = 0

    async def run(self) -> None:
        """Work through the markers on every marker change and every poll interval, until cancelled."""
        watch = await self._store.watch(UNDERREPLICATED_PATH, lambda _event: self._wake.set())
        try:
            while True:
                self._wake.clear()
                await self.run_once()
                await _wait_any(self._clock, self._next_wait_s(), self._wake)
        finally:
            watch.cancel()

    def _next_wait_s(self) -> float:
        now_ms = self._clock.now_ms()
        waits = [self._config.worker_poll_interval_ms, *(t - now_ms for t in self._not_before_ms.values())]
        return max(0.0, min(waits)) / 1000

    async def run_once(self) -> dict[int, ReplicationOutcome]:
        """One pass over the markers; returns what happened to each ledger looked at."""
        outcomes: dict[int, ReplicationOutcome] = {}
        now_ms = self._clock.now_ms()
        for ledger_id in await self._markers.ledger_ids():
            if self._not_before_ms.get(ledger_id, 0) > now_ms:
                continue
            outcomes[ledger_id] = await self.replicate(ledger_id)
        return outcomes

    async def replicate(self, ledger_id: int) -> ReplicationOutcome:
        """Take the ledger's lock and restore its copies; never raises for operating errors."""
        lock = self._markers.lock(ledger_id, self._owner)
        if not await lock.try_acquire():
            return ReplicationOutcome.BUSY
        try:
            outcome = await self._replicate_locked(ledger_id, lock)
        except MagnetarError as exc:
            log.warning("re-replication of ledger %d failed, will retry: %s", ledger_id, exc)
            outcome = ReplicationOutcome.FAILED
        finally:
            await lock.release()
        if outcome is not ReplicationOutcome.DEFERRED:
            self._not_before_ms.pop(ledger_id, None)
        return outcome

    async def _replicate_locked(self, ledger_id: int, lock: MetadataLock) -> ReplicationOutcome:
        found = await self._markers.get(ledger_id)
        if found is None:
            return ReplicationOutcome.GONE
        try:
            current = await self._ledgers.read(ledger_id)
        except NotFoundError:
            await self._markers.remove(ledger_id, found.version)
            return ReplicationOutcome.GONE
        # A bookie that registered again still has its copies: only the still-missing ones count.
        lost = found.marker.lost - await registered_bookies(self._store)
        meta = current.metadata
        deferred = False
        if meta.state is not LedgerState.CLOSED and lost & set(meta.last_fragment.ensemble):
            due_ms = found.marker.marked_ms + self._config.open_ledger_grace_ms
            if meta.state is LedgerState.OPEN and self._clock.now_ms() < due_ms:
                deferred = True
                self._not_before_ms[ledger_id] = due_ms
            else:
                # Fence: the writer can no longer add to the fragment we are about to copy.
                meta = await self._recovery(ledger_id).run()
        for index in range(len(meta.fragments)):
            if meta.state is not LedgerState.CLOSED and index == len(meta.fragments) - 1:
                continue  # an open tail: deferred above, or it holds no lost bookie
            for bookie in sorted(lost & set(meta.fragments[index].ensemble), key=str):
                self._check_lock(lock, ledger_id)
                await self._replace(ledger_id, index, bookie, lost, lock)
        if deferred:
            return ReplicationOutcome.DEFERRED
        self._check_lock(lock, ledger_id)
        if not await self._markers.remove(ledger_id, found.version):
            return ReplicationOutcome.DEFERRED  # the auditor added a lost bookie meanwhile: next round
        log.info("ledger %d fully replicated again", ledger_id)
        return ReplicationOutcome.REPLICATED

    def _recovery(self, ledger_id: int) -> LedgerRecovery:
        return LedgerRecovery(
            ledger_id,
            store=self._ledgers,
            transport=self._transport,
            clock=self._clock,
            config=self._ledger_config,
            master_key=self._master_key,
        )

    @staticmethod
    def _check_lock(lock: MetadataLock, ledger_id: int) -> None:
        if lock.state is not LockState.HELD:
            raise LockLostError(f"lost the re-replication lock of ledger {ledger_id}")

    async def _replace(
        self, ledger_id: int, index: int, bookie: BookieId, lost: frozenset[BookieId], lock: MetadataLock
    ) -> None:
        """Copy fragment ``index``'s entries held by ``bookie`` elsewhere, then CAS the ensemble."""
        copied: _Copied | None = None
        for _ in range(LEDGER_METADATA_CAS_RETRY_COUNT_MAX):
            current = await self._ledgers.read(ledger_id)
            meta = current.metadata
            fragment = meta.fragments[index]
            if bookie not in fragment.ensemble:
                return  # another worker (or the writer) already replaced it
            last = meta.fragment_end(index)
            invariant(last != -2, f"ledger {ledger_id}: fragment {index} must have an end before it is copied")
            if copied is None or (copied.first_entry_id, copied.last_entry_id) != (fragment.first_entry_id, last) \
                    or copied.target in fragment.ensemble:
                available = await self._directory.available_bookies()
                target = self._placement.replace_bookie(available, fragment.ensemble, lost,
                                                        write_quorum_size=meta.write_quorum_size,
                                                        slot=fragment.ensemble.index(bookie))
                await self._copy(meta, index, bookie, target, last)
                copied = _Copied(fragment.first_entry_id, last, target)
                await faults.point("autorecovery.after_copy")
            self._check_lock(lock, ledger_id)
            try:
                await self._ledgers.cas(current, meta.with_replaced_bookie(index, bookie, copied.target))
            except BadVersionError:
                continue  # the writer or another worker changed the ledger: re-validate
            self.fragments_replaced_count += 1
            log.info("ledger %d fragment %d: %s replaced by %s", ledger_id, index, bookie, copied.target)
            return
        raise LimitExceededError("LEDGER_METADATA_CAS_RETRY_COUNT_MAX", LEDGER_METADATA_CAS_RETRY_COUNT_MAX + 1,
                            LEDGER_METADATA_CAS_RETRY_COUNT_MAX)

    async def _copy(self, meta: LedgerMetadata, index: int, bookie: BookieId, target: BookieId, last: int) -> None:
        """Recovery-add every entry of the fragment whose write set includes ``bookie`` to ``target``."""
        fragment = meta.fragments[index]
        slot = fragment.ensemble.index(bookie)
        batch: list[int] = []
        for entry_id in range(fragment.first_entry_id, last + 1):
            if slot not in write_set(entry_id, meta.ensemble_size, meta.write_quorum_size):
                continue
            batch.append(entry_id)
            if len(batch) >= self._config.rereplication_batch_count_max:
                await self._copy_batch(meta, batch, target)
                batch = []
        if batch:
            await self._copy_batch(meta, batch, target)

    async def _copy_batch(self, meta: LedgerMetadata, entry_ids: list[int], target: BookieId) -> None:
        await asyncio.gather(*(self._copy_one(meta, e, target) for e in entry_ids))

    async def _copy_one(self, meta: LedgerMetadata, entry_id: int, target: BookieId) -> None:
        entry = await speculative_read(
            self._transport, self._clock, meta, entry_id, config=self._ledger_config, master_key=self._master_key
        )
        await with_deadline(
            self._clock,
            self._ledger_config.add_timeout_ms,
            self._transport.add(target, entry, recovery=True, master_key=self._master_key),
            f"re-replicate {meta.ledger_id}:{entry_id} to {target}",
        )
        self.entries_copied_count += 1
