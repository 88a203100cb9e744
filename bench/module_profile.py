"""Profiled time per message by Magnetar module, on the publish-and-consume path (issue 22).

How session 9 and 10 chose which modules mypyc compiles (``magnetar._compiled.COMPILED_MODULES``,
``docs/performance.md``): a standalone (1 bookie, fsync before every ack) runs in this process on
a plain asyncio loop in its own thread; the official client sends ``--messages`` 1 KiB messages one
at a time (each ``send()`` waits for its receipt) after a warm-up, and with ``--consume`` (the
default) a Shared consumer receives and acknowledges each one before the next is sent, so every
layer a message crosses is on the path: the SEND, the journal, the receipt, the dispatch, the
MESSAGE and the ack. ``cProfile`` runs on the loop thread only. Printed: own time (the functions'
``tottime``, profiler overhead included: for ranking modules, not a CPU figure) and calls per
message, summed by source file under ``magnetar/``; the rest (the standard library, asyncio,
protobuf, builtins, and the loop's idle wait in ``epoll``) in one line.

Run it pure (``MAGNETAR_PURE_PYTHON=1``): a compiled module's functions are native and the
profiler does not see them (they drop out of the table; that is also a quick check of what a build
compiled). ``PYTHONPATH=src MAGNETAR_PURE_PYTHON=1 .venv/bin/python bench/module_profile.py``.
Run compiled, the first line (profiled calls per message) counts what still runs as Python
functions (and the builtins Python code calls): a deterministic measure of how much of the path
compiling took out of the interpreter, whatever the machine's load.

``--rate R`` (messages per second, paced) or ``--in-flight N`` (up to N sends pending, as fast as
the broker answers: ``--in-flight 1000 --no-consume`` is the unbatched maximum rate that
``bench/peers/run.py`` measures) send with ``send_async`` instead of one at a time; the consumer
(unless ``--no-consume``) then receives and acknowledges in its own thread. ``--window W``: the
standalone's in-flight adds per ledger (default ``MAGNETAR_STANDALONE_LEDGER_WINDOW`` if set, else
the standalone's default). The table then also gives each module's share of the loop's busy time
(all profiled own time except the idle wait in ``epoll``/``select``), which is how session 11
ranked what to compile at the maximum rate and at 2,000 msg/s.

``--cpu``: no profiler; prints the loop thread's CPU time per message over the same workload
(``CLOCK_THREAD_CPUTIME_ID`` read on the loop thread before and after: the broker, the bookie and
the dispatch, not the client's threads in this process nor the journal's sync threads). CPU time,
not wall time, so it moves little with other work on the machine; compare trees or modes by
running it with each (``PYTHONPATH=<tree>/src``, ``MAGNETAR_PURE_PYTHON=1``).
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import os
import pstats
import tempfile
import threading
import time
from collections.abc import Coroutine
from typing import Any, TypeVar

from magnetar.runtime.standalone import STANDALONE_LEDGER_WINDOW, StandaloneConfig, start_standalone

R = TypeVar("R")
OTHER = "(other: stdlib, asyncio, protobuf, builtins)"
IDLE = "(idle: the loop's wait in epoll/select)"


def by_module(table: dict[Any, Any], messages: int) -> list[tuple[str, float, float]]:
    """(module file, own us per message, calls per message), most expensive first."""
    own: dict[str, float] = {}
    calls: dict[str, float] = {}
    for (path, _line, name), value in table.items():
        marker = path.rfind("/magnetar/")
        if marker >= 0:
            module = path[marker + 1:]
        elif path == "~" and ("'select." in name or "of 'select" in name):
            module = IDLE
        else:
            module = OTHER
        own[module] = own.get(module, 0.0) + value[2] * 1e6 / messages
        calls[module] = calls.get(module, 0.0) + value[1] / messages
    return sorted(((m, own[m], calls[m]) for m in own), key=lambda row: -row[1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=2000)
    parser.add_argument("--no-consume", action="store_true", help="publish only (no consumer)")
    parser.add_argument("--cpu", action="store_true", help="the loop thread's CPU us per message, no profiler")
    parser.add_argument("--rate", type=float, default=0.0, help="messages per second, paced (0: not paced)")
    parser.add_argument("--in-flight", type=int, default=1, help="sends pending at most (1: one at a time)")
    parser.add_argument("--window", type=int, default=int(os.environ.get("MAGNETAR_STANDALONE_LEDGER_WINDOW")
                                                              or STANDALONE_LEDGER_WINDOW),
                        help="the standalone's in-flight adds per ledger")
    parser.add_argument("--functions", type=int, default=0, help="also list the N Magnetar functions with most own time")
    args = parser.parse_args()
    loop = asyncio.new_event_loop()
    threading.Thread(target=loop.run_forever, daemon=True, name="standalone-loop").start()

    def call(coro: Coroutine[Any, Any, R]) -> R:
        return asyncio.run_coroutine_threadsafe(coro, loop).result(120)

    import pulsar

    profile = cProfile.Profile()
    thread_cpu: list[float] = []

    async def enable() -> None:
        thread_cpu.append(time.thread_time())
        if not args.cpu:
            profile.enable()

    async def disable() -> None:
        if not args.cpu:
            profile.disable()
        thread_cpu.append(time.thread_time())

    with tempfile.TemporaryDirectory(prefix="module-profile-") as data:
        running = call(start_standalone(StandaloneConfig(data_dir=data, broker_port=0, web_port=0, bookie_port=0,
                                                         ledger_window=args.window)))
        assert running.broker is not None
        client = pulsar.Client(running.broker.service_url)
        try:
            producer = client.create_producer("profiled", batching_enabled=False)
            consumer = None if args.no_consume else client.subscribe(
                "profiled", "profiled", consumer_type=pulsar.ConsumerType.Shared)

            def one() -> None:
                producer.send(b"x" * 1024)
                if consumer is not None:
                    consumer.acknowledge(consumer.receive(timeout_millis=30_000))

            for _ in range(200):
                one()
            call(enable())
            if args.rate > 0 or args.in_flight > 1:
                send_paced(producer, consumer, args.messages, args.rate, max(1, args.in_flight))
            else:
                for _ in range(args.messages):
                    one()
            call(disable())
        finally:
            client.close()
            call(running.stop())
    what = "publish only" if args.no_consume else "publish + consume + ack"
    what += f", window {args.window}"
    if args.rate > 0 or args.in_flight > 1:
        paced = f"paced at {args.rate:g} msg/s" if args.rate > 0 else "unpaced"
        what += f", {paced}, {args.in_flight} in flight"
    if args.cpu:
        import magnetar._compiled as compiled

        us = (thread_cpu[1] - thread_cpu[0]) * 1e6 / args.messages
        print(f"{args.messages} messages, {what}, {compiled.MODE}: loop thread CPU {us:.1f} us/msg")
        return
    table: dict[Any, Any] = pstats.Stats(profile).stats  # type: ignore[attr-defined]
    rows = by_module(table, args.messages)
    print(f"{args.messages} messages, {what}: {sum(calls for _, _, calls in rows):.1f} profiled calls per message "
          f"({sum(calls for module, _, calls in rows if module != OTHER):.1f} in Magnetar's Python modules)")
    busy = sum(us for module, us, _ in rows if module != IDLE) or 1.0
    print(f"loop busy (profiled own time, idle wait excluded): {busy:.1f} us/msg")
    print("own us/msg  busy share  calls/msg  module")
    for module, us, calls in rows:
        if us >= 0.05:
            share = "" if module == IDLE else f"{100 * us / busy:9.1f}%"
            print(f"{us:10.1f}  {share:>10}  {calls:9.1f}  {module}")
    if args.functions:
        print("own us/msg  calls/msg  function (Magnetar's Python modules; own time includes compiled callees)")
        ours = [(key, value) for key, value in table.items() if "/magnetar/" in key[0]]
        for (path, line, name), value in sorted(ours, key=lambda kv: -kv[1][2])[: args.functions]:
            where = path[path.rfind("/magnetar/") + 1:]
            print(f"{value[2] * 1e6 / args.messages:10.1f}  {value[1] / args.messages:9.2f}  {name}  {where}:{line}")


def send_paced(producer: Any, consumer: Any, messages: int, rate: float, in_flight: int) -> None:
    """``messages`` ``send_async``s, at most ``in_flight`` pending, paced at ``rate`` msg/s if > 0;
    the consumer (if any) receives and acknowledges them in its own thread. Bounded: 120 s."""
    import pulsar

    pending = threading.Semaphore(in_flight)
    errors: list[object] = []
    received = [0]

    def receipt(result: object, _message_id: object) -> None:
        if result != pulsar.Result.Ok:
            errors.append(result)
        pending.release()

    def consume() -> None:
        while received[0] < messages:
            consumer.acknowledge(consumer.receive(timeout_millis=30_000))
            received[0] += 1

    reader = threading.Thread(target=consume, daemon=True) if consumer is not None else None
    if reader is not None:
        reader.start()
    deadline = time.monotonic() + 120
    start = time.monotonic()
    for index in range(messages):
        if rate > 0:
            wait = start + index / rate - time.monotonic()
            if wait > 0:
                time.sleep(wait)  # pacing the sender, not waiting for a condition
        if not pending.acquire(timeout=max(0.0, deadline - time.monotonic())):
            raise TimeoutError("sends not acknowledged within 120 s")
        producer.send_async(b"x" * 1024, receipt)
    for _ in range(in_flight):
        if not pending.acquire(timeout=max(0.0, deadline - time.monotonic())):
            raise TimeoutError("sends not acknowledged within 120 s")
    _join(reader, deadline)
    if errors:
        raise RuntimeError(f"sends failed: {errors[:3]}")


def _join(reader: threading.Thread | None, deadline: float) -> None:
    if reader is not None:
        reader.join(max(0.0, deadline - time.monotonic()))
        if reader.is_alive():
            raise TimeoutError("the consumer did not receive every message within 120 s")


if __name__ == "__main__":
    main()
