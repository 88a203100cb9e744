"""Side-by-side benchmark (issue 10): Magnetar standalone (1 and 3 bookies) against RabbitMQ
(quorum queue, publisher confirms), NATS JetStream (file storage) and Redis Streams
(appendfsync always), one machine, one run, with the disk's fsync'd sequential bandwidth
measured in the same run (``raw_disk`` of ``bench/bookie_append.py``, before each system).

Per system and repeat, 1 KiB messages:
* durable publish, batched and unbatched (msgs/s, MB/s): Magnetar through ``magnetar perf
  produce`` (``run_perf``: official client, its default batching, or ``--no-batching``; 1000
  pending), the peers through ``workload.durable_publish`` (1000 in flight);
* end-to-end latency p50/p99 at a fixed ``--rate`` (2,000 msg/s), unbatched, consumer in the
  same process;
* the server's CPU per durable message, batched and unbatched: CPU seconds (``/proc/<pid>/stat``,
  user + system, of the server processes started here and their descendants: the standalone,
  redis-server, nats-server, RabbitMQ's Erlang VM and epmd) over the measured phase, divided by
  the messages acknowledged in it: what the server spends per message whatever the client
  reaches; and the clients' CPU per message (their processes' CPU over the same phase).

``--clients N`` (default 1) drives each durable publish from N client processes at once, the same
for every system: Magnetar ``magnetar perf --processes N`` (one producer each on the topic), a
peer N processes each running its 1-client workload on the same queue/stream. The e2e latency
stays one producer and one consumer.
Install the peers first (``bench/peers/install.sh``, which ``make bench`` runs). A peer that is
not installed or does not start is reported as such in the table; the others still run. Every
server is started here with a private data dir under ``--dir`` and stopped by PID.
Writes ``bench/results/peers.json`` and ``bench/results/peers.md``.

Run: ``.venv/bin/python bench/peers/run.py [--seconds 5] [--repeats 3] [--systems ...]``.
Bounded: about ``systems * repeats * 3 * seconds`` plus start-up (RabbitMQ ~5 s).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(REPO / "src"))
sys.path.insert(0, str(REPO / "bench"))
sys.path.insert(0, str(HERE))

from bookie_append import machine_busy_seconds, raw_disk  # noqa: E402
from servers import STARTERS, PeerUnavailable  # noqa: E402
from workload import DRIVERS, durable_publish, paced_e2e, publish_clients, run_uvloop  # noqa: E402

from magnetar.cli.perf import PerfSettings, run_perf  # noqa: E402
from magnetar.runtime.processes import StandaloneProcess  # noqa: E402

SYSTEMS = ("rabbitmq", "nats", "redis", "magnetar-1-bookie", "magnetar-3-bookies")
METRICS = ("batched_msgs_s", "batched_mb_s", "batched_server_us_msg", "batched_client_us_msg",
           "unbatched_msgs_s", "unbatched_mb_s", "unbatched_server_us_msg", "unbatched_client_us_msg",
           "e2e_p50_ms", "e2e_p99_ms", "raw_disk_mb_s", "machine_cpu_pct")
CLOCK_TICKS_S = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pids: list[int]) -> float:
    """User + system CPU seconds of ``pids`` and all their live descendants (with what their
    reaped children used), from ``/proc/<pid>/stat``."""
    parents: dict[int, int] = {}
    times: dict[int, float] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
        except OSError:  # exited meanwhile
            continue
        parents[int(entry)] = int(fields[1])
        times[int(entry)] = sum(int(fields[i]) for i in (11, 12, 13, 14)) / CLOCK_TICKS_S
    tree, frontier = set(), [pid for pid in pids if pid in times]
    while frontier:
        pid = frontier.pop()
        tree.add(pid)
        frontier.extend(child for child, parent in parents.items() if parent == pid and child not in tree)
    return sum(times[pid] for pid in tree)


class ServerCpu:
    """``on_phase`` for a measured phase: the server's CPU seconds between "start" and "end"."""

    def __init__(self, pids: list[int]) -> None:
        self.pids = pids
        self.marks: dict[str, float] = {}

    def __call__(self, phase: str) -> None:
        self.marks[phase] = cpu_seconds(self.pids)

    def us_per(self, messages: int) -> float:
        return 1e6 * (self.marks["end"] - self.marks["start"]) / max(1, messages)


