"""Clusters and replication clusters through the REST API (in-process, Pulsar's status codes)."""

from __future__ import annotations

from tests.admin.harness import AdminWorld, run_world

NS = "/namespaces/public/default"


def test_clusters_create_update_get_delete() -> None:
    async def body(w: AdminWorld) -> None:
        data = {"serviceUrl": "http://b:8080", "brokerServiceUrl": "pulsar://b:6650",
                "authenticationPlugin": "token", "authenticationParameters": "token:t"}
        assert (await w.call("PUT", "/clusters/B", data)).status == 204
        assert (await w.call("PUT", "/clusters/B", data)).status == 409
        assert await w.ok("GET", "/clusters/B") == data
        assert (await w.call("PUT", "/clusters/C", {"brokerServiceUrl": "http://wrong"})).status == 412
        await w.ok("POST", "/clusters/B", {"serviceUrl": "http://b2:8080", "brokerServiceUrl": "pulsar://b2:6650",
                                           "serviceUrlTls": "https://b2:8443"})
        assert (await w.ok("GET", "/clusters/B"))["brokerServiceUrl"] == "pulsar://b2:6650"
        assert (await w.call("POST", "/clusters/nope", data)).status == 404
        assert sorted(await w.ok("GET", "/clusters")) == ["B", "standalone"]
        await w.ok("POST", "/tenants/public", {"allowedClusters": ["standalone", "B"]})
        assert (await w.call("DELETE", "/clusters/B")).status == 412  # still allowed for public
        await w.ok("POST", "/tenants/public", {"allowedClusters": ["standalone"]})
        assert (await w.call("DELETE", "/clusters/B")).status == 204
        assert (await w.call("GET", "/clusters/B")).status == 404

    run_world(body)


def test_namespace_replication_clusters_are_checked_against_clusters_and_tenant() -> None:
    async def body(w: AdminWorld) -> None:
        assert await w.ok("GET", f"{NS}/replication") == ["standalone"]
        await w.ok("PUT", "/clusters/B", {"brokerServiceUrl": "pulsar://b:6650"})
        assert (await w.call("POST", f"{NS}/replication", ["standalone", "B"])).status == 403  # not allowed
        assert (await w.call("POST", f"{NS}/replication", ["standalone", "X"])).status == 412  # no such cluster
        assert (await w.call("POST", f"{NS}/replication", [])).status == 412
        assert (await w.call("POST", f"{NS}/replication", {"not": "a list"})).status == 400
        assert (await w.call("POST", "/namespaces/public/none/replication", ["standalone"])).status == 404
        await w.ok("POST", "/tenants/public", {"allowedClusters": ["standalone", "B"]})
        await w.ok("POST", f"{NS}/replication", ["standalone", "B", "B"])
        assert await w.ok("GET", f"{NS}/replication") == ["standalone", "B"]
        assert (await w.ok("GET", NS))["replication_clusters"] == ["standalone", "B"]
        # the namespace's create body is checked the same way
        assert (await w.call("PUT", "/namespaces/public/other", {"replication_clusters": ["X"]})).status == 412
        await w.ok("PUT", "/clusters/C", {"brokerServiceUrl": "pulsar://c:6650"})
        assert (await w.call("PUT", "/namespaces/public/other", {"replication_clusters": ["C"]})).status == 403
        await w.ok("PUT", "/namespaces/public/other", {"replication_clusters": ["standalone", "B"]})
        assert await w.ok("GET", "/namespaces/public/other/replication") == ["standalone", "B"]

    run_world(body)


def test_topic_replication_clusters_override() -> None:
    async def body(w: AdminWorld) -> None:
        path = "/persistent/public/default/t/replication"
        assert (await w.call("GET", path)).status == 404  # no such topic yet
        await w.ok("PUT", "/persistent/public/default/t")
        assert await w.ok("GET", path) is None
        await w.ok("PUT", "/clusters/B", {"brokerServiceUrl": "pulsar://b:6650"})
        assert (await w.call("POST", path, ["standalone", "B"])).status == 403
        await w.ok("POST", "/tenants/public", {"allowedClusters": ["standalone", "B"]})
        await w.ok("POST", path, ["standalone", "B"])
        assert await w.ok("GET", path) == ["standalone", "B"]
        await w.ok("DELETE", path)
        assert await w.ok("GET", path) is None

    run_world(body)
