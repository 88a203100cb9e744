"""The record of a simulated run: one line per event, in the order the events happened.

A line is ``<virtual seconds, 6 decimals> <node> <kind> <detail>``. Only deterministic values go
into a line (virtual time, names, counters, sizes; never ids, addresses or wall time), so two
runs with the same seed produce byte-identical text; that is the determinism test.
"""

from __future__ import annotations

from collections.abc import Callable

from magnetar.base.invariant import invariant

#: A run that records more lines than this is cut (and says so): the trace is for reading.
TRACE_LINES_MAX = 200_000


def format_time_ns(ns: int) -> str:
    seconds, rest = divmod(ns, 1_000_000_000)
    return f"{seconds:5d}.{rest // 1000:06d}"


class Trace:
    """Append-only list of trace lines; ``now_ns`` tells the virtual time of each.

    A line is kept as its parts and formatted only when the text is asked for: most runs are
    judged by their verdict and never print their trace."""

    def __init__(self, now_ns: Callable[[], int], *, lines_max: int = TRACE_LINES_MAX) -> None:
        self._now_ns = now_ns
        self._records: list[tuple[int, str, str, str]] = []
        self._lines_max = lines_max
        self._dropped_count = 0

    def record(self, node: str, kind: str, detail: str = "") -> None:
        invariant("\n" not in detail, "a trace detail is one line")
        if len(self._records) >= self._lines_max:
            self._dropped_count += 1
            return
        self._records.append((self._now_ns(), node, kind, detail))

    def count(self, node: str, kind: str, since_ns: int = 0) -> int:
        """How many lines of ``node`` of this ``kind`` were recorded at or after ``since_ns``."""
        return sum(1 for at, n, k, _ in self._records if n == node and k == kind and at >= since_ns)

    @property
    def lines(self) -> list[str]:
        return [f"{format_time_ns(at)} {node:<10} {kind:<16} {detail}".rstrip()
                for at, node, kind, detail in self._records]

    def text(self) -> str:
        tail = [f"... {self._dropped_count} more lines dropped (TRACE_LINES_MAX)"] if self._dropped_count else []
        return "\n".join(self.lines + tail) + "\n"
