"""Where read-only cursors live in the metadata store, and what the owner reads of them.

A read-only broker (``managed_ledger.read_only``) never creates a ledger, so its durable cursors
cannot have cursor ledgers: each one is a single ``CursorInfo`` record (``cursor_ledger_id`` -1,
bounded by ``cursor_ranges_persist_count_max`` individually deleted ranges and the batch-ack
bounds) at ``/read-only-cursors/{managed ledger name}/cursors/{subscription}``; the broker that
serves the subscription holds the ephemeral ``.../locks/{subscription}`` (its service and HTTP
URLs, ``LockRecord``). ``ReadOnlyCursor`` is that cursor.

A lock whose holder died stays until the holder's metadata session expires. A broker that finds
a subscription locked asks the holder first (``HolderProbe``) and removes the lock at once only
when the answer proves the holder does not serve it (its process is gone, or it restarted); any
other answer keeps the lock, so two brokers never dispatch one subscription.

These records sit outside the managed ledger's own node on purpose: the owner recovers every child
of its node as one of its cursors (taking it over with a cursor ledger), which would fence the
read-only broker that serves it. The owner instead *reads* these records when it trims, so a
read-only subscription holds back the deletion of what it has not consumed, exactly as the
owner's own subscriptions do.
"""

from __future__ import annotations

import contextlib
import json
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from magnetar.base.errors import BadVersionError, MagnetarError, NotFoundError
from magnetar.base.invariant import invariant
from magnetar.base.types import Position
from magnetar.managed_ledger.cursor import CursorState, ManagedCursor, cursor_name_from_node, cursor_node_name
from magnetar.managed_ledger.errors import ManagedLedgerFencedError
from magnetar.metadata.api import MetadataStore
from magnetar.metadata.errors import NodeExistsError
from magnetar.metadata.records import CursorInfo, decode, encode

if TYPE_CHECKING:
    from magnetar.managed_ledger.read_only import ReadOnlyManagedLedger

log = logging.getLogger(__name__)

READ_ONLY_CURSORS_ROOT = "/read-only-cursors"


def read_only_root(ml_name: str) -> str:
    return f"{READ_ONLY_CURSORS_ROOT}/{ml_name}"


def read_only_cursor_path(ml_name: str, cursor: str) -> str:
    return f"{read_only_root(ml_name)}/cursors/{cursor_node_name(cursor)}"


def read_only_lock_path(ml_name: str, cursor: str) -> str:
    return f"{read_only_root(ml_name)}/locks/{cursor_node_name(cursor)}"


async def read_only_cursors(store: MetadataStore, ml_name: str) -> dict[str, CursorInfo]:
    """Every read-only cursor of ``ml_name`` by subscription name (records that fail to decode
    are skipped: a half-written record cannot exist, CAS writes whole values)."""
    parent = f"{read_only_root(ml_name)}/cursors"
    if not await store.exists(parent):
        return {}
    out: dict[str, CursorInfo] = {}
    for node in await store.children(parent):
        found = await store.get(f"{parent}/{node}")
        if found is None:
            continue
        try:
            out[cursor_name_from_node(node)] = decode(CursorInfo, found.value)
        except Exception:
            continue
    return out


async def read_only_mark_deletes(store: MetadataStore, ml_name: str) -> list[Position]:
    """Mark-delete positions of the read-only cursors of ``ml_name`` (the owner's retention)."""
    cursors = await read_only_cursors(store, ml_name)
    return [Position(c.mark_delete.ledger_id, c.mark_delete.entry_id) for c in cursors.values()]


async def read_only_holders(store: MetadataStore, ml_name: str) -> dict[str, str]:
    """Subscription name -> service URL of the read-only broker serving it now."""
    parent = f"{read_only_root(ml_name)}/locks"
    if not await store.exists(parent):
        return {}
    out: dict[str, str] = {}
    for node in await store.children(parent):
        found = await store.get(f"{parent}/{node}")
        if found is None:
            continue
        try:
            out[cursor_name_from_node(node)] = str(json.loads(found.value)["broker"])
        except (ValueError, KeyError, TypeError):
            continue
    return out


async def delete_read_only_cursors(store: MetadataStore, ml_name: str) -> None:
    """Remove every read-only cursor record of a deleted managed ledger (locks go with sessions)."""
    for kind in ("cursors", "locks"):
        parent = f"{read_only_root(ml_name)}/{kind}"
        if not await store.exists(parent):
            continue
        for node in await store.children(parent):
            try:
                await store.delete(f"{parent}/{node}")
            except MagnetarError:
                continue


class HolderProbe(Protocol):
    """Asks the broker named in a subscription's lock whether it still serves the subscription."""

    async def still_serves(self, lock: LockRecord, topic: str, subscription: str) -> bool:
        """False only when the holder provably does not: its process is gone (its HTTP port
        refuses connections) or it answers that it does not serve ``subscription`` (it restarted).
        No answer in time, or any other failure, is True: the lock then waits for its session."""
        ...


