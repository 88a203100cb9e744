"""Benchmark: one client appending to one real ``magnetar bookie`` process, pipelined.

Reports, per repeat and as min/median/max over ``--repeats``:
* raw disk limit on the same filesystem: 1 MiB writes + fdatasync each (MB/s), serial 4 KiB
  write + fdatasync (ops/s, p50/p99 ms), measured right before and after the bookie runs of the
  repeat and averaged; also 1 MiB O_DIRECT writes + fdatasync (the bookie's write path, shown
  for comparison; the target is against the buffered figure);
* bookie adds with 1 KiB and 64 KiB entries, pipelined (entries/s, MB/s, add latency p50/p99);
* bookie adds of 1 KiB entries paced at ``--rate`` adds/s (p50/p99 add latency).
Targets (issue 4): 64 KiB >= 50% of raw fsync'd bandwidth; 1 KiB >= 30,000 adds/s; p99 <= 3 ms
at 5,000 adds/s. Every add is acknowledged only after the bookie's journal fsync.

Fairness (one scenario's disk work must not land in another's measurement; docs/performance.md,
"the rule"): every repeat starts a fresh bookie for the pipelined scenarios and stops it after
them, and a second fresh bookie, on the same filesystem, for the paced one. Before each bookie
run and each raw probe the disk is settled (``settle``: ``sync``, then wait until the device
was busy under ``SETTLE_BUSY_SHARE_MAX`` of ``SETTLE_QUIET_S``, at most ``SETTLE_TIMEOUT_S``); the raw
probe's files and the stopped bookies' data are deleted gently (``delete_gently``, as the
bookie deletes its own files) and only between measurements. So the paced window never holds
the raw probe's deletion or the 64 KiB scenario's checkpoint, but it does hold the paced
bookie's own checkpoints: it lasts ``--paced-seconds`` (default: the bookie's
``checkpoint_interval_ms`` plus ``PACED_MARGIN_S``), so the interval checkpoint of its own 5,000
adds/s (~50 MB) falls inside it, and ``paced_*_flushed_mb`` (entry-log bytes the paced bookie
wrote during the window) shows that it did. Beside the paced run a separate process probes the
disk (a 4 KiB write + fdatasync every 20 ms: ``paced_*_disk_probe_max_ms``, ``_stalls`` over
5 ms), and the run prints how many adds took over 3 ms in each second of the window: slow adds
in the seconds where the probe stalled too waited for the disk, not for the bookie.

Run: ``.venv/bin/python bench/bookie_append.py [--seconds 2.5] [--repeats 3] [--scenarios 1k,64k,paced]
[--paced-seconds 13] [--profile stacks.txt]`` (``--profile`` samples the throughput bookie
process with py-spy into collapsed stacks; py-spy is a separate install:
``.venv/bin/pip install py-spy``). Bounded: about ``repeats * (4 * seconds + paced_seconds + 10)``.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import mmap
import os
import selectors
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Coroutine
from pathlib import Path
from typing import Any, TypeVar

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "src"))

from magnetar.ledger.bookie_client import BookieClient  # noqa: E402
from magnetar.protocol.bookie import EncodedEntry, Status  # noqa: E402
from magnetar.runtime import SystemClock, TcpNetwork  # noqa: E402
from magnetar.runtime.disk import delete_gently  # noqa: E402
from magnetar.storage import BookieConfig  # noqa: E402

T = TypeVar("T")
KIB = 1024
MIB = 1024 * 1024
#: The disk counts as settled once, after a sync, it was busy (``io_ticks``) less than this
#: share of SETTLE_QUIET_S, with no request in flight (a discard, which large deletions cause on
#: a ``discard`` mount, is neither a read nor a write: only the busy time shows it).
SETTLE_BUSY_SHARE_MAX = 0.05
SETTLE_QUIET_S = 0.5
SETTLE_TIMEOUT_S = 6.0
#: The paced window lasts the bookie's checkpoint interval plus this (start-up, the checkpoint's
#: own duration at 5,000 adds/s, ~2 s paced): its own interval checkpoint falls inside it.
PACED_MARGIN_S = 3.0
#: The paced scenario counts the adds slower than this (the issue's p99 target), per second.
SLOW_ADD_MS = 3.0


def device_busy(directory: str) -> tuple[int, int] | None:
    """(ms the block device holding ``directory`` was busy so far, requests in flight now), from
    Linux sysfs; None where unknown (the device is a partition: its disk's counters are used)."""
    dev = os.stat(directory).st_dev
    for path in (f"/sys/dev/block/{os.major(dev)}:{os.minor(dev)}/stat",
                 f"/sys/dev/block/{os.major(dev)}:{os.minor(dev)}/../stat"):
        try:
            with open(path) as stat:
                fields = stat.read().split()
            return int(fields[9]), int(fields[8])
        except (OSError, IndexError, ValueError):
            continue
    return None


def settle(directory: str) -> float:
    """``sync``, then wait until the device holding ``directory`` is quiet (module docstring), at
    most SETTLE_TIMEOUT_S; returns the seconds it took (the bench reports the largest)."""
    start = time.perf_counter()
    os.sync()
    before = device_busy(directory)
    while True:
        time.sleep(SETTLE_QUIET_S)
        after = device_busy(directory)
        if before is None or after is None:
            break
        if after[0] - before[0] < SETTLE_BUSY_SHARE_MAX * SETTLE_QUIET_S * 1000 and after[1] == 0:
            break
        if time.perf_counter() - start > SETTLE_TIMEOUT_S:
            break
        before = after
    return time.perf_counter() - start


#: The disk probe beside the paced run: one 4 KiB write + fdatasync every DISK_PROBE_INTERVAL_S in
#: a separate process (no share of the client's GIL); a probe over DISK_PROBE_STALL_MS is a stall.
DISK_PROBE_INTERVAL_S = 0.02
DISK_PROBE_STALL_MS = 5.0
_DISK_PROBE = """
import os, sys, time
path, seconds, interval, stall_ms = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4])
fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
print("ready", flush=True)
block, latencies, start = os.urandom(4096), [], time.perf_counter()
per_second = [0.0] * (int(seconds) + 1)
while time.perf_counter() - start < seconds:
    t0 = time.perf_counter()
    os.pwrite(fd, block, 4096 * (len(latencies) % 256))
    os.fdatasync(fd)
    latency = (time.perf_counter() - t0) * 1e3
    latencies.append(latency)
    second = min(int(t0 - start), int(seconds))
    per_second[second] = max(per_second[second], latency)
    time.sleep(interval)
os.close(fd)
os.remove(path)
print(max(latencies, default=0.0), sum(1 for latency in latencies if latency > stall_ms), len(latencies))
print(" ".join(f"{worst:.1f}" for worst in per_second))
"""


def start_disk_probe(directory: str, seconds: float) -> subprocess.Popen[str]:
    """4 KiB write + fdatasync probes on ``directory``'s disk for ``seconds`` (``disk_probe_result``
    reads its figures): an add that is slow while the probe is slow too waited for the disk."""
    argv = [sys.executable, "-c", _DISK_PROBE, os.path.join(directory, "disk_probe"), str(seconds),
            str(DISK_PROBE_INTERVAL_S), str(DISK_PROBE_STALL_MS)]
    probe = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
    assert probe.stdout is not None
    probe.stdout.readline()  # "ready": its start-up is over before the paced run starts
    return probe


def disk_probe_result(probe: subprocess.Popen[str]) -> dict[str, float]:
    output, _ = probe.communicate(timeout=60)
    totals, per_second = output.splitlines()[-2:]
    worst, stalls, count = totals.split()
    print(f"  paced: slowest disk probe (ms) per second of the window:     {per_second}", flush=True)
    return {"disk_probe_max_ms": float(worst), "disk_probe_stalls": float(stalls), "disk_probes": float(count)}


def remove_gently(path: str) -> None:
    """Delete a file or a tree as the bookie deletes its own files (large files trimmed in
    steps: one unlink of ~1 GB, with the ``discard`` mount option, stalled fdatasyncs for tens of
    milliseconds)."""
    if os.path.isdir(path):
        for root, _dirs, files in os.walk(path):
            for name in files:
                try:
                    delete_gently(os.path.join(root, name))
                except OSError:
                    pass
        shutil.rmtree(path, ignore_errors=True)
    elif os.path.exists(path):
        delete_gently(path)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def raw_disk(directory: str, seconds: float) -> dict[str, float]:
    path = os.path.join(directory, "raw_probe")
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        block = os.urandom(MIB)
        start = time.perf_counter()
        written = 0
        while time.perf_counter() - start < seconds / 2:
            os.write(fd, block)
            os.fdatasync(fd)
            written += len(block)
        mb_s = written / MIB / (time.perf_counter() - start)
        direct_mb_s = raw_direct(directory, seconds / 2)
        small = os.urandom(4 * KIB)
        latencies = []
        start = time.perf_counter()
        while time.perf_counter() - start < seconds / 2:
            t0 = time.perf_counter()
            os.write(fd, small)
            os.fdatasync(fd)
            latencies.append((time.perf_counter() - t0) * 1e3)
        ops = len(latencies) / (time.perf_counter() - start)
    finally:
        os.close(fd)
        remove_gently(path)
    return {"raw_1mib_mb_s": mb_s, "raw_direct_1mib_mb_s": direct_mb_s, "raw_4k_fsync_ops_s": ops,
            "raw_4k_p50_ms": percentile(latencies, 0.5),
            "raw_4k_p99_ms": percentile(latencies, 0.99)}


def raw_direct(directory: str, seconds: float) -> float:
    """1 MiB ``O_DIRECT`` writes + fdatasync each (MB/s): the bookie's own write path, for
    comparison only (the target is against the buffered ``raw_1mib_mb_s``); 0 without O_DIRECT."""
    path = os.path.join(directory, "raw_direct_probe")
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_DIRECT, 0o644)
    except OSError:
        return 0.0
    try:
        block = mmap.mmap(-1, MIB)  # page-aligned, as O_DIRECT needs
        block.write(os.urandom(MIB))
        start = time.perf_counter()
        written = 0
        while time.perf_counter() - start < seconds:
            os.write(fd, block)
            os.fdatasync(fd)
            written += MIB
        return written / MIB / (time.perf_counter() - start)
    finally:
        os.close(fd)
        remove_gently(path)


