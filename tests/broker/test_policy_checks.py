"""The broker's periodic policy checks, each on its own period with Pulsar's keys and defaults
(broker/policy_checks.py), and the older single key still in force where set.

The service's checker runs on the AdminWorld's manual clock: TTL expiry is observed as the
subscription's ``expired`` counter, so a check that ran too early or not at all shows.
"""

from __future__ import annotations

from magnetar.base.types import EARLIEST, TopicName
from magnetar.broker import BrokerConfig
from magnetar.broker.policy_checks import RATE_SAMPLE_INTERVAL_MS, DueChecks, PolicyPeriods, PolicySchedule
from magnetar.runtime.pulsar_conf import translate
from tests.admin.harness import AdminWorld, message, run_world

T = "persistent://public/default/policies"


def test_pulsars_defaults_apply_when_nothing_is_set() -> None:
    assert BrokerConfig().policy_periods() == PolicyPeriods(
        expiry_ms=300_000, backlog_quota_ms=60_000, retention_ms=120_000, compaction_ms=60_000,
        rate_sample_ms=RATE_SAMPLE_INTERVAL_MS)


def test_the_older_single_key_sets_every_period_not_set_on_its_own() -> None:
    periods = BrokerConfig(policy_check_interval_ms=100, retention_check_interval_s=7).policy_periods()
    assert periods == PolicyPeriods(expiry_ms=100, backlog_quota_ms=100, retention_ms=7_000, compaction_ms=100,
                                    rate_sample_ms=100)


def test_pulsar_conf_keys_map_to_the_periods() -> None:
    conf = translate({"retentionCheckIntervalInSeconds": "30", "backlogQuotaCheckIntervalInSeconds": "15",
                      "messageExpiryCheckIntervalInMinutes": "2",
                      "brokerServiceCompactionMonitorIntervalInSeconds": "90"})
    periods = BrokerConfig(**conf.broker).policy_periods()
    assert (periods.retention_ms, periods.backlog_quota_ms, periods.expiry_ms, periods.compaction_ms) == (
        30_000, 15_000, 120_000, 90_000)


def test_schedule_runs_each_check_on_its_own_period() -> None:
    schedule = PolicySchedule(PolicyPeriods(expiry_ms=300, backlog_quota_ms=60, retention_ms=120, compaction_ms=60,
                                            rate_sample_ms=5), now_ms=0)
    assert schedule.due(4) == (DueChecks(False, False, False, False), False)
    assert schedule.due(5) == (DueChecks(False, False, False, False), True)
    assert schedule.due(60) == (DueChecks(False, True, False, True), True)
    assert schedule.due(120) == (DueChecks(False, True, True, True), True)
    assert schedule.next_due_ms() == 125
    assert schedule.due(300) == (DueChecks(True, True, True, True), True)
    assert schedule.due(301) == (DueChecks(False, False, False, False), False)  # re-armed from 300


def _expired_after(config: BrokerConfig, seconds: list[int]) -> list[int]:
    """Messages TTL expired on a subscription (TTL 1 s) at each of the times ``seconds``."""
    counts: list[int] = []

    async def body(w: AdminWorld) -> None:
        topic = await w.service.get_topic(TopicName.parse(T), create=True)
        subscription = await topic.subscription("s", durable=True, initial_mark_delete=EARLIEST)
        await topic.publish(message(publish_time=w.clock.now_ms()))
        elapsed = 0
        for at in seconds:
            while elapsed < at:
                await w.clock.advance(1)
                elapsed += 1
            counts.append(subscription.expired.msg_count)

    run_world(body, config)
    return counts


def test_ttl_runs_on_the_message_expiry_period() -> None:
    config = BrokerConfig(message_ttl_s=1, message_expiry_check_interval_s=30)
    # the rate samples (every 5 s) and the other checks ran meanwhile; expiry waits its period
    assert _expired_after(config, [10, 29, 31]) == [0, 0, 1]


def test_negative_control_the_older_key_alone_checks_ttl_at_its_period() -> None:
    assert _expired_after(BrokerConfig(message_ttl_s=1, policy_check_interval_ms=5000), [10]) == [1]


def test_a_full_pass_at_once_still_runs_every_check() -> None:
    async def body(w: AdminWorld) -> None:
        topic = await w.service.get_topic(TopicName.parse(T), create=True)
        subscription = await topic.subscription("s", durable=True, initial_mark_delete=EARLIEST)
        await topic.publish(message(publish_time=w.clock.now_ms()))
        await w.clock.advance(2)
        await w.service.check_policies()  # what tests and callers outside the schedule use
        assert subscription.expired.msg_count == 1

    run_world(body, BrokerConfig(message_ttl_s=1))
