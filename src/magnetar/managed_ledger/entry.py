"""``ManagedEntry``: one entry of a managed ledger as readers see it (position and payload)."""

from __future__ import annotations

from dataclasses import dataclass

from magnetar.base.types import Position


@dataclass(frozen=True, slots=True)
class ManagedEntry:
    position: Position
    data: bytes
