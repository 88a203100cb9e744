"""Side-by-side benchmark (issues 10 and 22): Magnetar standalone (1 and 3 bookies, pure and
compiled) against RabbitMQ (quorum queue, publisher confirms), NATS JetStream (file storage) and
Redis Streams (appendfsync always), one machine, one run, with the disk's fsync'd bandwidth
measured in the same run on the same filesystem, and issue 22's targets evaluated on it.

Per repeat, every system (and every Magnetar variant) is started fresh, measured and stopped in
turn, so the systems alternate and a change of the machine's load touches all of them. 1 KiB
messages:
* durable publish, batched and unbatched (msgs/s, MB/s): Magnetar through ``magnetar perf
  produce`` (``run_perf``: official client, its default batching, or ``--no-batching``; 1000
  pending), the peers through ``workload.durable_publish`` (1000 in flight);
* end-to-end latency p50/p99 at a fixed ``--rate`` (2,000 msg/s), unbatched, consumer in the
  same process;
* the server's CPU per durable message, batched and unbatched: CPU seconds (``/proc``, user +
  system, of the server processes started here and their descendants: the standalone and its
  bookie processes, redis-server, nats-server, RabbitMQ's Erlang VM and epmd) over the measured
  phase, divided by the messages acknowledged in it; the clients' CPU per message beside it;
* ``perf stat`` counters of the server processes per message (``--perf-events``, e.g.
  ``instructions,context-switches``; none by default) where perf counts them here
  (``measures.perf_probe`` says which and why not: a VM without a hardware PMU has no
  ``instructions``). Counters are off by default because they change what they watch: in a VM a
  hardware counter attached to the server is saved and restored at each of its context switches
  (MSR accesses the hypervisor traps), which inflated the server's CPU per message, the more the
  more it switches threads (session 21: 3 bookies / 1 bookie 1.809 with ``instructions`` attached,
  1.519 without, the same tree). So the CPU figures of a run are taken without counters, and
  instructions per message come from a separate run with ``--perf-events``;
* Magnetar only, the blast phase (``--blast-seconds``, 0 = off): ``magnetar perf produce --blast``
  from ``--blast-processes`` processes, unbatched (1 message per SEND) and batched
  (``--blast-batch`` messages per SEND): the broker's durable ingest (msg/s, MB/s of payload), the
  server's CPU per message, the busiest server thread and the busiest generator process in % of a
  core, and what bound the phase (``targets.bound_by``);
* the disk: ``write(block)`` + ``fdatasync`` of each ``--disk-blocks`` size in a loop of
  ``--disk-seconds`` in total into the system's data directory (``measures.fsync_bandwidth``);
  ``disk_fsync_mb_s`` is the best of the sizes (the target's denominator: the most the disk makes
  durable per second), ``raw_disk_mb_s`` the 1 MiB figure.

Magnetar variants (``--variants pure,compiled``): ``pure`` runs the standalone with
``MAGNETAR_PURE_PYTHON=1``, ``compiled`` without it on this tree's ``build/mypyc`` (``make
compile`` or ``scripts/build_compiled.py``); the mode the standalone's interpreter will load is
checked first (``magnetar._compiled.MODE``) and a variant that would not run as named is
reported unavailable. A variant ``LABEL=SRC_DIR`` runs another tree's compiled build (the tree
before a change, for an A/B in one run). ``--clients N`` drives each durable publish from N
client processes. ``--phases`` picks the measured phases (``publish``: batched and unbatched;
``e2e``), e.g. ``--phases e2e --blast-seconds 0`` for the latency alone. Beside the fsync'd
bandwidth, each repeat measures the disk's 4 KiB ``pwritev(RWF_DSYNC)`` latency at 1,000/s
(``--sync-seconds``; ``disk_sync_4k_p50_ms``/``_p99_ms``): the sync an fsync'd ack waits for.
The load average is recorded per repeat. Writes ``bench/results/peers.json`` (rows, min/median/
max, targets) and ``bench/results/peers.md`` (the tables).

Run: ``.venv/bin/python bench/peers/run.py [--seconds 5] [--repeats 3] [--systems ...]``;
``run.py --render bench/results/peers.json`` recomputes the statistics, targets and tables of a
results file (after a change of the tables, or with rows of several runs merged).
Bounded: about ``repeats * (peers * (3 * seconds + 5) + magnetars * (3 * seconds + 2 *
blast_seconds + 15))`` seconds, plus RabbitMQ's start-up.
"""

from __future__ import annotations

import argparse
import json
import os
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

