"""Offload of sealed ledgers into an object store, and reads back from it (PIP-17's model).

The unit is a sealed ledger of a managed ledger (never the current one). A ``LedgerOffloader``
(the driver: a directory, or an S3-compatible bucket, as Parquet files and a Delta Lake manifest —
``runtime/lakehouse``) stores and serves it; this module decides *when* and keeps the steps in the
one order that makes a crash harmless. One offload of ledger L:

1. ``write_ledger``: L's entries are written as files named by a fresh attempt id (``uid``).
   Fault point ``managed_ledger.offload.after_write_files``.
2. ``commit_manifest``: the table manifest lists this attempt's files for L and no other
   attempt's. Fault point ``managed_ledger.offload.after_manifest``.
3. L's entry in the ledger list gains ``OffloadContext(uid, complete)`` (CAS on the managed
   ledger's info). From here readers may read L from the object store.
   Fault point ``managed_ledger.offload.after_record``.
4. Once ``deletion_lag_ms`` passed since step 3: the bookies' copy is deleted, then
   ``bookie_deleted`` recorded. Fault point ``managed_ledger.offload.after_delete_bookie_copy``.

A crash before 3 leaves files (and maybe a manifest entry) of an attempt no metadata names:
``collect_orphans`` deletes every file whose (ledger, uid) is not recorded complete, and drops it
from the manifest; it runs when the managed ledger opens and before every offload pass. A crash
after 3 leaves a complete, readable offload; the bookie copy is deleted on a later pass (deleting a
ledger that is gone is not an error). Readers take entries from the bookies while their copy is
there (``bookie_deleted`` false) and fall back to the object store if the bookies fail, so no
step loses an entry; the ledger list names one attempt per ledger, so no entry is read twice.

Triggers: ``on_rollover`` (the namespace's ``offloadThreshold``: bytes kept on bookies; negative
disables, 0 offloads every sealed ledger) and ``start(up_to)`` (the admin's offload up to a
message id). ``status`` follows ``STATUS_TRANSITIONS`` (Pulsar's ``LongRunningProcessStatus``).
One pass runs at a time per managed ledger.
"""

from __future__ import annotations

import asyncio
import enum
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, runtime_checkable

import msgspec

from magnetar import faults
from magnetar.base.errors import MagnetarError
from magnetar.base.invariant import invariant
from magnetar.base.limits import OFFLOAD_READ_CHUNK_ENTRIES_COUNT
from magnetar.base.types import Position
from magnetar.metadata.records import LedgerInfo, OffloadContext

if TYPE_CHECKING:
    from magnetar.managed_ledger.ledger_list import LedgerList
    from magnetar.managed_ledger.managed_ledger import ManagedLedger

log = logging.getLogger(__name__)

AFTER_WRITE_FILES = "managed_ledger.offload.after_write_files"
AFTER_MANIFEST = "managed_ledger.offload.after_manifest"
AFTER_RECORD = "managed_ledger.offload.after_record"
AFTER_DELETE_BOOKIE_COPY = "managed_ledger.offload.after_delete_bookie_copy"

#: Pulsar's ``managedLedgerOffloadDeletionLagMs`` default: 4 hours.
OFFLOAD_DELETION_LAG_MS_DEFAULT = 4 * 3600 * 1000


class OffloadError(MagnetarError):
    """The object store failed (the driver translates its own errors into this)."""


class OffloadNotConfiguredError(MagnetarError):
    """No offload driver is configured on this broker."""


class OffloadRunningError(MagnetarError):
    """An offload of this topic is already running."""


class OffloadStatus(enum.Enum):
    NOT_RUN = "NOT_RUN"
    RUNNING = "RUNNING"
    SUCCESS = "SUCCESS"
    ERROR = "ERROR"


STATUS_TRANSITIONS: dict[OffloadStatus, frozenset[OffloadStatus]] = {
    OffloadStatus.NOT_RUN: frozenset({OffloadStatus.RUNNING}),
    OffloadStatus.RUNNING: frozenset({OffloadStatus.SUCCESS, OffloadStatus.ERROR}),
    OffloadStatus.SUCCESS: frozenset({OffloadStatus.RUNNING}),
    OffloadStatus.ERROR: frozenset({OffloadStatus.RUNNING}),
}


