"""The load balancer and bookie racks over the admin API (Pulsar's paths and JSON shapes).

* ``GET /brokers/leaderBroker``: ``{"serviceUrl", "brokerId"}`` of the load balancer's leader
  (``control.leader``); 404 while none is elected.
* ``GET /broker-stats/load-report``: this broker's load report as it publishes it
  (``LocalBrokerData``'s names: ``cpu``, ``msgRateIn``, ``lastStats``, ...), computed now.
* ``GET /broker-stats/load-balancer/decisions`` (Magnetar's): the leader's last decisions
  ``{"leader", "decisions": [{"time", "kind", "bundle", "from", "to", "reason", "leader"}]}``.
* ``GET /bookies/racks-info``: ``{"<group>": {"<host:port>": {"rack", "hostname"}}}``;
  ``GET|POST|DELETE /bookies/racks-info/{bookie}`` (POST body ``{"rack", "hostname"}``,
  ``?group=``, default ``default``): one bookie's rack (``ledger.racks``), 404 if it has none.
"""

from __future__ import annotations

import msgspec
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute

from magnetar.admin.common import AdminContext, AdminError, api_route, json_response, no_content, read_body
from magnetar.control.leader import read_decisions, read_leader
from magnetar.control.ownership import BundleOwnership, OwnershipLookup
from magnetar.ledger.racks import (
    DEFAULT_GROUP,
    BookieRack,
    delete_rack,
    rack_with_region,
    read_racks,
    set_rack,
)
from magnetar.metadata.api import MetadataStore


class BookieInfo(msgspec.Struct):
    rack: str = ""
    hostname: str = ""
    #: Magnetar's: the region, when ``rack`` does not name it (stored as ``/region/rack``).
    region: str = ""


def _ownership(ctx: AdminContext) -> BundleOwnership:
    lookup = ctx.service.lookup
    if not isinstance(lookup, OwnershipLookup):
        raise AdminError(412, "the load balancer needs a cluster broker (magnetar broker)")
    return lookup.ownership


def _store(ctx: AdminContext) -> MetadataStore:
    return ctx.resources.store


def routes(ctx: AdminContext) -> list[BaseRoute]:
    @api_route("/brokers/leaderBroker", ["GET"], "The load balancer's leader broker")
    async def leader_broker(_: Request) -> Response:
        leader = await read_leader(_store(ctx))
        if leader is None:
            raise AdminError(404, "no leader broker elected")
        return json_response({"serviceUrl": leader.service_url, "brokerId": leader.broker_id})

    @api_route("/broker-stats/load-report", ["GET"], "This broker's load report")
    async def load_report(_: Request) -> Response:
        ownership = _ownership(ctx)
        last = ownership.loads.last
        report = ownership.load_report(last.connections if last else 0, last.msg_rate_in if last else 0.0,
                                       last.msg_rate_out if last else 0.0,
                                       cpu_percent=last.cpu_percent if last else 0.0,
                                       now_ms=ctx.service.clock.now_ms() if ctx.service.clock else 0)
        return json_response(report.to_json())

    @api_route("/broker-stats/load-balancer/decisions", ["GET"], "The load balancer's last decisions")
    async def decisions(_: Request) -> Response:
        store = _store(ctx)
        leader = await read_leader(store)
        return json_response({"leader": leader.broker_id if leader else None,
                              "decisions": await read_decisions(store)})

    @api_route("/bookies/racks-info", ["GET"], "The rack of every bookie, by group")
    async def racks_info(_: Request) -> Response:
        config, _version = await read_racks(_store(ctx))
        return json_response(config.to_admin_json())

    @api_route("/bookies/racks-info/{bookie}", ["GET"], "One bookie's rack")
    async def get_rack(request: Request) -> Response:
        config, _version = await read_racks(_store(ctx))
        info = config.find(request.path_params["bookie"])
        if info is None:
            raise AdminError(404, f"Bookie address not found: {request.path_params['bookie']}")
        return json_response(info.to_admin_json())

    @api_route("/bookies/racks-info/{bookie}", ["POST"], "Set one bookie's rack", body=BookieInfo,
               query=(("group", "string"),))
    async def post_rack(request: Request) -> Response:
        body: BookieInfo = await read_body(request, BookieInfo)
        rack = rack_with_region(body.rack, body.region)
        await set_rack(_store(ctx), request.path_params["bookie"], BookieRack(rack, body.hostname),
                       request.query_params.get("group") or DEFAULT_GROUP)
        return no_content()

    @api_route("/bookies/racks-info/{bookie}", ["DELETE"], "Forget one bookie's rack")
    async def remove_rack(request: Request) -> Response:
        await delete_rack(_store(ctx), request.path_params["bookie"])
        return no_content()

    return [leader_broker, load_report, decisions, racks_info, get_rack, post_rack, remove_rack]
