"""What a perf run measures: latency histograms (``Latency``), the per-side counts and
per-second series (``Side``), and the live and summary lines printed from them.
"""

from __future__ import annotations

import bisect
import itertools
import operator
import sys
import threading
from dataclasses import dataclass, field
from typing import Any

from magnetar.base.limits import (
    MIB,
    PERF_LATENCY_US_MAX,
)
from magnetar.cli.perf.settings import PERCENTILES


class Latency:
    """A thread-safe HdrHistogram of latencies in microseconds (1 us .. 60 s, 3 digits). A value
    is recorded once, into the current interval's histogram (the live line's); taken intervals
    are added to the run's, and ``total`` is both."""

    def __init__(self) -> None:
        self.interval = self._new()
        self._taken = self._new()
        self._lock = threading.Lock()
        _bucket_middles(self._taken)  # once per process, before a run measures anything

    @staticmethod
    def _new() -> Any:
        from hdrh.histogram import HdrHistogram

        return HdrHistogram(1, PERF_LATENCY_US_MAX, 3)

    def record(self, micros: int) -> None:
        value = PERF_LATENCY_US_MAX if micros > PERF_LATENCY_US_MAX else micros if micros > 0 else 1
        with self._lock:
            self.interval.record_value(value)

    def take_interval(self) -> Any:
        with self._lock:
            taken, self.interval = self.interval, self._new()
            self._taken.add(taken)
        return taken

    @property
    def total(self) -> Any:
        """Every value recorded so far (a new histogram)."""
        out = self._new()
        with self._lock:
            out.add(self._taken)
            out.add(self.interval)
        return out

    @staticmethod
    def merged(encoded: list[str]) -> Any:
        """One histogram of several ``encode()``d ones (other processes' counts)."""
        out = Latency._new()
        for item in encoded:
            out.decode_and_add(item)
        return out

    @staticmethod
    def summary(histogram: Any) -> dict[str, float]:
        """p50/p95/p99/p99.9/max/mean in milliseconds (zeros when nothing was recorded): the
        values hdrh's ``get_value_at_percentile``, ``get_max_value`` and ``get_mean_value`` give,
        found with one cumulative pass in C (``itertools.accumulate``, ``bisect``) instead of
        hdrh's Python loops over every bucket (17,408 here, once per percentile and for the mean).
        Those took 30-130 ms per summary on the (loaded) bench VM, and the run's once-a-second line
        makes two in an e2e run: with the GIL held meanwhile, the official client's receipt and message
        callbacks and the sender thread waited, a stall every second that was most of the e2e p99
        at 2,000 msg/s (docs/performance.md, session 12)."""
        total = histogram.get_total_count()
        if total == 0:
            return {**{name: 0.0 for name, _ in PERCENTILES}, "max": 0.0, "mean": 0.0, "count": 0}
        counts = _bucket_counts(histogram)
        cumulative = list(itertools.accumulate(counts))
        out: dict[str, float] = {}
        for name, percentile in PERCENTILES:
            index = bisect.bisect_left(cumulative, histogram.get_target_count_at_percentile(percentile))
            value = (histogram.get_highest_equivalent_value(histogram.get_value_from_index(index))
                     if index < len(cumulative) else 0)
            out[name] = value / 1000
        out["max"] = histogram.get_max_value() / 1000
        weighted = sum(map(operator.mul, counts, _bucket_middles(histogram)))
        out["mean"] = weighted / total / 1000
        out["count"] = total
        return out


#: Per histogram layout (``Latency``'s is the only one): each bucket's middle value, as hdrh's
#: mean weighs it (lowest equivalent value + half the bucket's range).
_MIDDLES: dict[tuple[int, int, int], list[int]] = {}


def _bucket_middles(histogram: Any) -> list[int]:
    key = (histogram.lowest_trackable_value, histogram.highest_trackable_value, histogram.significant_figures)
    middles = _MIDDLES.get(key)
    if middles is None:
        middles = []
        for index in range(histogram.counts_len):
            value = histogram.get_value_from_index(index)
            lowest = histogram.get_lowest_equivalent_value(value)
            middles.append(lowest + ((histogram.get_highest_equivalent_value(value) - lowest + 1) >> 1))
        _MIDDLES[key] = middles
    return middles


