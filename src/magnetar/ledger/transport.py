"""The narrow bookie transport the ledger client is written against.

One call per bookie request, keyed by ``BookieId``. Entries travel encoded
(``magnetar.protocol.bookie.codec.EncodedEntry``: ledger, entry, LAC, digest, payload) so readers
verify the writer's digest end to end. Contract for implementations (the real adapter over
``ledger/bookie_client.py`` and the fakes used in tests):

* ``add`` is one operation whatever the state of the connection: it returns a future (the
  writer chains a callback on it instead of running a task)
  that completes only after the bookie durably stored the entry (journal fsync) and replied OK.
  A normal add to a fenced ledger raises ``FencedError``; ``recovery=True`` adds are accepted on
  fenced ledgers. A transport that must connect first or wait for room on the connection does
  so inside that same operation (backpressure is a wait, never another path).
* ``add_run`` is ``add`` for a run of entries to one bookie in one call (the writer's adds of one
  batch): one write on a connection, one hand-off to a local bookie. Each entry is answered on
  its own through a plain callback, ``on_reply(index, None)`` once it is stored or
  ``on_reply(index, error)`` with the error ``add`` would raise; once per entry, never from
  inside the call. Entries of a run are sent to the bookie in order, after every earlier add to it.
* ``read`` with ``fence=True`` fences the ledger on that bookie *before* it answers, and the fence
  is durable when the answer arrives. It raises ``NoSuchEntryError`` only when the bookie is
  sure it never stored the entry.
* ``read_last_entry`` answers the highest stored entry id and the highest LAC the bookie knows
  (``NO_ENTRY`` for none); ``fence=True`` fences first, as for ``read``.
* Every other failure is ``BookieUnavailableError``. Calls never hang forever; callers also bound
  them with their own deadlines.
* ``add`` and ``add_run`` take their arguments by position (the writer calls ``add_run`` once per
  run and bookie: compiled, keyword arguments are parsed by name on every call).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from magnetar.base.types import BookieId
from magnetar.protocol.bookie.codec import EncodedEntry


@dataclass(frozen=True, slots=True)
class LastEntryReply:
    """Answer to ``read_last_entry``: highest stored entry id and highest known LAC (or -1)."""

    last_entry_id: int
    lac: int


#: How ``add_run`` tells one entry's outcome: ``(index in the run, None)`` or ``(index, error)``.
AddReplyCallback = Callable[[int, BaseException | None], None]


class BookieTransport(Protocol):
    def add(self, bookie: BookieId, entry: EncodedEntry, recovery: bool, master_key: bytes) -> asyncio.Future[None]: ...

    def add_run(self, bookie: BookieId, entries: Sequence[EncodedEntry], recovery: bool, master_key: bytes,
                on_reply: AddReplyCallback) -> None: ...

    async def read(
        self, bookie: BookieId, ledger_id: int, entry_id: int, *, fence: bool, master_key: bytes
    ) -> EncodedEntry: ...

    async def read_last_entry(
        self, bookie: BookieId, ledger_id: int, *, fence: bool, master_key: bytes
    ) -> LastEntryReply: ...

    async def write_lac(self, bookie: BookieId, ledger_id: int, lac: int, *, master_key: bytes) -> None:
        """Store an explicit LAC on the bookie (for idle ledgers whose LAC no entry carries)."""
