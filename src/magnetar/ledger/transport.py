"""The narrow bookie transport the ledger client is written against.

One call per bookie request, keyed by ``BookieId``. Entries travel in their wire form
(``magnetar.protocol.bookie.codec.Entry``: ledger, entry, LAC, digest, payload) so readers verify
the writer's digest end to end. Contract for implementations (the real adapter over
``ledger/bookie_client.py`` and the fakes used in tests):

* ``add`` is one operation whatever the state of the connection: it returns a future (the
  writer chains a callback on it instead of running a task)
  that completes only after the bookie durably stored the entry (journal fsync) and replied OK.
  A normal add to a fenced ledger raises ``FencedError``; ``recovery=True`` adds are accepted on
  fenced ledgers. A transport that must connect first or wait for room on the connection does
  so inside that same operation (backpressure is a wait, never another path).
* ``read`` with ``fence=True`` fences the ledger on that bookie *before* it answers, and the fence
  is durable when the answer arrives. It raises ``NoSuchEntryError`` only when the bookie is
  sure it never stored the entry.
* ``read_last_entry`` answers the highest stored entry id and the highest LAC the bookie knows
  (``NO_ENTRY`` for none); ``fence=True`` fences first, as for ``read``.
* Every other failure is ``BookieUnavailableError``. Calls never hang forever; callers also bound
  them with their own deadlines.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Protocol

from magnetar.base.types import BookieId
from magnetar.protocol.bookie.codec import Entry


@dataclass(frozen=True, slots=True)
class LastEntryReply:
    """Answer to ``read_last_entry``: highest stored entry id and highest known LAC (or -1)."""

    last_entry_id: int
    lac: int


class BookieTransport(Protocol):
    def add(self, bookie: BookieId, entry: Entry, *, recovery: bool, master_key: bytes) -> asyncio.Future[None]: ...

    async def read(
        self, bookie: BookieId, ledger_id: int, entry_id: int, *, fence: bool, master_key: bytes
    ) -> Entry: ...

    async def read_last_entry(
        self, bookie: BookieId, ledger_id: int, *, fence: bool, master_key: bytes
    ) -> LastEntryReply: ...

    async def write_lac(self, bookie: BookieId, ledger_id: int, lac: int, *, master_key: bytes) -> None:
        """Store an explicit LAC on the bookie (for idle ledgers whose LAC no entry carries)."""