from bookie_append import machine_busy_seconds  # noqa: E402
from measures import (  # noqa: E402
    PerfStat,
    busiest,
    descendants,
    dsync_latency,
    fsync_bandwidth,
    load_average,
    perf_probe,
    sample_cpu,
)
from servers import STARTERS, PeerUnavailable  # noqa: E402
from tables import markdown  # noqa: E402
from targets import bound_by, per_message, stats, system_key, targets  # noqa: E402
from workload import DRIVERS, durable_publish, paced_e2e, publish_clients, run_uvloop  # noqa: E402

from magnetar.cli.blast import run_blast  # noqa: E402
from magnetar.cli.perf import PerfSettings, run_perf  # noqa: E402
from magnetar.runtime.processes import StandaloneProcess  # noqa: E402

SYSTEMS = ("rabbitmq", "nats", "redis", "magnetar-1-bookie", "magnetar-3-bookies")
VARIANTS = ("pure", "compiled")
PHASES = ("publish", "e2e")
MIB = 1024 * 1024


class Phase:
    """``on_phase`` for a measured phase: the server's CPU (per process and thread) and its perf
    counters between "start" and "end". The server is ``roots`` and their descendants at start."""

    def __init__(self, roots: list[int], events: tuple[str, ...]) -> None:
        self.roots = roots
        self.perf = PerfStat(events)
        self.pids: list[int] = []

    def __call__(self, phase: str) -> None:
        if phase == "start":
            self.pids = descendants(self.roots)
            self.perf.start(self.pids)
            self.before, self.t0 = sample_cpu(self.pids), time.perf_counter()
        else:
            self.after, self.elapsed = sample_cpu(self.pids), time.perf_counter() - self.t0
            self.perf.stop()

    def cpu_s(self) -> float:
        return sum(self.after.processes.values()) - sum(self.before.processes.get(p, 0.0)
                                                         for p in self.after.processes)

    def figures(self, label: str, messages: int, elapsed_s: float | None = None) -> dict[str, Any]:
        """``<label>_server_us_msg`` and one ``<label>_<event>_msg`` per counted perf event."""
        row: dict[str, Any] = {f"{label}_server_us_msg": 1e6 * self.cpu_s() / max(1, messages)}
        for event, count in self.perf.counts.items():
            value = per_message(count, messages)
            if value is not None:
                row[f"{label}_{event.replace('-', '_')}_msg"] = value
        top = busiest(self.before, self.after, elapsed_s or self.elapsed)
        row[f"{label}_server_thread_pct"] = float(top["busiest_thread_pct"])
        row[f"{label}_server_thread"] = top["busiest_thread"]
        return row


def peer_repeat(name: str, port: int, pids: list[int], args: argparse.Namespace, tag: str) -> dict[str, Any]:
    row: dict[str, Any] = {}
    bound = 3 * args.seconds + 60  # connect, measure, drain, close
    for label, group in (("batched", args.group), ("unbatched", 1)) if "publish" in args.phase_list else ():
        server = Phase(pids, args.events)
        stream = f"b{tag}{label}"
        if args.clients > 1:
            figures = publish_clients(name, port, stream, args.size, args.seconds, args.window, group, args.clients,
                                      bound, on_phase=server)
        else:
            async def publish(stream: str = stream, group: int = group, server: Phase = server) -> dict[str, float]:
                driver = DRIVERS[name](port, stream)
                await driver.open()
                try:
                    return await durable_publish(driver, args.size, args.seconds, args.window, group, server)
                finally:
                    await driver.close()

            figures = run_uvloop(publish, bound)
        row[f"{label}_msgs_s"] = figures["msgs_s"]
        row[f"{label}_mb_s"] = figures["mb_s"]
        row.update(server.figures(label, int(figures["acked"])))
        row[f"{label}_client_us_msg"] = 1e6 * figures["client_cpu_s"] / max(1, figures["acked"])
    if "e2e" not in args.phase_list:
        return row

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


