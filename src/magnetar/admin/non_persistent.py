"""``/non-persistent/{t}/{ns}[/{topic}]``: list, stats and delete non-persistent topics.

Non-persistent topics exist while loaded on this broker (``broker/non_persistent.py``), so the list
is the loaded ones of the namespace. Stats are Pulsar's ``NonPersistentTopicStats``: the persistent
shape (``admin/stats.py``) plus ``msgDropRate`` for the topic, each subscription and each
publisher (publishes are never refused here: 0), and ``msgDropCount`` (the running total, a
Magnetar addition so that drops can be checked exactly). Delete refuses (412) while clients are
attached unless ``force=true``, which disconnects them, as for persistent topics.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import unquote

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
    query_flag,
)
from magnetar.admin.stats import topic_stats
from magnetar.base.types import TopicName
from magnetar.broker.non_persistent import NonPersistentTopic, drop_stats
from magnetar.broker.resources import TopicBusy

_BASE = "/non-persistent/{tenant}/{namespace}"


def _name(request: Request) -> TopicName:
    return TopicName.parse(f"non-persistent://{namespace_of(request)}/{unquote(request.path_params['topic'])}")


async def _loaded(ctx: AdminContext, request: Request) -> NonPersistentTopic:
    name = _name(request)
    if not await ctx.resources.namespace_exists(name.namespace):
        raise AdminError(404, f"Namespace {name.namespace} does not exist")
    topic = ctx.service.topics.get(str(name))
    if not isinstance(topic, NonPersistentTopic):
        raise AdminError(404, f"Topic {name} not found")
    return topic


def non_persistent_stats(topic: NonPersistentTopic) -> dict[str, Any]:
    stats = topic_stats(topic)
    drops = drop_stats(topic)
    for name, subscription in stats["subscriptions"].items():
        subscription.update(drops.get(name, {"msgDropRate": 0.0, "msgDropCount": 0}))
    for publisher in stats["publishers"]:
        publisher["msgDropRate"] = 0.0
    stats["msgDropRate"] = sum(d["msgDropRate"] for d in drops.values())
    stats["msgDropCount"] = sum(d["msgDropCount"] for d in drops.values())
    return stats


def routes(ctx: AdminContext) -> list[BaseRoute]:
    @api_route(_BASE, ["GET"], "List the namespace's non-persistent topics")
    async def list_topics(request: Request) -> Response:
        namespace = namespace_of(request)
        if not await ctx.resources.namespace_exists(namespace):
            raise AdminError(404, f"Namespace {namespace} does not exist")
        prefix = f"non-persistent://{namespace}/"
        return json_response(sorted(name for name in ctx.service.topics if name.startswith(prefix)))

    @api_route(f"{_BASE}/{{topic}}/stats", ["GET"], "Stats of a non-persistent topic (with message drops)")
    async def stats(request: Request) -> Response:
        return json_response(non_persistent_stats(await _loaded(ctx, request)))

    @api_route(f"{_BASE}/{{topic}}", ["DELETE"], "Delete a non-persistent topic", query=(("force", "boolean"),))
    async def delete(request: Request) -> Response:
        topic = await _loaded(ctx, request)
        if not query_flag(request, "force"):
            if topic.producers:
                raise TopicBusy(f"Topic {topic.name} has active producers")
            if any(s.consumers for s in topic.subscriptions.values()):
                raise TopicBusy(f"Topic {topic.name} has active subscriptions")
        topic.disconnect_producers()
        for subscription in list(topic.subscriptions.values()):
            subscription.disconnect_consumers()
        await ctx.service.unload(topic.name)
        return no_content()

    return [list_topics, stats, delete]
