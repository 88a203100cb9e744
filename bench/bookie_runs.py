"""The standalone's bookie side alone: runs of adds through ``LocalFirstTransport`` into real bookies.

``--bookies`` storage cores (``Bookie`` on the real disk and RocksDB, in a temporary directory
under ``--dir``) in this process, on uvloop, reached as the standalone reaches them
(``node.ledger.LocalFirstTransport.add_run``, one call per bookie per run). A closed loop keeps
``--in-flight`` runs outstanding; each run is ``--run`` entries of ``--size`` payload bytes,
built as the ledger handle builds them (``EncodedEntry.build``: digest and one copy) and sent to
every bookie (write quorum = ``--bookies``), for ``--seconds`` after a one-second warm-up.
Printed as one JSON line: entries/s, the loop thread's CPU per entry (us) and per MB of payload
(ms), the other threads' (the journals' and the checkpoints' writers), voluntary context
switches per entry. No broker or network: what the bookie side of one run costs, with far less
noise than the standalone's figure. Compare trees by running it with each one's ``src`` first on
``PYTHONPATH`` (the call it makes, ``add_run``, is the same in both).

Run: ``PYTHONPATH=src .venv/bin/python bench/bookie_runs.py --run 8 --size 1024 --bookies 1``
(unbatched 1 KiB messages, runs of the standalone's default ledger window) or ``--run 4 --size
102400`` (batched: 100 x 1 KiB per entry). Bounded: ``seconds + 1`` of runs, then it stops.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from journal_steady import thread_cpu_s, voluntary_switches

from magnetar.base.types import BookieId
from magnetar.ledger.bookie_transport import BookieClientTransport
from magnetar.node.ledger import LocalFirstTransport
from magnetar.protocol.bookie import EncodedEntry
from magnetar.runtime.clock import SystemClock
from magnetar.runtime.disk import LocalDisk
from magnetar.runtime.gc_tuning import tune_gc_for_server
from magnetar.runtime.kv import RocksKeyValueStore
from magnetar.runtime.network import TcpNetwork
from magnetar.storage import Bookie, BookieConfig


async def run(args: argparse.Namespace, root: str) -> dict[str, float]:
    loop = asyncio.get_running_loop()
    clock = SystemClock()
    cores: dict[BookieId, Bookie] = {}
    for number in range(args.bookies):
        data = os.path.join(root, f"bookie-{number}")
        disk = LocalDisk(data)
        config = BookieConfig(data_dir=data, gc_interval_ms=0, disk_free_bytes_min=0)
        bookie = Bookie(disk, RocksKeyValueStore(os.path.join(disk.root, "index")), clock, config)
        await bookie.start()
        cores[BookieId("127.0.0.1", 10_000 + number)] = bookie
    transport = LocalFirstTransport(cores, BookieClientTransport(TcpNetwork(), clock))
    payload = os.urandom(args.size)
    deadline = time.monotonic() + 1.0 + args.seconds
    marks: dict[str, float] = {}
    counts = {"entries": 0, "measured": 0, "outstanding": 0}
    next_id = [0]
    done = loop.create_future()

    def send_run() -> None:
        if time.monotonic() >= deadline:
            if counts["outstanding"] == 0 and not done.done():
                done.set_result(None)
            return
        if "wall" not in marks and time.monotonic() >= deadline - args.seconds:
            marks["wall"] = time.monotonic()
            marks["ctx"] = voluntary_switches()
            marks["cpu"] = thread_cpu_s()  # type: ignore[assignment]
            marks["from"] = counts["entries"]
        first = next_id[0]
        next_id[0] += args.run
        entries = [EncodedEntry.build(1, first + i, first + i - 1, payload) for i in range(args.run)]
        left = [len(cores) * args.run]
        counts["outstanding"] += 1

        def on_reply(_index: int, error: BaseException | None) -> None:
            if error is not None:
                raise error
            left[0] -= 1
            if left[0] == 0:
                counts["entries"] += args.run
                counts["outstanding"] -= 1
                send_run()

        for bookie in cores:
            transport.add_run(bookie, entries, recovery=False, master_key=b"k" * 20, on_reply=on_reply)

    for _ in range(args.in_flight):
        send_run()
    await asyncio.wait_for(done, args.seconds + 60)
    wall = time.monotonic() - marks["wall"]
    cpu_after, ctx_after = thread_cpu_s(), voluntary_switches()
    cpu_before: dict[int, float] = marks["cpu"]  # type: ignore[assignment]
    measured = counts["entries"] - int(marks["from"])
    loop_tid = threading.get_native_id()
    loop_cpu = cpu_after[loop_tid] - cpu_before.get(loop_tid, 0.0)
    other_cpu = sum(v - cpu_before.get(tid, 0.0) for tid, v in cpu_after.items() if tid != loop_tid)
    await transport.close()
    for bookie in cores.values():
        await bookie.stop()
    mb = measured * args.size / 1e6
    return {
        "entries_s": round(measured / wall, 1),
        "loop_us_entry": round(loop_cpu / measured * 1e6, 2),
        "loop_ms_mb": round(loop_cpu / mb * 1e3, 3),
        "other_us_entry": round(other_cpu / measured * 1e6, 2),
        "ctx_per_entry": round((ctx_after - int(marks["ctx"])) / measured, 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bookies", type=int, default=1)
    parser.add_argument("--run", type=int, default=8, help="entries per run")
    parser.add_argument("--size", type=int, default=1024, help="payload bytes per entry")
    parser.add_argument("--in-flight", type=int, default=4, help="runs outstanding")
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--dir", default="/tmp")
    parser.add_argument("--label", default="")
    args = parser.parse_args()
    import uvloop

    tune_gc_for_server()  # as the standalone does after start-up
    with tempfile.TemporaryDirectory(prefix="bookie-runs-", dir=args.dir) as root:
        result = uvloop.run(run(args, root))
    print(json.dumps({"label": args.label, **result}))


if __name__ == "__main__":
    main()