def blast_phases(url: str, pids: list[int], args: argparse.Namespace, tag: str) -> dict[str, Any]:
    """``magnetar perf produce --blast``, unbatched then batched, with what bound each phase."""
    row: dict[str, Any] = {}
    for label, batch in (("blast_unbatched", 1), ("blast_batched", args.blast_batch)):
        server = Phase(pids, args.events)
        busy0 = machine_busy_seconds()
        server("start")
        result = run_blast(url, f"{label}-{tag}", size=args.size, seconds=args.blast_seconds,
                           window=args.blast_batch_window if batch > 1 else args.blast_window,
                           processes=args.blast_processes, batch=batch)
        server("end")
        if result["failed"]:
            raise RuntimeError(f"{label}: {result['failed']} sends failed")
        machine_pct = 100 * (machine_busy_seconds() - busy0) / server.elapsed
        row[f"{label}_msgs_s"] = result["msgs_s"]
        row[f"{label}_mb_s"] = result["mb_s"]
        row.update(server.figures(label, int(result["acked"]), result["elapsed_s"]))
        row[f"{label}_client_us_msg"] = result["client_cpu_us_per_msg"]
        row[f"{label}_generator_pct"] = result["client_cpu_pct_max"]
        row[f"{label}_p99_ms"] = result["p99_ms"]
        row[f"{label}_bound_by"] = bound_by(result["client_cpu_pct_max"], row[f"{label}_server_thread_pct"],
                                            machine_pct, os.cpu_count() or 1)
    row["blast_generator_pct"] = row["blast_batched_generator_pct"]
    row["blast_server_thread_pct"] = row["blast_batched_server_thread_pct"]
    row["blast_bound_by"] = row["blast_batched_bound_by"]
    return row


def magnetar_repeat(url: str, pids: list[int], args: argparse.Namespace, tag: str) -> dict[str, Any]:
    row: dict[str, Any] = {}
    for label, batching in (("batched", True), ("unbatched", False)) if "publish" in args.phase_list else ():
        server = Phase(pids, args.events)
        result = run_perf(PerfSettings(service_url=url, topic=f"{label}-{tag}", size=args.size,
                                       batching=batching, duration_s=args.seconds, processes=args.clients),
                          on_phase=server)
        row[f"{label}_msgs_s"] = result["publish"]["msgs_s"]
        row[f"{label}_mb_s"] = result["publish"]["mb_s"]
        row.update(server.figures(label, result["publish"]["count"]))
        row[f"{label}_client_us_msg"] = result["client_cpu_us_per_msg"]
    if "e2e" in args.phase_list:
        result = run_perf(PerfSettings(mode="e2e", service_url=url, topic=f"e2e-{tag}", size=args.size,
                                       batching=False, rate=args.rate, duration_s=args.seconds))
        row.update(e2e_p50_ms=result["receive"]["latency_ms"]["p50"],
                   e2e_p99_ms=result["receive"]["latency_ms"]["p99"],
                   e2e_received=result["receive"]["count"], e2e_sent=result["publish"]["sent"])
    if args.blast_seconds > 0:
        row.update(blast_phases(url, pids, args, tag))
    return row


def tree_variant(variant: str) -> tuple[str, str]:
    """A Magnetar variant's label and source tree: ``pure`` and ``compiled`` run this tree;
    ``LABEL=SRC_DIR`` runs the compiled build of another tree (its own ``build/mypyc``), e.g. the
    tree before a change for an A/B in one run (``git archive`` and ``scripts/build_compiled.py``)."""
    label, sep, tree = variant.partition("=")
    return label, (tree if sep else str(REPO / "src"))


def compiled_mode(env: dict[str, str]) -> tuple[str, str]:
    """The mode (``pure``/``compiled``) and reason a Magnetar interpreter with ``env`` will run."""
    done = subprocess.run([sys.executable, "-c", "import magnetar._compiled as c; print(c.MODE); print(c.REASON)"],
                          env=env, capture_output=True, text=True, timeout=120, check=True)
    mode, _, reason = done.stdout.partition("\n")
    return mode.strip(), reason.strip()


def disk_figures(directory: str, args: argparse.Namespace) -> dict[str, float]:
    """The fsync'd bandwidth per block size in ``directory``; the best is the target's denominator."""
    row: dict[str, float] = {}
    for block in args.disk_blocks:
        figures = fsync_bandwidth(directory, block, args.disk_seconds / len(args.disk_blocks))
        row[f"disk_fsync_{block // 1024}k_mb_s"] = figures["mb_s"]
    row["disk_fsync_mb_s"] = max(row.values())
    row["raw_disk_mb_s"] = row.get("disk_fsync_1024k_mb_s", row["disk_fsync_mb_s"])
    if args.sync_seconds > 0:  # the sync's own latency bounds the e2e latency an fsync'd ack can reach
        sync = dsync_latency(directory, 4096, 1000.0, args.sync_seconds)
        if sync:
            row["disk_sync_4k_p50_ms"], row["disk_sync_4k_p99_ms"] = sync["p50_ms"], sync["p99_ms"]
    return row


