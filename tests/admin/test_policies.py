"""Each policy through the REST API, and its effect on the broker (in-process, manual clock)."""

from __future__ import annotations

import asyncio

import msgspec
import pytest

from magnetar.base.types import TopicName
from magnetar.broker import BrokerConfig
from magnetar.broker.errors import BrokerError
from magnetar.catalog.policies import POLICIES_ROOT, Policies, RetentionAction
from magnetar.protocol.pulsar import pb
from tests.admin.harness import AdminWorld, message, run_world
from tests.manual_clock import settle

T = "persistent://public/default/t1"
NS = "/namespaces/public/default"


run = run_world


def test_policy_endpoints_store_pulsar_json_and_validate() -> None:
    async def body(w: AdminWorld) -> None:
        cases = [
            ("retention", {"retentionTimeInMinutes": 60, "retentionSizeInMB": -1}),
            ("messageTTL", 30),
            ("deduplication", False),
            ("maxProducersPerTopic", 2),
            ("maxConsumersPerTopic", 3),
            ("publishRate", {"publishThrottlingRateInMsg": 10, "publishThrottlingRateInByte": -1}),
            ("delayedDelivery", {"active": False, "tickTime": 500, "maxDeliveryDelayInMillis": 0}),
            ("autoTopicCreation", {"allowAutoTopicCreation": True, "topicType": "partitioned",
                                   "defaultNumPartitions": 2}),
        ]
        for segment, value in cases:
            assert await w.ok("GET", f"{NS}/{segment}") is None
            await w.ok("POST", f"{NS}/{segment}", value)
            assert await w.ok("GET", f"{NS}/{segment}") == value, segment
        for segment, bad in [("retention", {"retentionTimeInMinutes": -5}), ("messageTTL", -1),
                             ("maxProducersPerTopic", -2),
                             ("autoTopicCreation", {"allowAutoTopicCreation": True, "topicType": "partitioned"})]:
            assert (await w.call("POST", f"{NS}/{segment}", bad)).status == 412, segment
        assert (await w.call("POST", f"{NS}/messageTTL", "ten")).status == 400
        stored = await w.ok("GET", NS)
        assert stored["message_ttl_in_seconds"] == 30 and stored["deduplicationEnabled"] is False
        assert stored["publishMaxMessageRate"]["standalone"]["publishThrottlingRateInMsg"] == 10
        quota = {"limitSize": 1000, "limitTime": None, "policy": "producer_exception"}
        await w.ok("POST", f"{NS}/backlogQuota", quota, query="backlogQuotaType=destination_storage")
        assert await w.ok("GET", f"{NS}/backlogQuotaMap") == {"destination_storage": quota}
        assert (await w.call("POST", f"{NS}/backlogQuota", quota, query="backlogQuotaType=nope")).status == 412
        await w.ok("DELETE", f"{NS}/backlogQuota", query="backlogQuotaType=destination_storage")
        assert await w.ok("GET", f"{NS}/backlogQuotaMap") == {}
        await w.ok("DELETE", f"{NS}/messageTTL")
        assert await w.ok("GET", f"{NS}/messageTTL") is None

    run(body)


def test_topic_overrides_win_over_the_namespace_and_fall_back_when_removed() -> None:
    async def body(w: AdminWorld) -> None:
        path = w.topic_path(T)
        assert (await w.call("POST", f"{path}/messageTTL", query="messageTTL=5")).status == 404  # no topic yet
        await w.ok("PUT", path)
        name = TopicName.parse(T)
        await w.ok("POST", f"{NS}/messageTTL", 100)
        await w.ok("POST", f"{NS}/retention", {"retentionTimeInMinutes": 1, "retentionSizeInMB": 2})
        assert w.service.policies.effective(name).message_ttl_s == 100
        await w.ok("POST", f"{path}/messageTTL", query="messageTTL=5")
        await w.ok("POST", f"{path}/maxMessageSize", 64)
        await w.ok("POST", f"{path}/retention", {"retentionTimeInMinutes": -1, "retentionSizeInMB": -1})
        assert await w.ok("GET", f"{path}/messageTTL") == 5
        effective = w.service.policies.effective(name)
        assert (effective.message_ttl_s, effective.max_message_size_bytes) == (5, 64)
        assert (effective.retention_time_s, effective.retention_size_bytes) == (-1, -1)
        await w.ok("DELETE", f"{path}/messageTTL")
        await w.ok("DELETE", f"{path}/retention")
        effective = w.service.policies.effective(name)
        assert effective.message_ttl_s == 100
        assert (effective.retention_time_s, effective.retention_size_bytes) == (60.0, 2 * 1024 * 1024)
        # a partition takes its partitioned topic's overrides
        assert w.service.policies.effective(name.partition(0)).max_message_size_bytes == 64

    run(body)


