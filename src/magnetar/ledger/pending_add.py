"""``PendingAdd``: one add in a ``LedgerHandle``'s table (BookKeeper's ``PendingAddOp``).

The object a caller hands to ``LedgerHandle.append_adds`` is the one the handle keeps in its
table and tells the outcome to (``done``): a caller's own op subclasses it (the managed
ledger's ``_OpAdd``), so one object per add serves both layers (no callback object, pair or
second record per add). ``CallbackAdd`` is the plain one for callers with a callback
(``LedgerHandle.append_run``/``append_then``).

An add may be started again on another handle once the first one told it a failure (the
managed ledger writes an undecided add again to its next ledger): ``LedgerHandle.append_adds``
resets the handle's part of it (``start``), and a handle that ended never touches an add again
(its late replies and released gates stop at ``owner``: the handle that took it last).
"""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import TypeVar

from magnetar.protocol.bookie.codec import EncodedEntry

#: How an add's caller is told its outcome: ``(entry_id, None)`` or ``(None, error)``, once.
AddCallback = Callable[[int | None, BaseException | None], None]


class PendingAdd(ABC):
    """One in-flight add: which bookies acknowledged it, which requests are outstanding, and how
    far it got through its fault-point gates. A plain class (compiled: a dataclass's generated
    ``__init__`` runs interpreted, one per message). Subclasses say what ``done`` does."""

    __slots__ = ("acked", "entry", "entry_id", "inflight", "owner", "payload", "quorum_gated", "quorum_passed",
                 "sent", "sent_ns", "told")

    def __init__(self, payload: bytes) -> None:
        self.payload = payload
        self.owner: object | None = None  # the handle that took it last (``start``)
        self.entry_id = -1  # its id there
        self.told = False  # the handle told ``done`` (once per start)
        self.entry: EncodedEntry | None = None  # built when sent, carrying the LAC known then
        self.acked = 0  # ensemble slots (bit i: ``ensemble[i]``) that stored it, in its write set
        self.inflight = 0  # ensemble slots asked and not answered yet
        self.sent_ns = 0  # when it was last sent to its write set (the add timeout counts from here)
        self.sent = False  # past ``ledger.after_send_before_reply``: its replies may complete it
        self.quorum_gated = False  # reached its ack quorum once: ``ledger.after_quorum_before_ack`` entered
        self.quorum_passed = False  # ... and passed

    def start(self, owner: object, entry_id: int) -> None:
        """Taken by handle ``owner`` as ``entry_id``: the handle's part as new (a restarted add
        forgets its earlier ledger's; that handle's late answers no longer reach it)."""
        self.owner = owner
        self.entry_id = entry_id
        self.told = False
        self.entry = None
        self.acked = 0
        self.inflight = 0
        self.sent_ns = 0
        self.sent = False
        self.quorum_gated = False
        self.quorum_passed = False

    @abstractmethod
    def done(self, entry_id: int | None, error: BaseException | None) -> None:
        """Told once per start, by the handle's reply processing: ``(entry_id, None)`` once Qa
        bookies stored it and every lower id completed, or ``(None, error)``. May add again."""


class CallbackAdd(PendingAdd):
    """A ``PendingAdd`` that tells a plain callback."""

    __slots__ = ("on_done",)

    def __init__(self, payload: bytes, on_done: AddCallback) -> None:
        super().__init__(payload)
        self.on_done = on_done

    def done(self, entry_id: int | None, error: BaseException | None) -> None:
        self.on_done(entry_id, error)


_T = TypeVar("_T")


def settle(future: asyncio.Future[_T], value: _T | None, error: BaseException | None) -> None:
    """Complete ``future`` with ``value`` or ``error`` unless it is done (the append callbacks'
    bridge to callers that await one add; shared with the managed ledger's append pipeline)."""
    if future.done():
        return
    if error is not None:
        future.set_exception(error)
        future.exception()  # retrieved here: a caller that gave up must not log noise
    else:
        future.set_result(value)  # type: ignore[arg-type]