def start_system(system: str, variant: str | None, data: Path, args: argparse.Namespace) -> dict[str, Any]:
    """Start one system: its note, its stop and its one-repeat runner (or why it is unavailable)."""
    if system.startswith("magnetar"):
        assert variant is not None
        label, tree = tree_variant(variant)
        env = dict(os.environ, PYTHONPATH=tree)
        env.pop("MAGNETAR_FAULTS", None)
        env.pop("MAGNETAR_PURE_PYTHON", None)
        wanted = "pure" if label == "pure" else "compiled"
        if wanted == "pure":
            env["MAGNETAR_PURE_PYTHON"] = "1"
        mode, reason = compiled_mode(env)
        if mode != wanted:
            raise PeerUnavailable(f"the {variant} variant would run {mode} here: {reason}")
        reason = reason if tree == str(REPO / "src") else f"{reason}; sources {tree}"
        bookies = 3 if "3" in system else 1
        standalone = StandaloneProcess(str(data / "standalone"), bookies_count=bookies, env=env,
                                       stderr=subprocess.DEVNULL)
        return {"note": f"Magnetar standalone ({mode}: {reason}), {bookies} bookie(s), quorum "
                        f"{standalone.fields['quorum']}, official client, fsync before ack",
                "stop": standalone.terminate, "disk_dir": str(data / "standalone"),
                "run": lambda tag: magnetar_repeat(standalone.broker_url, [standalone.pid], args, tag)}
    peer = STARTERS[system](data)
    pids = [child.pid for child in peer.children]
    return {"note": peer.note, "stop": peer.stop, "disk_dir": str(data),
            "run": lambda tag: peer_repeat(system, peer.port, pids, args, tag)}


def run_one(system: str, variant: str | None, root: Path, repeat: int, args: argparse.Namespace,
            out: dict[str, Any]) -> None:
    """One repeat of one system: start it, measure the disk in its data dir, run, stop."""
    key = system_key(system, variant)
    data = root / f"{key.replace('/', '-')}-{repeat}"
    data.mkdir()
    try:
        started = start_system(system, variant, data, args)
    except (PeerUnavailable, RuntimeError, subprocess.SubprocessError) as exc:
        out["unavailable"] = str(exc).splitlines()[0] if str(exc) else "did not start"
        return
    out["note"] = started["note"]
    try:
        row: dict[str, Any] = {"repeat": repeat, "loadavg_1m_before": load_average()}
        row.update(disk_figures(started["disk_dir"], args))
        busy0, start = machine_busy_seconds(), time.perf_counter()
        row.update(started["run"](f"{repeat}x{int(time.time())}"))
        # CPU of the whole machine (all cores: 200% on 2): shows when other work competed.
        row["machine_cpu_pct"] = 100 * (machine_busy_seconds() - busy0) / (time.perf_counter() - start)
        row["loadavg_1m_after"] = load_average()
        if row.get("blast_batched_mb_s") is not None:
            row["blast_batched_over_disk"] = row["blast_batched_mb_s"] / row["disk_fsync_mb_s"]
        out["rows"].append(row)
        print(f"{key} repeat {repeat + 1}: " + ", ".join(
            f"{k}={v:.2f}" if isinstance(v, float) else f"{k}={v}" for k, v in row.items()), flush=True)
    except Exception as exc:  # one system failing must not lose the others' figures
        traceback.print_exc()
        out["failed"] = f"{type(exc).__name__}: {exc}"
    finally:
        started["stop"]()


