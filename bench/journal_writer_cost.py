"""CPU per synced journal write: Python's writer threads against the native writer (session 22).

Each of ``--files`` files (one per bookie journal) keeps one synced write of ``--size`` bytes in
flight through ``O_DIRECT`` (``pwritev`` with ``RWF_DSYNC``), ``--writes`` writes per file, from an
event loop (uvloop) that, with ``--busy``, also spins in Python between its callbacks (as the
broker's loop does under load: a writer thread that wants the GIL back waits for it). Per
variant, in a fresh process each, alternating, ``--repeats`` times:

* ``threads``: today's path: ``runtime.disk_threads``' pool, a job that writes and answers with
  ``call_soon_threadsafe`` (the process's switch interval set as the standalone sets it);
* ``native``: the Cython writer (``runtime.disk_writer``), answered through the loop's ``eventfd``.

Printed per run: the CPU per write of the writing side (every thread but the loop's, from
``/proc/self/task``), of the loop's thread, the wall time per write and the context switches per
write (voluntary + involuntary, all threads).

Run: ``PYTHONPATH=$PWD/src .venv/bin/python bench/journal_writer_cost.py --busy --files 3``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import mmap
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time


def _task_times() -> dict[int, tuple[float, int]]:
    """tid -> (user + system seconds, context switches) of every thread of this process."""
    ticks = os.sysconf("SC_CLK_TCK")
    out: dict[int, tuple[float, int]] = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
            with open(f"/proc/self/task/{tid}/status") as status:
                switches = sum(int(line.split()[1]) for line in status if "ctxt_switches" in line)
        except OSError:
            continue
        out[int(tid)] = ((int(fields[11]) + int(fields[12])) / ticks, switches)
    return out


def _child(variant: str, files: int, writes: int, size: int, busy: bool, directory: str,
           tick_s: float) -> dict[str, float]:
    import uvloop

    from magnetar.runtime import disk_threads, disk_writer

    buffers = []
    fds = []
    for k in range(files):
        path = os.path.join(directory, f"journal-{k}")
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_DIRECT, 0o600)
        buffer = mmap.mmap(-1, size)
        buffer.write(b"x" * size)
        for i in range(writes):  # written zeros first: no file-size change per synced write
            os.pwrite(fd, buffer, i * size)
        os.fsync(fd)
        fds.append(fd)
        buffers.append(buffer)

    loop = uvloop.new_event_loop()
    asyncio.set_event_loop(loop)
    finished = loop.create_future()
    left = [files]
    main_tid = threading.get_native_id()

    class Stream:
        def __init__(self, k: int) -> None:
            self.k = k
            self.i = 0

        def next(self) -> None:
            if self.i == writes:
                left[0] -= 1
                if left[0] == 0:
                    finished.set_result(None)
                return
            offset = self.i * size
            self.i += 1
            if variant == "native":
                port = disk_writer.port_for(loop)
                disk_writer.writer().submit(port, self, [(fds[self.k], [buffers[self.k]], offset, os.RWF_DSYNC)])
            else:
                fd, view = fds[self.k], buffers[self.k]

                def job() -> None:
                    os.pwritev(fd, [view], offset, os.RWF_DSYNC)
                    loop.call_soon_threadsafe(self.answered)

                disk_threads._sync_workers().submit(job)

        def written(self, error: int, failed: int, took_ns: int) -> None:
            assert error == 0, os.strerror(error)
            self.next()

        def answered(self) -> None:
            self.next()

    spinning = [busy or tick_s > 0]

    def tick() -> None:
        x = 0
        for i in range(300):  # a little Python work per tick (an add's arrival)
            x += i
        if spinning[0]:
            loop.call_later(tick_s, tick)

    def spin() -> None:
        x = 0
        for i in range(3000):  # ~100-200 us of Python with the GIL held
            x += i
        if spinning[0]:
            loop.call_soon(spin)

    async def main() -> tuple[float, float]:
        # Warm up: the threads exist and the port is registered before the measured part.
        if variant == "native":
            disk_writer.port_for(loop)
        streams = [Stream(k) for k in range(files)]
        if busy:
            loop.call_soon(spin)
        if tick_s > 0:
            loop.call_soon(tick)
        started = time.perf_counter()
        for stream in streams:
            stream.next()
        await finished
        spinning[0] = False
        return started, time.perf_counter()

    if variant == "native" and not disk_writer.available():
        raise SystemExit(f"no native writer: {disk_writer.REASON}")
    before = _task_times()
    started, ended = loop.run_until_complete(main())
    after = _task_times()
    total = files * writes
    loop_cpu = after[main_tid][0] - before.get(main_tid, (0.0, 0))[0]
    other_cpu = sum(cpu - before.get(tid, (0.0, 0))[0] for tid, (cpu, _) in after.items() if tid != main_tid)
    switches = sum(sw - before.get(tid, (0.0, 0))[1] for tid, (_, sw) in after.items())
    for fd in fds:
        os.close(fd)
    return {"writer_us": 1e6 * other_cpu / total, "loop_us": 1e6 * loop_cpu / total,
            "wall_us": 1e6 * (ended - started) / total, "csw": switches / total}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--files", type=int, default=3)
    parser.add_argument("--writes", type=int, default=300, help="writes per file")
    parser.add_argument("--size", type=int, default=16384)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--busy", action="store_true", help="the loop spins in Python between its callbacks")
    parser.add_argument("--tick-us", type=float, default=0.0,
                        help="a timer every this many us does a little Python work (an add's arrival)")
    parser.add_argument("--variants", default="threads,native")
    parser.add_argument("--dir", default=None, help="where the files go (default: a temporary directory in .)")
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        directory = args.dir or "."
        print(json.dumps(_child(args.child, args.files, args.writes, args.size, args.busy, directory,
                                args.tick_us / 1e6)))
        return 0
    results: dict[str, list[dict[str, float]]] = {}
    with tempfile.TemporaryDirectory(dir=args.dir or ".") as directory:
        for repeat in range(args.repeats):
            for variant in args.variants.split(","):
                command = [sys.executable, __file__, "--child", variant, "--files", str(args.files), "--writes",
                           str(args.writes), "--size", str(args.size), "--dir", directory]
                if args.busy:
                    command.append("--busy")
                if args.tick_us:
                    command += ["--tick-us", str(args.tick_us)]
                out = subprocess.run(command, check=True, capture_output=True, text=True, timeout=300).stdout
                row = json.loads(out.strip().splitlines()[-1])
                results.setdefault(variant, []).append(row)
                print(f"repeat {repeat} {variant:8s} " + " ".join(f"{k} {v:.1f}" for k, v in row.items()), flush=True)
    print(f"load average {os.getloadavg()[0]:.2f}; min / median / max:")
    for variant, rows in results.items():
        cells = []
        for key in rows[0]:
            values = sorted(row[key] for row in rows)
            cells.append(f"{key} {values[0]:.1f} / {statistics.median(values):.1f} / {values[-1]:.1f}")
        print(f"  {variant:8s} " + "; ".join(cells))
    return 0


if __name__ == "__main__":
    sys.exit(main())
