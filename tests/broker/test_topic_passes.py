"""The broker's policy pass calls the checks of a topic only when one of them can act on it
(``broker/topic_passes.py``; issue 22: ~35 us per topic and pass at 100,000 topics, for checks
that could do nothing at a broker's defaults), and every policy still applies on that pass.

Negative controls (each run): a ``pass_work`` that gives every topic every due check (the
session-start pass) calls the checks of all 100 quiet topics
(``test_negative_control_work_for_every_topic_calls_every_check``); without the
``quota_exceeded`` clause a quota removed after it was exceeded is never cleared (the producers
stay refused); ``retention_may_trim`` without ``set_retention`` leaves the managed ledger on the
old retention (the trim after a rollover would apply it).
"""

from __future__ import annotations

from typing import Any

import pytest

from magnetar import sim
from magnetar.base.types import EARLIEST, TopicName
from magnetar.broker import BrokerConfig
from magnetar.broker import service as service_module
from magnetar.broker.compaction import CompactedView
from magnetar.broker.managed_log import ManagedTopicLog
from magnetar.broker.policy_checks import ALL_CHECKS, DueChecks
from magnetar.broker.topic import Topic
from magnetar.broker.topic_passes import TopicPassWork, pass_work
from magnetar.catalog.policies import Policies, QuotaLimit, RetentionAction, TopicPolicies, resolve
from tests.admin.harness import AdminWorld, managed_broker, message, run_world
from tests.managed_ledger.harness import config, make_world

NS = "persistent://public/default/"
#: Every check but retention (the memory log does not say whether it may trim: always checked).
NOT_RETENTION = DueChecks(expiry=True, backlog_quota=True, retention=False, compaction=True)


def _count_checks(w: AdminWorld) -> list[str]:
    """The topics ``w`` loads from now on note each call of their ``check_policies``."""
    called: list[str] = []

    class CountingTopic(Topic):
        async def check_policies(self, now_ms: int, due: DueChecks = ALL_CHECKS) -> None:
            called.append(str(self.name))
            await super().check_policies(now_ms, due)

    w.service.topic_type = CountingTopic
    return called


async def _quiet_and_one_busy(w: AdminWorld) -> tuple[list[str], Any]:
    """100 topics without a subscription and one with a subscription and a message (TTL 1 s is
    the broker's default here); two seconds later. Returns (the calls noted, the subscription)."""
    called = _count_checks(w)
    for index in range(100):
        await w.service.get_topic(TopicName.parse(f"{NS}quiet-{index}"), create=True)
    busy = await w.service.get_topic(TopicName.parse(f"{NS}busy"), create=True)
    subscription = await busy.subscription("s", durable=True, initial_mark_delete=EARLIEST)
    await busy.publish(message(publish_time=w.clock.now_ms()))
    await w.clock.advance(2)  # before the first scheduled pass (rates at 5 s)
    return called, subscription


def test_a_pass_calls_only_the_checks_that_can_act() -> None:
    async def body(w: AdminWorld) -> None:
        called, subscription = await _quiet_and_one_busy(w)
        await w.service.check_policies(NOT_RETENTION, rates=False)
        assert called == [f"{NS}busy"]  # a TTL without a subscription can expire nothing
        assert subscription.expired.msg_count == 1  # and the TTL applied on this pass

    run_world(body, BrokerConfig(message_ttl_s=1))


def test_negative_control_work_for_every_topic_calls_every_check(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(service_module, "pass_work", lambda topic, due: TopicPassWork(due, 0, False))

    async def body(w: AdminWorld) -> None:
        called, subscription = await _quiet_and_one_busy(w)
        await w.service.check_policies(NOT_RETENTION, rates=False)
        assert len(called) == 101
        assert subscription.expired.msg_count == 1

    run_world(body, BrokerConfig(message_ttl_s=1))


def test_a_quota_found_exceeded_is_cleared_once_the_policy_is_gone() -> None:
    async def body(w: AdminWorld) -> None:
        topic = await w.service.get_topic(TopicName.parse(f"{NS}was-over"), create=True)
        assert pass_work(topic, NOT_RETENTION) is None  # no TTL, no quota, no threshold: nothing
        topic.quota_exceeded = QuotaLimit(1, RetentionAction.PRODUCER_REQUEST_HOLD)  # an earlier check's finding
        work = pass_work(topic, NOT_RETENTION)
        assert work is not None and work.own == DueChecks(False, True, False, False)
        await w.service.check_policies(NOT_RETENTION, rates=False)
        assert topic.quota_exceeded is None

    run_world(body)


def test_the_compaction_threshold_in_force_is_the_topics_else_the_namespaces() -> None:
    settings = BrokerConfig()
    assert resolve(settings, None, None).compaction_threshold_bytes == 0
    assert resolve(settings, Policies(compaction_threshold=500), None).compaction_threshold_bytes == 500
    assert resolve(settings, Policies(compaction_threshold=500),
                   TopicPolicies(compaction_threshold=7)).compaction_threshold_bytes == 7
    assert resolve(settings, Policies(compaction_threshold=500),
                   TopicPolicies(compaction_threshold=0)).compaction_threshold_bytes == 0  # the topic's off


def test_a_managed_log_with_one_ledger_cannot_trim_and_adopts_the_policy() -> None:
    async def main() -> None:
        world = make_world()
        service = await managed_broker(world, config(max_entries_per_ledger=2))
        topic = await service.get_topic(TopicName.parse(f"{NS}trimmed"), create=True)
        log = topic.log
        assert isinstance(log, ManagedTopicLog)
        await topic.publish(message(publish_time=world.clock.now_ms()))
        assert not log.retention_may_trim(60.0, -1)  # one ledger: the current one is never trimmed
        # A read_compacted consumer's view answers for the log it wraps (negative control: a view
        # answering True as the memory log does fails here).
        assert not CompactedView(log, topic.compaction).retention_may_trim(60.0, -1)
        assert (log.managed_ledger.config.retention_time_s, log.managed_ledger.config.retention_size_bytes) == (
            60.0, -1)  # adopted all the same
        for index in range(1, 4):
            await topic.publish(message(publish_time=world.clock.now_ms(), sequence_id=index))
        assert len(log.managed_ledger.ledger_ids) >= 2
        assert log.retention_may_trim(0.0, 0)
        assert pass_work(topic, ALL_CHECKS) is not None
        await service.close()

    sim.run(main(), steps_max=2_000_000)
