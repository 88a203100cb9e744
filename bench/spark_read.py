"""Benchmark (issue 9): Spark batch read of a topic through the connector, next to Spark reading the
same rows from Parquet, in the same run and the same SparkSession.

Starts ``magnetar standalone`` (one bookie; data under ``--dir``; stopped by PID at the end, also
on failure), creates the partitioned topic ``bench`` with ``--partitions`` partitions (admin REST)
and publishes ``--count`` messages of ``--size`` random bytes to it with the official client
(batching on, round-robin over partitions): by default every message its own random bytes
(``--values random``, the issue's workload: the Parquet copy is ~1 GB for 1M messages of 1 KiB).
``--values same`` repeats one random payload in every message instead — a different, easier
workload for Parquet (it dictionary-encodes the value column into a few MB), kept only to compare
with runs made that way before. Then:
* parquet copy: the connector's DataFrame (every column) written once to Parquet;
* reader alone: every Spark partition's ``read()`` run in this process, one after the other, without
  Spark (the connector's Python cost: bookie reads + Arrow batches);
* ``--warmups`` warm-up runs of each (default 1, not counted; Parquet's scan keeps getting faster
  over the first few runs of a session while the JIT compiles it, so ``--warmups 4`` compares
  against a warm Parquet), then ``--repeats`` runs, alternating which goes first:
  connector = ``spark.read.format("magnetar").option("topic", "bench")`` (entries straight from the
  bookie, Arrow record batches out, ``minPartitions`` = 2 x cores), parquet = ``spark.read.parquet``
  of the copy. Both are measured by the same action (``--action``): ``noop`` (default) writes every
  row of every column to Spark's ``noop`` sink (all columns turned into rows); ``value`` computes
  ``sum(length(value))`` (Parquet then reads only that column, the connector still builds all).
Reports rows/s of each (min/median/max over the repeats) and the ratio connector/parquet of each
repeat; target: ratio >= 0.5.

``--ceiling`` adds a third side measured the same way: ``format("magnetar_ceiling")``, a minimal
Python data source with the connector's exact schema and partition count whose ``read()`` only
yields pre-built in-memory Arrow record batches (the same rows' shape: ``--count`` rows of
``--size``-byte values, ``--ceiling-batch-rows`` rows per batch; built once per Python worker, logged,
and the run says whether any build fell inside the repeats). It is what Spark itself costs to take
rows from a Python data source: no I/O, no decoding. ``--sides ceiling,parquet`` measures it without
a standalone (the parquet copy is then written from the ceiling). ``--conf key=value`` and ``--master``
try Spark settings; ``--jfr FILE`` records the Spark JVM over the repeats (Java Flight Recorder).
CPU seconds per side and role are read from ``/proc``.

``--offload`` (issue 21): the standalone runs with small ledgers (``--ledger-entries``) and
tiered storage (deletion lag 0); after publishing, every partition is unloaded (sealing its
ledger) and offloaded through the admin API, so the whole topic lives in the lakehouse as Parquet
and not on the bookie. Sides then, alternating in each repeat: ``lakehouse`` =
``connectors.spark.lakehouse.read_topic`` (the offloaded history through Spark's own Parquet scan),
``connector`` = ``format("magnetar")`` (the Python source; its offloaded partitions yield Arrow
batches read from the Parquet files with pyarrow) and ``parquet`` (a plain Parquet copy of the same
rows); ratios to ``parquet`` per repeat and their min/median/max, and Spark JVM CPU seconds per
read beside the wall clock. ``--tail N`` then publishes N more messages (left on the bookie) and
measures the mixed read the same way, with ``read_topic``'s two halves alone (``history``: the
Parquet scan of the offloaded files; ``tail``: ``format("magnetar")`` over the live ledgers) and
each side's planning time. Prints the bytes on the bookie before the offload vs in the lakehouse.

Run: ``.venv/bin/python bench/spark_read.py [--count 1000000] [--size 1024] [--repeats 3] [--ceiling]``.
Bounded: publishing stops after ``--seconds``; each read is one Spark job over a fixed set of rows.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "src"))

import pulsar  # noqa: E402
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition  # noqa: E402

from magnetar.runtime.processes import StandaloneProcess  # noqa: E402

TOPIC = "bench"
WARMUPS_MAX = 10  # each warm-up is one bounded run per side
CEILING_FORMAT = "magnetar_ceiling"

# --- ceiling: a Python data source serving pre-built Arrow batches --------------------------------
#
# Spark imports this module by name in its Python workers (``PYTHONPATH`` gets this directory), so
# the batches cached here live as long as a worker does (``spark.python.worker.reuse``): built on a
# worker's first read, then every read only yields them. What a read then costs is Spark's own
# cost of a Python data source's rows (worker, Arrow IPC, JVM), with no I/O and no decoding.

_CEILING_CACHE: dict[tuple[Any, ...], list[list[Any]]] = {}
CEILING_CACHE_KEYS_MAX = 4  # ceiling sides of one run (each holds --count x --size bytes per worker)


def ceiling_batches(rows: int, size: int, partitions: int, batch_rows: int, values: str) -> list[list[Any]]:
    """Every partition's record batches (the connector's schema and row shape: 1 producer batch
    of 126 messages per entry, no keys, event times or properties), each batch its own buffers."""
    import numpy as np
    import pyarrow as pa

    from magnetar.connectors.spark.rows import MESSAGE_ID_TYPE, arrow_schema

    schema = arrow_schema(())
    timestamp = schema.field("publishTime").type
    rng = np.random.default_rng(7)
    payload = rng.integers(0, 256, size, np.uint8)
    out = []
    for p in range(partitions):
        first, last = rows * p // partitions, rows * (p + 1) // partitions
        topic = f"persistent://public/default/{TOPIC}-partition-{p}"
        batches = []
        for start in range(first, last, batch_rows):
            n = min(batch_rows, last - start)
            data = (rng.integers(0, 256, n * size, np.uint8) if values == "random" else np.tile(payload, n))
            offsets = np.arange(0, (n + 1) * size, size, dtype=np.int32)
            row = np.arange(start - first, start - first + n, dtype=np.int64)
            columns = [
                pa.nulls(n, pa.binary()),
                pa.Array.from_buffers(pa.binary(), n, [None, pa.py_buffer(offsets), pa.py_buffer(data)]),
                pa.repeat(pa.scalar(topic, pa.string()), n),
                pa.repeat(pa.scalar(p, pa.int32()), n),
                pa.StructArray.from_arrays([pa.array(np.full(n, 10 + p, np.int64)), pa.array(row // 126),
                                            pa.array((row % 126).astype(np.int32))], fields=list(MESSAGE_ID_TYPE)),
                pa.array(1_700_000_000_000_000 + (row // 126) * 1000, timestamp),
                pa.nulls(n, timestamp),
                pa.MapArray.from_arrays(pa.array(np.zeros(n + 1, np.int32)), pa.array([], pa.string()),
                                        pa.array([], pa.string())),
                pa.repeat(pa.scalar("standalone-0-0", pa.string()), n),
                pa.array(row),
                pa.array(np.zeros(n, np.int32)),
            ]
            batches.append(pa.RecordBatch.from_arrays(columns, schema=schema))
        out.append(batches)
    return out


class CeilingPartition(InputPartition):
    def __init__(self, index: int) -> None:
        super().__init__(index)
        self.index = index


class CeilingReader(DataSourceReader):
    def __init__(self, options: dict[str, str]) -> None:
        self.key = (int(options["rows"]), int(options["size"]), int(options["partitions"]),
                    int(options["batchrows"]), options["values"])
        self.builds = options["builds"]

    def partitions(self) -> list[InputPartition]:
        return [CeilingPartition(i) for i in range(self.key[2])]

    def read(self, partition: InputPartition) -> Any:
        assert isinstance(partition, CeilingPartition)
        batches = _CEILING_CACHE.get(self.key)
        if batches is None:  # this worker's first read: build (once), and say so in the log
            if len(_CEILING_CACHE) >= CEILING_CACHE_KEYS_MAX:
                _CEILING_CACHE.clear()
            start = time.perf_counter()
            batches = _CEILING_CACHE[self.key] = ceiling_batches(*self.key)
            with open(self.builds, "a") as log:
                log.write(f"{os.getpid()} {time.time():.3f} {time.perf_counter() - start:.2f}\n")
        return iter(batches[partition.index])


class CeilingDataSource(DataSource):
    """``format("magnetar_ceiling")``: the connector's schema, rows from ``ceiling_batches``."""

    @classmethod
    def name(cls) -> str:
        return CEILING_FORMAT

    def schema(self) -> str:
        from magnetar.connectors.spark.rows import SCHEMA_DDL

        return SCHEMA_DDL

    def reader(self, schema: Any) -> CeilingReader:
        return CeilingReader(dict(self.options))


