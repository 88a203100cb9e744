"""Per-topic and per-subscription Prometheus series (BrokerCollector), rates from the clock."""

from __future__ import annotations

import asyncio

from prometheus_client import CollectorRegistry, generate_latest

from magnetar.broker.metrics import BrokerCollector, LatencyHistogram, RateMeter
from tests.admin.harness import AdminWorld

T = "persistent://public/default/m"


def test_rate_meter_and_histogram() -> None:
    meter = RateMeter()
    meter.sample(0)
    meter.record(50, 5000)
    meter.sample(2_000_000_000)
    assert (meter.msg_rate, meter.byte_rate) == (25.0, 2500.0)
    histogram = LatencyHistogram()
    for latency_ms in (0.1, 3, 3, 7000):
        histogram.observe(latency_ms)
    buckets = dict(histogram.cumulative())
    assert buckets["0.0005"] == 1 and buckets["0.005"] == 3 and buckets["5.0"] == 3 and buckets["+Inf"] == 4


def test_collector_renders_loaded_topics_and_forgets_unloaded_ones() -> None:
    async def main() -> str:
        world = await AdminWorld().start()
        try:
            registry = CollectorRegistry()
            registry.register(BrokerCollector(world.service))
            await world.subscribe(T, "s")
            await world.publish(T, 4, size=50)
            await world.clock.advance(2.0)
            await world.check()
            text = generate_latest(registry).decode()
            await world.service.unload(world.service.topics[T].name)
            assert 'topic="persistent://public/default/m"' not in generate_latest(registry).decode()
            return text
        finally:
            await world.close()

    text = asyncio.run(main())
    labels = 'cluster="standalone",namespace="public/default",topic="persistent://public/default/m"'
    assert f"pulsar_in_messages_total{{{labels}}} 4.0" in text
    assert f"pulsar_rate_in{{{labels}}} 2.0" in text
    sub_labels = ('cluster="standalone",namespace="public/default",subscription="s",'
                  'topic="persistent://public/default/m"')
    assert f"pulsar_subscription_back_log{{{sub_labels}}} 4.0" in text
    assert f"pulsar_msg_backlog{{{labels}}} 4.0" in text
    assert f'magnetar_publish_latency_seconds_count{{{labels}}} 4.0' in text
