"""Benchmark (issue 22): up to 100,000 topics on one ``magnetar standalone --bookies 1``.

``topic_scale.py`` drives one official-client producer per topic; 100,000 of those in one Python
process measure the client (its threads and queues), not the broker. This one uses the raw-protocol
generator ``magnetar.cli.blast_topics`` (many producers per connection, pre-encoded SEND frames):
``--connections`` connections, each with a producer on topic 0 and topic ``i`` on connection
``i % connections``, so the 1-topic load and the N-topic load go through the same connections with
the same window. The same generator serves every topic count.

Two standalones, one after the other:
0. the baseline: a standalone with one topic, publish throughput (below) on it alone;
1. the scale standalone: for each count in ``--topics`` (ascending, topics added cumulatively,
   no load in between so the RSS is the topics' own), the missing topics are created in chunks of
   ``--chunk`` (one PRODUCER per topic and one message each, so the topic, its managed ledger and
   its first ledger exist); timed (topics/s); RSS from ``/proc`` (the standalone and all its child
   processes); memory per idle topic = RSS delta over the first count's state / topics added;
   idle CPU over ``--idle-seconds`` (every producer connected, nothing sent), % of one core;
2. then, for each count reached, publish throughput spread round-robin over its topics.
Publish throughput: unbatched (one message per entry) and batched (``--batch`` messages per
entry), ``--repeats`` windows of ``--seconds``, at most ``--window`` frames awaiting their receipt
over all connections; server CPU per message from ``/proc``. Ratios are against the baseline's
median (a standalone holding one topic). Bounded: creation stops (the run reports what it reached)
when the standalone's RSS passes ``--rss-max-mb``, the machine's MemAvailable falls below
``--mem-available-min-mb`` or creation took ``--create-seconds-max``. Writes
``bench/results/topic_scale_100k.json``.

Run: ``.venv/bin/python bench/topic_scale_100k.py [--topics 1,10000,100000] [--seconds 5] [--repeats 3]``;
``--src /other/checkout/src`` runs the standalones from another tree (A/B, the generator unchanged).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "src"))

from magnetar.cli.blast import SendTemplate  # noqa: E402
from magnetar.cli.blast_topics import BLAST_PRODUCER_REQUESTS_WINDOW_COUNT, TopicsBlaster  # noqa: E402
from magnetar.runtime.processes import StandaloneProcess  # noqa: E402

_TICK_S = 1 / os.sysconf("SC_CLK_TCK")
_PAGE_BYTES = os.sysconf("SC_PAGE_SIZE")
MIB = 1024 * 1024


def tree_pids(root: int) -> list[int]:
    """``root`` and its descendants (from /proc/*/stat parent ids)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            parent = int(stat[stat.rindex(")") + 2 :].split()[1])
            children.setdefault(parent, []).append(int(entry))
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo.extend(children.get(pid, []))
    return out


def tree_rss_bytes(root: int) -> int:
    total = 0
    for pid in tree_pids(root):
        try:
            total += int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * _PAGE_BYTES
        except OSError:
            pass
    return total


def tree_cpu_s(root: int) -> float:
    total = 0.0
    for pid in tree_pids(root):
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        total += (int(fields[11]) + int(fields[12])) * _TICK_S  # utime, stime
    return total


def mem_available_bytes() -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no MemAvailable in /proc/meminfo")


class Run:
    def __init__(self, args: argparse.Namespace, standalone: StandaloneProcess) -> None:
        self.args, self.pid = args, standalone.process.pid
        host, _, port = standalone.broker_url[len("pulsar://"):].rstrip("/").rpartition(":")
        self.blaster = TopicsBlaster(host, int(port), f"persistent://public/default/scale-{os.getpid()}",
                                     connections=args.connections, producer_name=f"scale-{os.getpid()}",
                                     requests_window=args.requests_window)
        payload = os.urandom(args.size)
        self.payload = payload
        self.templates: dict[str, list[SendTemplate]] = {}
        self.stopped_early = ""
        self.started = time.perf_counter()

    def over_memory(self) -> str:
        rss = tree_rss_bytes(self.pid)
        if rss > self.args.rss_max_mb * MIB:
            return f"standalone RSS {rss / MIB:.0f} MiB > --rss-max-mb {self.args.rss_max_mb}"
        if mem_available_bytes() < self.args.mem_available_min_mb * MIB:
            return f"MemAvailable < --mem-available-min-mb {self.args.mem_available_min_mb}"
        return ""

    def over_time(self) -> str:
        if time.perf_counter() - self.started > self.args.create_seconds_max:
            return f"topic creation past --create-seconds-max {self.args.create_seconds_max:.0f}"
        return ""

    async def create(self, count: int) -> dict[str, float]:
        """Topics up to ``count`` (chunks, memory-guarded); their RSS and creation rate."""
        before, have = tree_rss_bytes(self.pid), self.blaster.topics_count
        started = time.perf_counter()
        while self.blaster.topics_count < count:
            if (reason := self.over_memory()) or (reason := self.over_time()):
                self.stopped_early = reason
                break
            first = self.blaster.topics_count
            target = min(count, first + self.args.chunk)
            await self.blaster.add_topics(target)
            await self.blaster.send_load(self.templates["unbatched"], target, window=self.args.window,
                                         seconds=None, frames_per_producer=1, first=first)
            print(f"  topics {target:>7,}: {time.perf_counter() - started:7.1f} s, "
                  f"RSS {tree_rss_bytes(self.pid) / MIB:8.1f} MiB", flush=True)
        elapsed = time.perf_counter() - started
        after, added = tree_rss_bytes(self.pid), self.blaster.topics_count - have
        return {"topics": self.blaster.topics_count, "added": added, "create_s": elapsed,
                "topics_per_s": added / elapsed if elapsed > 0 else 0.0, "rss_before_mib": before / MIB,
                "rss_after_mib": after / MIB, "bytes_per_added_topic": (after - before) / added if added else 0.0}

    async def idle_cpu(self) -> float:
        cpu0, wall0 = tree_cpu_s(self.pid), time.perf_counter()
        await asyncio.sleep(self.args.idle_seconds)  # the benchmark's measuring interval, not a wait
        return 100 * (tree_cpu_s(self.pid) - cpu0) / (time.perf_counter() - wall0)

    async def load(self, mode: str, topics: int) -> list[dict[str, float]]:
        template, rows = self.templates[mode], []
        for _ in range(self.args.repeats):
            acked0, failed0 = self.blaster.totals()
            cpu0 = tree_cpu_s(self.pid)
            elapsed = await self.blaster.send_load(template, topics, window=self.args.window, seconds=self.args.seconds)
            acked, failed = self.blaster.totals()
            messages = (acked - acked0) * template[0].batch_count
            rows.append({"msgs_s": messages / elapsed, "server_cpu_us_per_msg": 1e6 * (tree_cpu_s(self.pid) - cpu0) / max(1, messages),
                         "failed": failed - failed0})
        return rows


async def _connected(args: argparse.Namespace, standalone: StandaloneProcess) -> Run:
    run = Run(args, standalone)
    await run.blaster.connect()
    run.templates = {"unbatched": run.blaster.templates(run.payload),
                     "batched": run.blaster.templates(run.payload, batch_count=args.batch)}
    return run


async def measure_baseline(args: argparse.Namespace, standalone: StandaloneProcess) -> dict[str, Any]:
    """A standalone with one topic: the reference rates."""
    run = await _connected(args, standalone)
    try:
        await run.create(1)
        return {mode: await run.load(mode, 1) for mode in args.modes}
    finally:
        run.blaster.close()


async def measure_scale(args: argparse.Namespace, standalone: StandaloneProcess, counts: list[int]) -> dict[str, Any]:
    """Topics created up to each count with no load in between (RSS, creation rate, idle CPU),
    then the load spread over the first N topics for each count reached."""
    run = await _connected(args, standalone)
    results: dict[str, Any] = {"rss_start_mib": tree_rss_bytes(run.pid) / MIB, "counts": {}}
    try:
        for count in counts:
            print(f"topics {count:,}: creating", flush=True)
            entry: dict[str, Any] = {"create": await run.create(count)}
            entry["idle_cpu_percent"] = await run.idle_cpu()
            results["counts"][run.blaster.topics_count] = entry
            print(json.dumps(entry), flush=True)
            if run.stopped_early:
                results["stopped_early"] = run.stopped_early
                print(f"stopped early: {run.stopped_early}", flush=True)
                break
        for count, entry in results["counts"].items():
            entry["load"] = {mode: await run.load(mode, count) for mode in args.modes}
            print(f"topics {count:,}: {json.dumps(entry['load'])}", flush=True)
        results["rss_after_load_mib"] = tree_rss_bytes(run.pid) / MIB
    finally:
        run.blaster.close()
    return results


def _rates_line(rows: list[dict[str, float]], base: float) -> tuple[str, dict[str, float]]:
    rates = [r["msgs_s"] for r in rows]
    ratio = {"min": min(rates) / base, "median": statistics.median(rates) / base, "max": max(rates) / base}
    cpu = statistics.median(r["server_cpu_us_per_msg"] for r in rows)
    return (f"min {min(rates):>9,.0f}  median {statistics.median(rates):>9,.0f}  max {max(rates):>9,.0f} msg/s; "
            f"ratio {ratio['min']:.2f}/{ratio['median']:.2f}/{ratio['max']:.2f}; server CPU {cpu:.1f} us/msg"), ratio


def summarize(results: dict[str, Any], modes: list[str]) -> None:
    baseline, counts = results["baseline"], results["scale"]["counts"]
    base = {m: statistics.median(r["msgs_s"] for r in baseline[m]) for m in modes}
    first_count = int(next(iter(counts)))
    first_rss = next(iter(counts.values()))["create"]["rss_after_mib"]
    print("\ntopic_scale_100k: raw-protocol producers, magnetar standalone 1 bookie; ratios vs a standalone with 1 topic")
    for mode in modes:
        line, _ = _rates_line(baseline[mode], base[mode])
        print(f"1 topic alone  {mode:<9} {line}")
    for count, entry in counts.items():
        create = entry["create"]
        per_topic = ((create["rss_after_mib"] - first_rss) * MIB / (int(count) - first_count)
                     if int(count) > first_count else 0.0)
        entry["bytes_per_idle_topic"] = per_topic
        print(f"topics {int(count):>7,}: created at {create['topics_per_s']:,.0f}/s, RSS {create['rss_after_mib']:,.0f} MiB "
              f"({per_topic / 1024:.1f} KiB per idle topic over the {first_count}-topic state), "
              f"idle CPU {entry['idle_cpu_percent']:.1f}% of a core")
        entry["ratios"] = {}
        for mode in modes:
            line, entry["ratios"][mode] = _rates_line(entry.get("load", {}).get(mode) or [{"msgs_s": 0.0,
                                                      "server_cpu_us_per_msg": 0.0}], base[mode])
            print(f"  {mode:<9} {line}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--topics", default="1,10000,100000")
    parser.add_argument("--modes", default="unbatched,batched")
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--window", type=int, default=1000)
    parser.add_argument("--connections", type=int, default=64)
    parser.add_argument("--chunk", type=int, default=2500)
    parser.add_argument("--requests-window", type=int, default=BLAST_PRODUCER_REQUESTS_WINDOW_COUNT,
                        help="PRODUCER requests in flight per connection while topics are created")
    parser.add_argument("--create-seconds-max", type=float, default=3000.0)
    parser.add_argument("--idle-seconds", type=float, default=10.0)
    parser.add_argument("--rss-max-mb", type=int, default=8000)
    parser.add_argument("--mem-available-min-mb", type=int, default=6000)
    parser.add_argument("--dir", default=str(REPO / "bench" / "results"))
    parser.add_argument("--standalone-log", default="", help="file for the standalone's stderr (default: none)")
    parser.add_argument("--src", default=str(REPO / "src"),
                        help="the source tree the standalones run (its own build/mypyc for compiled mode): "
                             "an A/B against another checkout; the load generator stays this tree's")
    args = parser.parse_args()
    counts = sorted(int(n) for n in args.topics.split(","))
    args.modes = [m for m in args.modes.split(",") if m]
    if args.repeats < 1 or not counts or counts[0] < 1 or set(args.modes) - {"batched", "unbatched"}:
        parser.error("repeats >= 1, topics a list of counts >= 1, modes from batched,unbatched")
    command = " ".join([Path(sys.executable).name, *sys.argv])
    print(f"command: {command}", flush=True)
    os.makedirs(args.dir, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=args.dir, prefix="topic_scale_100k.") as tmp:
        env = dict(os.environ, PYTHONPATH=str(Path(args.src).resolve()))
        env.pop("MAGNETAR_FAULTS", None)
        results: dict[str, Any] = {}
        for phase in ("baseline", "scale"):
            log = open(f"{args.standalone_log}.{phase}", "w") if args.standalone_log else None  # noqa: SIM115
            standalone = StandaloneProcess(os.path.join(tmp, phase), env=env,
                                           stderr=subprocess.DEVNULL if log is None else log.fileno())
            try:
                results[phase] = asyncio.run(measure_baseline(args, standalone) if phase == "baseline"
                                             else measure_scale(args, standalone, counts))
            finally:
                standalone.terminate()
                if log is not None:
                    log.close()
    summarize(results, args.modes)
    results["command"] = command
    Path(args.dir, "topic_scale_100k.json").write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
