"""The markdown of a ``bench/peers/run.py`` result: the side-by-side table, the clients' CPU,
the perf counters per message, the blast phase, the disk, and issue 22's targets (met/missed).
Pure functions of the result dict (tested in ``tests/tooling/test_bench_peers.py``)."""

from __future__ import annotations

from typing import Any

from targets import Target, blast_markdown, cell, targets_markdown

MAIN_COLUMNS = (("batched_msgs_s", 0), ("batched_mb_s", 1), ("batched_server_us_msg", 1),
                ("unbatched_msgs_s", 0), ("unbatched_mb_s", 1), ("unbatched_server_us_msg", 1),
                ("e2e_p50_ms", 2), ("e2e_p99_ms", 2), ("raw_disk_mb_s", 0), ("machine_cpu_pct", 0),
                ("loadavg_1m_before", 1))


def _header(result: dict[str, Any]) -> list[str]:
    blast = result.get("blast", {})
    blast_line = ("no blast phase" if not blast.get("seconds") else
                  f"blast: {blast['processes']} process(es) x {blast['seconds']:g} s, unbatched "
                  f"{blast['window']} in flight per process, batched {blast['batch']} messages per SEND")
    perf = result.get("perf", {})
    perf_line = "; ".join(f"`{event}`: {state}" for event, state in perf.items()) or "not asked"
    return [f"command: `{result['command']}`  ",
            f"{result['size']} B messages, {result['repeats']} repeats of {result['seconds']} s each (every "
            f"system started fresh per repeat, systems alternating), durable publish from {result['clients']} "
            f"client process(es) per system, e2e at {result['rate']:,.0f} msg/s (1 producer, 1 consumer); "
            f"{blast_line}; median (min..max)  ",
            f"perf stat on the server processes: {perf_line}", ""]


def main_table(systems: dict[str, dict[str, Any]]) -> list[str]:
    lines = ["| system | durable publish batched msgs/s | MB/s | server CPU us/msg | unbatched msgs/s | MB/s "
             "| server CPU us/msg | e2e p50 ms | e2e p99 ms | disk 1 MiB+fdatasync MB/s | machine CPU % "
             "| load avg (1 min) | setup |",
             "|---" * (len(MAIN_COLUMNS) + 2) + "|"]
    for name, system in systems.items():
        if "unavailable" in system and not system.get("rows"):
            lines.append(f"| {name} | not available here: {system['unavailable']} |" + " |" * len(MAIN_COLUMNS))
            continue
        s = system.get("stats", {})
        failed = f" FAILED: {system['failed']}" if "failed" in system else ""
        cells = " | ".join(cell(s.get(metric), digits) for metric, digits in MAIN_COLUMNS)
        lines.append(f"| {name} | {cells} | {system.get('note', '')}{failed} |")
    return lines


def per_message_table(systems: dict[str, dict[str, Any]]) -> list[str]:
    """The clients' CPU per message and every perf counter per message that was counted."""
    counters = sorted({key for system in systems.values() for key in system.get("stats", {})
                       if key.endswith("_msg") and not key.endswith(("_server_us_msg", "_client_us_msg"))
                       and not key.startswith("blast")})
    columns = ["batched_client_us_msg", "unbatched_client_us_msg", *counters]
    lines = ["| system | " + " | ".join(columns) + " |", "|---" * (len(columns) + 1) + "|"]
    for name, system in systems.items():
        if system.get("rows"):
            s = system["stats"]
            lines.append(f"| {name} | " + " | ".join(cell(s.get(c), 1) for c in columns) + " |")
    return lines


def disk_table(systems: dict[str, dict[str, Any]]) -> list[str]:
    keys = sorted({k for system in systems.values() for k in system.get("stats", {})
                   if k.startswith(("disk_fsync_", "disk_sync_"))}, key=lambda k: (k.startswith("disk_sync_"), len(k), k))
    if not keys:
        return []
    lines = ["| data dir of | " + " | ".join(keys) + " |", "|---" * (len(keys) + 1) + "|"]
    for name, system in systems.items():
        if system.get("rows"):
            lines.append(f"| {name} | " + " | ".join(cell(system["stats"].get(k), 2 if k.startswith("disk_sync_") else 0)
                                                   for k in keys) + " |")
    return lines


def markdown(result: dict[str, Any]) -> str:
    systems = result["systems"]
    lines = _header(result) + main_table(systems)
    lines += ["", "Per durable message: the clients' CPU (us) and the server's perf counters:", ""]
    lines += per_message_table(systems)
    blast = blast_markdown(systems)
    if blast:
        lines += ["", "`magnetar perf produce --blast` (durable ingest; MB/s of payload):", "", *blast]
    disk = disk_table(systems)
    if disk:
        lines += ["", "The disk: MB/s of `write(block)` + `fdatasync` in a loop, in each system's data directory "
                      "before its repeat (`disk_fsync_mb_s`: the best block size); `disk_sync_4k_p50_ms`/`_p99_ms`: the latency "
                      "of a 4 KiB `pwritev(RWF_DSYNC)` at 1,000/s (what an fsync'd ack waits for):", "", *disk]
    found = [Target(**{**{k: v for k, v in t.items() if k not in ("ratio", "verdict")},
                       "pairs": tuple(t.get("pairs", ()))}) for t in result.get("targets", [])]
    if found:
        lines += ["", "Issue 22's targets (ratios of medians in this run):", "", *targets_markdown(found)]
    return "\n".join(lines) + "\n"
