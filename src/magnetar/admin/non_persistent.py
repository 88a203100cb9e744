"""``/non-persistent/{t}/{ns}[/{topic}]``: list, stats and delete non-persistent topics, and
partitioned non-persistent topics.

Non-persistent topics exist while loaded on this broker (``broker/non_persistent.py``), so the list
is the loaded ones of the namespace. Stats are Pulsar's ``NonPersistentTopicStats``: the persistent
shape (``admin/stats.py``) plus ``msgDropRate`` for the topic, each subscription and each
publisher (publishes dropped at the connection's in-flight bound,
``max_concurrent_non_persistent_messages_per_connection``), and ``msgDropCount`` (the running
total, a Magnetar addition so that drops can be checked exactly). The topic's ``msgDropRate`` and
``msgDropCount`` sum its publishers' and subscriptions'. Delete refuses (412) while clients are
attached unless ``force=true``, which disconnects them, as for persistent topics.

Partitioned (Pulsar's paths): ``PUT|POST|GET|DELETE .../{topic}/partitions`` record, grow, read and
delete the partition count (the metadata node ``catalog.lookup.partitioned_topic_path``, as for
persistent topics); the partitions ``{topic}-partition-{i}`` are loaded when a client first uses
them (nothing is stored to create ahead). ``.../{topic}/partitioned-stats`` sums the loaded
partitions' stats; ``.../partitioned`` lists the namespace's partitioned non-persistent topics.
Deleting a partitioned topic unloads its loaded partitions (412 while clients are attached unless
``force=true``).
"""

from __future__ import annotations

import json
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
    read_body,
)
from magnetar.admin.stats import partitioned_stats, topic_stats
from magnetar.admin.topics import PartitionsBody, check_partitions, require_namespace
from magnetar.base.errors import AlreadyExistsError
from magnetar.base.types import TopicName
from magnetar.broker.non_persistent import NonPersistentTopic, drop_stats, publisher_drop_stats
from magnetar.catalog.lookup import PARTITIONED_TOPICS_ROOT, partitioned_topic_path
from magnetar.catalog.resources import TopicBusyError

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
    publisher_drops = publisher_drop_stats(topic)
    for publisher in stats["publishers"]:
        publisher.update(publisher_drops.get(publisher["producerName"], {"msgDropRate": 0.0, "msgDropCount": 0}))
    every = [*drops.values(), *publisher_drops.values()]
    stats["msgDropRate"] = sum(d["msgDropRate"] for d in every)
    stats["msgDropCount"] = sum(d["msgDropCount"] for d in every)
    return stats


def _partitioned_stats(partitions: list[dict[str, Any]], count: int) -> dict[str, Any]:
    total = partitioned_stats(partitions, count)
    for key in ("msgDropRate", "msgDropCount"):
        total[key] = sum(p[key] for p in partitions)
    return total


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
                raise TopicBusyError(f"Topic {topic.name} has active producers")
            if any(s.consumers for s in topic.subscriptions.values()):
                raise TopicBusyError(f"Topic {topic.name} has active subscriptions")
        topic.disconnect_producers()
        for subscription in list(topic.subscriptions.values()):
            subscription.disconnect_consumers()
        await ctx.service.unload(topic.name)
        return no_content()

    return [list_topics, stats, delete, *_partitioned_routes(ctx), *_partitioned_removal_and_stats_routes(ctx)]


