"""A run in one or several client processes: ``run_perf``, and for ``--processes N`` the
spawned children (``_child_main`` and its ``_ChildLink`` to the parent) and the parent that
starts them together and merges their reports (``MultiRun``).
"""

from __future__ import annotations

import multiprocessing
import os
import queue
import signal
import threading
import time
from collections.abc import Callable
from typing import Any

from magnetar.base.limits import (
    MIB,
    PERF_DRAIN_S_MAX,
)
from magnetar.cli.perf.client import _import_pulsar
from magnetar.cli.perf.run import PerfRun
from magnetar.cli.perf.settings import (
    CHILD_STOP_S,
    DRAIN_IDLE_S,
    PROGRESS_S,
    PerfSettings,
    Share,
    split_settings,
    split_shares,
)
from magnetar.cli.perf.stats import Latency, _cpu_per_message, _row, live_line

#: A client process gets this long to start (spawn, import the client) before its producers and
#: consumers are created (``--operation-timeout`` more).
CHILD_START_S = 60.0
#: The parent prints second N once every process reported it, or this long after the first did.
TICK_WAIT_S = 0.5


class _ChildLink:
    """A client process's side of ``--processes``: reports to the parent through ``reports``
    and follows its events (``go``: start measuring; ``stop``: end the measured phase;
    ``drained``: e2e, stop waiting for messages)."""

    def __init__(self, index: int, reports: Any, go: Any, stop: Any, drained: Any) -> None:
        self.index = index
        self.reports = reports
        self.go = go
        self.stop = stop
        self.drained = drained

    def put(self, kind: str, *data: Any) -> None:
        self.reports.put((kind, self.index, *data))

    def ready(self) -> bool:
        """Tell the parent the clients are set up; wait for the start (False: stopped first)."""
        self.put("ready")
        deadline = time.monotonic() + CHILD_START_S
        while not self.go.wait(PROGRESS_S):
            if self.stop.is_set() or time.monotonic() > deadline:
                return False
        return not self.stop.is_set()

    def progress(self, run: PerfRun, draining: bool) -> None:
        self.put("progress", run.sent, run.published.count + run.published.failed, run.received.count, draining)

    def tick(self, second: int, run: PerfRun) -> None:
        sides = {}
        for name, side in (("publish", run.published), ("receive", run.received)):
            if side.per_second and side.last_interval is not None:
                sides[name] = (side.per_second[-1]["msgs_s"], side.last_interval.encode().decode("ascii"))
        self.put("tick", second, sides, run.published.failed)


