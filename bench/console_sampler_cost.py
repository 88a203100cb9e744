"""Benchmark (issue 22): the console's rate sampler, CPU per tracked idle topic per pass.

``RateHistory.sample`` over ``--topics`` idle topics (counters unchanged between passes; the
console tracks at most ``CONSOLE_TOPICS_TRACKED_COUNT_MAX`` = 2,000 and samples every 2 s), ``--passes``
passes per repeat, timed by ``perf_counter_ns``. Each ``--src`` tree runs in its own process,
alternating per repeat; min / median / max ns per topic per pass. Run:
``.venv/bin/python bench/console_sampler_cost.py --src /tmp/base20/src --src $PWD/src``.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time

PASSES_MAX = 1_000
TOPICS_MAX = 100_000


def _measure(topics_count: int, passes: int) -> float:
    from magnetar.admin.console.history import Counters, RateHistory

    history = RateHistory(topics_max=topics_count)
    counters = {f"persistent://public/default/t{i}": Counters(i % 3, 0, 0, 0) for i in range(topics_count)}
    history.sample(0, counters)
    start = time.perf_counter_ns()
    for k in range(1, passes + 1):
        history.sample(k * 2000, counters)
    return (time.perf_counter_ns() - start) / passes / topics_count


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--src", action="append", default=[], help="a source tree (repeatable)")
    parser.add_argument("--topics", type=int, default=2000)
    parser.add_argument("--passes", type=int, default=50)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    topics_count = min(max(1, args.topics), TOPICS_MAX)
    passes = min(max(1, args.passes), PASSES_MAX)
    if args.child:
        print(_measure(topics_count, passes))
        return
    trees = args.src or ["src"]
    results: dict[str, list[float]] = {tree: [] for tree in trees}
    for _ in range(max(1, args.repeats)):
        for tree in trees:
            out = subprocess.run([sys.executable, __file__, "--child", "--topics", str(topics_count),
                                  "--passes", str(passes)], env={"PYTHONPATH": tree, "PATH": "/usr/bin:/bin"},
                                 capture_output=True, text=True, timeout=120, check=True)
            results[tree].append(float(out.stdout.strip().splitlines()[-1]))
    for tree, values in results.items():
        print(f"{tree}: ns per idle topic per pass min {min(values):,.0f} median "
              f"{statistics.median(values):,.0f} max {max(values):,.0f} ({topics_count:,} topics, {passes} passes)")


if __name__ == "__main__":
    main()
