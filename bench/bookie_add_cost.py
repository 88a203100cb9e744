"""Benchmark: user instructions per lone add through the bookie's storage core, on uvloop (issue 22).

What a standalone's ledger client does for one entry at a modest rate, below the ledger layers:
``EncodedEntry.build`` (once per entry), then ``Bookie.add_entries_runs`` of a run of that one
entry on each of ``--bookies`` storage cores (``LocalDisk`` on ``--dir``, ``/dev/shm`` by default,
and RocksDB, as a standalone composes them and ``LocalFirstTransport`` reaches them): the
checks, the ledger state, the write cache, the journal's submission, its group (one per add:
closed loop), the group's write and sync, the reply gates and lanes, and the run's callback.
The next entry is built from a loop callback scheduled once every bookie answered the previous
one, so each add is its own group on each bookie and the work per add does not depend on timing.
The event loop is uvloop and the collector is tuned as in production (``bench/journal_add_cost.py``
runs asyncio's own loop and the interpreter's collector).
The write cache is not flushed (the checkpoint's per-entry work is not counted).

Per repeat and per ``--src`` tree (each in its own child process, ``PYTHONPATH=<tree>``, its
compiled build; alternating), ``perf stat -e instructions:u`` counts two children, one of
``--adds`` adds and one of ``--adds / 5``; the difference over the difference of adds is the
instructions per add (every bookie's part of it) without the process's start-up.
``--profile`` runs one child of ``--adds`` adds without ``perf`` (for ``perf record -p``).

Run: ``.venv/bin/python bench/bookie_add_cost.py --src /tmp/base23/src --src src --bookies 1``.
Bounded: ``repeats * len(src) * 2`` children of at most ``--adds`` adds each.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from journal_add_cost import per_add_ab  # the perf stat A/B of the journal's bench


async def child(adds: int, root: str, bookies_count: int, size: int) -> None:
    from bookie_storage_cost import start_bookies  # imported here: magnetar from this child's --src

    from magnetar.protocol.bookie.codec import EncodedEntry, Status
    from magnetar.runtime.clock import SystemClock
    from magnetar.runtime.gc_tuning import tune_gc_for_server

    loop = asyncio.get_running_loop()
    clock = SystemClock()
    bookies = await start_bookies(root, bookies_count, clock)
    tune_gc_for_server()  # as the standalone and the bookie process do once started
    payload = os.urandom(size)
    key = b"bench-key"
    done: asyncio.Future[None] = loop.create_future()
    state = [0, 0]  # entries acknowledged by every bookie, answers of the current entry

    def answered(indexes: object, status: Status) -> None:
        if status is not Status.OK:
            raise SystemExit(f"add failed: {status}")
        state[1] += 1
        if state[1] < bookies_count:
            return
        state[1] = 0
        state[0] += 1
        if state[0] == adds:
            done.set_result(None)
        else:
            loop.call_soon(send)

    def send() -> None:
        entry_id = state[0]
        entries = [EncodedEntry.build(1, entry_id, entry_id - 1, payload)]
        for bookie in bookies:
            bookie.add_entries_runs(((entries, key, False, answered),))

    send()
    await asyncio.wait_for(done, 300)
    groups = [bookie._journal.groups_count for bookie in bookies if bookie._journal is not None]
    for bookie in bookies:
        await bookie.stop()
    if min(groups) < adds:
        raise SystemExit(f"{adds} adds in {groups} groups: not one add per group")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--src", action="append", default=[], help="a source tree (repeat for an A/B)")
    parser.add_argument("--adds", type=int, default=5000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--bookies", type=int, default=1)
    parser.add_argument("--size", type=int, default=1024, help="payload bytes per entry")
    parser.add_argument("--dir", default="/dev/shm")
    parser.add_argument("--profile", action="store_true", help="one child of --adds adds, no perf stat")
    parser.add_argument("--child", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child or args.profile:
        import uvloop

        with tempfile.TemporaryDirectory(dir=args.dir) as root:
            uvloop.run(child(args.child or args.adds, args.dir if args.child else root, args.bookies, args.size))
        return
    srcs = [os.path.abspath(src) for src in (args.src or ["src"])]
    per_add = per_add_ab(srcs, args.adds, args.repeats, args.dir, __file__,
                         ("--bookies", str(args.bookies), "--size", str(args.size)))
    for src, values in per_add.items():
        print(f"{src}: instructions per add min {min(values):,.0f} median {statistics.median(values):,.0f} "
              f"max {max(values):,.0f} ({len(values)} repeats, {args.bookies} bookie(s), {args.size} B)")


if __name__ == "__main__":
    main()
