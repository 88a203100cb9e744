"""Topic compaction through ``/admin/v2`` (Pulsar's paths).

* ``PUT /persistent/{t}/{ns}/{topic}/compaction``: start a compaction (204); 409 while one is
  running. On a partitioned topic every partition is compacted.
* ``GET`` the same path: ``{"status": "NOT_RUN"|"RUNNING"|"SUCCESS"|"ERROR", "lastError": ...}``
  (Pulsar's ``LongRunningProcessStatus``).
* ``PUT /namespaces/{t}/{ns}/compactionThreshold`` and ``PUT .../{topic}/compactionThreshold``:
  Pulsar's verb for setting the threshold (bytes after the horizon; 0 disables), beside the
  ``GET|POST|DELETE`` forms the policy table (``policy_routes.SPECS``) serves.
"""

from __future__ import annotations

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
from magnetar.broker.compaction import CompactionRunningError, CompactionStatus
from magnetar.catalog.policies import Policies, TopicPolicies


def _threshold(value: object) -> int:
    if not isinstance(value, int) or value < 0:
        raise AdminError(412, "Invalid value for compactionThreshold: must be >= 0")
    return value


def routes(ctx: AdminContext) -> list[BaseRoute]:
    topic_base = "/persistent/{tenant}/{namespace}/{topic}"

    @api_route(f"{topic_base}/compaction", ["PUT"], "Trigger a compaction of the topic")
    async def trigger(request: Request) -> Response:
        for name in await targets(ctx, topic_of(request)):
            loaded = await load(ctx, name)
            try:
                loaded.compaction.start()
            except CompactionRunningError as error:
                raise AdminError(409, error.message) from None
        return no_content()

    @api_route(f"{topic_base}/compaction", ["GET"], "Status of the topic's last compaction")
    async def status(request: Request) -> Response:
        found = [(await load(ctx, name)).compaction for name in await targets(ctx, topic_of(request))]
        order = (CompactionStatus.ERROR, CompactionStatus.RUNNING, CompactionStatus.NOT_RUN, CompactionStatus.SUCCESS)
        worst = min(found, key=lambda c: order.index(c.status))  # a partitioned topic reports its least done partition
        return json_response({"status": worst.status.value, "lastError": worst.last_error or ""})

    @api_route("/namespaces/{tenant}/{namespace}/compactionThreshold", ["PUT"],
               "Set the namespace's compaction threshold (bytes)", body=int)
    async def set_namespace_threshold(request: Request) -> Response:
        value = _threshold(await read_body(request, int))

        def change(p: Policies) -> None:
            p.compaction_threshold = value

        await ctx.resources.update_policies(namespace_of(request), change)
        return no_content()

    @api_route(f"{topic_base}/compactionThreshold", ["PUT"], "Set the topic's compaction threshold (bytes)", body=int)
    async def set_topic_threshold(request: Request) -> Response:
        topic = topic_of(request)
        await targets(ctx, topic)  # 404 unless the namespace and the topic exist
        value = _threshold(await read_body(request, int))

        def change(p: TopicPolicies) -> None:
            p.compaction_threshold = value

        await ctx.resources.update_topic_policies(topic, change)
        return no_content()

    return [trigger, status, set_namespace_threshold, set_topic_threshold]