def peer_repeat(name: str, port: int, pids: list[int], args: argparse.Namespace, tag: str) -> dict[str, float]:
    row: dict[str, float] = {}
    bound = 3 * args.seconds + 60  # connect, measure, drain, close
    for label, group in (("batched", args.group), ("unbatched", 1)):
        server = ServerCpu(pids)
        stream = f"b{tag}{label}"
        if args.clients > 1:
            figures = publish_clients(name, port, stream, args.size, args.seconds, args.window, group, args.clients,
                                      bound, on_phase=server)
        else:
            async def publish(stream: str = stream, group: int = group,
                              server: ServerCpu = server) -> dict[str, float]:
                driver = DRIVERS[name](port, stream)
                await driver.open()
                try:
                    return await durable_publish(driver, args.size, args.seconds, args.window, group, server)
                finally:
                    await driver.close()

            figures = run_uvloop(publish, bound)
        row[f"{label}_msgs_s"] = figures["msgs_s"]
        row[f"{label}_mb_s"] = figures["mb_s"]
        row[f"{label}_server_us_msg"] = server.us_per(int(figures["acked"]))
        row[f"{label}_client_us_msg"] = 1e6 * figures["client_cpu_s"] / max(1, figures["acked"])

    async def e2e() -> dict[str, float]:
        driver = DRIVERS[name](port, f"e{tag}")
        await driver.open()
        try:
            return await paced_e2e(driver, args.size, args.seconds, args.rate)
        finally:
            await driver.close()

    figures = run_uvloop(e2e, bound)
    row.update(e2e_p50_ms=figures["p50_ms"], e2e_p99_ms=figures["p99_ms"], e2e_received=figures["received"],
               e2e_sent=figures["sent"])
    return row


def magnetar_repeat(url: str, pids: list[int], args: argparse.Namespace, tag: str) -> dict[str, float]:
    row: dict[str, float] = {}
    for label, batching in (("batched", True), ("unbatched", False)):
        server = ServerCpu(pids)
        result = run_perf(PerfSettings(service_url=url, topic=f"{label}-{tag}", size=args.size,
                                       batching=batching, duration_s=args.seconds, processes=args.clients),
                          on_phase=server)
        row[f"{label}_msgs_s"] = result["publish"]["msgs_s"]
        row[f"{label}_mb_s"] = result["publish"]["mb_s"]
        row[f"{label}_server_us_msg"] = server.us_per(result["publish"]["count"])
        row[f"{label}_client_us_msg"] = result["client_cpu_us_per_msg"]
    result = run_perf(PerfSettings(mode="e2e", service_url=url, topic=f"e2e-{tag}", size=args.size,
                                   batching=False, rate=args.rate, duration_s=args.seconds))
    row.update(e2e_p50_ms=result["receive"]["latency_ms"]["p50"], e2e_p99_ms=result["receive"]["latency_ms"]["p99"],
               e2e_received=result["receive"]["count"], e2e_sent=result["publish"]["sent"])
    return row