def start_profiler(pid: int, output: str) -> subprocess.Popen[bytes]:
    """py-spy sampling ``pid`` into a collapsed-stack text file (stopped with SIGINT)."""
    spy = str(Path(sys.executable).parent / "py-spy")
    argv = [spy, "record", "--pid", str(pid), "--format", "raw", "--rate", "200", "--output", output]
    return subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def stop_process(process: subprocess.Popen[Any], sig: signal.Signals, timeout_s: float) -> None:
    """Send ``sig`` (a clean stop), then SIGKILL if it is still running after ``timeout_s``."""
    process.send_signal(sig)
    try:
        process.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def stop_profiler(profiler: subprocess.Popen[bytes]) -> None:
    stop_process(profiler, signal.SIGINT, 30)  # py-spy writes its output on SIGINT


def start_bookie(data_dir: str) -> tuple[subprocess.Popen[str], int]:
    env = dict(os.environ, PYTHONPATH=str(REPO / "src"))
    env.pop("MAGNETAR_FAULTS", None)
    env.setdefault("MAGNETAR_BOOKIE_GC_INTERVAL_MS", "0")  # the bench's ledgers have no metadata
    magnetar = str(Path(sys.executable).parent / "magnetar")
    argv = [magnetar, "bookie", "--metadata", "memory:", "--port", "0", "--data-dir", data_dir]
    process = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    assert process.stdout is not None
    selector = selectors.DefaultSelector()
    selector.register(process.stdout, selectors.EVENT_READ)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if selector.select(timeout=1):
            line = process.stdout.readline()
            if line.startswith("magnetar-bookie listening on "):
                return process, int(line.strip().rsplit(":", 1)[1])
            if not line:
                break
    process.kill()
    raise RuntimeError("bookie did not start")


