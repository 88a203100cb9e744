"""``GET .../readLayout`` (admin/read_layout.py) in process: who may ask (``consume``, as reading
messages) and its refusals. The answer itself, over managed ledgers with offloaded and live ledgers,
is read by the Spark connector against a real standalone in
``tests/connectors/spark/test_spark_secure.py``."""

from __future__ import annotations

from magnetar.admin.access import ROUTE_NEEDS
from magnetar.security.authorization import Need
from tests.admin.harness import AdminWorld, run_world
from tests.admin.test_permissions import NS, SECURE, call

TOPIC = "/persistent/acme/ns/t"


def test_read_layout_needs_consume_and_refuses_what_it_cannot_answer() -> None:
    assert ROUTE_NEEDS[("GET", "/persistent/{tenant}/{namespace}/{topic}/readLayout")] is Need.CONSUME

    async def body(world: AdminWorld) -> None:
        await call(world, "root", "PUT", "/tenants/acme", {"adminRoles": ["ops"], "allowedClusters": ["standalone"]})
        await call(world, "root", "PUT", NS)
        await call(world, "root", "PUT", TOPIC)
        await call(world, "root", "PUT", "/persistent/acme/ns/p/partitions", 2)
        assert (await call(world, None, "GET", f"{TOPIC}/readLayout")).status == 401
        refused = await call(world, "reader", "GET", f"{TOPIC}/readLayout")
        assert refused.status == 403, refused.body
        await call(world, "root", "POST", f"{NS}/permissions/reader", ["consume"])
        # allowed now; this in-process broker keeps topics in memory: nothing to lay out, said plainly
        memory = await call(world, "reader", "GET", f"{TOPIC}/readLayout")
        assert memory.status == 412 and "managed ledgers" in memory.json()["reason"]
        partitioned = await call(world, "reader", "GET", "/persistent/acme/ns/p/readLayout")
        assert partitioned.status == 412 and "per partition" in partitioned.json()["reason"]
        assert (await call(world, "reader", "GET", "/persistent/acme/ns/missing/readLayout")).status == 404

    run_world(body, SECURE)