def run_system(system: str, root: Path, args: argparse.Namespace) -> dict[str, Any]:
    """Start ``system``, run the repeats, stop it; the raw disk is measured before each repeat."""
    data = root / system
    data.mkdir()
    rows: list[dict[str, float]] = []
    out: dict[str, Any] = {"system": system, "rows": rows}
    try:
        if system.startswith("magnetar"):
            env = dict(os.environ, PYTHONPATH=str(REPO / "src"))
            env.pop("MAGNETAR_FAULTS", None)
            bookies = 3 if "3" in system else 1
            standalone = StandaloneProcess(str(data / "standalone"), bookies_count=bookies, env=env,
                                           stderr=subprocess.DEVNULL)
            out["note"] = (f"Magnetar standalone, {bookies} bookie(s), quorum {standalone.fields['quorum']}, "
                           "official client, fsync before ack")
            stop = standalone.terminate
            run = lambda tag: magnetar_repeat(standalone.broker_url, [standalone.pid], args, tag)  # noqa: E731
        else:
            peer = STARTERS[system](data)
            out["note"] = peer.note
            stop = peer.stop
            pids = [child.pid for child in peer.children]
            run = lambda tag: peer_repeat(system, peer.port, pids, args, tag)  # noqa: E731
    except (PeerUnavailable, RuntimeError) as exc:  # not installed, or did not start
        out["unavailable"] = str(exc).splitlines()[0] if str(exc) else "did not start"
        return out
    try:
        for repeat in range(args.repeats):
            raw = raw_disk(str(data), args.raw_seconds)["raw_1mib_mb_s"]
            busy0, start = machine_busy_seconds(), time.perf_counter()
            row = run(f"{repeat}x{int(time.time())}")
            row["raw_disk_mb_s"] = raw
            # CPU of the whole machine (both cores = 200%): shows when other work competed.
            row["machine_cpu_pct"] = 100 * (machine_busy_seconds() - busy0) / (time.perf_counter() - start)
            rows.append(row)
            print(f"{system} repeat {repeat + 1}: " + ", ".join(f"{k}={v:.2f}" for k, v in row.items()), flush=True)
    except Exception as exc:  # one system failing must not lose the others' figures
        traceback.print_exc()
        out["failed"] = f"{type(exc).__name__}: {exc}"
    finally:
        stop()
    return out


def stats(rows: list[dict[str, float]], key: str) -> dict[str, float] | None:
    values = [row[key] for row in rows if key in row]
    if not values:
        return None
    return {"min": min(values), "median": statistics.median(values), "max": max(values)}


def cell(summary: dict[str, float] | None, digits: int = 0) -> str:
    if summary is None:
        return "-"
    fmt = f"{{:,.{digits}f}}"
    return f"{fmt.format(summary['median'])} ({fmt.format(summary['min'])}..{fmt.format(summary['max'])})"


