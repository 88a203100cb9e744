"""Standalone CPU at a steady, modest rate (issue 22: "low load costs more than high load").

Per repeat and per variant (variants alternate inside a repeat, so each pair shares the machine's
load of the moment), one fresh ``magnetar standalone`` (``--bookies``, default 1) runs ``magnetar perf produce``
(official client, ``--no-batching`` unless ``--batching``) at ``--rate`` for ``--seconds``, and
reports:

* ``cpu_pct``: the standalone's CPU (user + system, ``/proc``) over the measured phase, in % of
  one core, and ``sys_pct`` the kernel's share of it; both summed over the standalone process and
  its descendants (bookie child processes);
* ``us_msg``: that CPU per acknowledged message;
* ``msgs_s`` and the publish latency p50/p99 the client saw;
* ``machine_pct``: the whole machine's busy CPU (200% = both cores), to see competing work;
* ``loop_us_msg``: the standalone's main thread (its event loop) CPU per message, and
  ``threads_us_msg`` all its other threads' (the journal's writer threads, bookie children);
* ``csw_msg``: context switches (voluntary + involuntary, every thread) per message: at a modest
  rate each message tends to bring its own wake-ups (a read, a writer-thread hand-off, its answer).

A variant is ``label[=SRC_DIR][:KEY=VALUE,...]``: the standalone runs with ``PYTHONPATH=SRC_DIR``
(default: this tree's ``src``) and the extra environment, so a tree before a change (``git
archive``) and after can be compared in one run. ``peer:NAME`` (``redis``, ``nats``,
``rabbitmq``; installed by ``bench/peers/install.sh``) runs that peer instead, paced at the same
rate through its ``bench/peers`` driver (one message per durable send, up to ``--max-pending`` in
flight; Redis with appendfsync always): its server CPU at the same rate. Ratios of medians are
printed per variant against the first.

Run: ``.venv/bin/python bench/steady_load.py --rate 2000 --seconds 6 --repeats 3``.
Bounded: ``repeats * variants * (seconds + start-up)``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO / "src"))
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE / "peers"))

from bookie_append import machine_busy_seconds  # noqa: E402
from measures import PerfStat, ServerCpu, descendants, perf_probe  # noqa: E402
from servers import STARTERS  # noqa: E402
from workload import DRIVERS, run_uvloop  # noqa: E402

from magnetar.cli.perf import PerfSettings, run_perf  # noqa: E402
from magnetar.runtime.processes import StandaloneProcess  # noqa: E402

METRICS = ("cpu_pct", "sys_pct", "us_msg", "loop_us_msg", "threads_us_msg", "csw_msg", "kinstr_msg", "ipc", "msgs_s",
           "p50_ms", "p99_ms", "machine_pct")
#: ``perf stat`` events counted over the measured phase with ``--count`` (every thread of the server),
#: where perf works here: user-space instructions per message move least with the machine's noise;
#: instructions per cycle say whether a change of CPU is more work or the same work run cold. Off by
#: default: on this VM the counters' save and restore at every context switch costs the kernel a lot
#: at a modest rate (Redis's CPU at 2,000/s measured 16.7% without, 39.8% with), so ``cpu_pct`` of a
#: counted run is not comparable with an uncounted one.
PERF_EVENTS = ("instructions:u", "cycles:u")


def counted(counts: dict[str, float | None], messages: float) -> dict[str, float]:
    """``kinstr_msg`` and ``ipc`` from ``perf stat``'s ``counts``; NaN (printed ``nan``) where perf
    counted nothing: ``--count`` not asked, or a machine without a PMU (perf prints ``<not
    supported>``), so an uncounted figure never reads as 0 instructions."""
    instructions, cycles = counts.get("instructions:u"), counts.get("cycles:u")
    if instructions is None or not cycles:
        return {"kinstr_msg": float("nan"), "ipc": float("nan")}
    return {"kinstr_msg": instructions / 1e3 / messages, "ipc": instructions / cycles}


class CountedPhase(ServerCpu):
    """``ServerCpu`` plus ``perf stat`` attached to the standalone's processes for the phase."""

    def __init__(self, roots: list[int], events: tuple[str, ...]) -> None:
        super().__init__(roots)
        self.perf = PerfStat(events)

    def __call__(self, phase: str) -> None:
        if phase == "start":
            self.perf.start(descendants(self.roots))
        super().__call__(phase)
        if phase == "end":
            self.perf.stop()


def parse_variant(spec: str) -> tuple[str, str, dict[str, str]]:
    if spec.startswith("peer:"):
        return spec, "", {}
    head, _, env_part = spec.partition(":")
    label, _, src = head.partition("=")
    # KEY=VALUE items are separated by commas before the next KEY= (a value may hold commas).
    env = dict(item.split("=", 1) for item in re.split(r",(?=[A-Z_][A-Z0-9_]*=)", env_part) if item)
    return label, src or str(REPO / "src"), env


