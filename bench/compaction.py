"""Benchmark (issue 18): topic compaction time, and a ``read_compacted`` reader against a full read.

Starts ``magnetar standalone --bookies 1`` as a process (free ports, data under a temporary
directory; stopped by PID at the end, also on failure). Then:
* produce: the official ``pulsar-client`` sends ``--messages`` messages of ``--size`` bytes over
  ``--keys`` keys (key ``i % keys``; batching on, the client's defaults), until every receipt is back;
* compact: ``PUT /admin/v2/persistent/public/default/<topic>/compaction``, then ``GET`` the status
  until it is no longer RUNNING (the time between is the compaction time; it must end SUCCESS);
* full read: a reader from the earliest message receives all ``--messages`` messages;
* compacted read: a reader with ``is_read_compacted=True`` from the earliest message receives the
  ``--keys`` survivors (checked: each key once, with its last value).
Reports the figures and the speedup (full read time / compacted read time), plus the CPU seconds
the standalone process used during the compaction. Each phase stops after ``--seconds``.

Run: ``.venv/bin/python bench/compaction.py [--messages 1000000] [--keys 10000] [--size 100]
[--seconds 900]``. Bounded: about 4 * seconds at worst, plus start-up.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "src"))

import pulsar  # noqa: E402

from magnetar.runtime.processes import StandaloneProcess  # noqa: E402

STATUS_POLL_INTERVAL_S = 0.1
RECEIVE_TIMEOUT_MS = 5000


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def http(method: str, url: str) -> Any:
    request = urllib.request.Request(url, method=method, data=b"" if method == "PUT" else None)
    with urllib.request.urlopen(request, timeout=30) as reply:
        raw = reply.read()
    return json.loads(raw) if raw else None


def value_of(index: int, size: int) -> bytes:
    return f"{index:012d}".encode().ljust(size, b"v")


def produce(client: Any, topic: str, count: int, keys: int, size: int, seconds: float) -> float:
    producer = client.create_producer(topic, batching_enabled=True, block_if_queue_full=True)
    started = time.monotonic()
    for i in range(count):
        producer.send_async(value_of(i, size), None, partition_key=f"key-{i % keys}")
        if i % 10_000 == 0 and time.monotonic() - started > seconds:
            raise SystemExit(f"produce did not finish in {seconds} s ({i} sent)")
    producer.flush()
    elapsed = time.monotonic() - started
    producer.close()
    return elapsed


def read(client: Any, topic: str, expected: int, seconds: float, *, compacted: bool) -> tuple[float, dict[str, bytes]]:
    reader = client.create_reader(topic, pulsar.MessageId.earliest, is_read_compacted=compacted,
                                  receiver_queue_size=1000)
    last: dict[str, bytes] = {}
    received = 0
    started = time.monotonic()
    while received < expected and time.monotonic() - started < seconds:
        message = reader.read_next(RECEIVE_TIMEOUT_MS)
        received += 1
        if compacted:
            key = message.partition_key()
            if key in last:
                raise SystemExit(f"compacted read delivered key {key} twice")
            last[key] = message.data()
    elapsed = time.monotonic() - started
    reader.close()
    if received < expected:
        raise SystemExit(f"read {received} of {expected} messages in {seconds} s")
    return elapsed, last


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--keys", type=int, default=10_000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--seconds", type=float, default=900.0)
    args = parser.parse_args()
    topic = f"persistent://public/default/compaction-bench-{os.getpid()}"
    with tempfile.TemporaryDirectory(prefix="magnetar-compaction-bench-") as tmp:
        standalone = StandaloneProcess(os.path.join(tmp, "standalone"), stderr=subprocess.DEVNULL)
        try:
            client = pulsar.Client(standalone.broker_url, operation_timeout_seconds=60,
                                   logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
            try:
                produce_s = produce(client, topic, args.messages, args.keys, args.size, args.seconds)
                path = f"{standalone.http_url}/admin/v2/persistent/public/default/{topic.rsplit('/', 1)[1]}/compaction"
                cpu0 = cpu_seconds(standalone.pid)
                started = time.monotonic()
                http("PUT", path)
                status = http("GET", path)
                while status["status"] == "RUNNING" and time.monotonic() - started < args.seconds:
                    time.sleep(STATUS_POLL_INTERVAL_S)  # polling a remote process: real time is the point
                    status = http("GET", path)
                compact_s = time.monotonic() - started
                compact_cpu_s = cpu_seconds(standalone.pid) - cpu0
                if status["status"] != "SUCCESS":
                    raise SystemExit(f"compaction ended {status}")
                full_s, _ = read(client, topic, args.messages, args.seconds, compacted=False)
                compacted_s, last = read(client, topic, args.keys, args.seconds, compacted=True)
                first_of_last_round = args.messages - args.keys
                for i in range(first_of_last_round, args.messages):
                    if last.get(f"key-{i % args.keys}") != value_of(i, args.size):
                        raise SystemExit(f"key-{i % args.keys} does not hold its last value")
            finally:
                client.close()
        finally:
            standalone.terminate()
    print(f"compaction benchmark: {args.messages:,} messages of {args.size} B over {args.keys:,} keys, "
          f"official client (batching on), magnetar standalone with 1 bookie")
    print(f"  produce            {produce_s:8.2f} s  ({args.messages / produce_s:,.0f} msgs/s)")
    print(f"  compaction         {compact_s:8.2f} s  (standalone CPU {compact_cpu_s:.2f} s; "
          f"{args.messages / compact_s:,.0f} msgs/s)")
    print(f"  full read          {full_s:8.2f} s  ({args.messages:,} messages)")
    print(f"  compacted read     {compacted_s:8.2f} s  ({args.keys:,} messages)")
    print(f"  speedup            {full_s / compacted_s:8.1f} x")


if __name__ == "__main__":
    main()
