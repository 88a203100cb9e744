"""Benchmark (issue 22, session 18): the storage core's work per add, without a broker or client.

``--bookies`` storage cores (``storage.Bookie`` over ``LocalDisk`` and RocksDB, as a standalone
composes them) each take every add, as a standalone's (3,3,2) ledgers reach them through
``LocalFirstTransport``: runs of ``--run`` entries (``EncodedEntry.build``, so the digest is
known), ``--ledgers`` ledgers in turn, ``--window`` runs in flight, each answered by every bookie's
journal after its fsync; then one checkpoint per bookie (entry log, index), so each add's whole
storage work is in the count. Prints the adds, the process's CPU seconds and a JSON line.

Meant to run under ``perf stat -e instructions:u`` twice, with ``--adds N`` and ``--adds 2N``: the
difference over N is the instructions per add, the start-up cancelled (``--count`` does it:
``python bench/bookie_storage_cost.py --count --adds 20000 --bookies 3``). Instructions move far
less than CPU time on a machine shared with other work. Run it with ``PYTHONPATH=<tree>/src``
to measure another tree (its own compiled build).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import subprocess
import sys
import tempfile
import time

from magnetar.protocol.bookie.codec import EncodedEntry, Status
from magnetar.runtime.clock import SystemClock
from magnetar.runtime.disk import LocalDisk
from magnetar.runtime.kv import RocksKeyValueStore
from magnetar.storage import Bookie, BookieConfig

MASTER_KEY = b"bench-key"


async def start_bookies(root: str, bookies_count: int, clock: SystemClock,
                        config: BookieConfig | None = None) -> list[Bookie]:
    """``bookies_count`` started storage cores under ``root`` (``bookie-<i>``: ``LocalDisk`` and a
    RocksDB index each, as the standalone composes them; ``config``, by default no GC pass)."""
    if config is None:
        config = BookieConfig(gc_interval_ms=0)
    bookies = []
    for index in range(bookies_count):
        data = os.path.join(root, f"bookie-{index}")
        disk = LocalDisk(data)
        bookie = Bookie(disk, RocksKeyValueStore(os.path.join(data, "index")), clock, config)
        await bookie.start()
        bookies.append(bookie)
    return bookies


async def drive(root: str, bookies_count: int, adds: int, run: int, ledgers: int, window: int, size: int,
                config: BookieConfig | None = None) -> float:
    clock = SystemClock()
    bookies = await start_bookies(root, bookies_count, clock, config)
    payload = os.urandom(size)
    next_entry = [0] * ledgers
    in_flight = 0
    room = asyncio.Event()
    failures: list[Status] = []

    def answered(count: list[int], indexes: object, status: Status) -> None:
        nonlocal in_flight
        if status is not Status.OK:
            failures.append(status)
        count[0] -= 1
        if count[0] == 0:
            in_flight -= 1
            room.set()

    sent = 0
    cpu0 = time.process_time()
    ledger = 0
    while sent < adds:
        while in_flight >= window:
            room.clear()
            await room.wait()
        first = next_entry[ledger]
        entries = [EncodedEntry.build(ledger + 1, first + i, first + i - 1, payload) for i in range(run)]
        next_entry[ledger] += run
        left = [bookies_count]
        in_flight += 1
        for bookie in bookies:
            bookie.add_entries_runs(((entries, MASTER_KEY, False,
                                      lambda indexes, status, left=left: answered(left, indexes, status)),))
        sent += run
        ledger = (ledger + 1) % ledgers
    while in_flight:
        room.clear()
        await room.wait()
    for bookie in bookies:
        await bookie.checkpoint()
    cpu = time.process_time() - cpu0
    for bookie in bookies:
        await bookie.stop()
    if failures:
        raise SystemExit(f"{len(failures)} adds failed: {failures[:3]}")
    return cpu


def counted(argv: list[str], adds: int) -> int:
    """User instructions of one run with ``adds`` adds (``perf stat``)."""
    command = ["perf", "stat", "-x,", "-e", "instructions:u", sys.executable, __file__, *argv, "--adds", str(adds)]
    result = subprocess.run(command, capture_output=True, text=True, check=True)
    for line in result.stderr.splitlines():
        if "instructions" in line:
            return int(re.split(r",", line)[0])
    raise SystemExit(f"no count from perf: {result.stderr}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--adds", type=int, default=20_000)
    parser.add_argument("--bookies", type=int, default=3)
    parser.add_argument("--run", type=int, default=1, help="entries per run (per add_entries_runs call)")
    parser.add_argument("--ledgers", type=int, default=1)
    parser.add_argument("--window", type=int, default=32, help="runs in flight")
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--count", action="store_true", help="perf stat of --adds and 2x --adds: instructions per add")
    parser.add_argument("--repeats", type=int, default=1, help="with --count")
    args = parser.parse_args()
    if args.count:
        argv = ["--bookies", str(args.bookies), "--run", str(args.run), "--ledgers", str(args.ledgers),
                "--window", str(args.window), "--size", str(args.size)]
        figures = []
        for _ in range(args.repeats):
            low, high = counted(argv, args.adds), counted(argv, 2 * args.adds)
            figures.append((high - low) / args.adds)
        figures.sort()
        print(json.dumps({"bookies": args.bookies, "run": args.run, "ledgers": args.ledgers,
                          "instructions_per_add": [round(f) for f in figures]}))
        return
    with tempfile.TemporaryDirectory(prefix="bookie-cost-") as root:
        cpu = asyncio.run(drive(root, args.bookies, args.adds, args.run, args.ledgers, args.window, args.size))
    print(json.dumps({"adds": args.adds, "cpu_s": round(cpu, 3), "cpu_us_per_add": round(1e6 * cpu / args.adds, 2)}))


if __name__ == "__main__":
    main()
