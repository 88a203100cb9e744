"""The stable measures of ``bench/peers/run.py`` (issue 22): CPU of a process tree and of its
busiest thread, ``perf stat`` counters of the server processes, and the disk's fsync'd bandwidth.

* ``ProcTree``: a process and its live descendants from ``/proc`` (user + system CPU per process
  and per thread, ``/proc/<pid>/task/<tid>/stat``).
* ``PerfStat``: ``perf stat -x, -e <events> -p <pids>`` attached to the server for one measured
  phase, stopped with SIGINT, its CSV parsed (``parse_perf_csv``). ``perf_probe`` says whether an
  event is counted on this machine (a VM without a hardware PMU counts software events only:
  ``instructions`` is then ``<not supported>``) and why not.
* ``fsync_bandwidth``: a bounded loop of ``write(block)`` + ``fdatasync`` into one file in a
  directory (the standalone's data directory: the same filesystem): MB/s of data made durable.

The parsing is pure (tested in ``tests/bench``); the rest reads ``/proc`` or starts ``perf``.
"""

from __future__ import annotations

import mmap
import os
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass

CLOCK_TICKS_S = os.sysconf("SC_CLK_TCK")
MIB = 1024 * 1024
#: ``perf stat`` gets this long to print its counts after SIGINT.
PERF_STOP_S = 10.0


def parse_stat_line(text: str) -> tuple[int, str, float]:
    """``/proc/<pid>/stat`` (or a task's): (parent pid, command name, user + system CPU seconds).
    The command name may hold spaces and parentheses: the fields follow the last ``)``."""
    head, _, rest = text.rpartition(")")
    name = head.split("(", 1)[1] if "(" in head else ""
    fields = rest.split()
    # fields[0] is the state (field 3 of proc(5)); utime and stime are fields 14 and 15.
    return int(fields[1]), name, (int(fields[11]) + int(fields[12])) / CLOCK_TICKS_S


def _read(path: str) -> str | None:
    try:
        with open(path) as handle:
            return handle.read()
    except OSError:  # exited meanwhile
        return None


def descendants(roots: list[int]) -> list[int]:
    """``roots`` (those alive) and all their live descendants, from ``/proc``."""
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit() and (text := _read(f"/proc/{entry}/stat")) is not None:
            parents[int(entry)] = parse_stat_line(text)[0]
    tree: list[int] = []
    frontier = [pid for pid in roots if pid in parents]
    while frontier:
        pid = frontier.pop()
        tree.append(pid)
        frontier.extend(child for child, parent in parents.items() if parent == pid and child not in tree)
    return sorted(tree)


@dataclass(frozen=True)
class CpuSample:
    """CPU seconds per process and per thread (``"pid/tid"``) of a tree at one moment, with names."""

    processes: dict[int, float]
    threads: dict[str, float]
    names: dict[str, str]


def sample_cpu(pids: list[int]) -> CpuSample:
    processes: dict[int, float] = {}
    threads: dict[str, float] = {}
    names: dict[str, str] = {}
    for pid in pids:
        text = _read(f"/proc/{pid}/stat")
        if text is None:
            continue
        processes[pid] = parse_stat_line(text)[2]
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for tid in tids:
            if (task := _read(f"/proc/{pid}/task/{tid}/stat")) is not None:
                _, name, cpu = parse_stat_line(task)
                threads[f"{pid}/{tid}"] = cpu
                names[f"{pid}/{tid}"] = name
    return CpuSample(processes, threads, names)


def cpu_seconds(roots: list[int]) -> float:
    """User + system CPU seconds of ``roots`` and all their live descendants now."""
    return sum(sample_cpu(descendants(roots)).processes.values())


def thread_switches(pid: int) -> dict[int, tuple[int, int]]:
    """Per thread of ``pid``: its (voluntary, involuntary) context switches so far
    (``/proc/<pid>/task/<tid>/status``); a thread that ended meanwhile is left out."""
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return {}
    out: dict[int, tuple[int, int]] = {}
    for tid in tids:
        counts = dict.fromkeys(("voluntary_ctxt_switches", "nonvoluntary_ctxt_switches"), 0)
        for line in (_read(f"/proc/{pid}/task/{tid}/status") or "").splitlines():
            key, _, value = line.partition(":")
            if key in counts:
                counts[key] = int(value)
        out[int(tid)] = (counts["voluntary_ctxt_switches"], counts["nonvoluntary_ctxt_switches"])
    return out


