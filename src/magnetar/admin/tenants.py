"""``/tenants``: list, create (``adminRoles``, ``allowedClusters``), get, update, delete."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute

from magnetar.admin.common import AdminContext, api_route, json_response, no_content, read_body
from magnetar.catalog.resources import TenantInfo


def routes(ctx: AdminContext) -> list[BaseRoute]:
    @api_route("/tenants", ["GET"], "List the tenants")
    async def list_tenants(request: Request) -> Response:
        return json_response(await ctx.resources.tenants())

    @api_route("/tenants/{tenant}", ["GET"], "Get a tenant's admin roles and allowed clusters")
    async def get_tenant(request: Request) -> Response:
        return json_response(await ctx.resources.tenant(request.path_params["tenant"]))

    @api_route("/tenants/{tenant}", ["PUT"], "Create a tenant", body=TenantInfo, body_required=False)
    async def create_tenant(request: Request) -> Response:
        info = await read_body(request, TenantInfo, required=False) or TenantInfo(allowed_clusters=[ctx.cluster])
        await ctx.resources.create_tenant(request.path_params["tenant"], info)
        return no_content()

    @api_route("/tenants/{tenant}", ["POST"], "Update a tenant", body=TenantInfo)
    async def update_tenant(request: Request) -> Response:
        info = await read_body(request, TenantInfo)
        assert info is not None
        await ctx.resources.update_tenant(request.path_params["tenant"], info)
        return no_content()

    @api_route("/tenants/{tenant}", ["DELETE"], "Delete a tenant that has no namespaces")
    async def delete_tenant(request: Request) -> Response:
        await ctx.resources.delete_tenant(request.path_params["tenant"])
        return no_content()

    return [list_tenants, get_tenant, create_tenant, update_tenant, delete_tenant]