def test_a_change_by_another_broker_is_applied_through_the_watch() -> None:
    async def body(w: AdminWorld) -> None:
        await w.publish(T, 1)
        name = TopicName.parse(T)
        assert w.service.policies.effective(name).max_producers == 0
        store = await w.metadata_server.connect()  # another broker's client
        found = await store.get(f"{POLICIES_ROOT}/public/default")
        policies = msgspec.json.decode(found.value, type=Policies)
        policies.max_producers_per_topic = 1
        await store.put(f"{POLICIES_ROOT}/public/default", msgspec.json.encode(policies), found.version)
        await settle()
        assert w.service.policies.effective(name).max_producers == 1

    run(body)


def test_max_producers_and_consumers_refuse_with_busy_errors() -> None:
    async def body(w: AdminWorld) -> None:
        await w.ok("POST", f"{NS}/maxProducersPerTopic", 1)
        await w.ok("POST", f"{NS}/maxConsumersPerTopic", 1)
        await w.producer(T)
        with pytest.raises(BrokerError) as refused:
            await w.producer(T)
        assert refused.value.code == pb.ProducerBusy and "max producers" in refused.value.message
        await w.subscribe(T, "a")
        with pytest.raises(BrokerError) as refused_consumer:
            await w.subscribe(T, "b")
        assert refused_consumer.value.code == pb.ConsumerBusy
        await w.ok("DELETE", f"{NS}/maxProducersPerTopic")
        await w.producer(T)

    run(body)


def test_max_message_size_fails_the_send_with_not_allowed() -> None:
    async def body(w: AdminWorld) -> None:
        path = w.topic_path(T)
        await w.ok("PUT", path)
        await w.ok("POST", f"{path}/maxMessageSize", 200)
        topic = w.service.topics[T]
        await topic.publish(message(b"x" * 100))
        with pytest.raises(BrokerError) as refused:
            await topic.publish(message(b"x" * 300))
        assert refused.value.code == pb.NotAllowedError

    run(body)


@pytest.mark.parametrize(("action", "code"), [
    ("producer_request_hold", pb.ProducerBlockedQuotaExceededError),
    ("producer_exception", pb.ProducerBlockedQuotaExceededException),
])
def test_backlog_size_quota_disconnects_and_refuses_producers_until_consumed(action: str, code: int) -> None:
    async def body(w: AdminWorld) -> None:
        await w.ok("POST", f"{NS}/backlogQuota", {"limitSize": 500, "policy": action},
                   query="backlogQuotaType=destination_storage")
        _consumer, sub, _ = await w.subscribe(T, "slow")
        await w.producer(T, "first")
        topic = w.service.topics[T]
        await w.publish(T, 10, size=100)
        await w.check()
        assert topic.quota_exceeded is not None and topic.quota_exceeded.action is RetentionAction(action)
        assert topic.producers == {}  # disconnected: their clients come back and are refused
        with pytest.raises(BrokerError) as refused:
            await w.producer(T, "first")
        assert refused.value.code == code
        await sub.clear_backlog()
        await w.check()
        assert topic.quota_exceeded is None
        await w.producer(T, "first")

    run(body)


def test_backlog_eviction_moves_the_slow_subscription_and_keeps_producers() -> None:
    async def body(w: AdminWorld) -> None:
        await w.ok("POST", f"{NS}/backlogQuota", {"limitSize": 500, "policy": "consumer_backlog_eviction"},
                   query="backlogQuotaType=destination_storage")
        _consumer, slow, _ = await w.subscribe(T, "slow")
        producer, _ = await w.producer(T)
        topic = w.service.topics[T]
        await w.publish(T, 20, size=100)
        assert topic.backlog_bytes() > 2000
        await w.check()
        assert topic.backlog_bytes() <= 500 and slow.cursor.backlog_entries() < 20
        assert list(topic.producers.values()) == [producer]

    run(body)


def test_message_age_quota_with_eviction_expires_old_entries() -> None:
    async def body(w: AdminWorld) -> None:
        await w.ok("POST", f"{NS}/backlogQuota", {"limitTime": 60, "policy": "consumer_backlog_eviction"},
                   query="backlogQuotaType=message_age")
        _consumer, slow, _ = await w.subscribe(T, "slow")
        await w.publish(T, 5)
        await w.clock.advance(120)
        await w.publish(T, 3)
        await w.check()
        assert slow.cursor.backlog_entries() == 3

    run(body)


