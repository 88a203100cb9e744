"""The journal alone at a steady rate: CPU per add on the event-loop thread and on the others.

A ``Journal`` on the real disk (``--dir``, default a temporary directory under ``/tmp``) in this
process, on uvloop, takes ``--rate`` adds/s of ``--size`` bytes, open loop (each add submitted at
its scheduled time by a timer, whether earlier ones were acknowledged or not), for ``--seconds``
after a one-second warm-up. Printed as one JSON line: the loop thread's and the other threads'
CPU (``/proc/self/task/*/schedstat``) per add in us, the process's voluntary context switches
per add, groups and waits per add, and the ack latency p50/p99 in ms. No broker or network: what
the journal and its disk hand-offs cost per add, with far less noise than the standalone's
figure. Compare trees by running it with each one's ``src`` first on ``PYTHONPATH``.

Run: ``PYTHONPATH=src .venv/bin/python bench/journal_steady.py --rate 2000 --seconds 4`` (``--threads-only``:
no group written inline on the loop thread).
Bounded: ``seconds + 1`` of adds, then the journal stops.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import tempfile
import threading
import time

from magnetar.runtime.clock import SystemClock
from magnetar.runtime.disk import LocalDisk
from magnetar.runtime.gc_tuning import tune_gc_for_server
from magnetar.storage.config import BookieConfig
from magnetar.storage.journal import Journal, add_record


def thread_cpu_s() -> dict[int, float]:
    """CPU seconds (user + system, ns resolution: ``schedstat``) of each thread of this process."""
    out: dict[int, float] = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/schedstat") as stat:
                out[int(tid)] = int(stat.read().split()[0]) / 1e9
        except OSError:
            continue
    return out


def voluntary_switches() -> int:
    total = 0
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/status") as status:
                for line in status:
                    if line.startswith("voluntary_ctxt_switches"):
                        total += int(line.split()[1])
        except OSError:
            continue
    return total


async def run(args: argparse.Namespace, root: str) -> dict[str, float]:
    loop = asyncio.get_running_loop()
    journal = Journal(LocalDisk(root), SystemClock(), BookieConfig(data_dir=root), 1)
    await journal.start()
    record = add_record(b"k" * 20, b"\0" * args.size)
    latencies: list[float] = []
    period = 1.0 / args.rate
    warm = int(args.rate)
    total = warm + int(args.rate * args.seconds)
    done = loop.create_future()
    marks: dict[str, object] = {}
    acked = [0]

    def acked_at(start: float, index: int, error: BaseException | None) -> None:
        if error is not None:
            raise error
        if index >= warm:
            latencies.append(time.monotonic() - start)
        acked[0] += 1
        if acked[0] == total and not done.done():
            done.set_result(None)

    t0 = loop.time()

    def send(index: int) -> None:
        if index == warm:
            marks["cpu"] = thread_cpu_s()
            marks["ctx"] = voluntary_switches()
            marks["groups"] = journal.groups_count
            marks["waits"] = journal.waits_count
            marks["wall"] = time.monotonic()
        now = time.monotonic()
        journal.submit(record, lambda error: acked_at(now, index, error))
        if index + 1 < total:
            loop.call_at(t0 + (index + 1) * period, send, index + 1)

    loop.call_soon(send, 0)
    await asyncio.wait_for(done, args.seconds + 30)
    cpu_after = thread_cpu_s()
    ctx_after = voluntary_switches()
    wall = time.monotonic() - float(marks["wall"])  # type: ignore[arg-type]
    cpu_before: dict[int, float] = marks["cpu"]  # type: ignore[assignment]
    measured = total - warm
    loop_tid = threading.get_native_id()
    loop_cpu = cpu_after[loop_tid] - cpu_before.get(loop_tid, 0.0)
    other_cpu = sum(v - cpu_before.get(tid, 0.0) for tid, v in cpu_after.items() if tid != loop_tid)
    await journal.stop()
    # The journal file's size on disk: past the records when it was preallocated.
    file_bytes = max((os.path.getsize(os.path.join(root, "journal", name))
                      for name in os.listdir(os.path.join(root, "journal"))), default=0)
    latencies.sort()
    return {
        "adds_s": round(measured / wall, 1),
        "loop_us_add": round(loop_cpu / measured * 1e6, 2),
        "other_us_add": round(other_cpu / measured * 1e6, 2),
        "ctx_per_add": round((ctx_after - int(marks["ctx"])) / measured, 2),  # type: ignore[call-overload]
        "groups_per_add": round((journal.groups_count - int(marks["groups"])) / measured, 3),  # type: ignore[call-overload]
        "waits_per_add": round((journal.waits_count - int(marks["waits"])) / measured, 3),  # type: ignore[call-overload]
        "p50_ms": round(latencies[len(latencies) // 2] * 1e3, 3),
        "p99_ms": round(latencies[int(len(latencies) * 0.99)] * 1e3, 3),
        "inline_groups": getattr(getattr(runtime_disk_module(), "_PACE", None), "inline_count", None),
        "file_bytes": file_bytes,
    }


def runtime_disk_module() -> object:
    from magnetar.runtime import disk as runtime_disk

    return runtime_disk


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rate", type=float, default=2000.0)
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--size", type=int, default=1100)
    parser.add_argument("--dir", default="/tmp")
    parser.add_argument("--label", default="")
    parser.add_argument("--threads-only", action="store_true",
                        help="every group to the writer threads (no inline write on the loop thread: the A/B of that)")
    args = parser.parse_args()
    if args.threads_only:
        # The inline rule's bound lives in ``runtime.disk_pace`` (session 17); a name that moved
        # again must fail here, not quietly measure the default rule.
        from magnetar.runtime import disk_pace

        if not hasattr(disk_pace, "INLINE_SYNC_NS_MAX"):
            parser.error("--threads-only: runtime.disk_pace.INLINE_SYNC_NS_MAX is gone; update this bench")
        disk_pace.INLINE_SYNC_NS_MAX = -1  # no average is at most -1: every group to the writer threads
    import uvloop

    tune_gc_for_server()  # as the standalone does after start-up
    with tempfile.TemporaryDirectory(prefix="journal-steady-", dir=args.dir) as root:
        result = uvloop.run(run(args, root))
    print(json.dumps({"label": args.label, **result}))


if __name__ == "__main__":
    main()