def create_partitioned(http: str, partitions: int) -> None:
    request = urllib.request.Request(f"http://{http}/admin/v2/persistent/public/default/{TOPIC}/partitions",
                                     data=json.dumps(partitions).encode(), method="PUT",
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as reply:
        if reply.status not in (200, 204):
            raise RuntimeError(f"creating {TOPIC} with {partitions} partitions: HTTP {reply.status}")


#: Words of the ``--values json`` documents (a compressible payload, like application events).
_WORDS = ("checkout", "login", "search", "view", "cart", "payment", "refund", "signup", "logout", "share",
          "mobile", "desktop", "eu-west", "us-east", "ap-south", "premium", "basic", "trial")


def json_value(i: int, size: int, rng: Any) -> bytes:
    """A JSON event of about ``size`` bytes: ids and numbers vary per message, words repeat."""
    words = " ".join(_WORDS[rng.randrange(len(_WORDS))] for _ in range(size // 9))
    head = (f'{{"id": {i}, "user": "user-{rng.randrange(100_000)}", "amount": {rng.randrange(1_000_000) / 100}, '
            f'"event": "{_WORDS[rng.randrange(len(_WORDS))]}", "tags": "')
    return (head + words[: max(0, size - len(head) - 2)] + '"}').encode()


def publish(url: str, count: int, size: int, seconds: float, values: str) -> int:
    """``count`` messages to the partitioned topic; returns how many were receipted. ``values``:
    ``same`` (one random payload for every message), ``random`` (each its own random bytes) or
    ``json`` (a compressible JSON event per message, ``json_value``)."""
    import random

    rng = random.Random(7)
    client = pulsar.Client(url, operation_timeout_seconds=60, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    producer = client.create_producer(TOPIC, batching_enabled=True, batching_max_messages=1000,
                                      batching_max_publish_delay_ms=10, max_pending_messages=5000,
                                      block_if_queue_full=True)
    done = threading.Semaphore(0)
    failed: list[object] = []
    payload = os.urandom(size)
    pool = os.urandom(size * 4096) if values == "random" else b""
    deadline = time.monotonic() + seconds

    def receipt(result: object, _id: object) -> None:
        if result != pulsar.Result.Ok:
            failed.append(result)
        done.release()

    sent = 0
    for _ in range(count):
        if time.monotonic() > deadline:
            break
        if values == "random":  # a fresh pool every 4,096 messages: no two values alike
            if sent % 4096 == 0 and sent:
                pool = os.urandom(size * 4096)
            payload = pool[(sent % 4096) * size : (sent % 4096 + 1) * size]
        elif values == "json":
            payload = json_value(sent, size, rng)
        producer.send_async(payload, receipt)
        sent += 1
    producer.flush()
    # every send must be receipted: a receipt that never comes would otherwise leave ``sent``
    # counting a message the topic may not hold, and the read's row count check would blame the read
    missing = sum(1 for _ in range(sent) if not done.acquire(timeout=60))
    client.close()
    if failed or missing:
        raise RuntimeError(f"{len(failed)} sends failed ({failed[:3]}), {missing} never receipted")
    return sent


def _admin(http: str, method: str, path: str) -> Any:
    request = urllib.request.Request(f"http://{http}/admin/v2{path}", method=method,
                                     data=b"" if method == "PUT" else None)
    with urllib.request.urlopen(request, timeout=60) as reply:
        raw = reply.read()
    return json.loads(raw) if raw else None


def offload_all(http: str, partitions: int, deadline_s: float) -> tuple[int, int]:
    """Seal and offload every partition; (bytes of the ledgers on the bookie before, ledgers offloaded)."""
    bookie_bytes = offloaded = 0
    for p in range(partitions):
        base = f"/persistent/public/default/{TOPIC}-partition-{p}"
        bookie_bytes += sum(lg["size"] for lg in _admin(http, "GET", f"{base}/internalStats")["ledgers"])
        _admin(http, "PUT", f"{base}/unload")  # the topic loads again on a new ledger: the old one is sealed
        _admin(http, "PUT", f"{base}/offload")
    give_up = time.monotonic() + deadline_s
    for p in range(partitions):
        base = f"/persistent/public/default/{TOPIC}-partition-{p}"
        while (status := _admin(http, "GET", f"{base}/offload"))["status"] == "RUNNING":
            if time.monotonic() > give_up:
                raise RuntimeError(f"offload of partition {p} still running after {deadline_s} s")
            time.sleep(0.5)  # polling a remote broker under a deadline
        if status["status"] != "SUCCESS":
            raise RuntimeError(f"offload of partition {p}: {status}")
        ledgers = _admin(http, "GET", f"{base}/internalStats")["ledgers"]
        offloaded += sum(1 for lg in ledgers if lg.get("bookieCopyDeleted"))
    return bookie_bytes, offloaded


def layouts_of(options: dict[str, str]) -> str:
    """Each partition's ledgers as planned (id:readable, * offloaded): what a failed count is checked against."""
    from magnetar.connectors.spark import fetch

    async def plan(cx: Any) -> dict[str, str]:
        names = await fetch.resolve_partitions(cx, (f"persistent://public/default/{TOPIC}",), None)
        out = {}
        for name in names:
            layout = await fetch.load_layout(cx, name)
            out[name.rsplit("-", 1)[-1]] = " ".join(f"{s.ledger_id}:{s.readable}{'*' if s.offload_uid else ''}"
                                                  for s in layout.ledgers)
        return out

    return str(fetch.call(plan, options["serviceUrl"], options.get("metadataUrl")))


def timed(df: Any, action: str) -> tuple[float, dict[str, float]]:
    """(seconds, CPU seconds by role) of one run of ``action`` over ``df``."""
    before = cpu_seconds()
    start = time.perf_counter()
    if action == "noop":
        df.write.format("noop").mode("overwrite").save()
    else:
        df.selectExpr("sum(length(value))").collect()
    elapsed = time.perf_counter() - start
    after = cpu_seconds()
    return elapsed, {role: after[role] - before[role] for role in after}


def reader_alone(options: dict[str, str]) -> tuple[int, float, float]:
    """(rows, seconds, CPU seconds of this process) of running every planned partition's
    ``read()`` here, one after the other, without Spark."""
    from magnetar.connectors.spark.source import MagnetarDataSource

    reader = MagnetarDataSource(options).reader(None)
    start, cpu_start = time.perf_counter(), time.process_time()
    rows = sum(batch.num_rows for partition in reader.partitions() for batch in reader.read(partition))
    return rows, time.perf_counter() - start, time.process_time() - cpu_start


def entries_alone(options: dict[str, str]) -> tuple[int, float]:
    """(bytes, seconds) of fetching every planned partition's entries at once in this process
    (pipelined bookie reads, no row building, no Spark): what the bookie can serve."""
    import asyncio

    from magnetar.connectors.spark import fetch
    from magnetar.connectors.spark.source import MagnetarDataSource, SlicePartition

    pieces = [p.piece for p in MagnetarDataSource(options).reader(None).partitions() if isinstance(p, SlicePartition)]

    async def fetch_all(cx: fetch.Connections) -> int:
        async def one(piece: Any) -> int:
            return sum([len(entry.raw) async for entry in fetch.entry_stream(cx, piece)])

        return sum(await asyncio.gather(*(one(piece) for piece in pieces)))

    start = time.perf_counter()
    size = fetch.call(fetch_all, options["serviceUrl"], options["metadataUrl"])
    return size, time.perf_counter() - start


def cpu_seconds() -> dict[str, float]:
    """CPU seconds (user + system) used so far by this run's child processes, by role: the
    standalone, Spark's JVM, and the Python workers the JVM started."""
    tick = os.sysconf("SC_CLK_TCK")
    parents: dict[int, int] = {}
    cpu: dict[int, float] = {}
    commands: dict[int, bytes] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            fields = Path(f"/proc/{name}/stat").read_text().rsplit(")", 1)[1].split()
            commands[int(name)] = Path(f"/proc/{name}/cmdline").read_bytes()
        except OSError:
            continue
        parents[int(name)] = int(fields[1])
        cpu[int(name)] = (int(fields[11]) + int(fields[12])) / tick
    out = {"standalone": 0.0, "spark jvm": 0.0, "python workers": 0.0}
    for pid in cpu:
        ancestor, chain = pid, []
        while ancestor in parents and ancestor != os.getpid():
            chain.append(ancestor)
            ancestor = parents[ancestor]
        if ancestor != os.getpid() or not chain:
            continue
        command = commands.get(pid, b"")
        role = ("standalone" if b"standalone" in command else "spark jvm" if b"java" in command.split(b"\0")[0]
                else "python workers")
        out[role] += cpu[pid]
    return out


def summary(values: list[float]) -> str:
    return f"min {min(values):,.0f}  median {statistics.median(values):,.0f}  max {max(values):,.0f}"


def jvm_pid() -> int | None:
    """The Spark JVM this process started (for ``--jfr``)."""
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                stat = Path(f"/proc/{name}/stat").read_text().rsplit(")", 1)[1].split()
                command = Path(f"/proc/{name}/cmdline").read_bytes().split(b"\0")[0]
            except OSError:
                continue
            if int(stat[1]) == os.getpid() and command.endswith(b"java"):
                return int(name)
    return None


def parquet_copy(spark: Any, frame: Any, path: str, rows: int, options: dict[str, str], what: str) -> Any:
    """``frame`` written once to Parquet at ``path`` and read back; fails when it counts other than ``rows``."""
    frame.write.parquet(path)
    parquet = spark.read.parquet(path)
    counted = parquet.count()
    if counted != rows:
        per_partition = {r["partition"]: r["count"] for r in parquet.groupBy("partition").count().collect()}
        raise RuntimeError(f"{what} read {counted:,} rows, {rows:,} were expected (per partition: "
                           f"{per_partition}; layouts: {layouts_of(options)})")
    return parquet


def measure(spark: Any, frames: dict[str, Any], source: str, rows: int, options: dict[str, str], args: Any,
            parquet_dir: Path, sides: list[str], cores: int, read_partitions: int, builds: Path, label: str) -> int:
    """Warm-ups, then ``args.repeats`` alternating runs of every frame (plus ``parquet``, a plain
    Parquet copy of ``source``'s rows); prints rows/s, ratios to Parquet per repeat and CPU seconds."""
    parquet = parquet_copy(spark, frames[source], str(parquet_dir), rows, options, source)
    if "parquet" in sides:
        frames["parquet"] = parquet
    parquet_bytes = sum(f.stat().st_size for f in parquet_dir.glob("*.parquet"))
    print(f"--- {label or 'read'}: spark {args.master} on {cores} cores, settings {args.conf or 'default'}; parquet "
          f"copy (of {source}) {rows:,} rows, {parquet_bytes / 1e6:,.1f} MB in files, read as "
          f"{parquet.rdd.getNumPartitions()} partitions; {read_partitions} read partitions; action {args.action}")
    warm: dict[str, float] = {}
    for _ in range(args.warmups):
        warm = {name: timed(df, args.action)[0] for name, df in frames.items()}
    if any(name.startswith("ceiling") for name in frames):  # a second pass: every worker has built its batches
        for name in frames:
            if name.startswith("ceiling"):
                warm[name] = timed(frames[name], args.action)[0]
    builds_before = builds.read_text().splitlines() if builds.exists() else []
    print(f"warm-up (not counted; the last of {args.warmups}): " + ", ".join(f"{n} {s:.2f} s" for n, s in warm.items()))
    jvm = jvm_pid() if args.jfr else None
    if jvm is not None:
        subprocess.run(["jcmd", str(jvm), "JFR.start", "name=bench", "settings=profile"], check=True,
                       capture_output=True)
    print(f"load average before the repeats: {Path('/proc/loadavg').read_text().strip()}")
    names = list(frames)
    rates: dict[str, list[float]] = {name: [] for name in names}
    cpu: dict[str, list[dict[str, float]]] = {name: [] for name in names}
    ratios: dict[str, list[float]] = {name: [] for name in names if name != "parquet"}
    for repeat in range(args.repeats):
        order = names[repeat % len(names):] + names[: repeat % len(names)]
        seconds: dict[str, float] = {}
        for name in order:
            seconds[name], used = timed(frames[name], args.action)
            rates[name].append(rows / seconds[name])
            cpu[name].append(used)
        if "parquet" in seconds:
            for name in ratios:
                ratios[name].append(seconds["parquet"] / seconds[name])
        print(f"repeat {repeat + 1}: " + ", ".join(f"{name} {seconds[name]:.2f} s (JVM CPU {cpu[name][-1]['spark jvm']:.2f} s)"
                                                   for name in order))
    print(f"load average after the repeats: {Path('/proc/loadavg').read_text().strip()}")
    if jvm is not None:
        subprocess.run(["jcmd", str(jvm), "JFR.stop", "name=bench", f"filename={args.jfr}"], check=True,
                       capture_output=True)
        print(f"JVM flight recording of the repeats: {args.jfr}")
    for name in names:
        print(f"{name:>16} rows/s: {summary(rates[name])}")
    for name, values in ratios.items():
        if values:
            target = 0.9 if name in ("lakehouse", "connector") and label else 0.5
            jvm_ratio = [c["spark jvm"] for c in cpu["parquet"]] if "parquet" in cpu else []
            print(f"ratio {name}/parquet per repeat: {', '.join(f'{r:.2f}' for r in values)}; min {min(values):.2f}  "
                  f"median {statistics.median(values):.2f}  max {max(values):.2f}  (target >= {target:.2f})"
                  + (f"; JVM CPU parquet/{name} (medians): "
                     f"{statistics.median(jvm_ratio) / max(1e-9, statistics.median(c['spark jvm'] for c in cpu[name])):.2f}"
                     if jvm_ratio else ""))
    for name, runs in cpu.items():
        roles = ", ".join(f"{role} {statistics.median(r[role] for r in runs):.2f}" for role in runs[0])
        print(f"CPU seconds per {name} run (median): {roles}")
    if any(name.startswith("ceiling") for name in frames):
        logged = builds.read_text().splitlines() if builds.exists() else []
        print(f"ceiling batches built {len(logged)} times (pid, seconds: "
              f"{', '.join(' '.join(line.split()[::2]) for line in logged)}); during the repeats: "
              f"{len(logged) - len(builds_before)}")
    return rows


def planning_seconds(df_of: Any, times: int = 3) -> float:
    """Median seconds to plan (not run) a fresh DataFrame from ``df_of()``: Spark's analysis plus,
    for ``format("magnetar")``, the Python source's ``partitions()`` in a Python worker."""
    spent = []
    for _ in range(times):
        start = time.perf_counter()
        df_of()._jdf.queryExecution().executedPlan()
        spent.append(time.perf_counter() - start)
    return statistics.median(spent)


def mixed(spark: Any, standalone: Any, options: dict[str, str], args: Any, work: Path, history_rows: int,
          cores: int, read_partitions: int, builds: Path) -> None:
    """The mixed read: ``--tail`` more messages published after the offload (on the bookie), then
    the connector and ``read_topic`` measured against a plain Parquet copy of all the rows, with
    the two halves of ``read_topic`` alone (``history``: the Parquet scan of the offloaded files;
    ``tail``: ``format("magnetar")`` over the live ledgers only) and planning times, to see where
    the time of the union goes."""
    from magnetar.connectors.spark.lakehouse import native_plan, read_topic
    from magnetar.connectors.spark.options import ReadOptions

    tail = publish(standalone.broker_url, args.tail, args.size, args.seconds, args.values)
    rows = history_rows + tail
    print(f"published a live tail of {tail:,} messages (on the bookie): mixed read of {rows:,} rows")
    plan = native_plan(ReadOptions.parse(options, streaming=False))
    assert plan is not None
    tail_options = {**options, "startingOffsets": json.dumps(plan.tail_starts),
                    "endingOffsets": json.dumps(plan.tail_ends)}
    frames = {"lakehouse": read_topic(spark, **options),
              "connector": spark.read.format("magnetar").options(**options).load(),
              "history": spark.read.parquet(*plan.files),
              "tail": spark.read.format("magnetar").options(**tail_options).load()}
    print("planning seconds (median of 3, not running): "
          f"connector {planning_seconds(lambda: spark.read.format('magnetar').options(**options).load()):.2f}, "
          f"read_topic {planning_seconds(lambda: read_topic(spark, **options)):.2f} (its own planning included), "
          f"tail {planning_seconds(lambda: spark.read.format('magnetar').options(**tail_options).load()):.2f}, "
          f"history {planning_seconds(lambda: spark.read.parquet(*plan.files)):.2f}")
    measure(spark, frames, "connector", rows, options, args, work / "parquet-mixed", ["parquet"], cores,
            read_partitions, builds, f"mixed ({history_rows:,} offloaded + {tail:,} live)")


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--count", type=int, default=1_000_000)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--warmups", type=int, default=1, help="warm-up runs of each side, not counted (1-10)")
    parser.add_argument("--action", choices=("noop", "value"), default="noop")
    parser.add_argument("--values", choices=("random", "same", "json"), default="random",
                        help="random (default, the issue's workload): each message its own random bytes; "
                             "same: one random payload repeated in every message (Parquet then dictionary-encodes "
                             "the values into a few MB; only to compare with earlier runs)")
    parser.add_argument("--sides", default="connector,parquet",
                        help="what is timed, of connector, parquet, ceiling (without connector no standalone is "
                             "started and the parquet copy is written from the ceiling)")
    parser.add_argument("--ceiling", action="store_true", help="add the ceiling side")
    parser.add_argument("--ceiling-batch-rows", default="8192",
                        help="rows per record batch of the ceiling, comma-separated for several ceiling sides")
    parser.add_argument("--read-partitions", type=int, default=0,
                        help="Spark partitions (connector minPartitions, ceiling partitions); 0: 2 x cores")
    parser.add_argument("--master", default="local[*]")
    parser.add_argument("--conf", action="append", default=[], help="extra Spark setting key=value")
    parser.add_argument("--no-alone", action="store_true", help="skip the reader-alone and entries-alone phases")
    parser.add_argument("--jfr", default=None, help="record the Spark JVM (Flight Recorder) over the repeats")
    parser.add_argument("--seconds", type=float, default=600, help="publishing stops after this long")
    parser.add_argument("--dir", default=None, help="parent of the data directory (default: a temp dir)")
    parser.add_argument("--offload", action="store_true", help="offload the whole topic first (sides: lakehouse)")
    parser.add_argument("--ledger-entries", type=int, default=500,
                        help="with --offload: entries per ledger (one lakehouse file each; 500 entries of ~110 KB "
                             "batches: ~55 MB files. 50 gives 5.6 MB files, and Spark's per-file cost shows)")
    parser.add_argument("--tail", type=int, default=0,
                        help="with --offload: after the fully offloaded read, publish this many more (left on the "
                             "bookie) and measure the mixed read too")
    parser.add_argument("--keep", action="store_true", help="keep the data directory (and the standalone's files)")
    args = parser.parse_args()
    sides = [side.strip() for side in args.sides.split(",") if side.strip()]
    if args.ceiling and "ceiling" not in sides:
        sides.append("ceiling")
    if args.offload and "lakehouse" not in sides:
        sides.insert(0, "lakehouse")
    if not set(sides) <= {"connector", "parquet", "ceiling", "lakehouse"} or not sides:
        parser.error(f"--sides: {args.sides!r}")
    if not 1 <= args.warmups <= WARMUPS_MAX:
        parser.error(f"--warmups: 1 to {WARMUPS_MAX}")

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    # Spark's Python workers import this module by name (the ceiling's data source and its cache)
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(Path(__file__).resolve().parent),
                                                             os.environ.get("PYTHONPATH")]))
    work = Path(tempfile.mkdtemp(prefix="magnetar-spark-bench-", dir=args.dir))
    env = None
    if args.offload:
        env = dict(os.environ, MAGNETAR_MANAGED_LEDGER_MAX_ENTRIES_PER_LEDGER=str(args.ledger_entries),
                   MAGNETAR_BROKER_OFFLOAD_DELETION_LAG_MS="0", MAGNETAR_BROKER_RETENTION_TIME_S="-1",
                   MAGNETAR_BROKER_RETENTION_SIZE_BYTES="-1")
    needs_standalone = "connector" in sides or "lakehouse" in sides
    standalone = StandaloneProcess(str(work / "data"), env=env) if needs_standalone else None
    spark = None
    cores = os.cpu_count() or 2
    read_partitions = args.read_partitions or 2 * cores
    try:
        rows = args.count
        options: dict[str, str] = {}
        if standalone is not None:
            create_partitioned(standalone.fields["http"], args.partitions)
            start = time.perf_counter()
            rows = publish(standalone.broker_url, args.count, args.size, args.seconds, args.values)
            print(f"published {rows:,} messages of {args.size} B ({args.values} values) to {TOPIC} "
                  f"({args.partitions} partitions) in {time.perf_counter() - start:.1f} s")
            options = {"serviceUrl": standalone.broker_url, "metadataUrl": standalone.fields["metadata"],
                       "topic": TOPIC, "minPartitions": str(read_partitions)}
            if args.offload:
                start = time.perf_counter()
                bookie_bytes, ledgers = offload_all(standalone.fields["http"], args.partitions, args.seconds)
                lake = work / "data" / "offload"
                lake_bytes = sum(f.stat().st_size for f in lake.rglob("*.parquet"))
                print(f"offloaded {ledgers} ledgers in {time.perf_counter() - start:.1f} s; storage for the same "
                      f"{rows:,} messages: bookie {bookie_bytes / 1e6:,.1f} MB (entries), lakehouse "
                      f"{lake_bytes / 1e6:,.1f} MB (Parquet zstd, per-message columns + raw entry column)")
            if not args.no_alone:
                reader_alone(options)  # warm-up: imports, first connections
                alone_rows, alone_s, alone_cpu_s = reader_alone(options)
                print(f"reader alone (no Spark, one process, one partition after the other): {alone_rows:,} rows "
                      f"in {alone_s:.2f} s = {alone_rows / alone_s:,.0f} rows/s, {alone_cpu_s:.2f} CPU s")
            if not args.no_alone and not args.offload:  # offloaded ledgers are not on the bookie
                fetched, fetch_s = entries_alone(options)
                print(f"entries alone (all partitions at once, no rows, no Spark): {fetched / 1e6:,.0f} MB in "
                      f"{fetch_s:.2f} s = {fetched / 1e6 / fetch_s:,.0f} MB/s = {rows / fetch_s:,.0f} rows/s "
                      f"(the bookie's ceiling here)")
        from pyspark.sql import SparkSession

        builder = (SparkSession.builder.master(args.master).appName("magnetar-spark-read-bench")
                   .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
                   .config("spark.driver.memory", "4g")
                   .config("spark.sql.shuffle.partitions", str(cores)))
        for setting in args.conf:
            key, _, value = setting.partition("=")
            builder = builder.config(key, value)
        spark = builder.getOrCreate()
        spark.sparkContext.setLogLevel("ERROR")
        frames: dict[str, Any] = {}
        if "lakehouse" in sides:
            from magnetar.connectors.spark.lakehouse import read_topic

            frames["lakehouse"] = read_topic(spark, **options)
        if "connector" in sides:
            frames["connector"] = spark.read.format("magnetar").options(**options).load()
        builds = work / "ceiling-builds.log"
        if "ceiling" in sides:
            import spark_read  # this file by its module name: what the workers import

            spark.dataSource.register(spark_read.CeilingDataSource)
            for batch_rows in args.ceiling_batch_rows.split(","):
                name = "ceiling" if "," not in args.ceiling_batch_rows else f"ceiling/{batch_rows}"
                frames[name] = spark.read.format(CEILING_FORMAT).options(
                    rows=str(rows), size=str(args.size), partitions=str(read_partitions), batchrows=batch_rows,
                    values=args.values, builds=str(builds)).load()
        source = next(name for name in ("connector", "lakehouse", *frames) if name in frames)
        measure(spark, frames, source, rows, options, args, work / "parquet", sides, cores,
                          read_partitions, builds, "fully offloaded" if args.offload else "")
        if args.offload and args.tail:
            mixed(spark, standalone, options, args, work, rows, cores, read_partitions, builds)
    finally:
        if spark is not None:
            spark.stop()
        if standalone is not None:
            standalone.terminate()
        if args.keep:
            print(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