def test_message_ttl_expires_by_publish_time() -> None:
    async def body(w: AdminWorld) -> None:
        await w.ok("POST", f"{NS}/messageTTL", 30)
        _consumer, sub, _ = await w.subscribe(T, "s")
        await w.publish(T, 4)
        await w.clock.advance(20)
        await w.publish(T, 2)
        await w.check()
        assert sub.cursor.backlog_entries() == 6  # nothing is 30 s old yet
        await w.clock.advance(15)
        await w.check()
        assert sub.cursor.backlog_entries() == 2
        stats = await w.ok("GET", f"{w.topic_path(T)}/stats")
        assert stats["subscriptions"]["s"]["totalMsgExpired"] == 4

    run(body)


def test_publish_rate_throttles_in_order_and_drops_nothing() -> None:
    async def body(w: AdminWorld) -> None:
        await w.ok("POST", f"{NS}/publishRate", {"publishThrottlingRateInMsg": 5, "publishThrottlingRateInByte": -1})
        await w.publish(T, 0)
        topic = w.service.topics[T]
        tasks = [asyncio.ensure_future(topic.publish(message(str(i).encode(), sequence_id=i))) for i in range(12)]
        await settle()
        assert sum(t.done() for t in tasks) == 5
        await w.clock.advance(1.0)
        assert sum(t.done() for t in tasks) == 10
        await w.clock.advance(1.0)
        positions = [await t for t in tasks]
        assert positions == sorted(positions) and len(set(positions)) == 12

    run(body)


def test_auto_topic_creation_policy_and_admin_create() -> None:
    async def body(w: AdminWorld) -> None:
        await w.ok("POST", f"{NS}/autoTopicCreation", {"allowAutoTopicCreation": False})
        with pytest.raises(BrokerError) as refused:
            await w.service.get_topic(TopicName.parse(T), create=True)
        assert refused.value.code == pb.TopicNotFound
        await w.ok("PUT", w.topic_path(T))  # an operator may still create it
        await w.producer(T)

    run(body)


def test_deduplication_switch_follows_the_policy() -> None:
    """Off by default (Pulsar's brokerDeduplicationEnabled=false); the namespace policy turns it
    on, the topic policy overrides the namespace's, and removing both brings the default back."""
    async def body(w: AdminWorld) -> None:
        await w.publish(T, 1)
        topic = w.service.topics[T]
        assert topic.policies().deduplication is False
        assert (await w.ok("GET", f"{w.topic_path(T)}/stats"))["deduplicationStatus"] == "Disabled"
        await w.ok("POST", f"{NS}/deduplication", True)
        assert topic.policies().deduplication is True
        assert (await w.ok("GET", f"{w.topic_path(T)}/stats"))["deduplicationStatus"] == "Enabled"
        await w.ok("POST", f"{w.topic_path(T)}/deduplicationEnabled", False)
        assert topic.policies().deduplication is False
        await w.ok("DELETE", f"{w.topic_path(T)}/deduplicationEnabled")
        assert topic.policies().deduplication is True
        await w.ok("DELETE", f"{NS}/deduplication")
        assert topic.policies().deduplication is False

    run(body)


def test_without_a_metadata_store_topics_run_on_broker_defaults() -> None:
    async def main() -> None:
        from magnetar.broker import MemoryLogStore
        from magnetar.broker.service import BrokerService

        service = BrokerService(BrokerConfig(message_ttl_s=7), MemoryLogStore())
        topic = await service.get_topic(TopicName.parse(T), create=True)
        assert topic.policies().message_ttl_s == 7 and service.resources is None
        await service.close()

    asyncio.run(main())


def test_partitioned_auto_creation_policy_answers_partitioned_metadata() -> None:
    async def body(w: AdminWorld) -> None:
        await w.ok("POST", f"{NS}/autoTopicCreation", {"allowAutoTopicCreation": True, "topicType": "partitioned",
                                                       "defaultNumPartitions": 3})
        assert await w.ok("GET", f"{w.topic_path(T)}/partitions") == {"partitions": 0}  # admin reads never create
        assert await w.service.partitions(TopicName.parse(T)) == 3  # what a client's lookup gets
        assert await w.ok("GET", f"{w.topic_path(T)}/partitions") == {"partitions": 3}
        await w.publish(T + "-partition-0", 1)
        assert await w.service.partitions(TopicName.parse(T + "-partition-0")) == 0

    run(body)


def test_delayed_delivery_switch_follows_the_policy() -> None:
    async def body(w: AdminWorld) -> None:
        _consumer, sub, _ = await w.subscribe(T, "s")
        assert sub.dispatcher is not None and sub.dispatcher._delayed_enabled() is True
        await w.ok("POST", f"{NS}/delayedDelivery", {"active": False, "tickTime": 1000})
        assert sub.dispatcher._delayed_enabled() is False
        await w.ok("POST", f"{w.topic_path(T)}/delayedDelivery", {"active": True, "tickTime": 100})
        assert sub.dispatcher._delayed_enabled() is True

    run(body)