@dataclass(frozen=True, slots=True)
class LockRecord:
    """The value of a subscription's lock: who serves it."""

    broker: str  # its service URL (named in ConsumerBusy)
    http: str = ""  # its HTTP URL (where a takeover asks it), empty if unknown

    def encode(self) -> bytes:
        return json.dumps({"broker": self.broker, "http": self.http}).encode()

    @classmethod
    def decode(cls, value: bytes) -> LockRecord:
        try:
            record = json.loads(value)
            return cls(str(record["broker"]), str(record.get("http", "")))
        except (ValueError, KeyError, TypeError):
            return cls("another broker")


async def _lock(ml: ReadOnlyManagedLedger, name: str, lock_path: str) -> None:
    """Take subscription ``name``'s lock; from a dead or restarted holder at once (``HolderProbe``),
    else ``ManagedLedgerFencedError`` naming the broker that serves it."""
    mine = LockRecord(ml.holder, ml.holder_http).encode()
    for _ in range(2):
        try:
            await ml.store.create(lock_path, mine, ephemeral=True)
            return
        except NodeExistsError:
            pass
        found = await ml.store.get(lock_path)
        if found is None:
            continue  # released meanwhile: take it
        held = LockRecord.decode(found.value)
        if ml.probe is None or not held.http or await ml.probe.still_serves(held, ml.topic, name):
            raise ManagedLedgerFencedError(
                f"subscription {name} of {ml.topic} is being served by read-only broker {held.broker}")
        # The holder is gone but its session not yet expired: remove its lock (that version only,
        # so a lock taken since by anyone else stands) and try once more.
        log.info("read-only %s: taking subscription %s over from %s (it no longer serves it)",
                 ml.name, name, held.broker)
        with contextlib.suppress(NotFoundError, BadVersionError):
            await ml.store.delete(lock_path, found.version)
        ml.takeovers += 1
    raise ManagedLedgerFencedError(f"subscription {name} of {ml.topic} is being taken by another read-only broker")


class ReadOnlyCursor(ManagedCursor):
    """A durable cursor of a read-only broker: one metadata record, no cursor ledger.

    Opened under an ephemeral lock (``read_only_lock_path``) that names the serving broker, so two
    brokers never dispatch one subscription at once: the second is refused (ConsumerBusy at the
    broker) until the first closes it, or its metadata session ends, or it is shown not to serve
    the subscription any more (``HolderProbe``: its process is gone, or it restarted). Flushes CAS the whole state
    into the record (bounded: ``cursor_ranges_persist_count_max`` ranges); a lost CAS means another
    broker took the cursor over (after our session ended) and this cursor is fenced.
    """

    def __init__(self, ml: ReadOnlyManagedLedger, name: str, mark_delete: Position) -> None:
        super().__init__(ml.cursor_context, name, mark_delete, durable=True)
        self._path = read_only_cursor_path(ml.name, name)
        self._lock_path = read_only_lock_path(ml.name, name)
        self._locked = False

    @classmethod
    async def open(cls, ml: ReadOnlyManagedLedger, name: str, initial: Position) -> ReadOnlyCursor:
        lock_path = read_only_lock_path(ml.name, name)
        await _lock(ml, name, lock_path)
        try:
            path = read_only_cursor_path(ml.name, name)
            found = await ml.store.get(path)
            if found is None:
                cursor = cls(ml, name, initial)
                try:
                    cursor._snapshot_version = await ml.store.put(path, encode(cursor._record(-1)), -1)
                except BadVersionError:
                    found = await ml.store.get(path)
            if found is not None:
                info = decode(CursorInfo, found.value)
                cursor = cls(ml, name, Position(info.mark_delete.ledger_id, info.mark_delete.entry_id))
                cursor._snapshot_version = found.version
                cursor._apply(info)
                cursor._persisted_md = cursor._md
                ml.entries_skipped += cursor.skip_to(ml.first_position)
        except BaseException:
            with contextlib.suppress(MagnetarError):
                await ml.store.delete(lock_path)
            raise
        cursor._locked = True
        cursor._start_flusher()
        return cursor

    async def flush(self) -> None:
        async with self._flush_lock:
            self._check_active()
            if self._changes == self._persisted_changes:
                return
            changes, md = self._changes, self._md
            await self._cas_snapshot(self._record(-1))
            self._persisted_changes = changes
            self._persisted_md = md
            self._last_flush_ns = self._ctx.clock.monotonic_ns()
            if self._changes == self._persisted_changes:
                self._dirty.clear()

    async def _switch_ledger(self, record: CursorInfo) -> None:
        invariant(False, f"read-only cursor {self.name} must never create a cursor ledger")

    async def close(self) -> None:
        if self._state is CursorState.CLOSED:
            return
        if self._state is CursorState.ACTIVE:
            try:
                await self.flush()
            except MagnetarError:
                pass  # taken over or store down: the last flush stands
        self._stop()
        await self._unlock()

    async def delete_persisted(self) -> None:
        self._stop()
        with contextlib.suppress(NotFoundError):
            await self._ctx.store.delete(self._path)
        await self._unlock()

    async def _unlock(self) -> None:
        if self._locked:
            self._locked = False
            with contextlib.suppress(MagnetarError):
                await self._ctx.store.delete(self._lock_path)
