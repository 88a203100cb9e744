"""Non-persistent topics through ``/admin/v2/non-persistent``: list, stats with drops, delete."""

from __future__ import annotations

from magnetar.base.types import EARLIEST, TopicName
from magnetar.broker.consumer import Consumer, SubType
from tests.admin.harness import AdminWorld, message, run_world
from tests.broker.fakes import FakeChannel

T = "non-persistent://public/default/np"
BASE = "/non-persistent/public/default"


def test_list_stats_and_delete() -> None:
    async def body(w: AdminWorld) -> None:
        assert await w.ok("GET", BASE) == []
        assert (await w.call("GET", f"{BASE}/np/stats")).status == 404
        topic = await w.service.get_topic(TopicName.parse(T), create=True)
        subscription = await topic.subscription("s", durable=False, initial_mark_delete=EARLIEST)
        channel = FakeChannel()
        consumer = Consumer(1, "c1", SubType.SHARED, channel)
        subscription.add_consumer(consumer)
        subscription.flow(consumer, 3)
        for i in range(5):
            await topic.publish(message(sequence_id=i))
        assert len(channel.messages) == 3
        assert await w.ok("GET", BASE) == [T]
        assert await w.ok("GET", "/persistent/public/default") == []  # not a persistent topic
        stats = await w.ok("GET", f"{BASE}/np/stats")
        assert stats["msgInCounter"] == 5
        assert stats["subscriptions"]["s"]["msgDropCount"] == 2
        assert stats["subscriptions"]["s"]["msgOutCounter"] == 3
        assert stats["msgDropCount"] == 2
        await w.clock.advance(1.0)
        await w.check()  # the policy pass samples the rates
        stats = await w.ok("GET", f"{BASE}/np/stats")
        assert stats["subscriptions"]["s"]["msgDropRate"] > 0 and stats["msgDropRate"] > 0
        assert (await w.call("DELETE", f"{BASE}/np")).status == 412  # a consumer is attached
        assert (await w.call("DELETE", f"{BASE}/np", query="force=true")).status == 204
        assert channel.closed_consumers == [1]
        assert await w.ok("GET", BASE) == []

    run_world(body)
