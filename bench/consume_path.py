"""The consume path alone: a backlog read and acknowledged by one official-client consumer (issue 22).

A standalone (1 bookie) gets a backlog of ``--messages`` unbatched 1 KiB messages on a fresh
topic whose subscription already exists; then one official-client consumer (``--sub-type``,
default Exclusive, the client's default; receiver queue 1000) subscribes, receives and
acknowledges every message and closes (closing flushes the client's grouped acks, so when it
returns the broker has handled every ACK; the run then checks through the admin API that the
subscription's backlog is 0). Only that phase is measured: dispatch (reading the log, MESSAGE
frames), FLOW permits and ACKs. Two measures:

* Process mode (the default): per repeat and variant (variants alternate inside a repeat) a fresh
  ``magnetar standalone`` process; printed per run: the standalone's CPU per consumed message
  (user + system of the process and its children, ``/proc``), the consume rate, the machine's
  busy CPU. ``--variant label[=SRC_DIR][:KEY=VALUE,...]`` as in ``bench/steady_load.py`` (a ``git
  archive`` of the tree before a change as ``SRC_DIR``). Min / median / max per variant and the
  ratio per pair against the first variant. ``--py-spy FILE``: the first run's consume phase
  recorded by ``py-spy record --gil --rate 200 -f raw`` (FILE gets one file per variant,
  ``FILE.<label>``).
* ``--calls``: the standalone in this process, on a plain asyncio loop in its own thread, with
  ``cProfile`` on the loop thread during the consume phase only: Python calls per consumed message
  (deterministic for a given tree and mode: what still runs as Python functions, and the builtins
  they call; compiled modules' own functions are native and not counted) and the functions called
  most; then the same phase again without the profiler for the loop thread's CPU per message
  (``time.thread_time``, the broker's own thread only).

* ``--e2e-rate R``: instead of the backlog, ``magnetar perf e2e --no-batching -s 1024 -r R -d
  --seconds`` (one official-client producer and consumer in this process) against each variant's
  fresh standalone after a one-second warm-up, variants alternating: the end-to-end p50 / p99 the
  consumer saw and the standalone's CPU per message over the measured phase.

The backlog is written with ``MAGNETAR_STANDALONE_LEDGER_WINDOW=1000`` (only the write side uses
the window; it just makes the set-up faster). Run:
``PYTHONPATH=src .venv/bin/python bench/consume_path.py --messages 20000 --repeats 3``;
``PYTHONPATH=src .venv/bin/python bench/consume_path.py --calls --messages 5000``.
Bounded: every wait has a deadline; each run is about ``messages / 4000`` seconds of set-up and
the consume phase.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import json
import os
import pstats
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any, TypeVar

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
# The tree measured in-process (``--calls``) is the one on PYTHONPATH: this tree's ``src`` only
# when none is given. (``bookie_append`` and ``steady_load`` put this tree first when imported:
# only process mode imports them, where the measured tree runs in the child.)
if not os.environ.get("PYTHONPATH"):
    sys.path.insert(0, str(REPO / "src"))
sys.path.append(str(HERE))
sys.path.append(str(HERE / "peers"))

R = TypeVar("R")
PAYLOAD = b"x" * 1024
METRICS = ("us_msg", "msgs_s", "machine_pct")
E2E_METRICS = ("p50_ms", "p99_ms", "us_msg", "msgs_s", "machine_pct")
PHASE_TIMEOUT_S = 300.0
WINDOW_ENV = {"MAGNETAR_STANDALONE_LEDGER_WINDOW": "1000"}


def _pulsar() -> Any:
    import pulsar

    return pulsar


def _client(url: str) -> Any:
    pulsar = _pulsar()
    return pulsar.Client(url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))


def _sub_type(name: str) -> Any:
    return getattr(_pulsar().ConsumerType, name)


def write_backlog(client: Any, topic: str, messages: int, sub_type: str) -> None:
    """The subscription first (so the backlog is its backlog), then ``messages`` unbatched sends
    pipelined (at most 1000 in flight), all acknowledged by the broker."""
    pulsar = _pulsar()
    client.subscribe(topic, "bench", consumer_type=_sub_type(sub_type)).close()
    producer = client.create_producer(topic, batching_enabled=False, max_pending_messages=1000,
                                      block_if_queue_full=True)
    done = threading.Semaphore(0)
    failures: list[object] = []

    def receipt(result: object, _message_id: object) -> None:
        if result != pulsar.Result.Ok:
            failures.append(result)
        done.release()

    for _ in range(messages):
        producer.send_async(PAYLOAD, receipt)
    for _ in range(messages):
        if not done.acquire(timeout=PHASE_TIMEOUT_S):
            raise TimeoutError("the backlog was not acknowledged in time")
    producer.close()
    if failures:
        raise RuntimeError(f"backlog sends failed: {failures[:3]}")


def consume_all(client: Any, topic: str, messages: int, sub_type: str) -> None:
    """Subscribe, receive and acknowledge ``messages``, close (which flushes the grouped acks)."""
    consumer = client.subscribe(topic, "bench", consumer_type=_sub_type(sub_type))
    deadline = time.monotonic() + PHASE_TIMEOUT_S
    for _ in range(messages):
        if time.monotonic() > deadline:
            raise TimeoutError("the backlog was not consumed in time")
        consumer.acknowledge(consumer.receive(timeout_millis=30_000))
    consumer.close()


def backlog_of(http_url: str, topic: str) -> int:
    with urllib.request.urlopen(f"{http_url}/admin/v2/persistent/public/default/{topic}/stats", timeout=30) as reply:
        stats = json.loads(reply.read())
    return int(stats["subscriptions"]["bench"]["msgBacklog"])


def one_run(src: str, extra_env: dict[str, str], args: argparse.Namespace, root: Path, tag: str,
            py_spy_out: str) -> dict[str, float]:
    from bookie_append import machine_busy_seconds
    from measures import ServerCpu

    from magnetar.runtime.processes import StandaloneProcess

    env = dict(os.environ, PYTHONPATH=src, **WINDOW_ENV)
    env.update(extra_env)
    env.pop("MAGNETAR_FAULTS", None)
    standalone = StandaloneProcess(str(root / tag), env=env, stderr=subprocess.DEVNULL)
    topic = f"consume-{tag}"
    try:
        client = _client(standalone.broker_url)
        try:
            write_backlog(client, topic, args.messages, args.sub_type)
            spy = _start_py_spy(standalone.pid, py_spy_out, args.py_spy_native) if py_spy_out else None
            server = ServerCpu([standalone.pid])
            server("start")
            busy0, start = machine_busy_seconds(), time.perf_counter()
            consume_all(client, topic, args.messages, args.sub_type)
            elapsed = time.perf_counter() - start
            server("end")
            machine = 100 * (machine_busy_seconds() - busy0) / elapsed
            if spy is not None:
                _stop_py_spy(spy)
        finally:
            client.close()
        left = backlog_of(standalone.http_url, topic)
        if left:
            raise RuntimeError(f"{left} messages still in the backlog after the consumer closed")
    finally:
        standalone.terminate()
    return {"us_msg": server.us_per(args.messages), "msgs_s": args.messages / elapsed, "machine_pct": machine}


def e2e_run(src: str, extra_env: dict[str, str], args: argparse.Namespace, root: Path, tag: str,
            _py_spy_out: str) -> dict[str, float]:
    """``perf e2e`` unbatched at ``--e2e-rate`` against a fresh standalone of this variant."""
    from bookie_append import machine_busy_seconds
    from measures import ServerCpu

    from magnetar.cli.perf import PerfSettings, run_perf
    from magnetar.runtime.processes import StandaloneProcess

    env = dict(os.environ, PYTHONPATH=src, **extra_env)
    env.pop("MAGNETAR_FAULTS", None)
    standalone = StandaloneProcess(str(root / tag), env=env, stderr=subprocess.DEVNULL)
    try:
        def settings(seconds: float) -> Any:
            return PerfSettings(mode="e2e", service_url=standalone.broker_url, topic=f"e2e-{tag}", size=1024,
                                batching=False, rate=args.e2e_rate, duration_s=seconds)

        run_perf(settings(1.0))  # warm-up: connections, ledgers, the subscription
        server = ServerCpu([standalone.pid])
        busy0, start = machine_busy_seconds(), time.perf_counter()
        result = run_perf(settings(args.seconds), on_phase=server)
        machine = 100 * (machine_busy_seconds() - busy0) / (time.perf_counter() - start)
    finally:
        standalone.terminate()
    received = result["receive"]
    return {"p50_ms": received["latency_ms"]["p50"], "p99_ms": received["latency_ms"]["p99"],
            "us_msg": server.us_per(received["count"]), "msgs_s": received["msgs_s"], "machine_pct": machine}


def _start_py_spy(pid: int, out: str, native: bool) -> subprocess.Popen[bytes]:
    beside = Path(sys.executable).parent / "py-spy"
    command = [str(beside) if beside.exists() else "py-spy", "record", "--gil", "--rate", "200", "-p", str(pid),
               "-f", "raw", "-o", out]
    if native:
        command.append("--native")  # C frames too: what compiled (mypyc) functions cost
    spy = subprocess.Popen(command,
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    return spy  # it attaches within milliseconds; the phase lasts seconds


def _stop_py_spy(spy: subprocess.Popen[bytes]) -> None:
    spy.send_signal(signal.SIGINT)
    try:
        spy.wait(timeout=60)
    except subprocess.TimeoutExpired:
        spy.kill()
        spy.wait(timeout=10)
    if spy.returncode not in (0, -signal.SIGINT):
        stderr = spy.stderr.read().decode(errors="replace") if spy.stderr is not None else ""
        print(f"py-spy exited {spy.returncode}: {stderr[-500:]}", file=sys.stderr)


def summarize_py_spy(path: str, top: int) -> None:
    """The busiest leaf frames and the frames with the most time under them in a ``py-spy -f raw``
    file (``frame;frame;... count`` lines), in % of the samples."""
    own: dict[str, int] = {}
    under: dict[str, int] = {}
    total = 0
    for line in Path(path).read_text().splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        total += count
        frames = [frame.split(" (")[0] + " " + frame.rsplit("/", 1)[-1].rstrip(")") for frame in stack.split(";")]
        own[frames[-1]] = own.get(frames[-1], 0) + count
        for frame in set(frames):
            under[frame] = under.get(frame, 0) + count
    print(f"{path}: {total} samples")
    for title, table in (("own", own), ("inclusive", under)):
        print(f"  {title}:")
        for frame, count in sorted(table.items(), key=lambda kv: -kv[1])[:top]:
            print(f"  {100 * count / max(1, total):6.1f}%  {frame}")


def process_mode(args: argparse.Namespace) -> None:
    from steady_load import parse_variant, summarize

    run, metrics = (e2e_run, E2E_METRICS) if args.e2e_rate else (one_run, METRICS)
    variants = [parse_variant(v) for v in (args.variant or ["this"])]
    rows: dict[str, list[dict[str, float]]] = {label: [] for label, _, _ in variants}
    with tempfile.TemporaryDirectory(prefix="consume-") as tmp:
        for repeat in range(args.repeats):
            for label, src, env in variants:
                spy_out = f"{args.py_spy}.{label}" if args.py_spy and repeat == 0 else ""
                row = run(src, env, args, Path(tmp), f"{label}{repeat}", spy_out)
                rows[label].append(row)
                print(f"{label} repeat {repeat + 1}: " + ", ".join(f"{k}={v:.1f}" for k, v in row.items()), flush=True)
    summary = summarize(rows, metrics, ("p50_ms", "p99_ms", "us_msg") if args.e2e_rate else ("us_msg", "msgs_s"))
    if args.json:
        Path(args.json).write_text(json.dumps({"argv": sys.argv, "rows": rows, "summary": summary}, indent=1))
    if args.py_spy:
        for label, _, _ in variants:
            if Path(f"{args.py_spy}.{label}").exists():
                summarize_py_spy(f"{args.py_spy}.{label}", args.top)


def calls_mode(args: argparse.Namespace) -> None:
    import magnetar._compiled as compiled
    from magnetar.runtime.standalone import StandaloneConfig, start_standalone

    os.environ.update(WINDOW_ENV)
    loop = asyncio.new_event_loop()
    threading.Thread(target=loop.run_forever, daemon=True, name="standalone-loop").start()

    def call(coro: Coroutine[Any, Any, R]) -> R:
        return asyncio.run_coroutine_threadsafe(coro, loop).result(PHASE_TIMEOUT_S)

    profile = cProfile.Profile()
    marks: list[float] = []

    async def mark(action: Callable[[], None]) -> None:
        action()
        marks.append(time.thread_time())

    with tempfile.TemporaryDirectory(prefix="consume-calls-") as data:
        running = call(start_standalone(StandaloneConfig(data_dir=data, broker_port=0, web_port=0, bookie_port=0)))
        assert running.broker is not None
        client = _client(running.broker.service_url)
        try:
            for phase in ("profiled", "timed"):
                topic = f"consume-{phase}"
                write_backlog(client, topic, args.messages, args.sub_type)
                call(mark(profile.enable if phase == "profiled" else lambda: None))
                consume_all(client, topic, args.messages, args.sub_type)
                call(mark(profile.disable if phase == "profiled" else lambda: None))
        finally:
            client.close()
            call(running.stop())
    stats = pstats.Stats(profile)
    table: dict[Any, Any] = stats.stats  # type: ignore[attr-defined]
    total = sum(value[1] for value in table.values())
    cpu_us = (marks[3] - marks[2]) * 1e6 / args.messages
    print(f"{args.messages} consumed ({args.sub_type}), {compiled.MODE}: {total / args.messages:.1f} Python calls "
          f"per message on the loop thread; loop thread CPU {cpu_us:.1f} us per message (unprofiled)")
    print("calls/msg  own us/msg (profiled)  function")
    for (path, line, name), value in sorted(table.items(), key=lambda kv: -kv[1][1])[: args.top]:
        print(f"{value[1] / args.messages:9.2f}  {value[2] * 1e6 / args.messages:9.2f}  {name}  {path.rsplit('/', 1)[-1]}:{line}")
    print("by own time:")
    for (path, line, name), value in sorted(table.items(), key=lambda kv: -kv[1][2])[: args.top]:
        print(f"{value[1] / args.messages:9.2f}  {value[2] * 1e6 / args.messages:9.2f}  {name}  {path.rsplit('/', 1)[-1]}:{line}")
    if args.callers:
        stats.print_callers(args.callers)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--sub-type", default="Exclusive", choices=("Exclusive", "Shared", "Failover", "KeyShared"))
    parser.add_argument("--variant", action="append", default=[], help="label[=SRC_DIR][:KEY=VALUE,...]")
    parser.add_argument("--py-spy", default="", help="record the first repeat's consume phase to FILE.<label>")
    parser.add_argument("--py-spy-native", action="store_true", help="with --py-spy: native frames too (--native)")
    parser.add_argument("--e2e-rate", type=float, default=0.0, help="perf e2e unbatched at this rate instead")
    parser.add_argument("--seconds", type=float, default=6.0, help="with --e2e-rate: the measured phase")
    parser.add_argument("--calls", action="store_true", help="in-process: Python calls per consumed message")
    parser.add_argument("--top", type=int, default=30)
    parser.add_argument("--callers", default="", help="with --calls: who calls the functions matching this")
    parser.add_argument("--json", default="")
    args = parser.parse_args()
    if args.calls:
        calls_mode(args)
    else:
        process_mode(args)


if __name__ == "__main__":
    main()
