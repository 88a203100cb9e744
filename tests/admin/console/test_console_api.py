"""``/console/api`` and the page itself against a broker's real HTTP endpoint, with the official client."""

from __future__ import annotations

import base64
import json
import urllib.error
import urllib.request
from typing import Any

import pulsar
import pytest

from tests.admin.conftest import HttpBroker


def get(broker: HttpBroker, path: str) -> Any:
    with urllib.request.urlopen(f"{broker.http_url}{path}", timeout=10) as reply:
        body = reply.read()
        return json.loads(body) if reply.headers.get("content-type", "").startswith("application/json") else body


def test_page_and_static_files_are_served_from_the_package(http_broker: HttpBroker) -> None:
    page = get(http_broker, "/").decode()
    assert '<script src="/console/static/app.js">' in page and "<main" in page
    assert b"function chart(" in get(http_broker, "/console/static/app.js")
    assert b"--accent" in get(http_broker, "/console/static/style.css")
    with pytest.raises(urllib.error.HTTPError) as missing:
        get(http_broker, "/console/static/nothing.js")
    assert missing.value.code == 404
    assert get(http_broker, "/health") == {"status": "ok"}  # the routes before the console still answer


def test_tree_topic_peek_and_ledgers(http_broker: HttpBroker) -> None:
    client = pulsar.Client(http_broker.thread.url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    try:
        client.subscribe("orders", "audit").close()  # a durable subscription with no consumer attached
        producer = client.create_producer("orders", batching_enabled=True, batching_max_publish_delay_ms=5)
        for i in range(6):
            producer.send_async(json.dumps({"n": i}).encode(), None, partition_key=f"k{i}", properties={"i": str(i)})
        producer.flush()
        producer.close()
        request = urllib.request.Request(f"{http_broker.http_url}/admin/v2/persistent/public/default/parted/partitions",
                                         data=b"3", method="PUT", headers={"Content-Type": "application/json"})
        urllib.request.urlopen(request, timeout=10).close()

        tree = get(http_broker, "/console/api/tree")
        topics = {t["local"]: t["partitions"] for t in tree["tenants"][0]["namespaces"][0]["topics"]}
        assert topics == {"orders": 0, "parted": 3}  # partitions are shown under their partitioned topic

        topic = get(http_broker, "/console/api/topic/public/default/orders")
        assert topic["msgInCounter"] == 6 and topic["partitions"] == 0
        backlog = topic["subscriptions"][0]["msgBacklog"]  # entries: the producer batched the six messages
        assert [s["name"] for s in topic["subscriptions"]] == ["audit"] and backlog >= 1

        parted = get(http_broker, "/console/api/topic/public/default/parted")
        assert [p["name"].rsplit("-", 1)[1] for p in parted["partitionRows"]] == ["0", "1", "2"]

        peeked = get(http_broker, "/console/api/topic/public/default/orders/peek?subscription=audit&count=4")["messages"]
        assert [json.loads(base64.b64decode(m["payload"])) for m in peeked] == [{"n": i} for i in range(4)]
        assert [m["key"] for m in peeked] == ["k0", "k1", "k2", "k3"] and peeked[1]["properties"] == {"i": "1"}
        again = get(http_broker, "/console/api/topic/public/default/orders")
        assert again["subscriptions"][0]["msgBacklog"] == backlog  # peeking moved no cursor
        with pytest.raises(urllib.error.HTTPError) as unknown:
            get(http_broker, "/console/api/topic/public/default/orders/peek?subscription=nope")
        assert unknown.value.code == 404
        with pytest.raises(urllib.error.HTTPError) as too_many:
            get(http_broker, "/console/api/topic/public/default/orders/peek?subscription=audit&count=100000")
        assert too_many.value.code == 412

        ledgers = get(http_broker, "/console/api/topic/public/default/orders/ledgers")["topics"][0]["ledgers"]
        assert sum(row["entries"] for row in ledgers) >= 1
        overview = get(http_broker, "/console/api/overview")
        assert overview["totals"]["backlog"] == backlog and overview["metadata"]["healthy"] is True
    finally:
        client.close()


def test_whoami_reports_the_role_the_authentication_layer_set(http_broker: HttpBroker) -> None:
    import asyncio

    from magnetar.admin import AdminContext
    from magnetar.admin.console import ConsoleContext, RateHistory, build_console_app

    assert http_broker.thread.server is not None
    app = build_console_app(ConsoleContext(AdminContext(http_broker.thread.server.service, cluster="standalone"),
                                           RateHistory()))

    async def call(state: dict[str, Any], headers: list[tuple[bytes, bytes]] | None = None) -> Any:
        sent: list[dict[str, Any]] = []

        async def receive() -> dict[str, Any]:
            return {"type": "http.request", "body": b"", "more_body": False}

        async def send(message: dict[str, Any]) -> None:
            sent.append(message)

        scope = {"type": "http", "method": "GET", "path": "/console/api/whoami", "raw_path": b"/console/api/whoami",
                 "query_string": b"", "headers": headers or [], "root_path": "", "scheme": "http", "state": state,
                 "server": ("127.0.0.1", 80), "client": ("127.0.0.1", 1), "http_version": "1.1"}
        await app(scope, receive, send)
        return json.loads(b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body"))

    # Authentication off: the authentication layer says "no role", whatever came before it.
    assert asyncio.run(call({"role": "ops"})) == {"role": None}
    assert asyncio.run(call({})) == {"role": None}
    assert get(http_broker, "/console/api/whoami") == {"role": None}  # no authentication on this broker
    # Authentication on: the role of the request's credentials.
    from magnetar.runtime.clock import SystemClock
    from magnetar.security import Authenticator, TokenVerifier, create_token

    service = http_broker.thread.server.service
    secret = b"console-secret-console-secret-co"
    service.authenticator = Authenticator(("token",), tokens=TokenVerifier(clock=SystemClock(), secret_key=secret))
    try:
        bearer = [(b"authorization", f"Bearer {create_token('ops', secret_key=secret)}".encode())]
        assert asyncio.run(call({}, bearer)) == {"role": "ops"}
        assert asyncio.run(call({}))["reason"].startswith("Authentication required")
    finally:
        service.authenticator = None
