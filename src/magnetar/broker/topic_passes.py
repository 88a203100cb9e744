"""The broker's periodic passes over every loaded topic, decided per topic without a call into
the checks (issue 22: 100,000 topics on one standalone).

A policy pass (``BrokerService.check_policies``) ran, for every loaded topic, the topic's
``check_policies`` coroutine, the compaction-threshold lookup (two awaited policy reads) and the
offload refresh: ~35 us per topic, 3.5 s of the loop every minute at 100,000 topics, although at
a broker's defaults none of them can act on any of those topics. ``pass_work`` says, from the
topic's state and the policies in force now, which of the due checks *can* act on a topic; the
pass calls only those, and moves on from a topic none of them can act on (most topics) after a
few attribute reads. The conditions are the checks' own early returns, read before the call
instead of inside it, so every policy applies exactly when it did:

* TTL expiry acts on an active topic with a TTL set and at least one subscription;
* the backlog-quota check acts on an active topic with a size or time quota set, or whose last
  check found a quota exceeded (the check then clears it);
* retention acts on an active topic whose log may trim (``TopicLog.retention_may_trim``): the
  managed topic log adopts the policy in force at once, as the check did, so a trim after a
  rollover applies it, and says no while it holds fewer than two ledgers; a compacted view asks
  the log it wraps; the memory and non-persistent logs let ``apply_retention`` decide;
* the compaction-threshold check acts when a threshold is set (``EffectivePolicies``);
* the offload refresh acts on a topic with an offload configured.

``sample_rates_of``: the rate samples of a run of topics in one compiled loop (the pass's
interpreted loop calls it per run of ``RATE_SAMPLE_RUN_COUNT`` topics and reads the clock between
runs, to yield to the event loop in slices).
"""

from __future__ import annotations

from magnetar.broker.log import TopicLog
from magnetar.broker.offload import offload_of
from magnetar.broker.policy_checks import DueChecks
from magnetar.broker.topic import Topic, TopicState
from magnetar.catalog.policies import EffectivePolicies

#: Topics sampled per call of ``sample_rates_of``: the pass reads its clock between two calls (a
#: sample is ~0.1-1 us, so a run stays far below a pass slice).
RATE_SAMPLE_RUN_COUNT = 32


class TopicPassWork:
    """What a policy pass does to one topic: ``own`` the topic's own checks to run
    (``Topic.check_policies``; None: none), ``compaction_threshold_bytes`` (> 0: check it) and
    ``offload_refresh``."""

    def __init__(self, own: DueChecks | None, compaction_threshold_bytes: int, offload_refresh: bool) -> None:
        self.own = own
        self.compaction_threshold_bytes = compaction_threshold_bytes
        self.offload_refresh = offload_refresh


def pass_work(topic: Topic, due: DueChecks) -> TopicPassWork | None:
    """The checks of ``due`` that can act on ``topic`` now; None when none can (see the module
    docstring)."""
    policies = topic.policies()
    active = topic.state is TopicState.ACTIVE
    expiry = due.expiry and active and policies.message_ttl_s > 0 and len(topic.subscriptions) > 0
    quota = due.backlog_quota and active and (
        policies.backlog_size is not None or policies.backlog_time is not None or topic.quota_exceeded is not None)
    retention = due.retention and active and _may_trim(topic.log, policies)
    threshold = policies.compaction_threshold_bytes if due.compaction else 0
    refresh = due.retention and _offload_configured(topic)
    if not (expiry or quota or retention or threshold > 0 or refresh):
        return None
    own = DueChecks(expiry, quota, retention, False) if expiry or quota or retention else None
    return TopicPassWork(own, threshold, refresh)


def _may_trim(log: TopicLog, policies: EffectivePolicies) -> bool:
    return log.retention_may_trim(policies.retention_time_s, policies.retention_size_bytes)


def _offload_configured(topic: Topic) -> bool:
    offload = offload_of(topic)
    return offload is not None and offload.configured


def sample_rates_of(topics: list[Topic], start: int, stop: int, now_ns: int, previous_ns: int) -> None:
    """``Topic.sample_rates`` of ``topics[start:stop]``."""
    for index in range(start, stop):
        topics[index].sample_rates(now_ns, previous_ns)