def ratios(systems: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The issue's targets as ratios of medians in this run."""
    def median(system: str, key: str) -> float | None:
        found = systems.get(system, {}).get("stats", {}).get(key)
        return None if found is None else float(found["median"])

    out: dict[str, Any] = {}
    mag_batched = median("magnetar-1-bookie", "batched_msgs_s")
    peers = {name: max(filter(None, (median(name, "batched_msgs_s"), median(name, "unbatched_msgs_s"))),
                       default=None) for name in ("rabbitmq", "nats", "redis")}
    peers = {k: v for k, v in peers.items() if v}
    if mag_batched and peers:
        fastest = max(peers, key=lambda k: peers[k])
        out["batched_vs_fastest_peer"] = {"peer": fastest, "ratio": mag_batched / peers[fastest], "target": 3.0}
    mag_mb, raw = median("magnetar-1-bookie", "batched_mb_s"), median("magnetar-1-bookie", "raw_disk_mb_s")
    if mag_mb and raw:
        out["batched_vs_disk"] = {"ratio": mag_mb / raw, "target": 0.4}
    mag_unbatched, nats = median("magnetar-1-bookie", "unbatched_msgs_s"), median("nats", "unbatched_msgs_s")
    if mag_unbatched and nats:
        out["unbatched_vs_nats"] = {"ratio": mag_unbatched / nats, "target": 1.0}
    p99 = median("magnetar-1-bookie", "e2e_p99_ms")
    if p99 is not None:
        out["e2e_p99_ms"] = {"value": p99, "target_max": 2.0}
    return out


def markdown(result: dict[str, Any]) -> str:
    lines = [f"command: `{result['command']}`  ",
             f"{result['size']} B messages, {result['repeats']} repeats of {result['seconds']} s each, "
             f"durable publish from {result['clients']} client process(es) per system, "
             f"e2e at {result['rate']:,.0f} msg/s (1 producer, 1 consumer); median (min..max)", "",
             "| system | durable publish batched msgs/s | MB/s | server CPU us/msg | unbatched msgs/s | MB/s "
             "| server CPU us/msg | e2e p50 ms | e2e p99 ms | raw disk 1 MiB+fsync MB/s | machine CPU % (of 200) "
             "| setup |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    clients = ["", "client CPU us per durable msg (the load generators' processes, same phases):", "",
               "| system | batched | unbatched |", "|---|---|---|"]
    for name, system in result["systems"].items():
        if "unavailable" in system:
            lines.append(f"| {name} | not available here: {system['unavailable']} | | | | | | | | | | |")
            continue
        s = system["stats"]
        failed = f" FAILED: {system['failed']}" if "failed" in system else ""
        lines.append(f"| {name} | {cell(s.get('batched_msgs_s'))} | {cell(s.get('batched_mb_s'), 1)} | "
                     f"{cell(s.get('batched_server_us_msg'), 1)} | "
                     f"{cell(s.get('unbatched_msgs_s'))} | {cell(s.get('unbatched_mb_s'), 1)} | "
                     f"{cell(s.get('unbatched_server_us_msg'), 1)} | "
                     f"{cell(s.get('e2e_p50_ms'), 2)} | {cell(s.get('e2e_p99_ms'), 2)} | "
                     f"{cell(s.get('raw_disk_mb_s'))} | {cell(s.get('machine_cpu_pct'))} | "
                     f"{system.get('note', '')}{failed} |")
        clients.append(f"| {name} | {cell(s.get('batched_client_us_msg'), 1)} | "
                       f"{cell(s.get('unbatched_client_us_msg'), 1)} |")
    lines.extend(clients)
    lines.append("")
    for key, value in result["ratios"].items():
        lines.append(f"* {key}: " + ", ".join(f"{k}={v:.3g}" if isinstance(v, float) else f"{k}={v}"
                                              for k, v in value.items()))
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=5.0, help="each measurement")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--rate", type=float, default=2000.0, help="e2e paced rate, msgs/s")
    parser.add_argument("--window", type=int, default=1000, help="peers: messages in flight")
    parser.add_argument("--group", type=int, default=100, help="peers: messages per batch (batched)")
    parser.add_argument("--raw-seconds", type=float, default=2.0)
    parser.add_argument("--clients", type=int, default=1,
                        help="client processes driving each durable publish, for every system")
    parser.add_argument("--systems", default=",".join(SYSTEMS))
    parser.add_argument("--dir", default=str(REPO / "bench" / "results"))
    parser.add_argument("--out", default=str(REPO / "bench" / "results" / "peers"))
    args = parser.parse_args()
    systems = [s for s in args.systems.split(",") if s]
    unknown = set(systems) - set(SYSTEMS)
    if unknown or args.repeats < 1 or args.seconds <= 0 or not 1 <= args.clients <= 16:
        parser.error(f"systems from {SYSTEMS}; repeats >= 1; seconds > 0; clients 1..16 (unknown: {sorted(unknown)})")
    command = " ".join([Path(sys.executable).name, *sys.argv])
    print(f"command: {command}", flush=True)
    os.makedirs(args.dir, exist_ok=True)
    result: dict[str, Any] = {"command": command, "size": args.size, "repeats": args.repeats,
                              "seconds": args.seconds, "rate": args.rate, "clients": args.clients, "systems": {}}
    with tempfile.TemporaryDirectory(dir=args.dir, prefix="peers.") as tmp:
        for system in systems:
            out = run_system(system, Path(tmp), args)
            out["stats"] = {key: stats(out["rows"], key) for key in METRICS}
            result["systems"][system] = out
    result["ratios"] = ratios(result["systems"])
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out + ".json").write_text(json.dumps(result, indent=2))
    table = markdown(result)
    Path(args.out + ".md").write_text(table)
    print("\n" + table)


if __name__ == "__main__":
    main()
