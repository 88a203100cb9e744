"""Where read-only cursors live in the metadata store, and what the owner reads of them.

A read-only broker (``managed_ledger.read_only``) never creates a ledger, so its durable cursors
cannot have cursor ledgers: each one is a single ``CursorInfo`` record (``cursor_ledger_id`` -1,
bounded by ``cursor_ranges_persist_count_max`` individually deleted ranges and the batch-ack
bounds) at ``/read-only-cursors/{managed ledger name}/cursors/{subscription}``; the broker that
serves the subscription holds the ephemeral ``.../locks/{subscription}`` (its service URL).

These records sit outside the managed ledger's own node on purpose: the owner recovers every child
of its node as one of its cursors (taking it over with a cursor ledger), which would fence the
read-only broker that serves it. The owner instead *reads* these records when it trims, so a
read-only subscription holds back the deletion of what it has not consumed, exactly as the
owner's own subscriptions do.
"""

from __future__ import annotations

import json

from magnetar.base.errors import MagnetarError
from magnetar.base.types import Position
from magnetar.managed_ledger.cursor import cursor_name_from_node, cursor_node_name
from magnetar.metadata.api import MetadataStore
from magnetar.metadata.records import CursorInfo, decode

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
