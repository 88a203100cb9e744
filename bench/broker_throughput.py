"""Benchmark (issue 6): broker produce and consume throughput with the official client, next to the
raw append rate of the bookie underneath, measured in the same run.

Starts ``magnetar standalone --bookies 1`` as a process (free ports, data on the real disk under
``--dir``; stopped by PID at the end, also on failure). Per repeat:
* produce: the official ``pulsar-client`` sends ``--messages`` messages of ``--size`` bytes with
  batching on (its defaults: up to 1000 messages / 128 KiB / 10 ms per batch), ``send_async`` with
  a blocking pending queue of ``--max-pending`` messages (the client's default 1000, i.e. about 8
  batches in flight: produce is then bound by the fsync latency, not by the broker's CPU), until
  every receipt is back (msgs/s, MB/s of payload);
* consume: a new Exclusive subscription from the earliest message receives all of them
  (cumulative ack every 1000 messages and at the end);
* raw bookie: one ``BookieClient`` appends the same total bytes to a fresh ledger of the same
  bookie, pipelined, in entries of ``--raw-entry-bytes`` (about one producer batch), fsync before
  ack as for the broker's own writes.
Reports min/median/max over ``--repeats`` of msgs/s, MB/s, the CPU share of the standalone process,
and the ratios produce/raw-bookie and consume/raw-bookie (by MB/s). Each phase stops after
``--seconds`` even if not all messages went through (then the figures count what did).

Run: ``.venv/bin/python bench/broker_throughput.py [--messages 100000] [--size 1024] [--repeats 3]
[--seconds 60]``. Bounded: about ``repeats * 3 * seconds`` at worst, plus start-up.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "src"))

import pulsar  # noqa: E402

from magnetar.ledger.bookie_client import BookieClient  # noqa: E402
from magnetar.protocol.bookie import EncodedEntry, Status  # noqa: E402
from magnetar.runtime import SystemClock, TcpNetwork  # noqa: E402
from magnetar.runtime.processes import StandaloneProcess  # noqa: E402

KIB = 1024
MIB = 1024 * 1024
RAW_LEDGER_BASE = 10**12  # far above the ids the standalone's ledger manager allocates


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` so far (Linux /proc)."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def produce(client: Any, topic: str, count: int, size: int, seconds: float, max_pending: int) -> dict[str, float]:
    producer = client.create_producer(topic, batching_enabled=True, block_if_queue_full=True,
                                      max_pending_messages=max_pending,
                                      send_timeout_millis=int(seconds * 1000) + 30_000)
    payload = os.urandom(size)
    done = [0, 0]  # acknowledged, failed
    lock = threading.Lock()

    def on_receipt(result: Any, _msg_id: Any) -> None:
        with lock:
            done[0 if result == pulsar.Result.Ok else 1] += 1

    start = time.perf_counter()
    sent = 0
    while sent < count and time.perf_counter() - start < seconds:
        producer.send_async(payload, on_receipt)
        sent += 1
    producer.flush()
    elapsed = time.perf_counter() - start
    producer.close()
    return {"msgs_s": done[0] / elapsed, "mb_s": done[0] * size / MIB / elapsed, "count": done[0],
            "failed": done[1]}


def consume(client: Any, topic: str, subscription: str, count: int, size: int, seconds: float) -> dict[str, float]:
    consumer = client.subscribe(topic, subscription, consumer_type=pulsar.ConsumerType.Exclusive,
                                initial_position=pulsar.InitialPosition.Earliest, receiver_queue_size=1000)
    received = 0
    last = None
    start = time.perf_counter()
    while received < count and time.perf_counter() - start < seconds:
        try:
            last = consumer.receive(timeout_millis=1000)
        except pulsar.Timeout:
            continue
        received += 1
        if received % 1000 == 0:
            consumer.acknowledge_cumulative(last)
    elapsed = time.perf_counter() - start
    if last is not None:
        consumer.acknowledge_cumulative(last)
    consumer.close()
    return {"msgs_s": received / elapsed, "mb_s": received * size / MIB / elapsed, "count": received}


async def raw_bookie(host: str, port: int, ledger: int, total_bytes: int, entry_bytes: int, window: int,
                     seconds: float) -> dict[str, float]:
    client = await BookieClient.connect(TcpNetwork(), host, port, SystemClock(), request_timeout_ms=30_000)
    payload = os.urandom(entry_bytes)
    room = asyncio.Semaphore(window)
    acked = [0, 0]  # ok, failed

    def done(future: asyncio.Future[object]) -> None:
        room.release()
        ok = not future.cancelled() and future.exception() is None and getattr(
            future.result(), "status", None) is Status.OK
        acked[0 if ok else 1] += 1

    entries = max(1, total_bytes // entry_bytes)
    try:
        start = time.perf_counter()
        for entry_id in range(entries):
            if time.perf_counter() - start >= seconds:
                break
            await room.acquire()
            future = client.add_nowait(EncodedEntry.build(ledger, entry_id, entry_id - 1, payload), master_key=b"bench")
            future.add_done_callback(done)
            if entry_id % 16 == 15:
                await client.drain()
        for _ in range(window):
            await room.acquire()
        elapsed = time.perf_counter() - start
    finally:
        await client.close()
    return {"mb_s": acked[0] * entry_bytes / MIB / elapsed, "entries_s": acked[0] / elapsed, "failed": acked[1]}


def measured(pid: int, run: Any) -> dict[str, float]:
    """``run``'s figures plus the CPU share (of one core) of the standalone process and of this one."""
    start, cpu0, own0 = time.perf_counter(), cpu_seconds(pid), cpu_seconds(os.getpid())
    result: dict[str, float] = run()
    elapsed = time.perf_counter() - start
    result["cpu_standalone_pct"] = 100 * (cpu_seconds(pid) - cpu0) / elapsed
    result["cpu_bench_client_pct"] = 100 * (cpu_seconds(os.getpid()) - own0) / elapsed
    return result


