"""What one wake-up and one synced write cost on this machine (issue 22, "steady modest load").

At 2,000 msg/s from the official client (one message per TCP write, every 0.5 ms) every
message wakes the broker, and every journal group is one synced write. This bench measures what
those two cost here, with no Magnetar code at all, so that the standalone's CPU per message at a
modest rate (``bench/steady_load.py``) can be set against a floor measured in the same run.

Two processes on loopback TCP: a *sender* writes ``--size`` bytes at ``--rate`` per second
(paced with ``time.sleep`` to each message's scheduled time, so each message is its own write, as
the official client sends unbatched messages), and a *receiver* sleeps in ``epoll`` between
messages. The receiver's thread CPU per wake-up (``time.thread_time``; one wake-up = one poll that
returned, one ``recv`` and that phase's work) is reported per phase, with the messages each wake-up
took (``*_msgs_per_wake``: 1 while the receiver keeps up with the sender):

* ``wake``: the receiver reads each message and does nothing else: the CPU of one sleep in
  ``epoll``, one wake-up and one ``recv`` per message;
* ``work_paced``: the same plus a fixed piece of Python work per message (``--work`` dict
  inserts, a stand-in for a layer's bookkeeping); ``work_warm``: that work timed back to back on a
  warm cache. ``work_paced - wake`` against ``work_warm`` says how much dearer the same code
  is when it runs right after a wake-up (cold caches on a shared machine);
* ``sync``: the receiver also writes 4 KiB with ``pwritev(RWF_DSYNC)`` into a preallocated file
  per wake-up: the CPU a synced write costs the thread that waits for it (``sync_us`` beside
  ``wake``), and its latency p50/p99.

The result is one JSON line per repeat plus min/median/max, and ``floor_pct_at_rate``: the CPU
share of one core that ``--rate`` messages/s cost at the least if each costs one wake-up
(``wake``) and each journal group of ``--group`` messages one synced write
(``sync - wake``), before any of the broker's own work.

Run: ``.venv/bin/python bench/wake_cost.py --rate 2000 --seconds 3 --repeats 3``.
Bounded: ``repeats * 3 phases * seconds`` plus start-up; every process is stopped by PID.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import select
import socket
import statistics
import tempfile
import time
from collections.abc import Callable
from typing import Any

PHASES = ("wake", "work_paced", "sync")
_SYNC_BLOCK = 4096


def python_work(inserts: int) -> int:
    """A fixed piece of interpreted work: ``inserts`` dict inserts of small tuples."""
    table: dict[int, tuple[int, int]] = {}
    for i in range(inserts):
        table[i] = (i, i + 1)
    return len(table)


def warm_work_us(inserts: int, rounds: int = 2000) -> float:
    """``python_work`` back to back on a warm cache, us per call (thread CPU)."""
    for _ in range(100):
        python_work(inserts)
    began = time.thread_time()
    for _ in range(rounds):
        python_work(inserts)
    return 1e6 * (time.thread_time() - began) / rounds


def floor_pct(rate: float, wake_us: float, sync_us: float, group: float) -> float:
    """CPU share (% of a core) of ``rate`` msg/s at one wake-up per message and one synced write
    (its CPU beyond a wake-up) per ``group`` messages."""
    per_message = wake_us + max(0.0, sync_us - wake_us) / max(group, 1.0)
    return rate * per_message / 1e4


def _sender(port: int, rate: float, count: int, size: int) -> None:
    payload = b"x" * size
    with socket.create_connection(("127.0.0.1", port)) as conn:
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        start = time.perf_counter()
        for sent in range(count):
            ahead = start + sent / rate - time.perf_counter()
            if ahead > 0:
                time.sleep(ahead)  # pacing: each message its own write, as a paced client sends
            conn.sendall(payload)


def _sync_file(directory: str) -> tuple[int, memoryview, Callable[[], None]]:
    path = os.path.join(directory, "wake_cost.journal")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
    os.posix_fallocate(fd, 0, 64 << 20)
    os.fsync(fd)
    block = memoryview(bytearray(b"j" * _SYNC_BLOCK))

    def close() -> None:
        os.close(fd)
        os.unlink(path)

    return fd, block, close


def receive_phase(phase: str, rate: float, seconds: float, size: int, inserts: int, directory: str) -> dict[str, float]:
    """One phase: a sender process at ``rate``, this thread receiving; CPU per message."""
    count = max(1, int(rate * seconds))
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    sender = multiprocessing.get_context("spawn").Process(target=_sender, args=(port, rate, count, size), daemon=True)
    sender.start()
    fd, block, close = _sync_file(directory) if phase == "sync" else (-1, memoryview(b""), lambda: None)
    latencies: list[float] = []
    try:
        listener.settimeout(30)
        conn, _ = listener.accept()
        conn.setblocking(False)
        poller = select.epoll()
        poller.register(conn.fileno(), select.EPOLLIN)
        received, offset, wakes, began = 0, 0, 0, time.thread_time()
        deadline = time.monotonic() + seconds + 30
        while received < count * size and time.monotonic() < deadline:
            if not poller.poll(1.0):
                continue
            data = conn.recv(1 << 16)
            if not data:
                break
            received += len(data)
            wakes += 1
            if phase == "work_paced":
                python_work(inserts)
            elif phase == "sync":
                written = time.perf_counter()
                os.pwritev(fd, [block], offset % (64 << 20), os.RWF_DSYNC)
                latencies.append(1e3 * (time.perf_counter() - written))
                offset += _SYNC_BLOCK
        cpu = time.thread_time() - began
        poller.close()
        conn.close()
    finally:
        close()
        listener.close()
        sender.join(timeout=seconds + 30)
        if sender.is_alive():
            sender.kill()
            sender.join()
    messages = received // size
    result = {"us_msg": 1e6 * cpu / max(1, messages), "us_wake": 1e6 * cpu / max(1, wakes),
              "msgs_per_wake": messages / max(1, wakes)}
    if latencies:
        latencies.sort()
        result["sync_p50_ms"] = latencies[len(latencies) // 2]
        result["sync_p99_ms"] = latencies[min(len(latencies) - 1, int(0.99 * len(latencies)))]
    return result


def one_repeat(args: argparse.Namespace) -> dict[str, float]:
    row: dict[str, float] = {"load_avg": os.getloadavg()[0]}
    for phase in PHASES:
        result = receive_phase(phase, args.rate, args.seconds, args.size, args.work, args.dir)
        row[f"{phase}_us"] = result["us_wake"]
        row[f"{phase}_msgs_per_wake"] = result["msgs_per_wake"]
        for key in ("sync_p50_ms", "sync_p99_ms"):
            if key in result:
                row[key] = result[key]
    row["work_warm_us"] = warm_work_us(args.work)
    row["work_cold_extra_us"] = row["work_paced_us"] - row["wake_us"] - row["work_warm_us"]
    row["floor_pct_at_rate"] = floor_pct(args.rate, row["wake_us"], row["sync_us"], args.group)
    return row


def summarize(rows: list[dict[str, float]]) -> dict[str, list[float]]:
    """min / median / max per key over the repeats."""
    keys = rows[0].keys() if rows else ()
    return {key: [min(r[key] for r in rows), statistics.median(r[key] for r in rows), max(r[key] for r in rows)]
            for key in keys}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rate", type=float, default=2000.0)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--work", type=int, default=300, help="dict inserts per message in the work phases")
    parser.add_argument("--group", type=float, default=3.0, help="messages per journal group, for the floor")
    parser.add_argument("--dir", default=tempfile.gettempdir(), help="where the synced file goes (the data disk)")
    args = parser.parse_args(argv)
    rows = []
    for repeat in range(1, args.repeats + 1):
        row = one_repeat(args)
        rows.append(row)
        print(json.dumps({"repeat": repeat, **{k: round(v, 3) for k, v in row.items()}}), flush=True)
    summary = summarize(rows)
    print(" ".join(f"{key} {'/'.join(f'{v:.1f}' for v in values)}" for key, values in summary.items()))
    return {"rows": rows, "summary": summary}


if __name__ == "__main__":
    main()