def _partitioned_routes(ctx: AdminContext) -> list[BaseRoute]:
    store = ctx.resources.store

    @api_route(f"{_BASE}/partitioned", ["GET"], "List the namespace's partitioned non-persistent topics")
    async def list_partitioned(request: Request) -> Response:
        namespace = namespace_of(request)
        await require_namespace(ctx, namespace)
        children = await store.children(f"{PARTITIONED_TOPICS_ROOT}/{namespace}/non-persistent")
        return json_response(sorted(str(TopicName.parse(f"non-persistent://{namespace}/{unquote(c)}"))
                                    for c in children))

    @api_route(f"{_BASE}/{{topic}}/partitions", ["PUT"], "Create a partitioned non-persistent topic",
               body=PartitionsBody)
    async def create_partitioned(request: Request) -> Response:
        name = await _partitioned_name(ctx, request)
        body = await read_body(request, PartitionsBody)
        count = body if isinstance(body, int) else body.partitions
        check_partitions(count)
        if str(name) in ctx.service.topics:
            raise AdminError(409, f"Topic {name} already exists as a non-partitioned topic")
        try:
            await ctx.service.partitioned.create(name, count)
        except AlreadyExistsError:
            raise AdminError(409, f"Partitioned topic {name} already exists") from None
        return no_content()

    @api_route(f"{_BASE}/{{topic}}/partitions", ["POST"], "Increase the partitions of a partitioned non-persistent topic",
               body=int)
    async def update_partitioned(request: Request) -> Response:
        name = await _partitioned_name(ctx, request)
        count = await read_body(request, int)
        assert count is not None
        check_partitions(count)
        found = await store.get(partitioned_topic_path(name))
        if found is None:
            raise AdminError(404, f"Partitioned topic {name} not found")
        current = await ctx.service.partitioned.partitions(name)
        if count <= current:
            raise AdminError(409, f"Number of partitions must be more than the current {current}")
        await store.put(partitioned_topic_path(name), json.dumps({"partitions": count}).encode(), found.version)
        return no_content()

    @api_route(f"{_BASE}/{{topic}}/partitions", ["GET"], "Get the partition count (0: not partitioned)")
    async def get_partitions(request: Request) -> Response:
        name = _name(request)
        await require_namespace(ctx, name.namespace)
        return json_response({"partitions": await ctx.service.partitioned.partitions(name)})

    return [list_partitioned, create_partitioned, update_partitioned, get_partitions]


def _partitioned_removal_and_stats_routes(ctx: AdminContext) -> list[BaseRoute]:
    store = ctx.resources.store

    @api_route(f"{_BASE}/{{topic}}/partitions", ["DELETE"], "Delete a partitioned non-persistent topic",
               query=(("force", "boolean"),))
    async def delete_partitioned(request: Request) -> Response:
        name = await _partitioned_name(ctx, request)
        count = await ctx.service.partitioned.partitions(name)
        if count == 0:
            raise AdminError(404, f"Partitioned topic {name} not found")
        loaded = [t for t in (ctx.service.topics.get(str(name.partition(i))) for i in range(count)) if t is not None]
        if not query_flag(request, "force"):
            for topic in loaded:
                if topic.producers:
                    raise TopicBusyError(f"Topic {topic.name} has active producers")
                if any(s.consumers for s in topic.subscriptions.values()):
                    raise TopicBusyError(f"Topic {topic.name} has active subscriptions")
        for topic in loaded:
            await ctx.service.delete_topic(topic.name, force=True)
        await store.delete(partitioned_topic_path(name))
        await ctx.resources.delete_topic_policies(name)
        return no_content()

    @api_route(f"{_BASE}/{{topic}}/partitioned-stats", ["GET"], "Stats of a partitioned non-persistent topic, summed")
    async def stats_partitioned(request: Request) -> Response:
        name = _name(request)
        await require_namespace(ctx, name.namespace)
        count = await ctx.service.partitioned.partitions(name)
        if count == 0:
            raise AdminError(404, f"Partitioned topic {name} not found")
        loaded = [t for t in (ctx.service.topics.get(str(name.partition(i))) for i in range(count))
                  if isinstance(t, NonPersistentTopic)]
        return json_response(_partitioned_stats([non_persistent_stats(t) for t in loaded], count))

    return [delete_partitioned, stats_partitioned]


async def _partitioned_name(ctx: AdminContext, request: Request) -> TopicName:
    name = _name(request)
    await require_namespace(ctx, name.namespace)
    if name.is_partition:
        raise AdminError(412, "Partitioned topic name must not end with -partition-N")
    return name
