"""Benchmark: concurrent creates per second on the embedded metadata store, grouped vs inline.

``--writers`` tasks each create nodes one after another (``create`` of a new path: one durable
batch each) until ``--creates`` in total are done or ``--seconds`` passed. ``grouped`` is the
default path (``write_durable``: batches of concurrent writers share one WAL sync in a worker
thread); ``inline`` is the old path (``write(sync=True)`` per change on the event loop), run in
the same process as the baseline. A ticker task measures the longest event-loop stall during the
run. Each mode repeats ``--repeats`` times on a fresh RocksDB directory: min / median / max.

    .venv/bin/python bench/embedded_writes.py [--writers 64] [--creates 5000] [--seconds 20] [--repeats 3]
"""

from __future__ import annotations

import argparse
import asyncio
import shlex
import statistics
import sys
import tempfile
import time
from pathlib import Path

from magnetar.metadata import EmbeddedMetadataServer
from magnetar.runtime import SystemClock
from magnetar.runtime.kv import RocksKeyValueStore

TICK_S = 0.001


async def one_run(directory: str, inline: bool, writers: int, creates_max: int, seconds_max: float) -> tuple[float, float, int]:
    """(creates/s, longest loop stall ms, WAL syncs of grouped writes) for one run."""
    kv = RocksKeyValueStore(directory)
    server = await EmbeddedMetadataServer.open(kv, SystemClock(), inline_sync=inline)
    store = await server.connect()
    await store.put("/bench", b"", -1)
    done = 0
    stall_s = 0.0
    deadline = time.monotonic() + seconds_max

    async def writer(index: int) -> None:
        nonlocal done
        sequence = 0
        while done < creates_max and time.monotonic() < deadline:
            await store.create(f"/bench/w{index}-{sequence}", b"producer-cursor")
            sequence += 1
            done += 1

    async def ticker() -> None:
        nonlocal stall_s
        last = time.monotonic()
        while True:
            await asyncio.sleep(TICK_S)
            now = time.monotonic()
            stall_s = max(stall_s, now - last - TICK_S)
            last = now

    ticking = asyncio.get_running_loop().create_task(ticker())
    started = time.monotonic()
    await asyncio.gather(*(writer(i) for i in range(writers)))
    elapsed = time.monotonic() - started
    ticking.cancel()
    groups = kv.durable_groups
    await server.close()
    return done / elapsed, stall_s * 1000, groups


def summary(values: list[float]) -> str:
    return f"min {min(values):.1f} / median {statistics.median(values):.1f} / max {max(values):.1f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--writers", type=int, default=64, help="concurrent writer tasks")
    parser.add_argument("--creates", type=int, default=5000, help="creates per run (bound)")
    parser.add_argument("--seconds", type=float, default=20.0, help="seconds per run (bound)")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    print("command:", shlex.join([Path(sys.executable).name, *sys.argv]))
    with tempfile.TemporaryDirectory(prefix="magnetar-bench-embedded-") as tmp:
        for mode in ("inline", "grouped"):
            rates, stalls, groups = [], [], []
            for run_index in range(args.repeats):
                rate, stall, group_count = asyncio.run(
                    one_run(f"{tmp}/{mode}-{run_index}", mode == "inline", args.writers, args.creates, args.seconds)
                )
                rates.append(rate)
                stalls.append(stall)
                groups.append(group_count)
            print(
                f"{mode:8s} creates/s: {summary(rates)}   longest loop stall ms: {summary(stalls)}"
                f"   grouped WAL syncs per run: {groups}"
            )


if __name__ == "__main__":
    main()