@dataclass(frozen=True, slots=True)
class OffloadSchema:
    """The topic's registered schema whose fields become typed columns."""

    version: int
    kind: str  # "AVRO" or "JSON" (both carry an Avro record definition in Pulsar)
    definition: str  # the schema's JSON text


@dataclass(frozen=True, slots=True)
class LedgerLocation:
    managed_ledger: str  # tenant/ns/persistent/<encoded topic>
    ledger_id: int
    uid: str


@dataclass(frozen=True, slots=True)
class WrittenLedger:
    location: LedgerLocation
    files: tuple[str, ...]  # paths relative to the topic's table directory
    size_bytes: int
    rows_count: int
    entries_count: int


@dataclass(frozen=True, slots=True)
class OffloadPolicy:
    #: Bytes kept on bookies (the current ledger counts); negative: no automatic offload.
    threshold_bytes: int = -1
    deletion_lag_ms: int = OFFLOAD_DELETION_LAG_MS_DEFAULT


#: The policy of a managed ledger no one set one for (frozen: one shared by every idle topic).
_DEFAULT_POLICY = OffloadPolicy()

#: (entry id, stored entry bytes) chunks of one ledger, in entry order.
EntryChunks = AsyncIterator[Sequence[tuple[int, bytes]]]


class LedgerOffloader(Protocol):
    """An object store holding offloaded ledgers. Every method is idempotent; failures raise
    ``OffloadError``. Blocking I/O runs off the event loop (the driver's business)."""

    driver_name: str

    def new_attempt_id(self) -> str:
        """A fresh, unique attempt id (never reused, also across restarts)."""

    async def write_ledger(self, location: LedgerLocation, chunks: EntryChunks,
                           schema: OffloadSchema | None) -> WrittenLedger:
        """Write every entry ``chunks`` yields as the files of attempt ``location.uid``."""

    async def commit_manifest(self, written: WrittenLedger, schema: OffloadSchema | None) -> None:
        """The table manifest lists ``written``'s files for its ledger, and no other attempt's."""

    async def read_entries(self, location: LedgerLocation, first: int, last: int) -> list[bytes]:
        """Stored entries ``first..last`` of an offloaded ledger, byte for byte as written."""

    async def delete_ledger(self, managed_ledger: str, ledger_id: int) -> None:
        """Remove every attempt's files of the ledger and its manifest entries."""

    async def collect_orphans(self, managed_ledger: str, keep: Mapping[int, str]) -> list[str]:
        """Delete files (and manifest entries) whose (ledger, uid) is not in ``keep``; ``keep``
        maps ledger id to the uid recorded complete. Returns what was deleted."""


@dataclass(frozen=True, slots=True)
class StoreLocation:
    """Where an object store is, as a reader outside the broker reaches it (the Spark connector,
    told by the broker's admin API): ``url`` a directory or ``s3://bucket/prefix``, with the S3
    endpoint URL (empty: AWS)."""

    url: str
    s3_endpoint: str = ""


@runtime_checkable
class LocatedOffloader(Protocol):
    """An offloader that can say where its store is (``runtime/lakehouse``'s drivers do)."""

    @property
    def location(self) -> StoreLocation: ...


def offloaded(info: LedgerInfo) -> bool:
    return info.offload is not None and info.offload.complete


