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
import pstats
import tempfile
import threading
import time
from collections.abc import Coroutine
from typing import Any, TypeVar

from magnetar.runtime.standalone import StandaloneConfig, start_standalone

R = TypeVar("R")
OTHER = "(other: stdlib, asyncio, protobuf, builtins, idle)"


def by_module(table: dict[Any, Any], messages: int) -> list[tuple[str, float, float]]:
    """(module file, own us per message, calls per message), most expensive first."""
    own: dict[str, float] = {}
    calls: dict[str, float] = {}
    for (path, _line, _name), value in table.items():
        marker = path.rfind("/magnetar/")
        module = path[marker + 1:] if marker >= 0 else OTHER
        own[module] = own.get(module, 0.0) + value[2] * 1e6 / messages
        calls[module] = calls.get(module, 0.0) + value[1] / messages
    return sorted(((m, own[m], calls[m]) for m in own), key=lambda row: -row[1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=2000)
    parser.add_argument("--no-consume", action="store_true", help="publish only (no consumer)")
    parser.add_argument("--cpu", action="store_true", help="the loop thread's CPU us per message, no profiler")
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
        running = call(start_standalone(StandaloneConfig(data_dir=data, broker_port=0, web_port=0, bookie_port=0)))
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
            for _ in range(args.messages):
                one()
            call(disable())
        finally:
            client.close()
            call(running.stop())
    what = "publish only" if args.no_consume else "publish + consume + ack"
    if args.cpu:
        import magnetar._compiled as compiled

        us = (thread_cpu[1] - thread_cpu[0]) * 1e6 / args.messages
        print(f"{args.messages} messages, {what}, {compiled.MODE}: loop thread CPU {us:.1f} us/msg")
        return
    table: dict[Any, Any] = pstats.Stats(profile).stats  # type: ignore[attr-defined]
    rows = by_module(table, args.messages)
    print(f"{args.messages} messages, {what}: {sum(calls for _, _, calls in rows):.1f} profiled calls per message "
          f"({sum(calls for module, _, calls in rows if module != OTHER):.1f} in Magnetar's Python modules)")
    print("own us/msg  calls/msg  module")
    for module, us, calls in rows:
        if us >= 0.05:
            print(f"{us:10.1f}  {calls:9.1f}  {module}")


if __name__ == "__main__":
    main()
