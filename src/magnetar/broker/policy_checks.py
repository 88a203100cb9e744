"""When the broker's periodic policy checks run: each on its own period, as in Pulsar.

Pulsar runs message expiry (TTL) every ``messageExpiryCheckIntervalInMinutes`` (5 min), backlog
quotas every ``backlogQuotaCheckIntervalInSeconds`` (60 s), retention (trimming consumed ledgers,
and deleting the bookie copies of offloaded ones) every ``retentionCheckIntervalInSeconds``
(120 s) and the compaction-threshold monitor every
``brokerServiceCompactionMonitorIntervalInSeconds`` (60 s). Each is a pass over every loaded
topic; one 5 s pass doing all four cost ~35 us per topic, 60% of an idle standalone's CPU at
20,000 topics (issue 22). Rates are sampled every ``RATE_SAMPLE_INTERVAL_MS`` (cheap counters).

``policy_check_interval_ms`` (Magnetar's older single key) still works: when set, it is the
period of every check whose own key is not set, and of the rate samples.

Pure: the caller passes monotonic milliseconds (``BrokerService`` from its clock).
"""

from __future__ import annotations

from dataclasses import dataclass

#: Rate samples (published / dispatched / expired per second) when ``policy_check_interval_ms``
#: is not set: the period the admin stats' rates are computed over.
RATE_SAMPLE_INTERVAL_MS = 5_000
#: How long a pass over the loaded topics (the policy checks, the rate samples) runs before it lets
#: the event loop run the rest (a yield), by the broker's clock: measured at 20,000 topics on a
#: memory log, a backlog-quota and compaction pass cost 17-75 us per topic (0.34-1.5 s in one loop
#: pass, every 60 s) and a rate sample 0.4-0.8 us (8-16 ms every 5 s), and every producer and
#: consumer of the broker waited for the pass to end (issue 22, "Session 18" in
#: docs/performance.md). Under a virtual clock no time passes within a pass: a simulated run's
#: passes never yield, and its schedule stays the one its seed gave.
TOPIC_PASS_SLICE_NS = 1_000_000


@dataclass(frozen=True, slots=True)
class DueChecks:
    """Which checks a pass runs."""

    expiry: bool = True
    backlog_quota: bool = True
    retention: bool = True
    compaction: bool = True

    def any(self) -> bool:
        return self.expiry or self.backlog_quota or self.retention or self.compaction


ALL_CHECKS = DueChecks()
NO_CHECKS = DueChecks(False, False, False, False)


@dataclass(frozen=True, slots=True)
class PolicyPeriods:
    """Milliseconds between two passes of each check, and between rate samples."""

    expiry_ms: int
    backlog_quota_ms: int
    retention_ms: int
    compaction_ms: int
    rate_sample_ms: int


class PolicySchedule:
    """The next due time of each check; ``due(now_ms)`` says which run now and re-arms them."""

    def __init__(self, periods: PolicyPeriods, now_ms: int) -> None:
        self.periods = periods
        self._next_ms = [now_ms + p for p in self._list(periods)]

    @staticmethod
    def _list(periods: PolicyPeriods) -> list[int]:
        return [periods.expiry_ms, periods.backlog_quota_ms, periods.retention_ms, periods.compaction_ms,
                periods.rate_sample_ms]

    def next_due_ms(self) -> int:
        return min(self._next_ms)

    def due(self, now_ms: int) -> tuple[DueChecks, bool]:
        """(the checks due at ``now_ms``, whether rates are due); each due one is re-armed one
        period after ``now_ms`` (a late pass does not bunch up the next ones)."""
        periods = self._list(self.periods)
        flags = [now_ms >= when for when in self._next_ms]
        for index, is_due in enumerate(flags):
            if is_due:
                self._next_ms[index] = now_ms + periods[index]
        return DueChecks(*flags[:4]), flags[4]