class ManagedLedgerOffload:
    """The offload state of one managed ledger: policy, status, one pass at a time."""

    def __init__(self, ml: ManagedLedger, offloader: LedgerOffloader | None, ledgers: LedgerList) -> None:
        self._ml = ml
        self._ledgers = ledgers  # the managed ledger's list (``check`` reads it without a copy)
        self.offloader = offloader
        self.policy = _DEFAULT_POLICY
        self.status = OffloadStatus.NOT_RUN
        self.last_error = ""
        #: The topic's schema, asked for at the start of each ledger's offload (set by the broker).
        self.schema_source: Callable[[], Awaitable[OffloadSchema | None]] | None = None
        self._lock_made: asyncio.Lock | None = None  # ``_lock``: made on first use (an idle topic never offloads)
        self._task: asyncio.Task[None] | None = None
        #: A rollover came while a pass ran: that pass offloads what the threshold says before it
        #: ends (its own choice was made before the newly sealed ledger existed).
        self._rollover_pending = False

    @property
    def _lock(self) -> asyncio.Lock:
        """One offload pass or status change at a time."""
        if self._lock_made is None:
            self._lock_made = asyncio.Lock()
        return self._lock_made

    def _move(self, new: OffloadStatus) -> None:
        invariant(new in STATUS_TRANSITIONS[self.status], f"offload of {self._ml.name}: {self.status} -> {new}")
        self.status = new

    def set_policy(self, threshold_bytes: int, deletion_lag_ms: int) -> None:
        """Adopt this policy; the same one as now keeps its object (the broker's policy pass sets
        it per topic every pass: at 100,000 idle topics a new frozen dataclass each, built by its
        interpreted ``__init__``, was ~6% of the idle standalone's samples, and one more object
        per topic where the shared default served)."""
        deletion_lag_ms = max(0, deletion_lag_ms)
        policy = self.policy
        if policy.threshold_bytes != threshold_bytes or policy.deletion_lag_ms != deletion_lag_ms:
            self.policy = OffloadPolicy(threshold_bytes, deletion_lag_ms)

    @property
    def configured(self) -> bool:
        return self.offloader is not None

    def ledger_infos(self) -> list[LedgerInfo]:
        """The managed ledger's list, each ledger with its offload state."""
        return self._ml.ledger_infos()

    # --- triggers --------------------------------------------------------------------------------

    def start(self, up_to: Position | None = None) -> None:
        """Offload every sealed ledger up to ``up_to`` (all sealed ones when None), in the
        background; ``status`` tells how it went. Raises ``OffloadRunningError`` while one runs."""
        if self.offloader is None:
            raise OffloadNotConfiguredError("no offload driver is configured (managedLedgerOffloadDriver)")
        if self.status is OffloadStatus.RUNNING:
            raise OffloadRunningError(f"an offload of {self._ml.name} is already running")
        self._move(OffloadStatus.RUNNING)
        self.last_error = ""
        self._task = self._ml.spawn(self._pass(lambda: self.ledgers_up_to(up_to)))

    async def wait(self) -> OffloadStatus:
        """The status once the pass now running (if any) ended."""
        task = self._task
        if task is not None and not task.done():
            await asyncio.wait([task])
        return self.status

    async def on_rollover(self) -> None:
        """After a rollover: offload what the threshold says, and delete bookie copies now due."""
        if self.offloader is None:
            return
        if self.policy.threshold_bytes >= 0 and self.status is OffloadStatus.RUNNING:
            self._rollover_pending = True  # the running pass takes the newly sealed ledger too
            return
        if self.policy.threshold_bytes >= 0 and self.over_threshold():
            self._move(OffloadStatus.RUNNING)
            self.last_error = ""
            await self._pass(self.over_threshold)
        else:
            async with self._lock:
                await self._delete_due_bookie_copies()

    async def after_open(self) -> None:
        """When the managed ledger opened: collect orphans of attempts a crash interrupted, and
        finish deleting bookie copies that are due."""
        if self.offloader is None:
            return
        async with self._lock:
            await self._collect_orphans()
            await self._delete_due_bookie_copies()

    async def check(self) -> None:
        """The broker's periodic pass: bookie copies whose deletion lag ran out are deleted."""
        if self.offloader is None or not self._ledgers.any_offloaded():  # per topic per pass: no list copy
            return
        async with self._lock:
            await self._delete_due_bookie_copies()

    # --- choosing ledgers ------------------------------------------------------------------------

    def _sealed(self) -> list[LedgerInfo]:
        infos = self._ml.ledger_infos()
        current = self._ml.current_ledger_id if not self._ml.is_terminated else -1
        return [i for i in infos if i.ledger_id != current and i.entries_count > 0]

    def ledgers_up_to(self, up_to: Position | None) -> list[int]:
        """Sealed ledgers not yet offloaded that end at or before ``up_to``."""
        out = []
        for info in self._sealed():
            if offloaded(info):
                continue
            if up_to is None or info.ledger_id < up_to.ledger_id or (
                    info.ledger_id == up_to.ledger_id and up_to.entry_id >= info.entries_count - 1):
                out.append(info.ledger_id)
        return out

    def over_threshold(self) -> list[int]:
        """The oldest sealed ledgers to offload so that at most ``threshold_bytes`` stay on bookies."""
        threshold = self.policy.threshold_bytes
        if threshold < 0:
            return []
        on_bookies = sum(i.size_bytes for i in self._ml.ledger_infos() if not offloaded(i))
        out = []
        for info in self._sealed():
            if on_bookies <= threshold and threshold > 0:
                break
            if not offloaded(info):
                out.append(info.ledger_id)
                on_bookies -= info.size_bytes
        return out

    # --- the pass --------------------------------------------------------------------------------

    async def _pass(self, choose: Callable[[], list[int]]) -> None:
        try:
            async with self._lock:
                await self._collect_orphans()
                for ledger_id in choose():
                    await self._offload_ledger(ledger_id)
                while self._rollover_pending:  # rollovers during this pass: the threshold again
                    self._rollover_pending = False
                    for ledger_id in self.over_threshold():
                        await self._offload_ledger(ledger_id)
                await self._delete_due_bookie_copies()
        except (MagnetarError, OSError) as error:
            self.last_error = str(error) or type(error).__name__
            log.warning("offload of %s failed: %s", self._ml.name, self.last_error)
            self._move(OffloadStatus.ERROR)
            return
        except BaseException as error:
            self.last_error = f"interrupted: {type(error).__name__}"
            self._move(OffloadStatus.ERROR)
            raise
        self._move(OffloadStatus.SUCCESS)

    async def _offload_ledger(self, ledger_id: int) -> None:
        offloader = self.offloader
        assert offloader is not None
        info = self._ml.ledger_info(ledger_id)
        if info is None or offloaded(info):
            return  # trimmed meanwhile, or done by an earlier pass
        schema = await self.schema_source() if self.schema_source is not None else None
        location = LedgerLocation(self._ml.name, ledger_id, offloader.new_attempt_id())
        written = await offloader.write_ledger(location, self._chunks(info), schema)
        invariant(written.entries_count == info.entries_count,
                  f"ledger {ledger_id}: wrote {written.entries_count} entries of {info.entries_count}")
        await faults.point("managed_ledger.offload.after_write_files")
        await offloader.commit_manifest(written, schema)
        await faults.point("managed_ledger.offload.after_manifest")
        context = OffloadContext(uid=location.uid, driver=offloader.driver_name, complete=True,
                                 timestamp_ms=self._ml.clock.now_ms(),
                                 schema_version=schema.version if schema is not None else -1,
                                 size_bytes=written.size_bytes)
        if not await self._ml.record_offload(ledger_id, context):
            await offloader.delete_ledger(self._ml.name, ledger_id)  # trimmed meanwhile: nothing names it
            return
        await faults.point("managed_ledger.offload.after_record")

    async def _chunks(self, info: LedgerInfo) -> EntryChunks:
        first = 0
        last = info.entries_count - 1
        while first <= last:
            upto = min(last, first + OFFLOAD_READ_CHUNK_ENTRIES_COUNT - 1)
            entries = await self._ml.read_ledger_from_bookies(info.ledger_id, first, upto)
            yield [(entry.position.entry_id, entry.payload) for entry in entries]
            first = upto + 1

    async def _delete_due_bookie_copies(self) -> None:
        now_ms = self._ml.clock.now_ms()
        for info in self._ml.ledger_infos():
            context = info.offload
            if context is None or not context.complete or context.bookie_deleted:
                continue
            if now_ms - context.timestamp_ms < self.policy.deletion_lag_ms:
                continue
            await self._ml.delete_bookie_copy(info.ledger_id)
            await faults.point("managed_ledger.offload.after_delete_bookie_copy")
            await self._ml.record_offload(info.ledger_id, msgspec.structs.replace(context, bookie_deleted=True))

    async def _collect_orphans(self) -> None:
        offloader = self.offloader
        assert offloader is not None
        keep = {i.ledger_id: i.offload.uid for i in self._ml.ledger_infos() if i.offload is not None}
        removed = await offloader.collect_orphans(self._ml.name, keep)
        if removed:
            log.info("offload of %s: collected %d orphan files", self._ml.name, len(removed))


__all__ = [
    "AFTER_DELETE_BOOKIE_COPY",
    "AFTER_MANIFEST",
    "AFTER_RECORD",
    "AFTER_WRITE_FILES",
    "OFFLOAD_DELETION_LAG_MS_DEFAULT",
    "STATUS_TRANSITIONS",
    "EntryChunks",
    "LedgerLocation",
    "LedgerOffloader",
    "ManagedLedgerOffload",
    "OffloadError",
    "OffloadNotConfiguredError",
    "OffloadPolicy",
    "OffloadRunningError",
    "OffloadSchema",
    "OffloadStatus",
    "WrittenLedger",
    "offloaded",
]
