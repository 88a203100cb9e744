"""The publish latency histogram puts a latency in the first bucket whose upper bound is at least
the latency (Prometheus's ``le``), +Inf past the last bound: checked at, just below and just above
every bound against the definition written out as a loop."""

from __future__ import annotations

import math

from magnetar.broker.metrics import LATENCY_BUCKETS_MS, LatencyHistogram


def _bucket_by_definition(latency_ms: float) -> int:
    for index, bound in enumerate(LATENCY_BUCKETS_MS):
        if latency_ms <= bound:
            return index
    return len(LATENCY_BUCKETS_MS)


def _observed_bucket(latency_ms: float) -> int:
    histogram = LatencyHistogram()
    histogram.observe(latency_ms)
    assert sum(histogram.counts) == 1 and histogram.count == 1 and histogram.sum_ms == latency_ms
    return histogram.counts.index(1)


def test_every_bound_edge_lands_in_its_bucket() -> None:
    latencies = [0.0, 1e-9, 1e9]
    for bound in LATENCY_BUCKETS_MS:
        latencies += [math.nextafter(bound, -math.inf), float(bound), math.nextafter(bound, math.inf)]
    for latency_ms in latencies:
        assert _observed_bucket(latency_ms) == _bucket_by_definition(latency_ms), latency_ms


def test_a_latency_equal_to_a_bound_is_in_that_bound() -> None:
    # Negative control for the edges above: "<=" is the rule, so a latency exactly at a bound is
    # counted by that bound's bucket, not the next one (a bisect to the right would fail here).
    assert _observed_bucket(5.0) == LATENCY_BUCKETS_MS.index(5)
    assert _observed_bucket(5.000001) == LATENCY_BUCKETS_MS.index(5) + 1
    assert _observed_bucket(5001.0) == len(LATENCY_BUCKETS_MS)
