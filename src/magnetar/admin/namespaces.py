"""``/namespaces``: list per tenant, create (optional ``Policies`` body), get policies, delete, topics.

Deleting a namespace that still has topics is refused with 409 unless ``force=true``, which
deletes its topics (and partitioned topics) first.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute

from magnetar.admin.common import (
    AdminContext,
    api_route,
    json_response,
    namespace_of,
    no_content,
    query_flag,
    read_body,
)
from magnetar.admin.topics import require_namespace
from magnetar.base.types import TopicName
from magnetar.catalog.lookup import PARTITIONED_TOPICS_ROOT
from magnetar.catalog.policies import Policies
from magnetar.catalog.resources import NotEmptyError
from magnetar.protocol.pulsar import pb


def routes(ctx: AdminContext) -> list[BaseRoute]:
    base = "/namespaces/{tenant}/{namespace}"

    @api_route("/namespaces/{tenant}", ["GET"], "List the namespaces of a tenant")
    async def list_namespaces(request: Request) -> Response:
        return json_response(await ctx.resources.namespaces(request.path_params["tenant"]))

    @api_route(base, ["PUT"], "Create a namespace", body=Policies, body_required=False)
    async def create_namespace(request: Request) -> Response:
        policies = await read_body(request, Policies, required=False)
        await ctx.resources.create_namespace(namespace_of(request), policies)
        return no_content()

    @api_route(base, ["GET"], "Get a namespace's policies")
    async def get_policies(request: Request) -> Response:
        return json_response(await ctx.resources.policies(namespace_of(request)))

    @api_route(base, ["DELETE"], "Delete a namespace (force: with its topics)", query=(("force", "boolean"),))
    async def delete_namespace(request: Request) -> Response:
        namespace = namespace_of(request)
        await ctx.resources.policies(namespace)
        # every domain, as Pulsar lists them (Mode.ALL): a loaded non-persistent topic makes the
        # namespace non-empty too, and a forced delete unloads it (its clients are disconnected)
        topics = await ctx.service.topics_of_namespace(namespace, mode=pb.CommandGetTopicsOfNamespace.ALL)
        partitioned_roots = [f"{PARTITIONED_TOPICS_ROOT}/{namespace}/{domain}"
                             for domain in ("persistent", "non-persistent")]
        partitioned = [(root, child) for root in partitioned_roots for child in await ctx.resources.store.children(root)]
        if (topics or partitioned) and not query_flag(request, "force"):
            raise NotEmptyError(f"Cannot delete non empty namespace {namespace}")
        for name in topics:
            await ctx.service.delete_topic(TopicName.parse(name), force=True)
        for root, child in partitioned:
            await ctx.resources.store.delete(f"{root}/{child}")
        await ctx.resources.delete_namespace(namespace)
        return no_content()

    @api_route(f"{base}/topics", ["GET"], "List the topics of a namespace")
    async def list_topics(request: Request) -> Response:
        namespace = namespace_of(request)
        await require_namespace(ctx, namespace)
        return json_response(await ctx.service.topics_of_namespace(namespace))

    return [list_namespaces, create_namespace, get_policies, delete_namespace, list_topics]
