"""Quorum read of a ledger's LAC over its last ensemble, optionally fencing (recovery step 2).

``read_lac_quorum`` asks every bookie of the last fragment for its last entry and known LAC and
returns once the *valid* answers (OK or "no such entry/ledger") cover every write set with
``Qw - Qa + 1`` bookies (``quorum.fencing_covered``). With ``fence=True`` that is exactly the
point after which the old writer cannot complete an add any more. Requests still outstanding
are left to finish in the background: each extra fenced bookie only helps.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from magnetar.base.clock import Clock
from magnetar.base.errors import MagnetarError
from magnetar.base.types import NO_ENTRY, BookieId
from magnetar.ledger._deadline import keep_in_background, with_deadline
from magnetar.ledger.errors import NoSuchEntryError, RecoveryIncompleteError
from magnetar.ledger.ledger_metadata import LedgerMetadata
from magnetar.ledger.quorum import fencing_covered
from magnetar.ledger.transport import BookieTransport, LastEntryReply


@dataclass(frozen=True, slots=True)
class LacQuorumResult:
    lac: int  # highest LAC any valid answer carried
    last_entry_id: int  # highest entry any answering bookie stores
    answered: frozenset[BookieId]


async def read_lac_quorum(
    transport: BookieTransport,
    clock: Clock,
    metadata: LedgerMetadata,
    *,
    fence: bool,
    timeout_ms: int,
    master_key: bytes,
    background: set[asyncio.Task[object]],
) -> LacQuorumResult:
    """See the module docstring. ``background`` keeps the still-running requests referenced."""
    ensemble = metadata.last_fragment.ensemble
    e, w, a = metadata.ensemble_size, metadata.write_quorum_size, metadata.ack_quorum_size

    async def ask(bookie: BookieId) -> LastEntryReply | None:
        try:
            return await with_deadline(
                clock,
                timeout_ms,
                transport.read_last_entry(bookie, metadata.ledger_id, fence=fence, master_key=master_key),
                f"read_last_entry {bookie}",
            )
        except NoSuchEntryError:
            return LastEntryReply(NO_ENTRY, NO_ENTRY)

    tasks: dict[asyncio.Task[LastEntryReply | None], int] = {
        asyncio.ensure_future(ask(bookie)): index for index, bookie in enumerate(ensemble)
    }
    answered: set[int] = set()
    lac: int = NO_ENTRY
    last: int = NO_ENTRY
    remaining = set(tasks)
    try:
        while remaining:
            done, remaining = await asyncio.wait(remaining, return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                try:
                    reply = task.result()
                except MagnetarError:
                    continue  # unknown: neither fenced nor known to be empty
                if reply is None:
                    continue
                answered.add(tasks[task])
                lac = max(lac, reply.lac)
                last = max(last, reply.last_entry_id)
            if fencing_covered(answered, e, w, a):
                return LacQuorumResult(lac, last, frozenset(ensemble[i] for i in answered))
    finally:
        # Requests still out (also when the caller is cancelled) keep fencing; they stay owned.
        for task in remaining:
            keep_in_background(task, background)
    raise RecoveryIncompleteError(
        f"ledger {metadata.ledger_id}: only {len(answered)} of {e} bookies answered the "
        f"{'fencing ' if fence else ''}LAC read; not every write set has {w - a + 1} answers"
    )
