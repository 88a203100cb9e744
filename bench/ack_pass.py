"""One grouped ACK through the real broker objects: how long the event loop is held (issue 22).

The official client groups its acknowledgements (``ackGroupingTime`` 100 ms): at 2,000 msg/s one
ACK command carries ~200 message ids every 100 ms, and the broker handles it on its event loop
(session ACK handler -> subscription -> cursor -> dispatcher). This measures that pass alone.

Per tree (``--tree label=SRC_DIR``, e.g. a ``git archive`` of the tree before a change; default:
this tree's ``src``) a child interpreter starts a standalone in its own process on a plain asyncio
loop in a thread (``runtime/standalone.start_standalone``, 1 bookie, the tree's compiled build
unless ``MAGNETAR_PURE_PYTHON=1``). An official-client producer writes ``--acks * --ids``
unbatched 1 KiB messages; an official-client consumer (``--sub-type``) receives them all and
acknowledges none. Then, for each run of ``--ids`` received ids in order, the ACK command the
client would send (individual acks, one ``CommandAck`` with ``--ids`` message ids) is decoded
(``fast_decode.decode_ack``, as the connection does) and handed to the consumer's ``Session``
(``handle_all``) on the loop. Timed on the loop thread:

* ``pass_us``: the wall time of the first loop pass of that handling, the decode included (the
  coroutine's first step: what delays every other callback due then), ``pass_cpu_us`` the loop
  thread's CPU time in it (``time.thread_time``: without the waits for a core on a shared
  machine), and ``total_us``: until the handling returned (more than one pass only when the ACK
  is sliced), and the loop passes it took; ``decode_us`` the decode's share of the pass;
* afterwards the subscription's backlog must be 0 (every ack applied) or the run fails.

Each child prints one JSON line; the parent alternates the trees ``--repeats`` times and prints
min / median / max of each tree's median pass and the ratio per pair against the first tree.

``--probe-seconds S`` (the loop probe): instead, each child's standalone serves ``magnetar perf
e2e --no-batching -s 1024 -r --rate -d S`` (official client, its own process, after a 1 s
warm-up run) while every callback of its loop is timed (``asyncio.events.Handle._run`` wrapped:
plain asyncio, the task steps included) and a probe task sleeping 1 ms records how late it wakes.
Printed per run: callbacks over 0.5 ms per second of the run and the longest, grouped by what
ran (a task's coroutine and the task's name, else the callback), the probe's lateness p99 / max, and the client's
e2e p50 / p99. Compiled coroutines show as their generated class names (``..._gen``).

Run: ``PYTHONPATH=src .venv/bin/python bench/ack_pass.py --repeats 3 --tree base=/tmp/base13ack/src
--tree now=src``. Bounded: every wait has a deadline (``PHASE_TIMEOUT_S``).
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
import threading
import time
from collections.abc import Coroutine
from pathlib import Path
from typing import Any, TypeVar

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
R = TypeVar("R")
PHASE_TIMEOUT_S = 120.0
PAYLOAD = b"x" * 1024


def _ack_command(consumer_id: int, ids: list[tuple[int, int]]) -> bytes:
    from magnetar.protocol.pulsar import pb

    base = pb.BaseCommand(type=pb.BaseCommand.ACK)
    base.ack.consumer_id = consumer_id
    base.ack.ack_type = pb.CommandAck.Individual
    for ledger_id, entry_id in ids:
        message_id = base.ack.message_id.add()
        message_id.ledgerId = ledger_id
        message_id.entryId = entry_id
    encoded: bytes = base.SerializeToString()
    return encoded


async def _run_with(action: Any) -> None:
    action()


def child(args: argparse.Namespace) -> dict[str, Any]:
    import pulsar

    import magnetar._compiled as compiled
    from magnetar.protocol.pulsar.connection import AckReceived
    from magnetar.protocol.pulsar.fast_decode import decode_ack
    from magnetar.runtime.standalone import StandaloneConfig, start_standalone

    loop = asyncio.new_event_loop()
    threading.Thread(target=loop.run_forever, daemon=True, name="standalone-loop").start()

    def call(coro: Coroutine[Any, Any, R]) -> R:
        return asyncio.run_coroutine_threadsafe(coro, loop).result(PHASE_TIMEOUT_S)

    total = args.acks * args.ids
    with tempfile.TemporaryDirectory(prefix="ack-pass-") as data:
        running = call(start_standalone(StandaloneConfig(data_dir=data, broker_port=0, web_port=0, bookie_port=0)))
        assert running.broker is not None
        client = pulsar.Client(running.broker.service_url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
        try:
            topic = "persistent://public/default/ack-pass"
            consumer = client.subscribe(topic, "bench", consumer_type=getattr(pulsar.ConsumerType, args.sub_type),
                                        receiver_queue_size=1000)
            producer = client.create_producer(topic, batching_enabled=False, max_pending_messages=1000,
                                              block_if_queue_full=True)
            sent = threading.Semaphore(0)
            for _ in range(total):
                producer.send_async(PAYLOAD, lambda _r, _m: sent.release())
            for _ in range(total):
                if not sent.acquire(timeout=PHASE_TIMEOUT_S):
                    raise TimeoutError("the backlog was not acknowledged in time")
            ids = []
            for _ in range(total):
                message_id = consumer.receive(int(PHASE_TIMEOUT_S * 1000)).message_id()
                ids.append((message_id.ledger_id(), message_id.entry_id()))
            service = running.broker.service
            subscription = service.topics[topic].subscriptions["bench"]
            assert subscription.dispatcher is not None
            broker_consumer = subscription.dispatcher.consumers[0]
            session: Any = broker_consumer.channel  # the consumer's connection: its Session
            frames = [_ack_command(broker_consumer.consumer_id, ids[i:i + args.ids]) for i in range(0, total, args.ids)]

            async def one(frame: bytes) -> tuple[float, float, int, float, float]:
                passes = 0
                first_pass = first_cpu = 0.0
                start, start_cpu = time.perf_counter(), time.thread_time()
                ack = decode_ack(frame)  # as the connection does, in the same pass
                decoded = time.perf_counter() - start
                assert ack is not None
                handling = asyncio.ensure_future(session.handle_all([AckReceived(ack, frame)]))
                # The coroutine's first step runs in the next loop pass; time passes until it is done.
                while not handling.done():
                    await asyncio.sleep(0)
                    passes += 1
                    if passes == 1:
                        first_pass = time.perf_counter() - start
                        first_cpu = time.thread_time() - start_cpu
                elapsed = time.perf_counter() - start
                handling.result()
                return first_pass, elapsed, passes, first_cpu, decoded

            if args.profile:
                import cProfile
                import pstats

                profile = cProfile.Profile()
                call(_run_with(profile.enable))
            results = [call(one(frame)) for frame in frames]
            if args.profile:
                call(_run_with(profile.disable))
                pstats.Stats(profile, stream=sys.stderr).sort_stats("tottime").print_stats(25)
            backlog = subscription.cursor.backlog_entries()
        finally:
            client.close()
            call(running.stop())
    loop.call_soon_threadsafe(loop.stop)
    if backlog != 0:
        raise SystemExit(f"backlog {backlog} after acknowledging every message: an ack was lost")
    firsts = [r[0] * 1e6 for r in results[1:]]  # the first ACK warms caches: left out
    totals = [r[1] * 1e6 for r in results[1:]]
    cpus = [r[3] * 1e6 for r in results[1:]]
    decodes = [r[4] * 1e6 for r in results[1:]]
    return {"mode": compiled.MODE, "ids": args.ids, "acks": len(firsts),
            "pass_us_median": statistics.median(firsts), "pass_us_max": max(firsts),
            "pass_cpu_us_median": statistics.median(cpus), "decode_us_median": statistics.median(decodes),
            "total_us_median": statistics.median(totals), "passes_max": max(r[2] for r in results)}


def _describe(handle: asyncio.Handle) -> str:
    callback = handle._callback
    owner = getattr(callback, "__self__", None)
    if isinstance(owner, asyncio.Task):
        coro = owner.get_coro()
        name = getattr(coro, "__qualname__", None) or type(coro).__name__
        return f"task {name} ({owner.get_name()})"  # one connection's task apart from another's
    return f"callback {getattr(callback, '__qualname__', None) or type(callback).__name__}"


def probe_child(args: argparse.Namespace) -> dict[str, Any]:
    import magnetar._compiled as compiled
    from magnetar.runtime.standalone import StandaloneConfig, start_standalone

    slow: list[tuple[float, float, str]] = []  # (start, seconds, what)
    measuring = threading.Event()
    original = asyncio.events.Handle._run

    def timed(handle: asyncio.Handle) -> None:
        start = time.perf_counter()
        original(handle)  # type: ignore[arg-type]
        elapsed = time.perf_counter() - start
        if elapsed > 0.0005 and measuring.is_set():
            slow.append((start, elapsed, _describe(handle)))

    asyncio.events.Handle._run = timed  # type: ignore[method-assign,assignment]
    loop = asyncio.new_event_loop()
    threading.Thread(target=loop.run_forever, daemon=True, name="standalone-loop").start()
    lateness: list[float] = []

    async def lag_probe() -> None:
        # The 1 ms sleep is the measurement (how late the loop wakes it), not a wait for a
        # condition; the probe lives on the bench's daemon loop thread and ends with the process.
        while True:
            before = time.perf_counter()
            await asyncio.sleep(0.001)
            if measuring.is_set():
                lateness.append(time.perf_counter() - before - 0.001)

    def call(coro: Coroutine[Any, Any, R]) -> R:
        return asyncio.run_coroutine_threadsafe(coro, loop).result(PHASE_TIMEOUT_S)

    def perf(seconds: float, report: str | None) -> None:
        command = [sys.executable, "-c", "from magnetar.cli.main import main; main()", "perf", "e2e", "--no-batching", "-s", "1024", "-r",
                   str(args.rate), "-d", str(seconds), "-u", url, f"e2e-{seconds}"]
        if report:
            command += ["--json", report]
        subprocess.run(command, check=True, capture_output=True, timeout=PHASE_TIMEOUT_S)

    with tempfile.TemporaryDirectory(prefix="ack-probe-") as data:
        running = call(start_standalone(StandaloneConfig(data_dir=data, broker_port=0, web_port=0, bookie_port=0)))
        assert running.broker is not None
        url = running.broker.service_url
        probe = asyncio.run_coroutine_threadsafe(lag_probe(), loop)
        try:
            perf(1, None)  # warm-up
            measuring.set()
            report = str(Path(data) / "e2e.json")
            perf(args.probe_seconds, report)
            measuring.clear()
            e2e = json.loads(Path(report).read_text())
        finally:
            probe.cancel()
            call(running.stop())
    loop.call_soon_threadsafe(loop.stop)
    groups: dict[str, list[float]] = {}  # what ran -> durations in ms
    for _, seconds, what in slow:
        groups.setdefault(what, []).append(seconds * 1e3)
    lateness_ms = sorted(x * 1e3 for x in lateness) or [0.0]
    return {"mode": compiled.MODE, "seconds": args.probe_seconds, "e2e": _e2e_figures(e2e),
            "lag_p99_ms": lateness_ms[int(0.99 * (len(lateness_ms) - 1))], "lag_max_ms": lateness_ms[-1],
            "slow_per_s": len(slow) / args.probe_seconds,
            "slow": [[what, len(ms), round(statistics.median(ms), 2), round(max(ms), 2)]
                     for what, ms in sorted(groups.items(), key=lambda item: -len(item[1]))[:8]]}


def _e2e_figures(report: dict[str, Any]) -> dict[str, float]:
    """Publish and end-to-end p50 / p99 (ms) from ``magnetar perf --json``."""
    out: dict[str, float] = {}
    for side, label in (("publish", "publish"), ("receive", "e2e")):
        latency = report.get(side, {}).get("latency_ms", {})
        for name in ("p50", "p99"):
            out[f"{label}_{name}_ms"] = round(float(latency.get(name, 0.0)), 3)
    return out


def parent(args: argparse.Namespace) -> None:
    trees = [tuple(spec.split("=", 1)) if "=" in spec else (spec, str(REPO / "src")) for spec in args.tree]
    trees = trees or [("this", str(REPO / "src"))]
    runs: dict[str, list[dict[str, Any]]] = {label: [] for label, _ in trees}
    for repeat in range(args.repeats):
        for label, src in trees:
            env = dict(os.environ, PYTHONPATH=str(Path(src).resolve()))
            command = [sys.executable, __file__, "--child", "--acks", str(args.acks), "--ids", str(args.ids),
                       "--sub-type", args.sub_type, "--probe-seconds", str(args.probe_seconds),
                       "--rate", str(args.rate)]
            out = subprocess.run(command, env=env, capture_output=True, text=True, timeout=PHASE_TIMEOUT_S * 3,
                                 check=False)
            if out.returncode != 0:
                raise SystemExit(f"{label} failed:\n{out.stdout}\n{out.stderr}")
            result = json.loads(out.stdout.strip().splitlines()[-1])
            runs[label].append(result)
            print(f"repeat {repeat + 1} {label}: {json.dumps(result)}", flush=True)
    if args.probe_seconds:
        return
    first = trees[0][0]
    print(f"\n{args.ids}-id ACK, {args.sub_type}: the first loop pass, median per run; min / median / max "
          f"over runs; per pair / {first}")
    for key in ("pass_us_median", "pass_cpu_us_median", "decode_us_median"):
        print(f"  {key}")
        for label, _ in trees:
            values = [r[key] for r in runs[label]]
            ratios = [v / b[key] for v, b in zip(values, runs[first], strict=True)]
            print(f"    {label:10s} {min(values):8.1f} {statistics.median(values):8.1f} {max(values):8.1f}   "
                  f"per id {statistics.median(values) / args.ids:.2f} us   ratios "
                  f"{', '.join(f'{r:.2f}' for r in ratios)}   ({runs[label][0]['mode']}; "
                  f"passes max {max(r['passes_max'] for r in runs[label])})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tree", action="append", default=[], help="label=SRC_DIR (repeatable; default this tree)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--acks", type=int, default=20, help="ACK commands measured per run")
    parser.add_argument("--ids", type=int, default=200, help="message ids per ACK command")
    parser.add_argument("--sub-type", default="Exclusive", choices=("Exclusive", "Shared", "Key_Shared", "Failover"))
    parser.add_argument("--probe-seconds", type=float, default=0.0,
                        help="the loop probe under `magnetar perf e2e` for this many seconds instead")
    parser.add_argument("--rate", type=float, default=2000.0, help="with --probe-seconds: messages/s")
    parser.add_argument("--profile", action="store_true",
                        help="one child of this tree with cProfile on the loop thread (to stderr)")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child and args.probe_seconds:
        print(json.dumps(probe_child(args)))
    elif args.child or args.profile:
        print(json.dumps(child(args)))
    else:
        parent(args)


if __name__ == "__main__":
    main()