def _bucket_counts(histogram: Any) -> list[int]:
    """The histogram's counts array (a ctypes array) as a list, copied through its buffer (C
    speed: ~0.2 ms for 17,408 buckets against ~2.4 ms element by element)."""
    view = memoryview(histogram.counts)
    code = view.format.lstrip("<>=!@")
    native = view.format[:1] not in "<>!" or view.format[:1] == ("<" if sys.byteorder == "little" else ">")
    if native and view.itemsize == 8 and code in ("Q", "L"):  # hdrh's default 64-bit counters
        return view.cast("B").cast("Q").tolist()
    return list(histogram.counts)


def _row(second: int, done: float, size: int, histogram: Any) -> dict[str, float]:
    window = Latency.summary(histogram)
    return {"t": second, "msgs_s": done, "mb_s": done * size / MIB, "p50_ms": window["p50"],
            "p99_ms": window["p99"], "max_ms": window["max"]}


@dataclass
class Side:
    """Counters of one side (publish or receive) of a run."""

    latency: Latency = field(default_factory=Latency)
    count: int = 0
    failed: int = 0
    per_second: list[dict[str, float]] = field(default_factory=list)
    last_interval: Any = None
    _last_count: int = 0

    def tick(self, second: int, interval_s: float, size: int) -> dict[str, float]:
        done, self._last_count = self.count - self._last_count, self.count
        self.last_interval = self.latency.take_interval()
        row = _row(second, done / interval_s, size, self.last_interval)
        self.per_second.append(row)
        return row

    def result(self, elapsed_s: float, size: int, count: int) -> dict[str, Any]:
        """Totals of the measured window (``count`` done in ``elapsed_s``); latency of every message."""
        return {"count": count, "failed": self.failed, "msgs_s": count / elapsed_s,
                "mb_s": count * size / MIB / elapsed_s, "latency_ms": Latency.summary(self.latency.total),
                "per_second": self.per_second}


def live_line(mode: str, second: int, publish: dict[str, float] | None, receive: dict[str, float] | None,
              failed: int) -> str:
    parts = [f"{second:>4}s"]
    if mode != "consume" and publish is not None:
        parts.append(f"publish {publish['msgs_s']:>9,.0f} msg/s {publish['mb_s']:>7.1f} MB/s "
                     f"p50 {publish['p50_ms']:.2f} p99 {publish['p99_ms']:.2f} max {publish['max_ms']:.2f} ms")
    if mode != "produce" and receive is not None:
        parts.append(f"receive {receive['msgs_s']:>9,.0f} msg/s e2e p50 {receive['p50_ms']:.2f} "
                     f"p99 {receive['p99_ms']:.2f} ms")
    if failed:
        parts.append(f"failed {failed}")
    return " | ".join(parts)


def _cpu_per_message(result: dict[str, Any]) -> float:
    """The client processes' CPU over the measured phase per message published (``consume``:
    received)."""
    side = result.get("publish") or result.get("receive") or {}
    count = side.get("count", 0)
    return 1e6 * result["client_cpu_s"] / count if count else 0.0


def summary_lines(result: dict[str, Any]) -> list[str]:
    lines = []
    for side, label in (("publish", "publish latency"), ("receive", "end-to-end latency")):
        if side not in result:
            continue
        data = result[side]
        lat = data["latency_ms"]
        lines.append(f"{side}: {data['count']:,} msgs in {result['elapsed_s']:.2f} s = {data['msgs_s']:,.0f} msg/s "
                     f"{data['mb_s']:.2f} MB/s (failed {data['failed']})")
        lines.append(f"  {label} ms: p50 {lat['p50']:.3f}  p95 {lat['p95']:.3f}  p99 {lat['p99']:.3f}  "
                     f"p99.9 {lat['p99_9']:.3f}  max {lat['max']:.3f}")
        lag = data.get("send_lag_ms")
        if lag:  # paced: the sender's lateness against its schedule (bursts it then sent)
            lines.append(f"  sender late ms: p50 {lag['p50']:.3f}  p99 {lag['p99']:.3f}  p99.9 {lag['p99_9']:.3f}  "
                         f"max {lag['max']:.3f}")
    if "client_cpu_s" in result:
        lines.append(f"client: {result.get('processes', 1)} process(es), {result['client_cpu_s']:.2f} CPU s = "
                     f"{result['client_cpu_us_per_msg']:.1f} us/msg")
    return lines