def context_switches(pids: list[int]) -> int:
    """Voluntary + involuntary context switches so far of every thread of ``pids``: wake-ups and
    preemptions, a cost per message that a CPU figure hides in its kernel share."""
    return sum(v + n for pid in pids for v, n in thread_switches(pid).values())


def minor_faults(pid: int) -> int:
    """Minor page faults of ``pid`` so far (``minflt``, field 10 of proc(5)); 0 if it exited."""
    text = _read(f"/proc/{pid}/stat")
    return int(text.rpartition(")")[2].split()[7]) if text is not None else 0


class ServerCpu:
    """``on_phase`` for a measured phase: the server's CPU seconds between "start" and "end"
    (``roots`` and their descendants, for ``bench/steady_load.py``), per thread too, and its
    threads' context switches."""

    def __init__(self, roots: list[int]) -> None:
        self.roots = roots
        self.marks: dict[str, float] = {}
        self.samples: dict[str, CpuSample] = {}
        self.switches: dict[str, int] = {}

    def __call__(self, phase: str) -> None:
        tree = descendants(self.roots)
        sample = sample_cpu(tree)
        self.samples[phase] = sample
        self.switches[phase] = context_switches(tree)
        self.marks[phase] = sum(sample.processes.values())

    def us_per(self, messages: int) -> float:
        return 1e6 * (self.marks["end"] - self.marks["start"]) / max(1, messages)

    def thread_seconds(self, pid: int) -> tuple[float, float]:
        """CPU seconds between "start" and "end" of ``pid``'s main thread (an asyncio server's
        event loop) and of all the tree's other threads (writer threads, bookie children...)."""
        start, end = self.samples["start"].threads, self.samples["end"].threads
        main = f"{pid}/{pid}"
        loop_s = end.get(main, 0.0) - start.get(main, 0.0)
        others_s = sum(cpu - start.get(key, 0.0) for key, cpu in end.items() if key != main)
        return loop_s, others_s


def busiest(before: CpuSample, after: CpuSample, elapsed_s: float) -> dict[str, float | str]:
    """The process and the thread that used the most CPU between two samples, in % of one core."""
    def top(a: dict[str, float], b: dict[str, float]) -> tuple[str, float]:
        deltas = {key: b[key] - a.get(key, 0.0) for key in b}
        if not deltas:
            return "", 0.0
        key = max(deltas, key=lambda k: deltas[k])
        return key, 100 * deltas[key] / max(elapsed_s, 1e-9)

    pid, process_pct = top({str(k): v for k, v in before.processes.items()},
                           {str(k): v for k, v in after.processes.items()})
    thread, thread_pct = top(before.threads, after.threads)
    return {"busiest_process_pct": process_pct, "busiest_process": pid, "busiest_thread_pct": thread_pct,
            "busiest_thread": f"{thread} {after.names.get(thread, '')}".strip()}


# --- perf stat ----------------------------------------------------------------------------------
def parse_perf_csv(text: str) -> dict[str, float | None]:
    """``perf stat -x,`` output: event name -> count, ``None`` where perf printed ``<not supported>``
    or ``<not counted>``. Lines that are not counter lines (comments, blank) are skipped."""
    counts: dict[str, float | None] = {}
    for line in text.splitlines():
        fields = line.strip().split(",")
        if len(fields) < 3 or line.startswith("#"):
            continue
        value, event = fields[0], fields[2]
        if not event:
            continue
        if value.startswith("<"):
            counts[event] = None
            continue
        try:
            counts[event] = float(value)
        except ValueError:
            continue
    return counts