def _child_main(index: int, settings: PerfSettings, share: Share, reports: Any, go: Any, stop: Any,
                drained: Any, parent: int) -> None:
    """One client process of ``--processes`` (spawned): run its share, report the result with
    its latency histograms encoded. The parent stops it (Ctrl-C goes to the parent only); it
    ends itself if the parent is gone."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)

    def orphaned() -> None:
        while os.getppid() == parent:
            time.sleep(0.5)
        os._exit(3)

    threading.Thread(target=orphaned, name="perf-orphan", daemon=True).start()
    link = _ChildLink(index, reports, go, stop, drained)
    try:
        run = PerfRun(settings, share=share, link=link)
        result = run.run()
        result["histograms"] = {side: getattr(run, attr).latency.total.encode().decode("ascii")
                                for side, attr in (("publish", "published"), ("receive", "received"))}
        result["histograms"]["send_lag"] = run.send_lag.total.encode().decode("ascii")
        link.put("result", result)
    except BaseException as exc:  # reported to the parent, which fails the run
        link.put("error", f"{type(exc).__name__}: {exc}")


class MultiRun:
    """``--processes N``: N spawned client processes (``_child_main``), started together,
    their per-second reports merged into the live line and their results into one."""

    def __init__(self, settings: PerfSettings, on_tick: Callable[[str], None] | None = None,
                 on_phase: Callable[[str], None] | None = None) -> None:
        self.s = settings
        self.on_tick = on_tick
        self.on_phase = on_phase
        self.count = settings.processes
        self.ready: set[int] = set()
        self.measured: set[int] = set()
        self.results: dict[int, dict[str, Any]] = {}
        self.failed: dict[int, str] = {}
        self.progress: dict[int, tuple[int, int, int, bool]] = {}
        self.ticks: dict[int, dict[int, tuple[dict[str, Any], int]]] = {}
        self.tick_first_seen: dict[int, float] = {}
        self.next_second = 1
        self.per_second: dict[str, list[dict[str, float]]] = {"publish": [], "receive": []}
        self.failed_sends: dict[int, int] = {}

    # --- reports -------------------------------------------------------------------------------
    def _handle(self, report: tuple[Any, ...]) -> None:
        kind, index, *data = report
        if kind == "ready":
            self.ready.add(index)
        elif kind == "progress":
            sent, answered, received, draining = data
            self.progress[index] = (sent, answered, received, draining)
        elif kind == "tick":
            second, sides, failed = data
            self.ticks.setdefault(second, {})[index] = (sides, failed)
            self.tick_first_seen.setdefault(second, time.monotonic())
        elif kind == "measured":
            self.measured.add(index)
        elif kind == "result":
            self.results[index] = data[0]
        elif kind == "error":
            self.failed[index] = data[0]

    def _pump(self, reports: Any, processes: list[Any], done: Callable[[], bool], deadline: float) -> bool:
        """Handle reports until ``done()`` (True) or ``deadline`` (False); a process that exits
        without its result counts as failed."""
        while not done():
            if time.monotonic() >= deadline:
                return False
            try:
                self._handle(reports.get(timeout=0.02))
                continue
            except queue.Empty:
                pass
            self._emit_ticks(final=False)
            exited = [i for i, p in enumerate(processes)
                      if p.exitcode is not None and i not in self.results and i not in self.failed]
            if exited:  # its last reports may have arrived since the queue was found empty
                self._read_all(reports)
                for index in exited:
                    if index not in self.results and index not in self.failed:
                        self.failed[index] = f"exited with code {processes[index].exitcode} without a result"
        return True

    def _read_all(self, reports: Any) -> None:
        while True:
            try:
                self._handle(reports.get(timeout=0.2))
            except queue.Empty:
                return

    def _live(self, index: int) -> bool:
        return index not in self.failed and index not in self.measured

    def _emit_ticks(self, final: bool) -> None:
        """Print each second once every running process reported it (or ``TICK_WAIT_S`` after
        the first did; ``final``: whatever arrived)."""
        while self.next_second in self.ticks:
            second = self.next_second
            got = self.ticks[second]
            waiting = [i for i in range(self.count) if i not in got and self._live(i)]
            if waiting and not final and time.monotonic() - self.tick_first_seen[second] < TICK_WAIT_S:
                return
            rows: dict[str, dict[str, float] | None] = {}
            for side in ("publish", "receive"):
                parts = [sides[side] for sides, _ in got.values() if side in sides]
                if not parts:
                    rows[side] = None
                    continue
                row = _row(second, sum(done for done, _ in parts), self.s.size, Latency.merged([h for _, h in parts]))
                self.per_second[side].append(row)
                rows[side] = row
            for index, (_, failed) in got.items():
                self.failed_sends[index] = failed
            if self.on_tick is not None:
                self.on_tick(live_line(self.s.mode, second, rows["publish"], rows["receive"],
                                       sum(self.failed_sends.values())))
            del self.ticks[second]
            self.next_second += 1

    def _all(self, seen: set[int] | dict[int, Any]) -> Callable[[], bool]:
        return lambda: all(i in seen or i in self.failed for i in range(self.count))

    # --- the run -------------------------------------------------------------------------------
    def run(self) -> dict[str, Any]:
        _import_pulsar()  # fail here, not in N processes
        context = multiprocessing.get_context("spawn")
        reports = context.Queue()
        go, stop, drained = context.Event(), context.Event(), context.Event()
        processes = [context.Process(target=_child_main, name=f"magnetar-perf-{i}", daemon=True,
                                     args=(i, child, share, reports, go, stop, drained, os.getpid()))
                     for i, (child, share) in enumerate(zip(split_settings(self.s), split_shares(self.s),
                                                            strict=True))]
        try:
            for process in processes:
                process.start()
            setup_s = CHILD_START_S + 2 * self.s.operation_timeout_s
            self._pump(reports, processes, self._all(self.ready), time.monotonic() + setup_s)
            if self.failed or len(self.ready) < self.count:
                raise RuntimeError(self._failure("did not start"))
            if self.on_phase is not None:
                self.on_phase("start")
            go.set()
            self._measure(reports, processes, stop)
            if self.on_phase is not None:
                self.on_phase("end")
            if self.s.mode == "e2e":
                self._drain(reports, processes)
            drained.set()
            self._pump(reports, processes, self._all(self.results),
                       time.monotonic() + PERF_DRAIN_S_MAX + CHILD_STOP_S + self.s.operation_timeout_s)
            self._emit_ticks(final=True)
        finally:
            stop.set()
            drained.set()
            self._stop(reports, processes)
        if not self.results:
            raise RuntimeError(self._failure("reported no result"))
        return self._merge()

    def _measure(self, reports: Any, processes: list[Any], stop: Any) -> None:
        """Until every process ended its measured phase (their own bounds). ``consume`` with
        ``--messages``: the parent stops them once the total is received."""
        start = time.monotonic()
        bound = self.s.messages if self.s.mode == "consume" else 0

        def over() -> bool:
            if bound and sum(p[2] for p in self.progress.values()) >= bound:
                stop.set()
            return self._all(self.measured)()

        if not self._pump(reports, processes, over, start + self.s.duration_s * self.s.windows + PROGRESS_S * 10):
            stop.set()  # a process missed its own deadline
            self._pump(reports, processes, self._all(self.measured), time.monotonic() + CHILD_STOP_S)

    def _drain(self, reports: Any, processes: list[Any]) -> None:
        """e2e: until every process's consumers received what all of them sent, nothing arrived
        for ``DRAIN_IDLE_S``, or ``PERF_DRAIN_S_MAX``."""
        deadline = time.monotonic() + PERF_DRAIN_S_MAX
        last, last_change = -1, time.monotonic()
        while time.monotonic() < deadline:
            self._pump(reports, processes, lambda: False, time.monotonic() + PROGRESS_S)
            running = [i for i in range(self.count) if i not in self.failed]
            draining = [self.progress[i] for i in running if i in self.progress and self.progress[i][3]]
            if len(draining) < len(running):
                continue  # a sender is still finishing: its last count of sends is not in yet
            sent, received = sum(p[0] for p in draining), sum(p[2] for p in draining)
            if received >= sent:
                return
            if received != last:
                last, last_change = received, time.monotonic()
            elif time.monotonic() - last_change > DRAIN_IDLE_S:
                return

    def _stop(self, reports: Any, processes: list[Any]) -> None:
        """Every process ends: given ``CHILD_STOP_S`` to close and exit (their reports read
        meanwhile, so none blocks on a full pipe), then terminated, then killed."""
        deadline = time.monotonic() + CHILD_STOP_S
        for signal_them in (None, "terminate", "kill"):
            if signal_them is not None:
                for process in processes:
                    if process.is_alive():
                        getattr(process, signal_them)()
                deadline = time.monotonic() + CHILD_STOP_S
            while any(p.is_alive() for p in processes) and time.monotonic() < deadline:
                try:
                    self._handle(reports.get(timeout=0.05))
                except queue.Empty:
                    pass
            if not any(p.is_alive() for p in processes):
                break
        for process in processes:
            process.join(timeout=1)
        reports.cancel_join_thread()
        reports.close()

    def _failure(self, what: str) -> str:
        details = "; ".join(f"process {i}: {error}" for i, error in sorted(self.failed.items()))
        return f"client processes {what}" + (f": {details}" if details else "")

    def _merge(self) -> dict[str, Any]:
        results = [self.results[i] for i in sorted(self.results)]
        elapsed = max(max(r["elapsed_s"] for r in results), 1e-9)
        cpu_s = sum(r["client_cpu_s"] for r in results)
        merged: dict[str, Any] = {"settings": self.s.public(), "elapsed_s": elapsed,
                                  "topics_addressed": len(self.s.topic_names()), "processes": self.count,
                                  "client_cpu_s": cpu_s}
        windows = []
        for w in range(max(len(r["windows"]) for r in results)):
            rows = [r["windows"][w] for r in results if len(r["windows"]) > w]
            windows.append({key: sum(row[key] for row in rows) for key in ("publish_msgs_s", "receive_msgs_s")})
        merged["windows"] = windows
        for side in ("publish", "receive"):
            if side not in results[0]:
                continue
            count = sum(r[side]["count"] for r in results)
            data: dict[str, Any] = {}
            if side == "publish":
                data = {"sent": sum(r[side]["sent"] for r in results),
                        "pending_at_end": sum(r[side]["pending_at_end"] for r in results)}
            histogram = Latency.merged([r["histograms"][side] for r in results])
            data.update(count=count, failed=sum(r[side]["failed"] for r in results), msgs_s=count / elapsed,
                        mb_s=count * self.s.size / MIB / elapsed, latency_ms=Latency.summary(histogram),
                        per_second=self.per_second[side])
            if side == "publish" and self.s.rate > 0:  # the senders' lateness, over every process
                lags = [r["histograms"]["send_lag"] for r in results if "send_lag" in r["histograms"]]
                data["send_lag_ms"] = Latency.summary(Latency.merged(lags))
            merged[side] = data
        merged["client_cpu_us_per_msg"] = _cpu_per_message(merged)
        errors = [f"process {i}: {e}" for i in sorted(self.results) for e in self.results[i]["errors"]]
        errors += [f"process {i}: {e}" for i, e in sorted(self.failed.items())]
        merged["errors"] = errors
        return merged


def run_perf(settings: PerfSettings, on_tick: Callable[[str], None] | None = None,
             on_phase: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Run ``settings`` to its bound and return the results (what ``--json`` writes).
    ``on_phase("start")``/``("end")`` is called where the measured phase starts and ends."""
    if settings.processes > 1:
        return MultiRun(settings, on_tick, on_phase).run()
    return PerfRun(settings, on_tick, on_phase=on_phase).run()