def summary(label: str, values: list[float], unit: str) -> str:
    return (f"{label:<30} min {min(values):>10.2f}  median {statistics.median(values):>10.2f}  "
            f"max {max(values):>10.2f} {unit}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--size", type=int, default=KIB, help="message payload bytes")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=60.0, help="cap on each phase")
    parser.add_argument("--max-pending", type=int, default=1000,
                        help="producer max_pending_messages (the client's default 1000 allows ~8 batches in flight)")
    parser.add_argument("--raw-entry-bytes", type=int, default=128 * KIB)
    parser.add_argument("--raw-window", type=int, default=64)
    parser.add_argument("--dir", default=str(REPO / "bench" / "results"))
    args = parser.parse_args()
    if args.repeats < 1 or args.messages < 1 or args.size < 1:
        parser.error("repeats, messages and size must be >= 1")
    command = " ".join([Path(sys.executable).name, *sys.argv])
    print(f"command: {command}", flush=True)
    os.makedirs(args.dir, exist_ok=True)
    rows: list[dict[str, float]] = []
    with tempfile.TemporaryDirectory(dir=args.dir, prefix="broker_throughput.") as tmp:
        # The raw phase writes ledgers that have no metadata: the bookie's GC must not collect them.
        env = dict(os.environ, PYTHONPATH=str(REPO / "src"), MAGNETAR_BOOKIE_GC_INTERVAL_MS="0")
        env.pop("MAGNETAR_FAULTS", None)
        standalone = StandaloneProcess(os.path.join(tmp, "standalone"), env=env, stderr=subprocess.DEVNULL)
        client = pulsar.Client(standalone.broker_url, operation_timeout_seconds=60,
                               logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
        try:
            host, port = standalone.bookies[0]
            for repeat in range(args.repeats):
                topic = f"persistent://public/default/bench-{repeat}"
                produced = measured(standalone.pid, lambda t=topic: produce(
                    client, t, args.messages, args.size, args.seconds, args.max_pending))
                consumed = measured(standalone.pid, lambda t=topic, n=int(produced["count"]): consume(
                    client, t, "bench", n, args.size, args.seconds))
                total = int(produced["count"]) * args.size
                raw = measured(standalone.pid, lambda r=repeat, b=total: asyncio.run(raw_bookie(
                    host, port, RAW_LEDGER_BASE + r, b, args.raw_entry_bytes, args.raw_window, args.seconds)))
                row = {f"produce_{k}": v for k, v in produced.items()}
                row.update({f"consume_{k}": v for k, v in consumed.items()})
                row.update({f"raw_bookie_{k}": v for k, v in raw.items()})
                row["raw_bookie_msgs_equiv_s"] = raw["mb_s"] * MIB / args.size  # same bytes as 1 KiB messages
                row["produce_over_raw"] = produced["mb_s"] / raw["mb_s"]
                row["consume_over_raw"] = consumed["mb_s"] / raw["mb_s"]
                rows.append(row)
                print(f"repeat {repeat + 1}: " + ", ".join(f"{k}={v:.2f}" for k, v in row.items()), flush=True)
        finally:
            client.close()
            standalone.terminate()
    print(f"\nbroker_throughput: {args.repeats} repeats, {args.messages} x {args.size} B messages, official "
          f"client (batching on), magnetar standalone with 1 bookie (E=Qw=Qa=1, fsync before ack)")
    print(f"command: {command}")
    units = {"msgs_s": "msgs/s", "mb_s": "MB/s", "entries_s": "entries/s", "equiv_s": "msgs/s", "pct": "%",
             "over_raw": "x", "count": "msgs", "failed": ""}
    for key in rows[0]:
        unit = next((u for suffix, u in units.items() if key.endswith(suffix)), "")
        print(summary(key, [r[key] for r in rows], unit))


if __name__ == "__main__":
    main()
