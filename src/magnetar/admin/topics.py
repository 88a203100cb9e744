"""``/persistent/{t}/{ns}[/{topic}]``: create, list, delete, partitions, stats, internal stats, unload.

A partitioned topic is its metadata node (``catalog.lookup.partitioned_topic_path``, JSON
``{"partitions": N}``) plus one topic per partition ``{topic}-partition-{i}``, created here at
once so they exist even where auto-creation is off. The count only grows (Pulsar's rule). Topic
names in paths are URL-encoded local names; the namespace must exist (404 otherwise).
"""

from __future__ import annotations

import json
from typing import Any

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
    query_flag,
    read_body,
    topic_of,
)
from magnetar.admin.stats import add_read_only_subscriptions, internal_stats, partitioned_stats, topic_stats
from magnetar.base.errors import LimitExceededError, NotFoundError
from magnetar.base.limits import ADMIN_PARTITIONS_COUNT_MAX
from magnetar.base.types import TopicName
from magnetar.broker.errors import BrokerError
from magnetar.broker.topic import Topic
from magnetar.catalog.lookup import PARTITIONED_TOPICS_ROOT, partitioned_topic_path
from magnetar.protocol.pulsar import pb


class PartitionedTopicMetadata(msgspec.Struct):
    partitions: int
    properties: dict[str, str] | None = None


PartitionsBody = int | PartitionedTopicMetadata


async def require_namespace(ctx: AdminContext, namespace: str) -> None:
    if not await ctx.resources.namespace_exists(namespace):
        raise AdminError(404, f"Namespace {namespace} does not exist")


async def load(ctx: AdminContext, name: TopicName) -> Topic:
    try:
        return await ctx.service.get_topic(name, create=False)
    except BrokerError as error:
        if error.code == pb.TopicNotFound:
            raise AdminError(404, f"Topic {name} not found") from None
        raise


async def targets(ctx: AdminContext, topic: TopicName) -> list[TopicName]:
    """The partitions of a partitioned topic, else the topic itself; 404 if it is neither."""
    await require_namespace(ctx, topic.namespace)
    count = await ctx.service.partitioned.partitions(topic)
    if count > 0:
        return [topic.partition(i) for i in range(count)]
    if not await ctx.service.topic_exists(topic):
        raise AdminError(404, f"Topic {topic} not found")
    return [topic]


def check_partitions(count: int) -> None:
    if count < 1:
        raise AdminError(412, "Number of partitions should be more than 0")
    if count > ADMIN_PARTITIONS_COUNT_MAX:
        raise LimitExceededError("ADMIN_PARTITIONS_COUNT_MAX", count, ADMIN_PARTITIONS_COUNT_MAX)


async def _create_partitions(ctx: AdminContext, topic: TopicName, start: int, stop: int) -> None:
    for index in range(start, stop):
        partition = topic.partition(index)
        if not await ctx.service.topic_exists(partition):
            await ctx.service.get_topic(partition, create=True, admin=True)


async def _stats(ctx: AdminContext, name: TopicName) -> dict[str, Any]:
    """Topic stats, with the subscriptions read-only brokers serve when this broker owns it."""
    topic = await load(ctx, name)
    return await add_read_only_subscriptions(topic_stats(topic), topic)


_BASE = "/persistent/{tenant}/{namespace}"


def routes(ctx: AdminContext) -> list[BaseRoute]:
    """Topics listed, created and deleted; partitioned topics; stats and unload of loaded topics."""
    return [*_topic_routes(ctx), *_partitioned_routes(ctx), *_loaded_routes(ctx)]


def _topic_routes(ctx: AdminContext) -> list[BaseRoute]:
    """List a namespace's topics; create and delete a non-partitioned topic."""
    base, store = _BASE, ctx.resources.store

    @api_route(base, ["GET"], "List the non-partitioned topics and partitions of a namespace")
    async def list_topics(request: Request) -> Response:
        namespace = namespace_of(request)
        await require_namespace(ctx, namespace)
        return json_response(await ctx.service.topics_of_namespace(namespace))

    @api_route(f"{base}/partitioned", ["GET"], "List the partitioned topics of a namespace")
    async def list_partitioned(request: Request) -> Response:
        namespace = namespace_of(request)
        await require_namespace(ctx, namespace)
        children = await store.children(f"{PARTITIONED_TOPICS_ROOT}/{namespace}/persistent")
        names = [str(TopicName.parse(f"persistent://{namespace}/{c}")) for c in children]
        return json_response(sorted(names))

    @api_route(f"{base}/{{topic}}", ["PUT"], "Create a non-partitioned topic")
    async def create_topic(request: Request) -> Response:
        topic = topic_of(request)
        await require_namespace(ctx, topic.namespace)
        if await ctx.service.partitioned.partitions(topic):
            raise AdminError(409, f"Partitioned topic {topic} already exists")
        await ctx.service.create_topic(topic)
        return no_content()

    @api_route(f"{base}/{{topic}}", ["DELETE"], "Delete a non-partitioned topic", query=(("force", "boolean"),))
    async def delete_topic(request: Request) -> Response:
        topic = topic_of(request)
        await require_namespace(ctx, topic.namespace)
        await ctx.service.delete_topic(topic, force=query_flag(request, "force"))
        return no_content()

    return [list_topics, list_partitioned, create_topic, delete_topic]


