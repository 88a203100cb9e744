"""Benchmark: replicated ledger adds through the real client stack, (3,3,2) vs (1,1,1) in one run.

Three in-process bookies (``start_bookie``: real journal fsyncs on ``LocalDisk`` in a temporary
directory, RocksDB index) on 127.0.0.1, a memory metadata store, and a ``LedgerManager`` from
``open_ledger_manager`` over TCP. Per repeat and quorum: one fresh ledger, ``--seconds`` of
1 KiB adds with ``--window`` in flight; reports adds/s and add latency p50/p99 (from
``add_entry`` call to acknowledgement, i.e. Qa fsyncs and in-order completion), then
min/median/max over ``--repeats``. Bookies and client share one process and one event loop, so
absolute figures are lower than separate processes; the ratio between the quorums is the point.

``--local``: the client reaches the bookies by direct calls into their storage cores
(``LocalFirstTransport``, as ``magnetar standalone`` does), and ``--run N`` makes each of the
``--window`` callers append runs of N adds (``append_run``, as a receive's SENDs for one topic);
the process's CPU per add (all threads) is reported beside the rate: an A/B of the add path with
``PYTHONPATH=<tree>/src``.

Run: ``.venv/bin/python bench/ledger_replication.py [--seconds 2] [--repeats 3] [--window 64] [--local] [--run 1]``.
Bounded: about ``2 * repeats * seconds`` plus start-up.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "src"))

from magnetar.base.rng import SeededRng  # noqa: E402
from magnetar.base.types import BookieId  # noqa: E402
from magnetar.ledger.manager import LedgerManager  # noqa: E402
from magnetar.metadata.memory import MemoryMetadataServer  # noqa: E402
from magnetar.node.ledger import close_ledger_manager, open_ledger_manager  # noqa: E402
from magnetar.runtime import SystemClock, TcpNetwork  # noqa: E402
from magnetar.runtime.bookie import start_bookie  # noqa: E402
from magnetar.storage import BookieConfig  # noqa: E402

QUORUMS = [(3, 3, 2), (1, 1, 1)]
PAYLOAD = b"x" * 1024
SECONDS_MAX = 30.0


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


async def one_run(manager: LedgerManager, quorum: tuple[int, int, int], seconds: float, window: int,
                  run: int = 1) -> dict[str, float]:
    handle = await manager.create_ledger(*quorum)
    latencies: list[float] = []
    stop_at = time.perf_counter() + seconds
    count = 0
    loop = asyncio.get_running_loop()

    async def worker() -> None:
        nonlocal count
        while time.perf_counter() < stop_at:
            start = time.perf_counter()
            if run == 1:
                await handle.add_entry(PAYLOAD)
            else:
                last: asyncio.Future[None] = loop.create_future()

                def done(entry_id: int | None, error: BaseException | None, last: asyncio.Future[None] = last) -> None:
                    if not last.done():
                        if error is not None:
                            last.set_exception(error)
                        else:
                            last.set_result(None)

                noop = lambda _entry_id, _error: None  # noqa: E731
                await handle.wait_for_room()
                handle.append_run([(PAYLOAD, noop)] * (run - 1) + [(PAYLOAD, done)])
                await last
            latencies.append(time.perf_counter() - start)
            count += run

    began, cpu0 = time.perf_counter(), time.process_time()
    await asyncio.gather(*(worker() for _ in range(window)))
    elapsed, cpu = time.perf_counter() - began, time.process_time() - cpu0
    await handle.close()
    return {
        "cpu_us_per_add": 1e6 * cpu / max(1, count),
        "adds_per_s": count / elapsed,
        "p50_ms": percentile(latencies, 0.50) * 1000,
        "p99_ms": percentile(latencies, 0.99) * 1000,
    }


async def main(seconds: float, repeats: int, window: int, local: bool = False, run: int = 1) -> None:
    clock = SystemClock()
    meta = await MemoryMetadataServer(clock).connect()
    with tempfile.TemporaryDirectory(prefix="ledger-bench-", dir=str(REPO)) as tmp:
        bookies = [
            await start_bookie(
                BookieConfig(host="127.0.0.1", port=0, data_dir=f"{tmp}/b{i}", disk_free_bytes_min=0),
                store=meta, clock=clock, network=TcpNetwork(),
            )
            for i in range(3)
        ]
        local_bookies = {BookieId.parse(b.bookie_id): b.bookie for b in bookies} if local else None
        manager = await open_ledger_manager(meta, network=TcpNetwork(), clock=clock, rng=SeededRng(1),
                                            local_bookies=local_bookies)
        results: dict[tuple[int, int, int], list[dict[str, float]]] = {q: [] for q in QUORUMS}
        try:
            for repeat in range(repeats):
                for quorum in QUORUMS:
                    result = await one_run(manager, quorum, seconds, window, run)
                    results[quorum].append(result)
                    print(f"repeat {repeat + 1} E/Qw/Qa={quorum}: {result['adds_per_s']:.0f} adds/s "
                          f"{result['cpu_us_per_add']:.1f} us CPU/add "
                          f"p50 {result['p50_ms']:.2f} ms p99 {result['p99_ms']:.2f} ms", flush=True)
        finally:
            await close_ledger_manager(manager)
            for bookie in bookies:
                await bookie.stop()
            await meta.close()
    print(f"\n1 KiB adds, window {window}, runs of {run}, {'local' if local else 'TCP'} bookies, "
          f"{seconds:.1f} s x {repeats} repeats: min / median / max")
    for quorum, runs in results.items():
        line = []
        for key in ("cpu_us_per_add", "adds_per_s", "p50_ms", "p99_ms"):
            values = [r[key] for r in runs]
            line.append(f"{key} {min(values):.2f} / {statistics.median(values):.2f} / {max(values):.2f}")
        print(f"E/Qw/Qa={quorum}: " + "; ".join(line))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--window", type=int, default=64)
    parser.add_argument("--local", action="store_true", help="direct calls into the bookies (LocalFirstTransport)")
    parser.add_argument("--run", type=int, default=1, help="adds per append_run call")
    args = parser.parse_args()
    asyncio.run(main(min(args.seconds, SECONDS_MAX), args.repeats, args.window, args.local, max(1, args.run)))
