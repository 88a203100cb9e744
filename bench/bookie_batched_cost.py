"""Benchmark: the bookie's cost per batched entry (issue 22, session 24): counters per entry of
128 KiB, the official client's batch bound, through one storage core on uvloop.

``bench/bookie_storage_cost.py``'s ``drive`` (``storage.Bookie`` over ``LocalDisk`` and RocksDB, as a
standalone composes them) with ``--size`` bytes per entry, one entry per run, ``--window`` runs in
flight, a write cache of ``--cache-mib`` (so the background checkpoints run during the load, as
they do under a batched producer), then the last checkpoint: every entry's journal write, entry
log write and index row are counted. ``--dir`` is a directory on a real disk (``O_DIRECT`` and
``fdatasync`` as in production; the default is the system's temporary directory).

Per repeat and per ``--src`` tree (alternating, each in its own child, ``PYTHONPATH=<tree>``),
``perf stat -e instructions:u,instructions:k,context-switches,task-clock`` (and ``getrusage``) count a child of
``--adds`` entries and one of ``--adds / 5``: the difference over the difference of entries is
the cost per entry without the start-up. Context switches are the process's, every thread's
(``perf stat`` follows the threads): a thread hand-off per entry shows there.

Run: ``.venv/bin/python bench/bookie_batched_cost.py --src /tmp/base24/src --src src``.
Bounded: ``repeats * len(src) * 2`` children of at most ``--adds`` entries each (~0.3 GB of
writes per 2,000 entries of 128 KiB).
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "peers"))

from measures import parse_perf_csv

#: Counted with ``perf stat``; the instruction counts only where the machine has a PMU (a VM
#: may have none: "<not supported>", then left out). User and system CPU time and the voluntary
#: and involuntary switches come from the child's ``getrusage`` (every thread's).
EVENTS = ("instructions:u", "instructions:k", "context-switches", "task-clock")
RUSAGE = ("user_us", "sys_us", "voluntary_switches", "involuntary_switches")


async def child(adds: int, root: str, size: int, window: int, cache_mib: int) -> None:
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import bookie_storage_cost  # imported here: magnetar from this child's --src

    from magnetar.storage import BookieConfig

    config = BookieConfig(gc_interval_ms=0, write_cache_bytes_max=cache_mib * 1024 * 1024)
    await bookie_storage_cost.drive(root, 1, adds, 1, 1, window, size, config)


def counted(src: str, adds: int, dir_: str, extra: tuple[str, ...]) -> dict[str, float]:
    """The events of one child of ``adds`` entries, with ``src`` first on the path."""
    with tempfile.TemporaryDirectory(dir=dir_) as root, tempfile.NamedTemporaryFile("r") as out:
        env = dict(os.environ, PYTHONPATH=src)
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        subprocess.run(["perf", "stat", "-x,", "-e", ",".join(EVENTS), "-o", out.name, sys.executable,
                        __file__, "--child", str(adds), "--dir", root, *extra], env=env, check=True, timeout=600)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        figures: dict[str, float] = {
            "user_us": 1e6 * (after.ru_utime - before.ru_utime),
            "sys_us": 1e6 * (after.ru_stime - before.ru_stime),
            "voluntary_switches": after.ru_nvcsw - before.ru_nvcsw,
            "involuntary_switches": after.ru_nivcsw - before.ru_nivcsw,
        }
        for event, value in parse_perf_csv(out.read()).items():
            if event in EVENTS and value is not None:  # None: <not supported> (no PMU) or <not counted>
                figures[event] = value * (1000.0 if event == "task-clock" else 1.0)
    if "context-switches" not in figures:
        raise RuntimeError(f"perf stat counted only {sorted(figures)}")
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--src", action="append", default=[], help="a source tree (repeat for an A/B)")
    parser.add_argument("--adds", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--size", type=int, default=128 * 1024, help="bytes per entry")
    parser.add_argument("--window", type=int, default=8, help="entries in flight")
    parser.add_argument("--cache-mib", type=int, default=64, help="the write cache (both halves)")
    parser.add_argument("--dir", default=tempfile.gettempdir())
    parser.add_argument("--child", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        import uvloop

        from magnetar.runtime.gc_tuning import tune_gc_for_server

        tune_gc_for_server()
        uvloop.run(child(args.child, args.dir, args.size, args.window, args.cache_mib))
        return
    extra = ("--size", str(args.size), "--window", str(args.window), "--cache-mib", str(args.cache_mib))
    srcs = [os.path.abspath(src) for src in (args.src or ["src"])]
    small = max(1, args.adds // 5)
    per_entry: dict[str, dict[str, list[float]]] = {src: {} for src in srcs}
    for _ in range(args.repeats):
        for src in srcs:
            big, low = counted(src, args.adds, args.dir, extra), counted(src, small, args.dir, extra)
            for event in (*EVENTS, *RUSAGE):
                if event in big and event in low:
                    per_entry[src].setdefault(event, []).append((big[event] - low[event]) / (args.adds - small))
    for src, events in per_entry.items():
        print(f"{src} ({args.repeats} repeats, {args.size} B entries, window {args.window}), per entry "
              "min / median / max:")
        for event, values in events.items():
            unit = " us" if event in ("task-clock", "user_us", "sys_us") else ""  # task-clock: us here
            print(f"  {event:20} {min(values):>12,.2f} {statistics.median(values):>12,.2f} "
                  f"{max(values):>12,.2f}{unit}")


if __name__ == "__main__":
    main()
