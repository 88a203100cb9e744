"""A/B of the batched ``--blast`` path: trees alternated, a fresh standalone per measure (issue 22).

Each ``--tree NAME=SRC[,KEY=VALUE...]`` is a source directory (``git archive`` of a commit with its
own ``build/mypyc``, or a worktree's ``src``) put first on the standalone's ``PYTHONPATH``, with
optional extra environment variables. Per round, every tree in turn: start ``magnetar
standalone`` (``--bookies``), a one-second warm-up blast, then ``magnetar perf produce --blast``
(``run_blast``: ``--processes`` generators, ``--batch`` messages of ``--size`` bytes per SEND,
``--window`` SENDs in flight each) for ``--seconds``, and stop. Per measure: msg/s and MB/s
acknowledged, the server's CPU per message (``/proc``, the standalone and its descendants), its
busiest thread in % of a core, the standalone's minor page faults per entry, the load average.
Then min / median / max per tree. The machine's load changes between measures; alternating the
trees spreads it over all of them.

Run: ``.venv/bin/python bench/blast_ab.py --tree A=/tmp/main/src --tree B=$PWD/src --rounds 4``.
Bounded: ``rounds * trees * (seconds + ~8)`` seconds.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "peers"))
sys.path.insert(0, str(HERE.parent / "src"))

from measures import busiest, descendants, load_average, minor_faults, sample_cpu  # noqa: E402

from magnetar.cli.blast import run_blast  # noqa: E402
from magnetar.runtime.processes import StandaloneProcess  # noqa: E402

FIGURES = ("msgs_s", "mb_s", "server_us_msg", "thread_pct", "faults_entry")


def tree_env(spec: str, pure: bool) -> tuple[str, dict[str, str]]:
    name, _, rest = spec.partition("=")
    src, *extra = rest.split(",")
    env = dict(os.environ, PYTHONPATH=src)
    env.pop("MAGNETAR_FAULTS", None)
    env.pop("MAGNETAR_PURE_PYTHON", None)
    if pure:
        env["MAGNETAR_PURE_PYTHON"] = "1"
    env.update(item.split("=", 1) for item in extra)
    return name, env


def measure(env: dict[str, str], args: argparse.Namespace, tag: str) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(dir=args.dir) as data:
        standalone = StandaloneProcess(os.path.join(data, "standalone"), bookies_count=args.bookies, env=env,
                                       stderr=subprocess.DEVNULL)
        try:
            run_blast(standalone.broker_url, f"warm-{tag}", size=args.size, seconds=1, window=args.window,
                      processes=1, batch=args.batch)
            pids = descendants([standalone.pid])
            load = load_average()
            faults0, before = minor_faults(standalone.pid), sample_cpu(pids)
            result = run_blast(standalone.broker_url, f"blast-{tag}", size=args.size, seconds=args.seconds,
                               window=args.window, processes=args.processes, batch=args.batch)
            after, faults1 = sample_cpu(pids), minor_faults(standalone.pid)
        finally:
            standalone.terminate()
    if result["failed"]:
        raise RuntimeError(f"{result['failed']} sends failed")
    cpu_s = sum(after.processes.values()) - sum(before.processes.get(pid, 0.0) for pid in after.processes)
    acked = max(1, int(result["acked"]))
    return {"msgs_s": result["msgs_s"], "mb_s": result["mb_s"], "server_us_msg": 1e6 * cpu_s / acked,
            "thread_pct": float(busiest(before, after, result["elapsed_s"])["busiest_thread_pct"]),
            "faults_entry": (faults1 - faults0) * args.batch / acked, "load": load,
            "generator_pct": result["client_cpu_pct_max"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tree", action="append", required=True, help="NAME=SRC[,KEY=VALUE...]")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--batch", type=int, default=100, help="messages per SEND")
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--window", type=int, default=50, help="SENDs in flight per generator")
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--bookies", type=int, default=1)
    parser.add_argument("--pure", action="store_true", help="MAGNETAR_PURE_PYTHON=1 for every tree")
    parser.add_argument("--dir", default=tempfile.gettempdir())
    args = parser.parse_args()
    trees = [tree_env(spec, args.pure) for spec in args.tree]
    rows: dict[str, list[dict[str, Any]]] = {name: [] for name, _ in trees}
    for round_ in range(args.rounds):
        for name, env in trees:
            row = measure(env, args, f"{name}-{round_}")
            rows[name].append(row)
            print(name, round_, json.dumps({k: round(v, 2) for k, v in row.items()}), flush=True)
    for name, measured in rows.items():
        for figure in FIGURES:
            values = sorted(row[figure] for row in measured)
            print(f"{name} {figure}: {values[0]:.2f} / {statistics.median(values):.2f} / {values[-1]:.2f}")


if __name__ == "__main__":
    main()
