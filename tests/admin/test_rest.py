"""The admin REST API (Pulsar's /admin/v2 paths and JSON shapes) over an in-process broker."""

from __future__ import annotations

from magnetar.base.types import TopicName
from magnetar.catalog.lookup import partitioned_topic_path
from tests.admin.harness import AdminWorld, run_world

T = "persistent://public/default/t1"


run = run_world


def test_first_start_has_cluster_tenant_and_default_namespace() -> None:
    async def body(w: AdminWorld) -> None:
        assert await w.ok("GET", "/clusters") == ["standalone"]
        assert (await w.ok("GET", "/clusters/standalone"))["serviceUrl"] == "http://x"
        assert await w.ok("GET", "/tenants") == ["public"]
        assert await w.ok("GET", "/tenants/public") == {"adminRoles": [], "allowedClusters": ["standalone"]}
        assert await w.ok("GET", "/namespaces/public") == ["public/default"]
        policies = await w.ok("GET", "/namespaces/public/default")
        assert policies["replication_clusters"] == ["standalone"]
        assert policies["bundles"]["numBundles"] == 4
        missing = await w.call("GET", "/clusters/nope")
        assert missing.status == 404 and "reason" in missing.json()

    run(body)


def test_tenants_create_get_update_delete_with_pulsar_status_codes() -> None:
    async def body(w: AdminWorld) -> None:
        info = {"adminRoles": ["ops"], "allowedClusters": ["standalone"]}
        assert (await w.call("PUT", "/tenants/acme", info)).status == 204
        assert (await w.call("PUT", "/tenants/acme", info)).status == 409
        assert await w.ok("GET", "/tenants/acme") == info
        assert (await w.call("PUT", "/tenants/bad", {"allowedClusters": ["mars"]})).status == 412
        assert (await w.call("PUT", "/tenants/b%20ad", info)).status == 412
        assert (await w.call("PUT", "/tenants/x", raw=b"{not json")).status == 400
        await w.ok("POST", "/tenants/acme", {"adminRoles": ["root"], "allowedClusters": []})
        assert (await w.ok("GET", "/tenants/acme"))["adminRoles"] == ["root"]
        assert sorted(await w.ok("GET", "/tenants")) == ["acme", "public"]
        await w.ok("PUT", "/namespaces/acme/ns1")
        assert (await w.call("DELETE", "/tenants/acme")).status == 409  # still has a namespace
        await w.ok("DELETE", "/namespaces/acme/ns1")
        await w.ok("DELETE", "/tenants/acme")
        assert (await w.call("GET", "/tenants/acme")).status == 404
        assert (await w.call("DELETE", "/tenants/acme")).status == 404

    run(body)


def test_namespaces_create_list_policies_delete() -> None:
    async def body(w: AdminWorld) -> None:
        assert (await w.call("PUT", "/namespaces/nobody/ns")).status == 404
        await w.ok("PUT", "/namespaces/public/ns2", {"message_ttl_in_seconds": 30})
        assert (await w.call("PUT", "/namespaces/public/ns2")).status == 409
        assert await w.ok("GET", "/namespaces/public") == ["public/default", "public/ns2"]
        assert (await w.ok("GET", "/namespaces/public/ns2"))["message_ttl_in_seconds"] == 30
        await w.publish("persistent://public/ns2/a", 1)
        assert await w.ok("GET", "/namespaces/public/ns2/topics") == ["persistent://public/ns2/a"]
        assert (await w.call("DELETE", "/namespaces/public/ns2")).status == 409  # has a topic
        await w.ok("DELETE", "/namespaces/public/ns2", query="force=true")
        assert (await w.call("GET", "/namespaces/public/ns2")).status == 404
        assert await w.ok("GET", "/namespaces/public") == ["public/default"]

    run(body)


def test_topics_create_list_delete_and_partitions() -> None:
    async def body(w: AdminWorld) -> None:
        path = w.topic_path(T)
        await w.ok("PUT", path)
        assert (await w.call("PUT", path)).status == 409
        assert await w.ok("GET", "/persistent/public/default") == [T]
        assert await w.ok("GET", f"{path}/partitions") == {"partitions": 0}
        assert (await w.call("PUT", "/persistent/public/nope/t")).status == 404

        p = w.topic_path("persistent://public/default/pt")
        await w.ok("PUT", f"{p}/partitions", 2)
        assert (await w.call("PUT", f"{p}/partitions", 2)).status == 409
        assert (await w.call("PUT", f"{p}/partitions", 0)).status == 412
        assert await w.ok("GET", f"{p}/partitions") == {"partitions": 2}
        assert await w.ok("GET", "/persistent/public/default/partitioned") == ["persistent://public/default/pt"]
        await w.ok("POST", f"{p}/partitions", 3)
        assert (await w.call("POST", f"{p}/partitions", 2)).status == 409  # never shrinks
        assert await w.service.partitions(TopicName.parse("persistent://public/default/pt")) == 3
        listed = await w.ok("GET", "/persistent/public/default")
        assert [f"persistent://public/default/pt-partition-{i}" for i in range(3)] == [n for n in listed if "pt-" in n]
        m = w.topic_path("persistent://public/default/meta")
        await w.ok("PUT", f"{m}/partitions", {"partitions": 4, "properties": {}})
        assert await w.ok("GET", f"{m}/partitions") == {"partitions": 4}

        await w.ok("DELETE", f"{p}/partitions")
        assert not await w.metadata.exists(partitioned_topic_path(TopicName.parse("persistent://public/default/pt")))
        await w.producer(T)
        assert (await w.call("DELETE", path)).status == 412  # active producer
        await w.ok("DELETE", path, query="force=true")
        assert T not in await w.ok("GET", "/persistent/public/default")
        assert (await w.call("DELETE", path)).status == 404

    run(body)