def plan(systems: list[str], variants: list[str]) -> list[tuple[str, str | None]]:
    return [(system, variant) for system in systems
            for variant in (variants if system.startswith("magnetar") else [None])]


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=5.0, help="each measurement")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--rate", type=float, default=2000.0, help="e2e paced rate, msgs/s")
    parser.add_argument("--window", type=int, default=1000, help="peers: messages in flight")
    parser.add_argument("--group", type=int, default=100, help="peers: messages per batch (batched)")
    parser.add_argument("--clients", type=int, default=1,
                        help="client processes driving each durable publish, for every system")
    parser.add_argument("--systems", default=",".join(SYSTEMS))
    parser.add_argument("--variants", default=",".join(VARIANTS),
                        help="Magnetar: pure, compiled, and LABEL=SRC_DIR (another tree's compiled build)")
    parser.add_argument("--phases", default=",".join(PHASES),
                        help="measured phases: publish (batched and unbatched), e2e; the blast: --blast-seconds")
    parser.add_argument("--sync-seconds", type=float, default=1.0,
                        help="the disk's 4 KiB pwritev(RWF_DSYNC) latency at 1,000/s per repeat (0 = off)")
    parser.add_argument("--blast-seconds", type=float, default=5.0, help="each blast phase (0 = no blast)")
    parser.add_argument("--blast-processes", type=int, default=2)
    parser.add_argument("--blast-window", type=int, default=1000, help="messages in flight per blast process")
    parser.add_argument("--blast-batch", type=int, default=100, help="messages per SEND in the batched blast")
    parser.add_argument("--blast-batch-window", type=int, default=50,
                        help="batched SENDs in flight per blast process")
    parser.add_argument("--disk-blocks", default="65536,1048576,4194304",
                        help="bytes per write+fdatasync (4 MiB: the journal's largest group)")
    parser.add_argument("--disk-seconds", type=float, default=3.0, help="all disk block sizes together")
    parser.add_argument("--perf-events", default="",
                        help="perf stat events per message of the server, e.g. instructions,context-switches "
                             "(default none: attached counters inflate the server's CPU in a VM; see above)")
    parser.add_argument("--dir", default=str(REPO / "bench" / "results"))
    parser.add_argument("--out", default=str(REPO / "bench" / "results" / "peers"))
    args = parser.parse_args()
    args.system_list = [s for s in args.systems.split(",") if s]
    args.variant_list = [v for v in args.variants.split(",") if v]
    args.phase_list = [p for p in args.phases.split(",") if p]
    args.disk_blocks = [int(b) for b in args.disk_blocks.split(",") if b]
    unknown = ((set(args.system_list) - set(SYSTEMS)) | (set(args.phase_list) - set(PHASES))
               | {v for v in args.variant_list if v not in VARIANTS and "=" not in v})
    if (unknown or not args.phase_list or args.sync_seconds < 0 or args.repeats < 1 or args.seconds <= 0
            or not 1 <= args.clients <= 16 or not args.variant_list or not args.disk_blocks or args.blast_seconds < 0 or not 1 <= args.blast_processes <= 16):
        parser.error(f"systems from {SYSTEMS}, variants from {VARIANTS} or LABEL=SRC_DIR, phases from {PHASES}; "
                     f"repeats >= 1; seconds > 0; clients "
                     f"and blast processes 1..16; disk blocks given (unknown: {sorted(unknown)})")
    return args


def main() -> None:
    if sys.argv[1:2] == ["--render"]:  # re-read a results JSON: statistics, targets and tables again
        write(json.loads(Path(sys.argv[2]).read_text()), sys.argv[2].removesuffix(".json"))
        return
    args = parse_args()
    command = " ".join([Path(sys.executable).name, *sys.argv])
    print(f"command: {command}", flush=True)
    probe = perf_probe(tuple(e for e in args.perf_events.split(",") if e))
    args.events = tuple(event for event, state in probe.items() if state == "ok")
    print(f"perf stat: {probe}", flush=True)
    os.makedirs(args.dir, exist_ok=True)
    result: dict[str, Any] = {"command": command, "size": args.size, "repeats": args.repeats,
                              "seconds": args.seconds, "rate": args.rate, "clients": args.clients,
                              "blast": {"seconds": args.blast_seconds, "processes": args.blast_processes,
                                        "window": args.blast_window, "batch": args.blast_batch},
                              "disk_blocks": args.disk_blocks, "perf": probe, "cpus": os.cpu_count(), "systems": {}}
    systems: dict[str, dict[str, Any]] = result["systems"]
    with tempfile.TemporaryDirectory(dir=args.dir, prefix="peers.") as tmp:
        for repeat in range(args.repeats):
            for system, variant in plan(args.system_list, args.variant_list):
                out = systems.setdefault(system_key(system, variant), {"system": system, "variant": variant,
                                                                       "rows": []})
                if "unavailable" not in out:
                    run_one(system, variant, Path(tmp), repeat, args, out)
    write(result, args.out)


def write(result: dict[str, Any], out_path: str) -> None:
    """The statistics and targets of ``result`` (from its rows), its JSON and its markdown."""
    systems: dict[str, dict[str, Any]] = result["systems"]
    for out in systems.values():
        keys = sorted({k for row in out["rows"] for k, v in row.items()
                       if isinstance(v, (int, float)) and k != "repeat"})
        out["stats"] = {key: stats(out["rows"], key) for key in keys}
    variants = sorted({str(s["variant"]) for s in systems.values() if s.get("variant") and s["rows"]},
                      key=lambda v: VARIANTS.index(v) if v in VARIANTS else len(VARIANTS))
    result["targets"] = [t.as_dict() for t in targets(systems, variants)]
    Path(out_path).parent.mkdir(parents=True, exist_ok=True)
    Path(out_path + ".json").write_text(json.dumps(result, indent=2))
    table = markdown(result)
    Path(out_path + ".md").write_text(table)
    print("\n" + table)


if __name__ == "__main__":
    main()
