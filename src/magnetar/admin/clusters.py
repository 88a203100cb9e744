"""``/clusters``: the clusters this metadata store knows (``standalone`` on a laptop).

Geo-replication registers each remote cluster here (``PUT /clusters/{name}`` with its
``serviceUrl``/``brokerServiceUrl`` and, optionally, the credentials replicators present to it);
``POST`` replaces a cluster's data, ``DELETE`` removes one no tenant allows any more (412 otherwise).
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute

from magnetar.admin.common import AdminContext, api_route, json_response, no_content, read_body
from magnetar.catalog.resources import ClusterData


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

    @api_route("/clusters/{cluster}", ["POST"], "Update a cluster's configuration", body=ClusterData)
    async def update_cluster(request: Request) -> Response:
        data = await read_body(request, ClusterData)
        assert data is not None
        await ctx.resources.update_cluster(request.path_params["cluster"], data)
        return no_content()

    @api_route("/clusters/{cluster}", ["DELETE"], "Delete a cluster no tenant allows")
    async def delete_cluster(request: Request) -> Response:
        await ctx.resources.delete_cluster(request.path_params["cluster"])
        return no_content()

    return [list_clusters, get_cluster, create_cluster, update_cluster, delete_cluster]
