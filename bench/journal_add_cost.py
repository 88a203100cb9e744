"""Benchmark: user instructions per add through a real ``Journal``, each add its own group (issue 22).

At a modest rate each add arrives alone, so each one is its own group and pays the journal's
per-group fixed cost: ``submit`` (queue, the ack-before-fsync break's check), the look, the
``bookie.before_journal_append`` gate, the group's write and sync (``LocalDisk`` on ``--dir``,
``/dev/shm`` by default: the disk's own cost stays small), the ``bookie.after_fsync_before_reply``
gate, the reply lanes and the ``bookie.after_reply`` gate. Closed loop: the next add is
submitted from a loop callback scheduled by the previous add's answer, so every group holds one
add and the count of work per add is the same in every run (no timing decides the grouping).

Per repeat and per ``--src`` tree (each in its own child process, ``PYTHONPATH=<tree>``, its
compiled build; alternating), ``perf stat -e instructions:u`` counts two children, one of
``--adds`` adds and one of ``--adds / 5``; the difference over the difference of adds is the
instructions per add without the process's start-up. Printed: min/median/max per tree.

Run: ``.venv/bin/python bench/journal_add_cost.py --src /tmp/base22/src --src src``.
Bounded: ``repeats * len(src) * 2`` children of at most ``--adds`` adds each.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile


async def child(adds: int, root: str) -> None:
    from magnetar.runtime.clock import SystemClock
    from magnetar.runtime.disk import LocalDisk
    from magnetar.storage.config import BookieConfig
    from magnetar.storage.journal import Journal, add_record

    loop = asyncio.get_running_loop()
    journal = Journal(LocalDisk(root), SystemClock(), BookieConfig(data_dir=root), 1)
    await journal.start()
    record = add_record(b"k" * 20, b"\0" * 100)
    done: asyncio.Future[None] = loop.create_future()
    left = [adds]

    def acked(error: BaseException | None) -> None:
        if error is not None:
            raise error
        left[0] -= 1
        if left[0] == 0:
            done.set_result(None)
        else:
            loop.call_soon(journal.submit, record, acked)

    journal.submit(record, acked)
    await asyncio.wait_for(done, 120)
    invariant_groups = journal.groups_count
    await journal.stop()
    if invariant_groups < adds:
        raise SystemExit(f"{adds} adds in {invariant_groups} groups: not one add per group")


def count(src: str, adds: int, dir_: str, script: str = __file__, extra: tuple[str, ...] = ()) -> int:
    """User instructions of one child of ``adds`` adds (``script --child adds --dir <tmp> *extra``)
    with ``src`` first on the path."""
    with tempfile.TemporaryDirectory(dir=dir_) as root, tempfile.NamedTemporaryFile("r") as out:
        env = dict(os.environ, PYTHONPATH=src)
        subprocess.run(["perf", "stat", "-x,", "-e", "instructions:u", "-o", out.name, sys.executable,
                        script, "--child", str(adds), "--dir", root, *extra], env=env, check=True, timeout=300)
        for line in out.read().splitlines():
            if "instructions" in line:
                return int(line.split(",")[0])
    raise RuntimeError("perf stat printed no instruction count")


def per_add_ab(srcs: list[str], adds: int, repeats: int, dir_: str, script: str = __file__,
               extra: tuple[str, ...] = ()) -> dict[str, list[float]]:
    """Per tree, per repeat (the trees alternating): the instructions of a child of ``adds`` adds
    minus one of ``adds / 5``, over the difference of adds (the start-up cancelled)."""
    small = max(1, adds // 5)
    per_add: dict[str, list[float]] = {src: [] for src in srcs}
    for _ in range(repeats):
        for src in srcs:
            big_count = count(src, adds, dir_, script, extra)
            small_count = count(src, small, dir_, script, extra)
            per_add[src].append((big_count - small_count) / (adds - small))
    return per_add


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--src", action="append", default=[], help="a source tree (repeat for an A/B)")
    parser.add_argument("--adds", type=int, default=5000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--dir", default="/dev/shm")
    parser.add_argument("--child", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        asyncio.run(child(args.child, args.dir))
        return
    srcs = [os.path.abspath(src) for src in (args.src or ["src"])]
    per_add = per_add_ab(srcs, args.adds, args.repeats, args.dir)
    for src, values in per_add.items():
        print(f"{src}: instructions per add min {min(values):,.0f} median {statistics.median(values):,.0f} "
              f"max {max(values):,.0f} ({len(values)} repeats)")


if __name__ == "__main__":
    main()
