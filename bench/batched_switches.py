"""Benchmark (issue 22, session 24): a standalone's thread hand-offs, CPU and page faults per
message under the official client's batched publish, with a fixed number of messages.

Per repeat and per ``--src`` tree (alternating; each a fresh ``magnetar standalone`` with
``PYTHONPATH=<tree>``, its own compiled build): a warm-up of 5,000 messages on another topic,
then ``magnetar perf produce`` of ``--messages`` 1 KiB messages (default batching: entries of up
to 128 KiB). Before and after the measured load it reads every thread's voluntary and involuntary
context switches and CPU time (``/proc/<pid>/task/*/status`` and ``stat``) and the process's minor
page faults. Printed per tree: per 1,000 messages, each thread's switches and CPU (the event loop
first, then the other threads by switches: the native writer's, Python's executor threads), and
the totals per message and per entry (``--per-entry`` messages each: the client's 128 KiB bound
holds ~125 messages of 1 KiB), min / median / max over the repeats.

Counts of switches and faults hold under a noisy machine far better than CPU time (which is
printed too). Run: ``.venv/bin/python bench/batched_switches.py --src /tmp/base24/src --src src``.
Bounded: ``repeats * len(src)`` standalones, each stopped (by its own process) after its load.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "peers"))

from measures import minor_faults, sample_cpu, thread_switches

from magnetar.runtime.processes import StandaloneProcess


def threads(pid: int) -> dict[int, tuple[int, int, float]]:
    """Each thread's (voluntary switches, involuntary switches, CPU seconds)."""
    cpu = sample_cpu([pid]).threads
    return {tid: (voluntary, involuntary, cpu[f"{pid}/{tid}"])
            for tid, (voluntary, involuntary) in thread_switches(pid).items() if f"{pid}/{tid}" in cpu}


def one_run(src: str, messages: int) -> tuple[dict[int, tuple[int, int, float]], int, int, float]:
    """(per thread: the load's switches and CPU seconds; the loop's thread id; minor faults; seconds)."""
    env = dict(os.environ, PYTHONPATH=src)
    perf = [sys.executable, "-m", "magnetar.cli", "perf", "produce"]
    with tempfile.TemporaryDirectory(prefix="batched-switches-") as data:
        standalone = StandaloneProcess(os.path.join(data, "standalone"), env=env, stderr=subprocess.DEVNULL)
        try:
            url, pid = standalone.broker_url, standalone.pid
            subprocess.run([*perf, "warm", "-u", url, "-m", "5000", "-d", "30"], env=env, check=True,
                           capture_output=True, timeout=120)
            before, faults_before, started = threads(pid), minor_faults(pid), time.monotonic()
            subprocess.run([*perf, "t1", "-u", url, "-m", str(messages), "-d", "120"], env=env, check=True,
                           capture_output=True, timeout=300)
            after, faults_after, took = threads(pid), minor_faults(pid), time.monotonic() - started
        finally:
            standalone.terminate()
    delta = {}
    for tid, (voluntary, involuntary, seconds) in after.items():
        v0, n0, t0 = before.get(tid, (0, 0, 0.0))
        delta[tid] = (voluntary - v0, involuntary - n0, seconds - t0)
    return delta, pid, faults_after - faults_before, took


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--src", action="append", default=[], help="a source tree (repeat for an A/B)")
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--per-entry", type=float, default=125.0, help="messages per batch entry")
    args = parser.parse_args()
    srcs = [os.path.abspath(src) for src in (args.src or ["src"])]
    totals: dict[str, dict[str, list[float]]] = {src: {} for src in srcs}
    for repeat in range(args.repeats):
        for src in srcs:
            delta, loop_tid, faults, took = one_run(src, args.messages)
            per_k = 1000 / args.messages
            print(f"{src} repeat {repeat + 1}: {args.messages} messages in {took:.1f} s; per 1,000 messages: "
                  "voluntary / involuntary switches, CPU ms")
            order = sorted(delta, key=lambda tid: (tid != loop_tid, -delta[tid][0] - delta[tid][1]))
            for tid in order:
                voluntary, involuntary, seconds = delta[tid]
                if voluntary + involuntary + seconds:
                    name = "event loop" if tid == loop_tid else f"thread {tid}"
                    print(f"  {name:16} {voluntary * per_k:8.1f} {involuntary * per_k:8.1f} "
                          f"{1000 * seconds * per_k:8.1f}")
            switches = sum(v + n for v, n, _ in delta.values())
            figures = {
                "switches per entry": switches * args.per_entry / args.messages,
                "voluntary per entry": sum(v for v, _, _ in delta.values()) * args.per_entry / args.messages,
                "CPU us per message": 1e6 * sum(t for _, _, t in delta.values()) / args.messages,
                "minor faults per message": faults / args.messages,
            }
            for key, value in figures.items():
                totals[src].setdefault(key, []).append(value)
    for src, figures in totals.items():
        print(f"{src} ({args.repeats} repeats), min / median / max:")
        for key, values in figures.items():
            print(f"  {key:26} {min(values):8.2f} {statistics.median(values):8.2f} {max(values):8.2f}")


if __name__ == "__main__":
    main()
