"""``GET /admin/v2/persistent/{t}/{ns}/{topic}/readLayout``: what a reader outside the broker needs
to read a topic partition's stored entries itself (a Magnetar endpoint; Pulsar has none).

The Spark connector plans reads with it when it is given only the broker's URLs (``serviceUrl`` +
``adminUrl``) and credentials: the broker, authorized as the reading role (``consume`` on the
topic, ``access.ROUTE_NEEDS``), answers from the owning managed ledger, so a reader never needs
the metadata store. Answer (one partition; a partitioned topic's name is 412, as internalStats)::

    {"topic": "persistent://t/ns/topic-partition-0",
     "lastConfirmedEntry": "L:E",
     "ledgers": [{"ledgerId": L, "entries": N, "state": "CLOSED"|"OPEN"|"IN_RECOVERY",
                  "metadata": "<base64 of the ledger's metadata record: ensembles, quorums>"},
                 {"ledgerId": L, "entries": N, "offloadUid": "<attempt>", "bookieCopyDeleted": b}],
     "lakehouse": {"url": "/dir or s3://bucket/prefix", "s3Endpoint": ""} | null}

``entries`` is how many entries may be read: a closed ledger's length, and for a ledger still
open the entries the owner has confirmed (acknowledged to producers, so never taken back). An
offloaded ledger (complete offload recorded) is read from the lakehouse file of ``offloadUid``
and carries no bookie metadata, since its bookie copy may be gone. Ledgers that retention deletes
while the answer is built are left out.
"""

from __future__ import annotations

import base64
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute

from magnetar.admin.common import AdminContext, AdminError, api_route, json_response, topic_of
from magnetar.admin.topics import load, targets
from magnetar.base.errors import MagnetarError
from magnetar.broker.managed_log import ManagedTopicLog
from magnetar.managed_ledger.managed_ledger import ManagedLedger
from magnetar.managed_ledger.offload import LocatedOffloader, offloaded
from magnetar.metadata.records import LedgerInfo, LedgerState


def routes(ctx: AdminContext) -> list[BaseRoute]:
    @api_route("/persistent/{tenant}/{namespace}/{topic}/readLayout", ["GET"],
               "What a reader needs to read the partition's entries itself: ledgers, readable ends, "
               "bookie ensembles, offload state and where the lakehouse is")
    async def read_layout(request: Request) -> Response:
        topic = topic_of(request)
        if await targets(ctx, topic) != [topic]:
            raise AdminError(412, "readLayout is per partition: ask for {topic}-partition-{i}")
        log = (await load(ctx, topic)).log
        if not isinstance(log, ManagedTopicLog) or not isinstance(log.managed_ledger, ManagedLedger):
            raise AdminError(412, f"Topic {topic} is not stored on managed ledgers (no layout to read)")
        return json_response(await layout_of(str(topic), log.managed_ledger))

    return [read_layout]


async def layout_of(name: str, ml: ManagedLedger) -> dict[str, Any]:
    """The answer for managed ledger ``ml`` (see the module docstring)."""
    ledgers = []
    for info in ml.ledger_infos():
        entry = await _ledger(ml, info)
        if entry is not None:
            ledgers.append(entry)
    offloader = ml.offload.offloader
    lakehouse = None
    if isinstance(offloader, LocatedOffloader):
        lakehouse = {"url": offloader.location.url, "s3Endpoint": offloader.location.s3_endpoint}
    lce = ml.last_confirmed_entry
    return {"topic": name, "lastConfirmedEntry": f"{lce.ledger_id}:{lce.entry_id}", "ledgers": ledgers,
            "lakehouse": lakehouse}


async def _ledger(ml: ManagedLedger, info: LedgerInfo) -> dict[str, Any] | None:
    if offloaded(info):
        assert info.offload is not None
        return {"ledgerId": info.ledger_id, "entries": info.entries_count, "offloadUid": info.offload.uid,
                "bookieCopyDeleted": info.offload.bookie_deleted}
    try:
        metadata = (await ml.manager.store.read(info.ledger_id)).metadata
    except MagnetarError:  # deleted since the list was read: trimmed by retention
        return None
    readable = metadata.last_entry_id + 1 if metadata.state is LedgerState.CLOSED else info.entries_count
    return {"ledgerId": info.ledger_id, "entries": readable, "state": metadata.state.name,
            "metadata": base64.b64encode(metadata.encode()).decode()}