async def pipelined(client: BookieClient, ledger: int, size: int, seconds: float, window: int) -> dict[str, float]:
    payload = os.urandom(size)
    latencies: list[float] = []
    room = asyncio.Semaphore(window)
    failures = 0

    def done(start_ns: int, future: asyncio.Future[object]) -> None:
        nonlocal failures
        room.release()
        if future.cancelled() or future.exception() is not None:
            failures += 1
            return
        response = future.result()
        if getattr(response, "status", None) is not Status.OK:
            failures += 1
        latencies.append((time.monotonic_ns() - start_ns) / 1e6)

    start = time.perf_counter()
    entry_id = 0
    while time.perf_counter() - start < seconds:
        await room.acquire()
        t0 = time.monotonic_ns()
        future = client.add_nowait(EncodedEntry.build(ledger, entry_id, entry_id - 1, payload), master_key=b"bench")
        future.add_done_callback(lambda f, t0=t0: done(t0, f))
        entry_id += 1
        if entry_id % 64 == 0:
            await client.drain()
    for _ in range(window):
        await room.acquire()
    elapsed = time.perf_counter() - start
    return {"entries_s": len(latencies) / elapsed, "mb_s": len(latencies) * size / MIB / elapsed,
            "p50_ms": percentile(latencies, 0.5), "p99_ms": percentile(latencies, 0.99), "failures": failures}


