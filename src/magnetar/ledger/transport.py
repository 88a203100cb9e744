"""The narrow bookie transport the ledger client is written against.

One call per bookie request, keyed by ``BookieId``. Entries travel in their wire form
(``magnetar.protocol.bookie.codec.Entry``: ledger, entry, LAC, digest, payload) so readers verify
the writer's digest end to end. Contract for implementations (the real adapter over
``ledger/bookie_client.py`` and the fakes used in tests):

* ``add`` returns only after the bookie durably stored the entry (journal fsync) and replied OK.
  A normal add to a fenced ledger raises ``FencedError``; ``recovery=True`` adds are accepted on
  fenced ledgers.
* ``read`` with ``fence=True`` fences the ledger on that bookie *before* it answers, and the fence
  is durable when the answer arrives. It raises ``NoSuchEntryError`` only when the bookie is
  sure it never stored the entry.
* ``read_last_entry`` answers the highest stored entry id and the highest LAC the bookie knows
  (``NO_ENTRY`` for none); ``fence=True`` fences first, as for ``read``.
* Every other failure is ``BookieUnavailable``. Calls never hang forever; callers also bound
  them with their own deadlines.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from magnetar.base.types import BookieId
from magnetar.protocol.bookie.codec import Entry


@dataclass(frozen=True, slots=True)
class LastEntryReply:
    """Answer to ``read_last_entry``: highest stored entry id and highest known LAC (or -1)."""

    last_entry_id: int
    lac: int


class BookieTransport(Protocol):
    async def add(self, bookie: BookieId, entry: Entry, *, recovery: bool, master_key: bytes) -> None: ...

    async def read(
        self, bookie: BookieId, ledger_id: int, entry_id: int, *, fence: bool, master_key: bytes
    ) -> Entry: ...

    async def read_last_entry(
        self, bookie: BookieId, ledger_id: int, *, fence: bool, master_key: bytes
    ) -> LastEntryReply: ...

    async def write_lac(self, bookie: BookieId, ledger_id: int, lac: int, *, master_key: bytes) -> None:
        """Store an explicit LAC on the bookie (for idle ledgers whose LAC no entry carries)."""


@runtime_checkable
class PipelinedAdds(Protocol):
    """Optional capability of a transport: an add sent on an already open connection without a
    task of its own (the writer's hot path: one callback per reply instead of a task per add).

    ``add_nowait`` returns ``None`` when it cannot send that way (no open connection, or its
    in-flight bytes reached ``LEDGER_PIPELINED_ADD_BYTES_MAX``): the caller then uses ``add``.
    Its future is bounded by the connection's request deadline. Once it is done,
    ``add_outcome`` gives the outcome ``add`` would have had: it returns True (stored), raises
    ``FencedError`` or ``BookieUnavailable``, or returns False when the connection was lost, in
    which case the caller retries with ``add`` (adds are idempotent).
    """

    def add_nowait(self, bookie: BookieId, entry: Entry, *, master_key: bytes) -> asyncio.Future[Any] | None:
        """Send the add now, or ``None`` (use ``add``)."""

    def add_outcome(self, bookie: BookieId, entry: Entry, future: asyncio.Future[Any]) -> bool:
        """The done ``future``'s outcome (see the class docstring)."""
