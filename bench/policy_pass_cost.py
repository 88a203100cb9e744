"""Benchmark (issue 22): the CPU of the broker's periodic passes over every loaded topic, per topic.

A ``BrokerService`` over the in-memory log store and metadata store (no bookie, no socket), with
``--topics`` topics at the broker's defaults and no traffic: what 100,000 idle topics on a standalone
cost between two messages. Three passes, each timed by the thread's CPU clock:
* ``quota+compaction``: the backlog-quota and compaction-threshold checks (each every 60 s at
  Pulsar's defaults), the most frequent policy pass;
* ``all``: every check at once (TTL, quotas, retention, compaction; retention every 120 s). The
  memory log does not say whether it may trim, so its topics' retention is always called;
* ``rates``: a rate-sampling pass over idle topics (every 5 s).

Each ``--src`` tree runs in its own process (its own compiled build, if it has one), alternating
per repeat. Run: ``.venv/bin/python bench/policy_pass_cost.py --src /tmp/base20/src --src $PWD/src``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


async def _child(topics: int, passes: int) -> dict[str, float]:
    from magnetar._compiled import MODE
    from magnetar.base.types import TopicName
    from magnetar.broker import BrokerConfig, MemoryLogStore
    from magnetar.broker.policy_checks import DueChecks
    from magnetar.broker.service import BrokerService
    from magnetar.metadata import MemoryMetadataServer
    from magnetar.node.broker_generation import bootstrap_cluster
    from magnetar.runtime.clock import SystemClock

    clock = SystemClock()
    store = await MemoryMetadataServer(clock).connect()
    service = BrokerService(BrokerConfig(), MemoryLogStore(), store, clock=clock)
    await bootstrap_cluster(service, web_url="http://127.0.0.1:9")
    for index in range(topics):
        await service.get_topic(TopicName.parse(f"persistent://public/default/t{index}"), create=True)
    await service.check_policies(DueChecks(False, False, False, False), rates=True)  # every topic sampled once
    kinds = {"quota+compaction": (DueChecks(False, True, False, True), False),
             "all": (DueChecks(True, True, True, True), False),
             "rates": (DueChecks(False, False, False, False), True)}
    out: dict[str, float] = {"compiled": float(MODE == "compiled")}
    for name, (due, rates) in kinds.items():
        best = float("inf")
        for _ in range(passes):
            started = time.thread_time_ns()
            await service.check_policies(due, rates=rates)
            best = min(best, (time.thread_time_ns() - started) / topics)
        out[name] = best
    await service.close()
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--src", action="append", default=[], help="a source tree (repeat for an A/B)")
    parser.add_argument("--topics", type=int, default=20_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--passes", type=int, default=3, help="passes of each kind per process (the fastest counts)")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(asyncio.run(_child(args.topics, args.passes))))
        return
    trees = args.src or [str(REPO / "src")]
    rows: dict[str, list[dict[str, float]]] = {tree: [] for tree in trees}
    for repeat in range(args.repeats):
        for tree in trees:
            env = dict(os.environ, PYTHONPATH=str(Path(tree).resolve()))
            done = subprocess.run([sys.executable, __file__, "--child", "--topics", str(args.topics),
                                   "--passes", str(args.passes)], env=env, capture_output=True, text=True,
                                  timeout=1800, check=True)
            rows[tree].append(json.loads(done.stdout.strip().splitlines()[-1]))
            print(f"repeat {repeat + 1} {tree}: {rows[tree][-1]}", flush=True)
    print(f"\npolicy_pass_cost: {args.topics:,} idle topics, CPU ns per topic and pass (min / median / max "
          f"of {args.repeats} processes, each the fastest of {args.passes} passes); load {os.getloadavg()[0]:.1f}")
    for tree, results in rows.items():
        modes = {"compiled" if r["compiled"] else "pure" for r in results}
        cells = []
        for kind in ("quota+compaction", "all", "rates"):
            values = [r[kind] for r in results]
            cells.append(f"{kind} {min(values):,.0f} / {statistics.median(values):,.0f} / {max(values):,.0f}")
        print(f"{tree} ({'/'.join(sorted(modes))}): " + "; ".join(cells))


if __name__ == "__main__":
    main()
