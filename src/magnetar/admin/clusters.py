"""``/clusters``: the clusters this metadata store knows (``standalone`` on a laptop)."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute

from magnetar.admin.common import AdminContext, api_route, json_response, no_content, read_body
from magnetar.broker.resources import ClusterData


def routes(ctx: AdminContext) -> list[BaseRoute]:
    @api_route("/clusters", ["GET"], "List the clusters")
    async def list_clusters(request: Request) -> Response:
        return json_response(await ctx.resources.clusters())

    @api_route("/clusters/{cluster}", ["GET"], "Get a cluster's configuration")
    async def get_cluster(request: Request) -> Response:
        return json_response(await ctx.resources.cluster(request.path_params["cluster"]))

    @api_route("/clusters/{cluster}", ["PUT"], "Create a cluster", body=ClusterData)
    async def create_cluster(request: Request) -> Response:
        data = await read_body(request, ClusterData)
        assert data is not None
        await ctx.resources.create_cluster(request.path_params["cluster"], data)
        return no_content()

    return [list_clusters, get_cluster, create_cluster]