def test_stats_and_internal_stats_shapes() -> None:
    async def body(w: AdminWorld) -> None:
        await w.subscribe(T, "s1")
        await w.producer(T, "prod-a")
        await w.publish(T, 5, size=100)
        await w.clock.advance(1.0)
        await w.check()
        stats = await w.ok("GET", f"{w.topic_path(T)}/stats")
        assert stats["msgInCounter"] == 5 and stats["bytesInCounter"] > 500
        assert stats["msgRateIn"] > 0 and stats["storageSize"] > 500
        assert [p["producerName"] for p in stats["publishers"]] == ["prod-a"]
        sub = stats["subscriptions"]["s1"]
        assert sub["type"] == "Shared" and sub["msgBacklog"] == 5 and sub["consumers"][0]["consumerName"]
        internal = await w.ok("GET", f"{w.topic_path(T)}/internalStats")
        assert internal["numberOfEntries"] == 5 and internal["cursors"]["s1"]["markDeletePosition"]
        assert internal["ledgers"][0]["entries"] == 5
        partitioned = w.topic_path(T + "-parted")
        await w.ok("PUT", f"{partitioned}/partitions", 2)
        assert (await w.call("GET", f"{partitioned}/internalStats")).status == 412
        one = await w.ok("GET", f"{partitioned}-partition-1/internalStats")
        assert one["numberOfEntries"] == 0

    run(body)


def test_subscriptions_create_skip_clear_expire_reset_delete() -> None:
    async def body(w: AdminWorld) -> None:
        path = w.topic_path(T)
        await w.ok("PUT", path)
        start = w.clock.now_ms()
        await w.publish(T, 10, publish_time=start)
        await w.clock.advance(10.0)
        await w.publish(T, 10)
        await w.ok("PUT", f"{path}/subscription/s1", {"ledgerId": -1, "entryId": -1})  # earliest
        await w.ok("PUT", f"{path}/subscription/s2")  # latest
        assert (await w.call("PUT", f"{path}/subscription/s1")).status == 409
        assert await w.ok("GET", f"{path}/subscriptions") == ["s1", "s2"]
        topic = w.service.topics[T]

        def backlog(name: str) -> int:
            return topic.subscriptions[name].cursor.backlog_entries()

        assert (backlog("s1"), backlog("s2")) == (20, 0)
        await w.ok("POST", f"{path}/subscription/s1/skip/3")
        assert backlog("s1") == 17
        await w.ok("POST", f"{path}/subscription/s1/expireMessages/5")  # the first 10 are 10 s old
        assert backlog("s1") == 10
        await w.ok("POST", f"{path}/subscription/s1/resetcursor/{start}")  # back to the first entry
        assert backlog("s1") == 20
        last = topic.log.last_position
        await w.ok("POST", f"{path}/subscription/s1/resetcursor", {"ledgerId": last.ledger_id, "entryId": 15})
        assert backlog("s1") == 5
        await w.ok("POST", f"{path}/subscription/s1/skip_all")
        assert backlog("s1") == 0
        await w.ok("POST", f"{path}/subscription/s2/resetcursor/{start}")
        await w.ok("POST", f"{path}/all_subscription/expireMessages/5")
        assert backlog("s2") == 10
        assert (await w.call("POST", f"{path}/subscription/nope/skip_all")).status == 404
        await w.ok("DELETE", f"{path}/subscription/s2")
        assert await w.ok("GET", f"{path}/subscriptions") == ["s1"]

    run(body)


def test_subscription_with_consumer_needs_force_to_delete_and_reset_detaches_it() -> None:
    async def body(w: AdminWorld) -> None:
        path = w.topic_path(T)
        consumer, _sub, channel = await w.subscribe(T, "s")
        assert (await w.call("DELETE", f"{path}/subscription/s")).status == 412
        await w.ok("POST", f"{path}/subscription/s/resetcursor/0")
        assert channel.closed_consumers == [consumer.consumer_id]
        await w.ok("DELETE", f"{path}/subscription/s", query="force=true")
        assert await w.ok("GET", f"{path}/subscriptions") == []

    run(body)


def test_unknown_paths_and_methods_answer_json_reasons() -> None:
    async def body(w: AdminWorld) -> None:
        assert (await w.call("GET", "/nothing")).json()["reason"]
        reply = await w.call("PATCH", "/tenants")
        assert reply.status == 405 and reply.json()["reason"]

    run(body)