async def paced(client: BookieClient, ledger: int, size: int, seconds: float, rate: float) -> dict[str, float]:
    payload = os.urandom(size)
    latencies: list[float] = []
    interval = 1.0 / rate
    failures = 0
    pending = 0
    all_done = asyncio.Event()
    sending = True

    # Futures are not kept (a list of all of them made the client's own full GC passes longer).
    def done(start_ns: int, future: asyncio.Future[object]) -> None:
        nonlocal failures, pending
        pending -= 1
        if not sending and not pending:
            all_done.set()
        if future.cancelled() or future.exception() is not None:
            failures += 1
            return
        if getattr(future.result(), "status", None) is not Status.OK:
            failures += 1  # an error reply comes fast: it must not count as a fast add
            return
        latency = (time.monotonic_ns() - start_ns) / 1e6
        latencies.append(latency)
        if latency > SLOW_ADD_MS:
            second = int((start_ns - start_ns0) / 1e9)
            slow_per_second[second] = slow_per_second.get(second, 0) + 1

    start = time.perf_counter()
    start_ns0 = time.monotonic_ns()
    slow_per_second: dict[int, int] = {}
    entry_id = 0
    while time.perf_counter() - start < seconds:
        due = start + entry_id * interval
        delay = due - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        t0 = time.monotonic_ns()
        future = client.add_nowait(EncodedEntry.build(ledger, entry_id, entry_id - 1, payload), master_key=b"bench")
        pending += 1
        future.add_done_callback(lambda f, t0=t0: done(t0, f))
        entry_id += 1
    sending = False
    if pending:
        await all_done.wait()
    achieved = len(latencies) / (time.perf_counter() - start)
    # Where in the window the slow adds were (a burst: one stall; spread: a slow path).
    print(f"  paced: adds over {SLOW_ADD_MS} ms per second of the window: "
          + " ".join(str(slow_per_second.get(second, 0)) for second in range(int(seconds) + 1)), flush=True)
    return {"rate_achieved_s": achieved, "p50_ms": percentile(latencies, 0.5), "p99_ms": percentile(latencies, 0.99),
            "max_ms": max(latencies, default=float("nan")), "slow_adds": sum(slow_per_second.values()),
            "failures": failures}


SCENARIOS = ("1k", "64k", "paced")


def run_loop(coroutine: Coroutine[Any, Any, T]) -> T:
    """The load generator runs on uvloop (as the bookie does), so it takes less of the CPU."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(coroutine)
    return uvloop.run(coroutine)


def cpu_seconds(pid: int, *, system_only: bool = False) -> float:
    """User + system (or only system) CPU seconds of process ``pid`` so far (Linux /proc)."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    ticks = int(fields[12]) if system_only else int(fields[11]) + int(fields[12])
    return ticks / os.sysconf("SC_CLK_TCK")


