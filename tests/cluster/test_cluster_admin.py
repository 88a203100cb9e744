"""Bundle admin on a real cluster: unload through the non-owner (307 to the owner) moves the topic
while a producer keeps sending; split on the owner keeps serving; the load reports are in ZooKeeper."""

from __future__ import annotations

import asyncio
import json
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from magnetar.cli.admin import _Api
from magnetar.cli.credentials import Credentials
from magnetar.control.load import LOAD_REPORTS_ROOT, LoadReport
from magnetar.runtime.cluster import LocalCluster, http_health
from magnetar.runtime.metadata import open_metadata_store
from tests.cluster.helpers import (
    Outcomes,
    bundle_key,
    client,
    owner_of,
    read_all,
    running_cluster,
    wait_until,
)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]


def request(method: str, url: str) -> tuple[int, dict[str, str], bytes]:
    req = urllib.request.Request(url, method=method, data=b"" if method == "PUT" else None)
    opener = urllib.request.build_opener(NoRedirect)
    try:
        with opener.open(req, timeout=30) as response:
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as error:
        return error.code, dict(error.headers), error.read()


class NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: object, **kwargs: object) -> None:
        return None


def load_reports(cluster: LocalCluster) -> list[LoadReport]:
    async def read() -> list[LoadReport]:
        store = await open_metadata_store(cluster.metadata_url)
        try:
            out = []
            for child in await store.children(LOAD_REPORTS_ROOT):
                found = await store.get(f"{LOAD_REPORTS_ROOT}/{child}")
                if found is not None:
                    out.append(LoadReport.decode(child, found.value))
            return out
        finally:
            await store.close()

    return asyncio.run(read())


def test_unload_through_the_non_owner_and_split_on_the_owner_keep_the_producer_going(tmp_path: Path) -> None:
    with running_cluster(tmp_path) as cluster:
        topic = "persistent://public/default/admin-bundles"
        c = client(cluster.service_url())
        producer = c.create_producer(topic, batching_enabled=False, send_timeout_millis=60_000)
        outcomes = Outcomes()
        for i in range(5):
            outcomes.send_async(producer, f"a-{i}".encode())
        outcomes.wait(5, 30)
        owner = owner_of(cluster, topic)
        assert owner is not None
        other = 1 - owner
        namespace, bundle = bundle_key(topic).rsplit("/", 1)
        base = f"/admin/v2/namespaces/{namespace}"

        # A topic request to the non-owner: 307 to the owner, same path and query (Pulsar's answer)
        stats_path = "/admin/v2/persistent/public/default/admin-bundles/stats?getPreciseBacklog=true"
        status, headers, _ = request("GET", f"{cluster.http_url(other)}{stats_path}")
        assert status == 307 and headers["location"] == f"{cluster.http_url(owner)}{stats_path}"
        # magnetar admin follows it, keeping the method (a PUT stays a PUT)
        api = _Api(cluster.http_url(other), Credentials())
        assert api.call("GET", "/persistent/public/default/admin-bundles/stats")["publishers"]
        api.call("PUT", "/persistent/public/default/admin-bundles/unload")

        status, _, body = request("GET", f"{cluster.http_url(other)}{base}/bundles")
        assert status == 200 and json.loads(body)["numBundles"] == 4

        status, headers, _ = request("PUT", f"{cluster.http_url(other)}{base}/{bundle}/unload")
        assert status == 307 and headers["location"].startswith(cluster.http_url(owner))
        status, _, body = request("PUT", headers["location"])
        assert status == 204, body
        for i in range(5):
            outcomes.send_async(producer, f"b-{i}".encode())
        outcomes.wait(10, 60)
        new_owner = owner_of(cluster, topic)
        assert new_owner is not None

        status, _, body = request("PUT", f"{cluster.http_url(new_owner)}{base}/{bundle}/split")
        assert status == 204, body
        status, _, body = request("GET", f"{cluster.http_url(other)}{base}/bundles")
        assert json.loads(body)["numBundles"] == 5
        for i in range(5):
            outcomes.send_async(producer, f"c-{i}".encode())
        outcomes.wait(15, 60)
        c.close()
        assert outcomes.failed == {}
        assert owner_of(cluster, topic) == new_owner  # the half holding the topic stayed with its owner
        stored = read_all(cluster.service_url(), topic)
        assert {v: stored.get(v) for v in outcomes.acked} == outcomes.acked

        wait_until(lambda: sum(len(r.bundles) for r in load_reports(cluster)) >= 2, 10, "load reports")
        reports = {r.pulsar_service_url: r for r in load_reports(cluster)}
        assert set(reports) == {cluster.broker_url(0), cluster.broker_url(1)}
        assert len(reports[cluster.broker_url(new_owner)].bundles) >= 2
        health = http_health(cluster.processes[f"broker-{new_owner}"].http_port or 0)
        assert health is not None and health["topics"] >= 1