def system_seconds(pid: int) -> float:
    """Kernel CPU seconds of ``pid`` and its live descendants (a standalone's bookie children)."""
    stats: dict[int, list[str]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as stat:
                    stats[int(entry)] = stat.read().rsplit(")", 1)[1].split()
            except OSError:  # exited meanwhile
                continue
    tree, frontier = set(), [pid]
    while frontier:
        member = frontier.pop()
        tree.add(member)
        frontier.extend(child for child, fields in stats.items() if int(fields[1]) == member and child not in tree)
    return sum(int(stats[member][12]) + int(stats[member][14]) for member in tree if member in stats) / os.sysconf(
        "SC_CLK_TCK")


def one_run(src: str, extra_env: dict[str, str], args: argparse.Namespace, root: Path, tag: str) -> dict[str, float]:
    env = dict(os.environ, PYTHONPATH=src, **extra_env)
    env.pop("MAGNETAR_FAULTS", None)
    standalone = StandaloneProcess(str(root / tag), env=env, stderr=subprocess.DEVNULL, bookies_count=args.bookies)
    try:
        server = CountedPhase([standalone.pid], args.events)
        settings = PerfSettings(service_url=standalone.broker_url, topic=f"steady-{tag}", size=args.size,
                                batching=args.batching, rate=args.rate, duration_s=args.seconds,
                                max_pending=args.max_pending)
        # A short warm-up on the same topic: connections, ledgers and caches exist before measuring.
        run_perf(PerfSettings(service_url=standalone.broker_url, topic=f"steady-{tag}", size=args.size,
                              batching=args.batching, rate=args.rate, duration_s=1.0))
        sys0 = system_seconds(standalone.pid)
        busy0, start = machine_busy_seconds(), time.perf_counter()
        result = run_perf(settings, on_phase=server)
        elapsed = time.perf_counter() - start
        machine = 100 * (machine_busy_seconds() - busy0) / elapsed
        sys_s = system_seconds(standalone.pid) - sys0
    finally:
        standalone.terminate()
    count = result["publish"]["count"]
    cpu_s = server.marks["end"] - server.marks["start"]
    measured_s = max(1e-9, float(result["elapsed_s"]))
    loop_s, threads_s = server.thread_seconds(standalone.pid)
    return {
        "cpu_pct": 100 * cpu_s / measured_s,
        "sys_pct": 100 * sys_s / elapsed,
        "us_msg": 1e6 * cpu_s / max(1, count),
        "loop_us_msg": 1e6 * loop_s / max(1, count),
        "threads_us_msg": 1e6 * threads_s / max(1, count),
        "csw_msg": (server.switches["end"] - server.switches["start"]) / max(1, count),
        **counted(server.perf.counts, max(1, count)),
        "msgs_s": result["publish"]["msgs_s"],
        "p50_ms": result["publish"]["latency_ms"]["p50"],
        "p99_ms": result["publish"]["latency_ms"]["p99"],
        "machine_pct": machine,
    }


def peer_run(name: str, args: argparse.Namespace, root: Path, tag: str) -> dict[str, float]:
    """``name`` paced at ``args.rate`` (one message per durable send), its server CPU."""
    data = root / tag
    data.mkdir()
    peer = STARTERS[name](data)
    try:
        server = CountedPhase([child.pid for child in peer.children], args.events)

        async def paced() -> dict[str, float]:
            driver = DRIVERS[name](peer.port, f"steady{tag}")
            await driver.open()
            try:
                return await _paced_sends(driver, args, server)
            finally:
                await driver.close()

        busy0, start = machine_busy_seconds(), time.perf_counter()
        figures = run_uvloop(paced, 3 * args.seconds + 60)
        machine = 100 * (machine_busy_seconds() - busy0) / (time.perf_counter() - start)
    finally:
        peer.stop()
    cpu_s = server.marks["end"] - server.marks["start"]
    acked = max(1.0, figures["acked"])
    return {"cpu_pct": 100 * cpu_s / figures["elapsed_s"], "sys_pct": float("nan"),
            "us_msg": 1e6 * cpu_s / acked, "loop_us_msg": float("nan"), "threads_us_msg": float("nan"),
            "csw_msg": (server.switches["end"] - server.switches["start"]) / acked,
            **counted(server.perf.counts, acked),
            "msgs_s": figures["acked"] / figures["elapsed_s"],
            "p50_ms": figures["p50_ms"], "p99_ms": figures["p99_ms"], "machine_pct": machine}


async def _paced_sends(driver: Any, args: argparse.Namespace, server: CountedPhase) -> dict[str, float]:
    import asyncio

    payload = os.urandom(args.size)
    room = asyncio.Semaphore(args.max_pending)
    latencies: list[float] = []
    pending: set[asyncio.Task[None]] = set()

    async def one() -> None:
        began = time.perf_counter()
        try:
            await driver.send([payload])
            latencies.append(1000 * (time.perf_counter() - began))
        finally:
            room.release()

    for _ in range(50):  # warm-up: connection, stream or queue created (not measured)
        await driver.send([payload])
    server("start")
    start, sent = time.perf_counter(), 0
    while time.perf_counter() - start < args.seconds:
        ahead = start + sent / args.rate - time.perf_counter()
        if ahead > 0:
            await asyncio.sleep(ahead)
        await room.acquire()
        task = asyncio.ensure_future(one())
        pending.add(task)
        task.add_done_callback(pending.discard)
        sent += 1
    if pending:
        await asyncio.wait(pending, timeout=30)
    elapsed = time.perf_counter() - start
    server("end")
    latencies.sort()

    def pct(q: float) -> float:
        return latencies[min(len(latencies) - 1, int(q * len(latencies)))] if latencies else float("nan")

    return {"acked": float(len(latencies)), "elapsed_s": elapsed, "p50_ms": pct(0.5), "p99_ms": pct(0.99)}


def _digits(metric: str) -> int:
    return 2 if metric == "ipc" else 1


def summarize(rows: dict[str, list[dict[str, float]]], metrics: Sequence[str],
              pair_keys: Sequence[str]) -> dict[str, Any]:
    """Print and return min / median / max of ``metrics`` per variant (``rows``: label -> one row
    per repeat, the first label the baseline), then, per later variant and key of ``pair_keys``,
    its ratio to the baseline per pair (the repeats ran alternately) and the ratio of medians.
    Shared by the benchmarks that compare variants (``consume_path.py`` too)."""
    print(f"\n{' '.join(sys.argv)}")
    summary: dict[str, Any] = {}
    for label, label_rows in rows.items():
        summary[label] = {k: {"min": min(r[k] for r in label_rows), "median": statistics.median(r[k] for r in label_rows),
                              "max": max(r[k] for r in label_rows)} for k in metrics}
        print(f"{label:>12}  " + "  ".join(
            f"{k} {s['min']:.{_digits(k)}f}/{s['median']:.{_digits(k)}f}/{s['max']:.{_digits(k)}f}" for k, s in summary[label].items()))
    first = next(iter(rows))
    for label in list(rows)[1:]:
        for key in pair_keys:
            per_pair = [b[key] / a[key] for a, b in zip(rows[first], rows[label], strict=True) if a[key]]
            base = summary[first][key]["median"]
            medians = f" (ratio of medians {summary[label][key]['median'] / base:.2f})" if base else ""
            print(f"{label}/{first} {key} per pair: " + ", ".join(f"{r:.2f}" for r in per_pair) + medians)
    return summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rate", type=float, default=2000.0)
    parser.add_argument("--seconds", type=float, default=6.0)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--batching", action="store_true")
    parser.add_argument("--bookies", type=int, default=1, help="the standalone's bookies (3: quorum 3,3,2)")
    parser.add_argument("--max-pending", type=int, default=1000)
    parser.add_argument("--variant", action="append", default=[], help="label[=SRC_DIR][:KEY=VALUE,...]")
    parser.add_argument("--json", default="")
    parser.add_argument("--count", action="store_true",
                        help="perf stat the server: user instructions per message and per cycle (inflates cpu_pct)")
    args = parser.parse_args()
    probe = perf_probe(PERF_EVENTS) if args.count else {}
    args.events = tuple(event for event, state in probe.items() if state == "ok")
    for event, state in probe.items():
        if state != "ok":  # kinstr_msg / ipc print nan: say why
            print(f"--count: {event} not counted: {state}", file=sys.stderr)
    variants = [parse_variant(v) for v in (args.variant or ["this"])]
    rows: dict[str, list[dict[str, float]]] = {label: [] for label, _, _ in variants}
    with tempfile.TemporaryDirectory(prefix="steady-") as tmp:
        for repeat in range(args.repeats):
            for label, src, env in variants:
                if label.startswith("peer:"):
                    row = peer_run(label[len("peer:"):], args, Path(tmp), f"{label[5:]}{repeat}")
                else:
                    row = one_run(src, env, args, Path(tmp), f"{label}{repeat}")
                rows[label].append(row)
                print(f"{label} repeat {repeat + 1}: " + ", ".join(f"{k}={v:.{_digits(k)}f}" for k, v in row.items()), flush=True)
    summary = summarize(rows, METRICS, ("cpu_pct", "us_msg"))
    if args.json:
        Path(args.json).write_text(json.dumps({"argv": sys.argv, "rows": rows, "summary": summary}, indent=1))


if __name__ == "__main__":
    main()