def machine_busy_seconds() -> float:
    """CPU seconds all cores spent busy so far (Linux /proc/stat: everything but idle and iowait)."""
    with open("/proc/stat") as stat:
        fields = [int(value) for value in stat.readline().split()[1:]]
    return (sum(fields) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK")


class GcPauses:
    """This client's own garbage-collector pauses (``gc.callbacks``): they delay its callbacks,
    so during a run they show up as add latency that the bookie did not cause."""

    def __init__(self) -> None:
        self.total_ms = 0.0
        self.max_ms = 0.0
        self._started = 0.0

    def __call__(self, phase: str, _info: dict[str, int]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
            return
        pause = (time.perf_counter() - self._started) * 1e3
        self.total_ms += pause
        self.max_ms = max(self.max_ms, pause)


async def measured(
    bookie_pid: int, run: Coroutine[Any, Any, dict[str, float]]
) -> dict[str, float]:
    """``run``'s figures plus the CPU share (of one core) the bookie, this client and every other
    process on the machine used meanwhile (the VM is shared: ``cpu_others_pct`` explains noise),
    and the client's own GC pauses (``client_gc_max_ms``, ``client_gc_total_ms``). What the
    client holds before the run is frozen (``gc.freeze``), so its full collections stay short."""
    gc.collect()
    gc.freeze()
    pauses = GcPauses()
    gc.callbacks.append(pauses)
    start, bookie0, client0 = time.perf_counter(), cpu_seconds(bookie_pid), cpu_seconds(os.getpid())
    bookie_sys0 = cpu_seconds(bookie_pid, system_only=True)
    machine0 = machine_busy_seconds()
    try:
        result = await run
    finally:
        gc.callbacks.remove(pauses)
    elapsed = time.perf_counter() - start
    bookie = cpu_seconds(bookie_pid) - bookie0
    client = cpu_seconds(os.getpid()) - client0
    result["cpu_bookie_pct"] = 100 * bookie / elapsed
    result["cpu_bookie_sys_pct"] = 100 * (cpu_seconds(bookie_pid, system_only=True) - bookie_sys0) / elapsed
    if result.get("entries_s"):
        # Bookie CPU per add: how much work the bookie does, nearly independent of how much CPU
        # other processes leave it (the shared VM's noise moves throughput far more than this).
        result["cpu_bookie_us_per_add"] = 1e6 * bookie / (result["entries_s"] * elapsed)
    result["cpu_client_pct"] = 100 * client / elapsed
    result["cpu_others_pct"] = 100 * max(0.0, machine_busy_seconds() - machine0 - bookie - client) / elapsed
    result["client_gc_max_ms"] = pauses.max_ms
    result["client_gc_total_ms"] = pauses.total_ms
    return result


async def throughput_runs(
    port: int, bookie_pid: int, seconds: float, repeat: int, scenarios: list[str]
) -> dict[str, dict[str, float]]:
    client = await BookieClient.connect(TcpNetwork(), "127.0.0.1", port, SystemClock(), request_timeout_ms=30_000)
    results: dict[str, dict[str, float]] = {}
    try:
        base = 1000 * (repeat + 1)
        if "1k" in scenarios:
            results["1KiB"] = await measured(bookie_pid, pipelined(client, base + 1, KIB, seconds, window=512))
        if "64k" in scenarios:
            results["64KiB"] = await measured(bookie_pid, pipelined(client, base + 2, 64 * KIB, seconds, window=64))
    finally:
        await client.close()
    return results


def entry_log_bytes(data_dir: str) -> int:
    """Bytes in a bookie's entry logs (what its checkpoints flushed so far)."""
    logs = os.path.join(data_dir, "entrylogs")
    try:
        return sum(entry.stat().st_size for entry in os.scandir(logs) if entry.is_file())
    except FileNotFoundError:
        return 0


async def paced_run(
    port: int, bookie_pid: int, data_dir: str, seconds: float, rate: float, repeat: int
) -> dict[str, float]:
    client = await BookieClient.connect(TcpNetwork(), "127.0.0.1", port, SystemClock(), request_timeout_ms=30_000)
    try:
        flushed0 = entry_log_bytes(data_dir)
        probe = start_disk_probe(os.path.dirname(data_dir), seconds)
        try:
            result = await measured(bookie_pid, paced(client, 1000 * (repeat + 1) + 3, KIB, seconds, rate))
        finally:
            result_probe = disk_probe_result(probe)
        result["flushed_mb"] = (entry_log_bytes(data_dir) - flushed0) / MIB
        result.update(result_probe)
    finally:
        await client.close()
    return result


def stop_bookie(process: subprocess.Popen[str]) -> None:
    stop_process(process, signal.SIGTERM, 20)


def summary(label: str, values: list[float], unit: str) -> str:
    return f"{label:<34} min {min(values):>10.2f}  median {statistics.median(values):>10.2f}  max {max(values):>10.2f} {unit}"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=2.5)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--rate", type=float, default=5000.0)
    parser.add_argument("--dir", default=str(REPO / "bench" / "results"))
    parser.add_argument("--scenarios", default=",".join(SCENARIOS), help="comma list of " + ", ".join(SCENARIOS))
    parser.add_argument("--paced-seconds", type=float, default=0.0,
                        help="paced window (default: the bookie's checkpoint interval + PACED_MARGIN_S)")
    parser.add_argument("--profile", default="",
                        help="write py-spy collapsed stacks of the throughput bookie to this file (.<repeat> appended)")
    args = parser.parse_args()
    scenarios = [name for name in args.scenarios.split(",") if name]
    unknown = set(scenarios) - set(SCENARIOS)
    if unknown or args.repeats < 1:
        parser.error(f"unknown scenarios {sorted(unknown)} or repeats < 1")
    command = " ".join([Path(sys.executable).name, *sys.argv])
    print(f"command: {command}", flush=True)
    os.makedirs(args.dir, exist_ok=True)
    results: list[dict[str, float]] = []
    paced_seconds = args.paced_seconds or BookieConfig().checkpoint_interval_ms / 1000 + PACED_MARGIN_S
    throughput = [name for name in scenarios if name != "paced"]
    with tempfile.TemporaryDirectory(dir=args.dir, prefix="bookie_append.") as tmp:
        for repeat in range(args.repeats):
            # The raw baseline is measured right before and right after the bookie runs and
            # averaged, so drift of a shared disk during the repeat hits both sides alike. Each
            # measurement starts on a settled disk (module docstring: fairness).
            settle_s = [settle(tmp)]
            raw_before = raw_disk(tmp, args.seconds / 2)
            runs: dict[str, dict[str, float]] = {}
            if throughput:
                settle_s.append(settle(tmp))
                data_dir = os.path.join(tmp, f"bookie-{repeat}")
                process, port = start_bookie(data_dir)
                profiler = start_profiler(process.pid, f"{args.profile}.{repeat}") if args.profile else None
                try:
                    runs.update(run_loop(throughput_runs(port, process.pid, args.seconds, repeat, throughput)))
                finally:
                    if profiler is not None:
                        stop_profiler(profiler)
                    stop_bookie(process)
            if "paced" in scenarios:
                settle_s.append(settle(tmp))
                data_dir = os.path.join(tmp, f"bookie-paced-{repeat}")
                process, port = start_bookie(data_dir)
                try:
                    runs[f"paced_{int(args.rate)}"] = run_loop(
                        paced_run(port, process.pid, data_dir, paced_seconds, args.rate, repeat)
                    )
                finally:
                    stop_bookie(process)
            settle_s.append(settle(tmp))
            raw_after = raw_disk(tmp, args.seconds / 2)
            for name in os.listdir(tmp):
                remove_gently(os.path.join(tmp, name))
            row = {key: (raw_before[key] + raw_after[key]) / 2 for key in raw_before}
            for name, values in runs.items():
                row.update({f"{name}_{key}": value for key, value in values.items()})
            if "64KiB_mb_s" in row:
                row["64KiB_fraction_of_raw"] = row["64KiB_mb_s"] / row["raw_1mib_mb_s"]
                if row["raw_direct_1mib_mb_s"]:
                    row["64KiB_fraction_of_raw_direct"] = row["64KiB_mb_s"] / row["raw_direct_1mib_mb_s"]
            if "1KiB_entries_s" in row:
                row["1KiB_fraction_of_raw_4k_fsyncs"] = row["1KiB_entries_s"] / row["raw_4k_fsync_ops_s"]
            row["settle_max_sec"] = max(settle_s)
            row["loadavg_1m"] = os.getloadavg()[0]
            results.append(row)
            print(f"repeat {repeat + 1}: " + ", ".join(f"{k}={v:.2f}" for k, v in row.items()), flush=True)
    print(f"\nbookie_append: {args.repeats} repeats x {args.seconds}s (paced {paced_seconds}s), one client, "
          "a fresh bookie per repeat and scenario kind, fsync before ack")
    print(f"command: {command}")
    units = {"pct": "%", "mb_s": "MB/s", "entries_s": "entries/s", "ops_s": "ops/s", "ms": "ms", "s": "/s", "raw": "x",
             "us_per_add": "us"}
    for key in results[0]:
        unit = next((u for suffix, u in units.items() if key.endswith(suffix)), "")
        print(summary(key, [r[key] for r in results], unit))
    median = {key: statistics.median(r[key] for r in results) for key in results[0]}
    verdicts = []
    if "64KiB_fraction_of_raw" in median:
        verdicts.append(f"64KiB >= 50% raw: {median['64KiB_fraction_of_raw']:.0%}")
    if "1KiB_entries_s" in median:
        verdicts.append(f"1KiB >= 30000 adds/s: {median['1KiB_entries_s']:.0f}")
    paced_key = f"paced_{int(args.rate)}_p99_ms"
    if paced_key in median:
        verdicts.append(f"p99 <= 3 ms at {args.rate:.0f}/s: {median[paced_key]:.2f} ms")
    print("\ntargets (median): " + "; ".join(verdicts))


if __name__ == "__main__":
    main()
