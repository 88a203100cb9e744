"""``PerfRun``: one bounded run in this process: create consumers and producers, send and/or
receive, summarise (one client process of a ``--processes`` run, or the whole run).
"""

from __future__ import annotations

import dataclasses
import gc
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from magnetar.base.limits import (
    PERF_DRAIN_S_MAX,
    PERF_MESSAGES_COUNT_MAX,
)
from magnetar.cli.perf.client import (
    _THREAD,
    _import_pulsar,
    _in_parallel,
    _official_client,
    _pin_thread_state,
    _Receipts,
    _sender,
)
from magnetar.cli.perf.settings import (
    CHILD_STOP_S,
    DRAIN_IDLE_S,
    PROGRESS_S,
    STAMP,
    PerfSettings,
    Share,
    split_shares,
)
from magnetar.cli.perf.stats import Latency, Side, _cpu_per_message, live_line
from magnetar.runtime.gc_tuning import SERVER_GC_THRESHOLDS

if TYPE_CHECKING:
    from magnetar.cli.perf.processes import _ChildLink


#: The GIL switch interval of a perf client process during a run (CPython: 5 ms). The official
#: client calls back into Python from its I/O thread (every receipt, under the GIL): while another
#: thread holds the GIL (the once-a-second line's histogram work, a consumer callback), that
#: thread, and with it every socket of the client, waits until the holder lets go, at the latest
#: after the switch interval. Shorter, a stalled I/O thread gets the GIL sooner.
PERF_SWITCH_INTERVAL_S = 0.0005


@contextmanager
def _client_tuning(on: bool) -> Iterator[None]:
    """For one run: the switch interval above, and the garbage collector as a server tunes it
    (start-up objects frozen, a large young generation: no full collection walks the client's
    modules mid-run). Both restored afterwards (a bench script runs several runs in-process)."""
    if not on:
        yield
        return
    interval, thresholds, frozen = sys.getswitchinterval(), gc.get_threshold(), gc.get_freeze_count()
    gc.collect()
    gc.freeze()
    gc.set_threshold(*SERVER_GC_THRESHOLDS)
    sys.setswitchinterval(PERF_SWITCH_INTERVAL_S)
    try:
        yield
    finally:
        sys.setswitchinterval(interval)
        gc.set_threshold(*thresholds)
        if not frozen:  # else the caller froze objects before: unfreezing would undo that too
            gc.unfreeze()


