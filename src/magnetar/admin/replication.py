"""Replication clusters of a namespace and of a topic (Pulsar's paths and answers).

* ``GET|POST /namespaces/{t}/{ns}/replication``: the namespace's ``replication_clusters`` (body: a
  JSON list of cluster names). Every name must be a registered cluster (412 otherwise) that the
  tenant's ``allowedClusters`` holds (403 otherwise); the list may not be empty (412).
* ``GET|POST|DELETE /persistent/{t}/{ns}/{topic}/replication``: the topic-level override (same
  checks); DELETE falls back to the namespace's list. GET answers JSON ``null`` when unset.

What a topic replicates to is resolved in ``magnetar.replication.policy``: the topic's list if set,
else the namespace's, always capped by the tenant's allowed clusters.
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
from magnetar.base.types import TopicName
from magnetar.catalog.policies import Policies, TopicPolicies


async def _checked(ctx: AdminContext, request: Request, tenant: str) -> list[str]:
    """The body's cluster list, checked (412 unknown or empty, 403 not allowed: ``ClusterNotAllowedError``)."""
    clusters = await read_body(request, list[str])
    checked: list[str] = await ctx.resources.check_replication_clusters(tenant, clusters)
    return checked


async def _existing_topic(ctx: AdminContext, request: Request) -> TopicName:
    topic = topic_of(request)
    if not await ctx.resources.namespace_exists(topic.namespace):
        raise AdminError(404, f"Namespace {topic.namespace} does not exist")
    if not await ctx.service.topic_exists(topic) and not await ctx.service.partitioned.partitions(topic):
        raise AdminError(404, f"Topic {topic} not found")
    return topic


def routes(ctx: AdminContext) -> list[BaseRoute]:
    ns_path = "/namespaces/{tenant}/{namespace}/replication"
    topic_path = "/persistent/{tenant}/{namespace}/{topic}/replication"

    @api_route(ns_path, ["GET"], "Get the namespace's replication clusters")
    async def get_namespace_clusters(request: Request) -> Response:
        return json_response((await ctx.resources.policies(namespace_of(request))).replication_clusters)

    @api_route(ns_path, ["POST"], "Set the namespace's replication clusters", body=list[str])
    async def set_namespace_clusters(request: Request) -> Response:
        namespace = namespace_of(request)
        await ctx.resources.policies(namespace)  # 404 before the body's checks
        clusters = await _checked(ctx, request, namespace.partition("/")[0])

        def change(policies: Policies) -> None:
            policies.replication_clusters = clusters

        await ctx.resources.update_policies(namespace, change)
        return no_content()

    @api_route(topic_path, ["GET"], "Get the topic's replication clusters override")
    async def get_topic_clusters(request: Request) -> Response:
        topic = await _existing_topic(ctx, request)
        return json_response((await ctx.resources.topic_policies(topic)).replication_clusters)

    @api_route(topic_path, ["POST"], "Set the topic's replication clusters", body=list[str])
    async def set_topic_clusters(request: Request) -> Response:
        topic = await _existing_topic(ctx, request)
        clusters = await _checked(ctx, request, topic.tenant)

        def change(policies: TopicPolicies) -> None:
            policies.replication_clusters = clusters

        await ctx.resources.update_topic_policies(topic, change)
        return no_content()

    @api_route(topic_path, ["DELETE"], "Remove the topic's replication clusters override")
    async def remove_topic_clusters(request: Request) -> Response:
        topic = await _existing_topic(ctx, request)

        def change(policies: TopicPolicies) -> None:
            policies.replication_clusters = None

        await ctx.resources.update_topic_policies(topic, change)
        return no_content()

    return [get_namespace_clusters, set_namespace_clusters, get_topic_clusters, set_topic_clusters,
            remove_topic_clusters]
