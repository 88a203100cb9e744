"""Benchmark (issue 10): publish throughput with 1, 100, 1,000 and 10,000 topics on one
``magnetar standalone --bookies 1``, as a ratio of the 1-topic rate measured in the same run.

One producer per topic (official client through ``magnetar perf produce``'s ``run_perf``), 1 KiB
messages, at most ``--max-outstanding`` (1000, one producer's default pending queue) messages
awaiting their receipt over all producers, so every topic count offers the broker the same
concurrency; ``--seconds`` of measurement after every producer exists (creating them is timed
separately). Two modes:
* ``unbatched``: every message is one entry, spread round-robin over the topics (the broker's
  per-entry cost, whatever the topic count);
* ``batched``: the client's default batching, messages sent to one producer in bursts of
  ``--burst`` (1000, one full batch) before the next topic's turn, so each topic's batches fill
  as with one topic (round-robin single messages would leave 10,000 producers with batches of
  one message each: a client effect, not the broker's).
Target: 10,000 topics >= 80% of the 1-topic throughput. The repeats are ``--repeats`` successive
windows of ``--seconds`` over the same producers (``run_perf``'s ``windows``); reports
min/median/max over them and writes ``bench/results/topic_scale.json``.

Run: ``.venv/bin/python bench/topic_scale.py [--seconds 5] [--repeats 3] [--topics 1,100,1000,10000]
[--modes batched,unbatched]``. Bounded: ``repeats * modes * counts * seconds`` plus producer creation (minutes at 10,000 topics).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "src"))

from magnetar.base.limits import MIB  # noqa: E402
from magnetar.cli.perf import PerfSettings, run_perf  # noqa: E402
from magnetar.runtime.processes import StandaloneProcess  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--topics", default="1,100,1000,10000")
    parser.add_argument("--modes", default="batched,unbatched")
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--burst", type=int, default=1000)
    parser.add_argument("--max-outstanding", type=int, default=1000)
    parser.add_argument("--dir", default=str(REPO / "bench" / "results"))
    args = parser.parse_args()
    counts = [int(n) for n in args.topics.split(",")]
    modes = [m for m in args.modes.split(",") if m]
    if args.repeats < 1 or not counts or set(modes) - {"batched", "unbatched"}:
        parser.error("repeats >= 1, topics a list of counts, modes from batched,unbatched")
    command = " ".join([Path(sys.executable).name, *sys.argv])
    print(f"command: {command}", flush=True)
    os.makedirs(args.dir, exist_ok=True)
    rows: dict[str, dict[int, list[dict[str, float]]]] = {m: {n: [] for n in counts} for m in modes}
    with tempfile.TemporaryDirectory(dir=args.dir, prefix="topic_scale.") as tmp:
        env = dict(os.environ, PYTHONPATH=str(REPO / "src"))
        env.pop("MAGNETAR_FAULTS", None)
        standalone = StandaloneProcess(os.path.join(tmp, "standalone"), env=env, stderr=subprocess.DEVNULL)
        try:
            for mode in modes:
                for count in counts:
                    # The repeats are successive windows over the same producers (creating 10,000
                    # producers takes minutes: once per count and mode).
                    settings = PerfSettings(service_url=standalone.broker_url, topic=f"s{mode[0]}n{count}",
                                            topics=count, size=args.size, batching=mode == "batched",
                                            burst=args.burst if mode == "batched" else 1,
                                            max_outstanding=args.max_outstanding, duration_s=args.seconds,
                                            windows=args.repeats, operation_timeout_s=120)
                    started = time.perf_counter()
                    result = run_perf(settings)
                    setup_s = time.perf_counter() - started - result["elapsed_s"]
                    for window in result["windows"]:
                        row = {"msgs_s": window["publish_msgs_s"], "mb_s": window["publish_msgs_s"] * args.size / MIB,
                               "p99_ms": result["publish"]["latency_ms"]["p99"], "setup_s": setup_s,
                               "failed": result["publish"]["failed"]}
                        rows[mode][count].append(row)
                        print(f"{mode} topics={count} window {len(rows[mode][count])}: " +
                              ", ".join(f"{k}={v:.2f}" for k, v in row.items()), flush=True)
        finally:
            standalone.terminate()
    summary: dict[str, Any] = {"command": command, "seconds": args.seconds, "repeats": args.repeats, "modes": {}}
    print(f"\ntopic_scale: 1 producer per topic, {args.size} B messages, magnetar standalone 1 bookie")
    for mode in modes:
        base = statistics.median(r["msgs_s"] for r in rows[mode][counts[0]])
        summary["modes"][mode] = {}
        for count in counts:
            rates = [r["msgs_s"] for r in rows[mode][count]]
            median = statistics.median(rates)
            entry = {"min": min(rates), "median": median, "max": max(rates), "ratio_vs_first": median / base,
                     "setup_s_median": statistics.median(r["setup_s"] for r in rows[mode][count]),
                     "p99_ms_median": statistics.median(r["p99_ms"] for r in rows[mode][count])}
            summary["modes"][mode][count] = entry
            print(f"{mode:<9} topics {count:>6}: min {entry['min']:>9,.0f}  median {median:>9,.0f}  "
                  f"max {entry['max']:>9,.0f} msgs/s  ratio {entry['ratio_vs_first']:.2f}  "
                  f"p99 {entry['p99_ms_median']:.1f} ms  setup {entry['setup_s_median']:.1f} s")
    Path(args.dir, "topic_scale.json").write_text(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
