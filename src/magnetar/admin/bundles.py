"""Namespace bundles over the admin API (Pulsar's paths): list, unload, split.

* ``GET /namespaces/{tenant}/{namespace}/bundles``: ``{"boundaries": [...], "numBundles": n}``.
* ``PUT /namespaces/{tenant}/{namespace}/{bundle}/unload``: the owner closes the bundle's topics
  (clients look up again) and gives up its lock; the next lookup picks the least-loaded broker.
* ``PUT /namespaces/{tenant}/{namespace}/{bundle}/split``: the owner halves the bundle and keeps
  both halves (its topics stay loaded); ``?unload=true`` then unloads both halves.

A broker that does not own the bundle answers 307 to the same path on the owner's HTTP URL (as
Pulsar does); 412 when no broker owns it, or on a broker without ownership (standalone).
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import BaseRoute

from magnetar.admin.common import AdminContext, AdminError, api_route, json_response, namespace_of, no_content
from magnetar.control.bundles import BundleRange
from magnetar.control.ownership import BundleOwnership, OwnershipLookup


def _ownership(ctx: AdminContext) -> BundleOwnership:
    lookup = ctx.service.lookup
    if not isinstance(lookup, OwnershipLookup):
        raise AdminError(412, "bundle ownership needs a cluster broker (magnetar broker)")
    return lookup.ownership


async def _owner_redirect(ownership: BundleOwnership, request: Request, namespace: str,
                          bundle: BundleRange) -> Response:
    found = await ownership.owner_of(namespace, bundle)
    if found is None or not found[0].http_url:
        raise AdminError(412, f"namespace bundle {namespace}/{bundle.name} is not owned by any broker")
    query = f"?{request.url.query}" if request.url.query else ""
    return RedirectResponse(f"{found[0].http_url.rstrip('/')}{request.url.path}{query}", status_code=307)


def routes(ctx: AdminContext) -> list[BaseRoute]:
    @api_route("/namespaces/{tenant}/{namespace}/bundles", ["GET"], "Get the bundle boundaries of a namespace")
    async def get_bundles(request: Request) -> Response:
        bundles = await _ownership(ctx).current_bundles(namespace_of(request))
        return json_response({"boundaries": [f"0x{b:08x}" for b in bundles.boundaries],
                              "numBundles": len(bundles.ranges)})

    @api_route("/namespaces/{tenant}/{namespace}/{bundle}/unload", ["PUT"], "Unload a namespace bundle",
               body_required=False)
    async def unload(request: Request) -> Response:
        ownership = _ownership(ctx)
        namespace = namespace_of(request)
        bundle = BundleRange.parse(request.path_params["bundle"])
        if not ownership.owns(namespace, bundle.name):
            return await _owner_redirect(ownership, request, namespace, bundle)
        await ownership.unload(namespace, bundle.name)
        return no_content()

    @api_route("/namespaces/{tenant}/{namespace}/{bundle}/split", ["PUT"], "Split a namespace bundle in two",
               query=(("unload", "boolean"),), body_required=False)
    async def split(request: Request) -> Response:
        ownership = _ownership(ctx)
        namespace = namespace_of(request)
        bundle = BundleRange.parse(request.path_params["bundle"])
        if not ownership.owns(namespace, bundle.name):
            return await _owner_redirect(ownership, request, namespace, bundle)
        halves = await ownership.split(namespace, bundle.name)
        if request.query_params.get("unload", "false").lower() == "true":
            for half in halves:
                await ownership.unload(namespace, half.name)
        return no_content()

    return [get_bundles, unload, split]