class PerfRun:
    """One bounded run: create consumers and producers, send and/or receive, summarise.
    ``share`` is what this process creates (all of it by default); ``link`` makes it one of the
    client processes of a ``--processes`` run."""

    def __init__(self, settings: PerfSettings, on_tick: Callable[[str], None] | None = None,
                 share: Share | None = None, link: _ChildLink | None = None,
                 on_phase: Callable[[str], None] | None = None) -> None:
        self.s = settings
        self.on_tick = on_tick
        self.on_phase = on_phase
        self.share = share or split_shares(dataclasses.replace(settings, processes=1, messages=0))[0]
        self.link = link
        self.published = Side()
        # Paced runs: how late the sender thread made each send against its schedule (0 when on
        # time). A late sender stamps late (the lateness is not in the latencies) and then sends
        # what it owes at once: a burst the server sees; this says how large the bursts were.
        self.send_lag = Latency()
        self.received = Side()
        self.sent = 0
        self.stop = threading.Event()
        self.closing = False
        self.draining = False
        self.drained = 0
        self.abandoned = 0
        self.windows: list[dict[str, float]] = []
        self.errors: list[str] = []

    # --- consumers -----------------------------------------------------------------------------
    def _on_message(self, consumer: Any, message: Any) -> None:
        if not getattr(_THREAD, "pinned", False):
            _pin_thread_state()
        now = time.time_ns()
        data = message.data()
        if len(data) >= STAMP.size:
            self.received.latency.record((now - STAMP.unpack_from(data)[0]) // 1000)
        self.received.count += 1
        consumer.acknowledge(message)

    def _subscribe(self, client: Any, pulsar: Any) -> list[Any]:
        sub_type = getattr(pulsar.ConsumerType, {"key_shared": "KeyShared"}.get(
            self.s.subscription_type, self.s.subscription_type.capitalize()))
        position = pulsar.InitialPosition.Earliest if self.s.earliest else pulsar.InitialPosition.Latest

        def make(name: str) -> Any:
            return client.subscribe(name, self.s.subscription, consumer_type=sub_type,
                                    initial_position=position, receiver_queue_size=self.s.receiver_queue,
                                    message_listener=self._on_message)

        return _in_parallel(make, list(self.share.consumers))

    # --- producers -----------------------------------------------------------------------------
    def _create_producers(self, client: Any) -> list[Any]:
        timeout_ms = int((self.s.duration_s + PERF_DRAIN_S_MAX) * 1000)

        def make(name: str) -> Any:
            return client.create_producer(
                name, batching_enabled=self.s.batching, batching_max_messages=self.s.batch_max_messages,
                batching_max_allowed_size_in_bytes=self.s.batch_max_bytes,
                batching_max_publish_delay_ms=self.s.batch_delay_ms, max_pending_messages=self.s.max_pending,
                block_if_queue_full=True, send_timeout_millis=timeout_ms)

        return _in_parallel(make, list(self.share.producers))

    def _send_loop(self, producers: list[Any], pulsar: Any) -> None:
        try:
            self._send(producers, pulsar)
        except Exception as exc:  # a producer closed under us (lost connection): stop, report it
            if not self.closing:
                self.errors.append(f"send: {type(exc).__name__}: {exc}")
            self.stop.set()

    def _send(self, producers: list[Any], pulsar: Any) -> None:
        body = bytearray(os.urandom(self.s.size))
        stamped = len(body) >= STAMP.size
        pack = STAMP.pack_into
        outstanding = threading.BoundedSemaphore(self.s.max_outstanding) if self.s.max_outstanding else None
        receipts = [_Receipts(self, pulsar.Result.Ok, outstanding) for _ in producers]
        sends = [_sender(producer) for producer in producers]
        pushes = [receipt.push for receipt in receipts]
        callbacks = [receipt.done for receipt in receipts]
        limit = self.s.messages or PERF_MESSAGES_COUNT_MAX
        interval = 1.0 / self.s.rate if self.s.rate > 0 else 0.0
        start = time.perf_counter()
        count = len(producers)
        burst = self.s.burst
        stop = self.stop
        time_ns = time.time_ns
        record_lag = self.send_lag.record
        while self.sent < limit and not stop.is_set():
            if interval:
                ahead = start + self.sent * interval - time.perf_counter()
                if ahead > 0:
                    time.sleep(ahead)
                    record_lag(0)
                else:
                    record_lag(int(-ahead * 1e6))
            if outstanding is not None:
                while not outstanding.acquire(timeout=0.1):
                    if stop.is_set():
                        return
            now = time_ns()
            if stamped:
                pack(body, 0, now)
            i = (self.sent // burst) % count
            pushes[i](now)
            sends[i](bytes(body), callbacks[i])
            self.sent += 1

    # --- the run -------------------------------------------------------------------------------
    def _line(self, second: int) -> str:
        publish = self.published.tick(second, 1.0, self.s.size) if self.s.mode != "consume" else None
        receive = self.received.tick(second, 1.0, self.s.size) if self.s.mode != "produce" else None
        return live_line(self.s.mode, second, publish, receive, self.published.failed)

    def _phase_over(self, sender: threading.Thread | None) -> bool:
        """True once a ``--messages`` bound is reached: all sent and answered, or all received;
        or the parent (``--processes``) ended the phase."""
        if self.link is not None and self.link.stop.is_set():
            return True
        if sender is not None:
            answered = self.published.count + self.published.failed
            return not sender.is_alive() and (answered >= self.sent or self.stop.is_set())
        return self.received.count >= (self.s.messages or PERF_MESSAGES_COUNT_MAX)

    def _wait(self, sender: threading.Thread | None, start: float) -> float:
        """Tick once a second until every window is over or the ``--messages`` bound is reached;
        returns the elapsed seconds of that measured phase. Each window's rates are recorded."""
        deadline = start + self.s.duration_s * self.s.windows
        second = 0
        window_end, marks = start + self.s.duration_s, (0, 0)
        next_progress = start
        while True:
            now = time.perf_counter()
            if now >= window_end and len(self.windows) < self.s.windows:
                marks = self._close_window(marks, now - (window_end - self.s.duration_s))
                window_end += self.s.duration_s
            if now >= deadline or self._phase_over(sender):
                break
            if self.link is not None and now >= next_progress:
                self.link.progress(self, draining=False)
                next_progress = now + PROGRESS_S
            next_tick = start + second + 1
            time.sleep(min(max(0.0, min(next_tick, deadline) - now), 0.02))
            if time.perf_counter() >= next_tick:
                second += 1
                line = self._line(second)
                if self.link is not None:
                    self.link.tick(second, self)
                if self.on_tick is not None:
                    self.on_tick(line)
        self.stop.set()
        return time.perf_counter() - start

    def _close_window(self, marks: tuple[int, int], elapsed_s: float) -> tuple[int, int]:
        published, received = self.published.count, self.received.count
        self.windows.append({"publish_msgs_s": (published - marks[0]) / elapsed_s,
                             "receive_msgs_s": (received - marks[1]) / elapsed_s})
        return published, received

    def _drain_receive(self) -> None:
        """e2e: let the consumers receive everything sent (bounded; stops early when
        nothing arrives for a while). With ``--processes`` the parent decides, over every
        process's counts (a process's consumers receive other processes' messages)."""
        deadline = time.perf_counter() + PERF_DRAIN_S_MAX
        if self.link is not None:
            while not self.link.drained.wait(PROGRESS_S) and time.perf_counter() < deadline + CHILD_STOP_S:
                self.link.progress(self, draining=True)
            return
        last, last_change = self.received.count, time.perf_counter()
        while self.received.count < self.sent and time.perf_counter() < deadline:
            time.sleep(0.01)
            if self.received.count != last:
                last, last_change = self.received.count, time.perf_counter()
            elif time.perf_counter() - last_change > DRAIN_IDLE_S:
                break

    def _drain_publish(self) -> None:
        """Wait (bounded by ``PERF_DRAIN_S_MAX``) until every SEND made was answered, so the client
        closes its producers with nothing in flight. The window's figures were taken already."""
        self.draining = True
        deadline = time.perf_counter() + PERF_DRAIN_S_MAX
        while (self.published.count + self.published.failed + self.drained < self.sent
               and time.perf_counter() < deadline):
            time.sleep(0.01)

    def _phase(self, name: str) -> None:
        if self.on_phase is not None:
            self.on_phase(name)

    def run(self) -> dict[str, Any]:
        pulsar = _import_pulsar()
        elapsed = cpu_s = 0.0
        published = received = 0
        with _client_tuning(self.s.client_tuning), _official_client(self.s) as client:
            if self.s.mode != "produce":
                self._subscribe(client, pulsar)
            producers = self._create_producers(client) if self.s.mode != "consume" else []
            if self.link is not None and not self.link.ready():
                self.stop.set()
                producers = []
            sender = None
            self._phase("start")
            start, cpu0 = time.perf_counter(), time.process_time()
            if producers:
                sender = threading.Thread(target=self._send_loop, args=(producers, pulsar), name="perf-sender",
                                          daemon=True)
                sender.start()
            try:
                if not self.stop.is_set():
                    elapsed = self._wait(sender, start)
                    cpu_s = time.process_time() - cpu0
                published, received = self.published.count, self.received.count  # the measured window
                self._phase("end")
                if self.link is not None:
                    self.link.put("measured")
                if sender is not None:
                    sender.join(timeout=PERF_DRAIN_S_MAX)
                    self._drain_publish()
                if self.s.mode == "e2e":
                    self._drain_receive()
                    received = self.received.count
            finally:
                self.stop.set()
                self.closing = True  # closing the client fails what is still pending: not failures
        return self._result(elapsed, cpu_s, published, received)

    def _result(self, elapsed: float, cpu_s: float, published: int, received: int) -> dict[str, Any]:
        elapsed = max(elapsed, 1e-9)
        result: dict[str, Any] = {"settings": self.s.public(), "elapsed_s": elapsed,
                                  "topics_addressed": len(self.s.topic_names()), "windows": self.windows,
                                  "processes": 1, "client_cpu_s": cpu_s}
        if self.s.mode != "consume":
            result["publish"] = {"sent": self.sent, "pending_at_end": self.abandoned,
                                 **self.published.result(elapsed, self.s.size, published)}
            if self.s.rate > 0:
                result["publish"]["send_lag_ms"] = Latency.summary(self.send_lag.total)
        if self.s.mode != "produce":
            result["receive"] = self.received.result(elapsed, self.s.size, received)
        result["client_cpu_us_per_msg"] = _cpu_per_message(result)
        result["errors"] = self.errors
        return result
