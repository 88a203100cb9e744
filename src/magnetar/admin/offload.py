"""Tiered storage through ``/admin/v2`` (Pulsar's paths and bodies).

* ``PUT /persistent/{t}/{ns}/{topic}/offload`` with a message id body (``{"ledgerId": L,
  "entryId": E}``, Pulsar's ``MessageIdImpl``; empty: everything sealed): offload, in the
  background, every sealed ledger that ends at or before it (204). 409 while one runs, 400 when
  the broker has no offload driver. A partitioned topic: every partition, the same id.
* ``GET`` the same path: ``{"status": "NOT_RUN"|"RUNNING"|"SUCCESS"|"ERROR", "lastError": ...,
  "firstUnoffloadedMessage": {"ledgerId", "entryId", "partitionIndex"}}`` (Pulsar's
  ``OffloadProcessStatus``; a partitioned topic reports its least done partition).
* ``GET|PUT /namespaces/{t}/{ns}/offloadThreshold`` (bytes kept on bookies; negative disables,
  0 offloads at once; GET answers -1 when unset, as Pulsar) and ``GET|PUT|DELETE
  .../offloadDeletionLagMs`` (ms; GET answers null when unset). A PUT applies at once to the
  namespace's loaded topics.
"""

from __future__ import annotations

import msgspec
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute

from magnetar.admin.common import (
    AdminContext,
    AdminError,
    api_route,
    json_response,
    namespace_of,
    no_content,
    read_body,
    topic_of,
)
from magnetar.admin.topics import load, targets
from magnetar.base.types import Position
from magnetar.broker import offload as broker_offload
from magnetar.catalog.policies import Policies
from magnetar.managed_ledger.offload import (
    OffloadNotConfiguredError,
    OffloadRunningError,
    OffloadStatus,
    offloaded,
)


class MessageIdBody(msgspec.Struct, rename="camel"):
    ledger_id: int
    entry_id: int
    partition_index: int = -1
    batch_index: int = -1


def routes(ctx: AdminContext) -> list[BaseRoute]:
    return [*_topic_routes(ctx), *_namespace_routes(ctx)]


def _topic_routes(ctx: AdminContext) -> list[BaseRoute]:
    topic_base = "/persistent/{tenant}/{namespace}/{topic}"

    @api_route(f"{topic_base}/offload", ["PUT"], "Offload the topic's sealed ledgers up to a message id",
               body=MessageIdBody, body_required=False)
    async def trigger(request: Request) -> Response:
        body = await read_body(request, MessageIdBody, required=False)
        up_to = None if body is None else Position(body.ledger_id, body.entry_id)
        for name in await targets(ctx, topic_of(request)):
            found = broker_offload.offload_of(await load(ctx, name))
            if found is None:
                raise AdminError(400, f"Topic {name} has no tiered storage (not on managed ledgers)")
            try:
                found.start(up_to)
            except OffloadRunningError as error:
                raise AdminError(409, str(error)) from None
            except OffloadNotConfiguredError as error:
                raise AdminError(400, str(error)) from None
        return no_content()

    @api_route(f"{topic_base}/offload", ["GET"], "Status of the topic's last offload")
    async def status(request: Request) -> Response:
        order = (OffloadStatus.ERROR, OffloadStatus.RUNNING, OffloadStatus.NOT_RUN, OffloadStatus.SUCCESS)
        answers = []
        for name in await targets(ctx, topic_of(request)):
            found = broker_offload.offload_of(await load(ctx, name))
            if found is None:
                raise AdminError(400, f"Topic {name} has no tiered storage (not on managed ledgers)")
            first = next((i for i in found.ledger_infos() if not offloaded(i)), None)
            answers.append((order.index(found.status), {
                "status": found.status.value,
                "lastError": found.last_error,
                "firstUnoffloadedMessage": {"ledgerId": first.ledger_id if first else -1, "entryId": 0,
                                            "partitionIndex": name.partition_index},
            }))
        return json_response(min(answers, key=lambda a: a[0])[1])

    return [trigger, status]


def _namespace_routes(ctx: AdminContext) -> list[BaseRoute]:
    async def _apply(namespace: str) -> None:
        for topic in list(ctx.service.topics.values()):
            if topic.name.namespace == namespace:
                await broker_offload.refresh(topic, ctx.service.policies, ctx.service.config)

    @api_route("/namespaces/{tenant}/{namespace}/offloadThreshold", ["GET"],
               "The namespace's offload threshold (bytes kept on bookies; -1: off)")
    async def get_threshold(request: Request) -> Response:
        policies = await ctx.resources.policies(namespace_of(request))
        return json_response(-1 if policies.offload_threshold is None else policies.offload_threshold)

    @api_route("/namespaces/{tenant}/{namespace}/offloadThreshold", ["PUT"],
               "Set the namespace's offload threshold (bytes kept on bookies)", body=int)
    async def set_threshold(request: Request) -> Response:
        value = await read_body(request, int)
        namespace = namespace_of(request)

        def change(p: Policies) -> None:
            p.offload_threshold = value

        await ctx.resources.update_policies(namespace, change)
        await _apply(namespace)
        return no_content()

    @api_route("/namespaces/{tenant}/{namespace}/offloadDeletionLagMs", ["GET"],
               "How long bookie copies stay after an offload (ms; null: the broker's default)")
    async def get_lag(request: Request) -> Response:
        return json_response((await ctx.resources.policies(namespace_of(request))).offload_deletion_lag_ms)

    @api_route("/namespaces/{tenant}/{namespace}/offloadDeletionLagMs", ["PUT"],
               "Set how long bookie copies stay after an offload (ms)", body=int)
    async def set_lag(request: Request) -> Response:
        value = await read_body(request, int)
        if value < 0:
            raise AdminError(412, "Invalid value for offloadDeletionLagMs: must be >= 0")
        namespace = namespace_of(request)

        def change(p: Policies) -> None:
            p.offload_deletion_lag_ms = value

        await ctx.resources.update_policies(namespace, change)
        await _apply(namespace)
        return no_content()

    @api_route("/namespaces/{tenant}/{namespace}/offloadDeletionLagMs", ["DELETE"],
               "Remove the namespace's offload deletion lag (the broker's default applies)")
    async def clear_lag(request: Request) -> Response:
        namespace = namespace_of(request)

        def change(p: Policies) -> None:
            p.offload_deletion_lag_ms = None

        await ctx.resources.update_policies(namespace, change)
        await _apply(namespace)
        return no_content()

    return [get_threshold, set_threshold, get_lag, set_lag, clear_lag]