def perf_probe(events: tuple[str, ...]) -> dict[str, str]:
    """Per event: ``"ok"`` or why it is not counted here (no ``perf``, a paranoid setting, no PMU)."""
    binary = shutil.which("perf")
    if binary is None:
        return {event: "perf is not installed (Debian: linux-perf)" for event in events}
    try:
        done = subprocess.run([binary, "stat", "-x,", "-e", ",".join(events), "--", "true"],
                              capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return {event: f"perf did not run: {exc}" for event in events}
    counts = parse_perf_csv(done.stderr)
    paranoid = (_read("/proc/sys/kernel/perf_event_paranoid") or "?").strip()
    out: dict[str, str] = {}
    for event in events:
        if counts.get(event) is not None:
            out[event] = "ok"
        elif event in counts:
            out[event] = (f"perf counts it as <not supported> here (perf_event_paranoid={paranoid}; "
                          "a VM without a hardware PMU counts software events only)")
        else:
            out[event] = f"perf stat failed (exit {done.returncode}): {done.stderr.strip()[:200]}"
    return out


class PerfStat:
    """``perf stat`` on ``pids`` (with their threads) from ``start`` to ``stop``; ``counts`` after."""

    def __init__(self, events: tuple[str, ...]) -> None:
        self.events = events
        self.process: subprocess.Popen[str] | None = None
        self.counts: dict[str, float | None] = {}
        self.error = ""

    def start(self, pids: list[int]) -> None:
        binary = shutil.which("perf")
        if binary is None or not pids or not self.events:
            self.error = "perf is not installed" if binary is None else "nothing to count"
            return
        self.process = subprocess.Popen([binary, "stat", "-x,", "-e", ",".join(self.events),
                                         "-p", ",".join(map(str, pids))],
                                        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        time.sleep(0.05)  # perf attaches before the phase starts; a fixed, bounded head start

    def stop(self) -> None:
        if self.process is None:
            return
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
        try:
            _, stderr = self.process.communicate(timeout=PERF_STOP_S)
        except subprocess.TimeoutExpired:
            self.process.kill()
            _, stderr = self.process.communicate()
            self.error = "perf stat did not stop on SIGINT"
        self.counts = parse_perf_csv(stderr or "")
        if not self.counts and not self.error:
            self.error = f"perf stat printed no counts: {(stderr or '').strip()[:200]}"


# --- the disk -----------------------------------------------------------------------------------
def fsync_bandwidth(directory: str, block_bytes: int, seconds: float, max_bytes: int = 2048 * MIB) -> dict[str, float]:
    """``write(block)`` + ``fdatasync`` in a loop into one new file in ``directory`` for at most
    ``seconds`` and ``max_bytes``; the file is removed after. MB/s of data made durable and the
    fsyncs per second (each ``fdatasync`` covers exactly one block)."""
    path = os.path.join(directory, f"fsync_probe_{os.getpid()}")
    block = os.urandom(block_bytes)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    written = syncs = 0
    try:
        start = time.perf_counter()
        while time.perf_counter() - start < seconds and written < max_bytes:
            os.write(fd, block)
            os.fdatasync(fd)
            written += block_bytes
            syncs += 1
        elapsed = time.perf_counter() - start
    finally:
        os.close(fd)
        os.unlink(path)
    return {"block_bytes": block_bytes, "mb_s": written / MIB / elapsed, "fsyncs_s": syncs / elapsed}


def dsync_latency(directory: str, block_bytes: int = 4096, rate: float = 1000.0, seconds: float = 1.0) -> dict[str, float]:
    """The disk's own sync latency as the journal meets it: ``pwritev(block, RWF_DSYNC)`` (each
    write its own data sync) with ``O_DIRECT`` where the filesystem takes it, paced at ``rate``
    for ``seconds`` into one new file in ``directory`` (removed after), cycling over 256 blocks.
    p50/p99 in ms; ``{}`` where ``RWF_DSYNC`` is missing (not Linux >= 4.7)."""
    if not hasattr(os, "RWF_DSYNC") or not hasattr(os, "pwritev"):
        return {}
    path = os.path.join(directory, f"dsync_probe_{os.getpid()}")
    buffer = mmap.mmap(-1, block_bytes)  # page-aligned, as O_DIRECT needs
    buffer.write(os.urandom(block_bytes))
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_DIRECT", 0), 0o644)
    except OSError:  # no O_DIRECT here (tmpfs): the page cache's path
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    count = max(1, int(rate * seconds))
    latencies: list[int] = []
    try:
        start = time.perf_counter()
        for i in range(count):
            ahead = start + i / rate - time.perf_counter()
            if ahead > 0:
                time.sleep(ahead)  # the pacing is the measure's own schedule
            began = time.perf_counter_ns()
            os.pwritev(fd, [buffer], (i % 256) * block_bytes, os.RWF_DSYNC)
            latencies.append(time.perf_counter_ns() - began)
    finally:
        os.close(fd)
        os.unlink(path)
        buffer.close()
    latencies.sort()
    return {"p50_ms": latencies[len(latencies) // 2] / 1e6,
            "p99_ms": latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))] / 1e6}


def load_average() -> float:
    """The 1-minute load average (other work on the machine)."""
    return os.getloadavg()[0]