def _partitioned_routes(ctx: AdminContext) -> list[BaseRoute]:
    """Create a partitioned topic, add partitions, read its count, delete it with its partitions."""
    base, store = _BASE, ctx.resources.store

    @api_route(f"{base}/{{topic}}/partitions", ["PUT"], "Create a partitioned topic", body=PartitionsBody)
    async def create_partitioned(request: Request) -> Response:
        topic = topic_of(request)
        await require_namespace(ctx, topic.namespace)
        body = await read_body(request, PartitionsBody)
        count = body if isinstance(body, int) else body.partitions
        check_partitions(count)
        if topic.is_partition:
            raise AdminError(412, "Partitioned topic name must not end with -partition-N")
        if await ctx.service.topic_exists(topic):
            raise AdminError(409, f"Topic {topic} already exists as a non-partitioned topic")
        await ctx.service.partitioned.create(topic, count)
        await _create_partitions(ctx, topic, 0, count)
        return no_content()

    @api_route(f"{base}/{{topic}}/partitions", ["POST"], "Increase the partitions of a partitioned topic",
               body=int)
    async def update_partitioned(request: Request) -> Response:
        topic = topic_of(request)
        await require_namespace(ctx, topic.namespace)
        count = await read_body(request, int)
        assert count is not None
        check_partitions(count)
        path = partitioned_topic_path(topic)
        found = await store.get(path)
        if found is None:
            raise AdminError(404, f"Partitioned topic {topic} not found")
        current = await ctx.service.partitioned.partitions(topic)
        if count <= current:
            raise AdminError(409, f"Number of partitions must be more than the current {current}")
        await store.put(path, json.dumps({"partitions": count}).encode(), found.version)
        await _create_partitions(ctx, topic, current, count)
        return no_content()

    @api_route(f"{base}/{{topic}}/partitions", ["GET"], "Get the partition count (0: not partitioned)")
    async def get_partitions(request: Request) -> Response:
        topic = topic_of(request)
        await require_namespace(ctx, topic.namespace)
        return json_response({"partitions": await ctx.service.partitioned.partitions(topic)})

    @api_route(f"{base}/{{topic}}/partitions", ["DELETE"], "Delete a partitioned topic",
               query=(("force", "boolean"),))
    async def delete_partitioned(request: Request) -> Response:
        topic = topic_of(request)
        await require_namespace(ctx, topic.namespace)
        count = await ctx.service.partitioned.partitions(topic)
        if count == 0:
            raise AdminError(404, f"Partitioned topic {topic} not found")
        force = query_flag(request, "force")
        for index in range(count):
            try:
                await ctx.service.delete_topic(topic.partition(index), force=force)
            except NotFoundError:
                continue
        await store.delete(partitioned_topic_path(topic))
        await ctx.resources.delete_topic_policies(topic)
        return no_content()

    return [create_partitioned, update_partitioned, get_partitions, delete_partitioned]


def _loaded_routes(ctx: AdminContext) -> list[BaseRoute]:
    """Stats of a topic (summed over partitions, or internal per partition) and unloading it."""
    base = _BASE

    @api_route(f"{base}/{{topic}}/stats", ["GET"], "Topic stats (rates, backlog, storage, publishers, subscriptions)")
    async def stats(request: Request) -> Response:
        names = await targets(ctx, topic_of(request))
        return json_response(await _stats(ctx, names[0]) if len(names) == 1 and not names[0].is_partition
                             else partitioned_stats([await _stats(ctx, n) for n in names], len(names)))

    @api_route(f"{base}/{{topic}}/partitioned-stats", ["GET"], "Stats of a partitioned topic, summed")
    async def stats_partitioned(request: Request) -> Response:
        names = await targets(ctx, topic_of(request))
        return json_response(partitioned_stats([await _stats(ctx, n) for n in names], len(names)))

    @api_route(f"{base}/{{topic}}/internalStats", ["GET"], "Internal stats (ledgers, cursors)")
    async def stats_internal(request: Request) -> Response:
        topic = topic_of(request)
        names = await targets(ctx, topic)
        if names != [topic]:  # a partitioned topic's name: its partitions have the stats
            raise AdminError(412, "internalStats is per partition: ask for {topic}-partition-{i}")
        return json_response(internal_stats(await load(ctx, names[0])))

    @api_route(f"{base}/{{topic}}/unload", ["PUT"], "Unload a topic (clients reconnect and it loads again)")
    async def unload(request: Request) -> Response:
        for name in await targets(ctx, topic_of(request)):
            loaded = ctx.service.topics.get(str(name))
            if loaded is not None:  # tell clients first, so they reconnect at once
                loaded.disconnect_producers()
                for subscription in list(loaded.subscriptions.values()):
                    subscription.disconnect_consumers()
            await ctx.service.unload(name)
        return no_content()

    return [stats, stats_partitioned, stats_internal, unload]
