"""Python function calls per unbatched message on a standalone's event-loop thread (issue 22).

A deterministic measure beside the noisy CPU figures: a standalone (1 bookie, fsync before every
ack) runs in this process on a plain asyncio loop in its own thread; the official client sends
``--messages`` 1 KiB messages one at a time (each ``send()`` waits for its receipt) after a
warm-up, with ``cProfile`` enabled on the loop thread only. Printed: all calls (Python functions
and builtins, the loop's own included) per message, and the functions called most per message.
The journal's sync threads are not counted. Compare two trees by running it with each one's
``src`` first on ``PYTHONPATH``.

Run: ``PYTHONPATH=src .venv/bin/python bench/calls_per_message.py --messages 2000 --top 30``
(``--callers NAME`` also prints who calls the functions matching NAME).
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import pstats
import tempfile
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

from magnetar.runtime.standalone import StandaloneConfig, start_standalone

R = TypeVar("R")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=2000)
    parser.add_argument("--top", type=int, default=30)
    parser.add_argument("--callers", default="")
    args = parser.parse_args()
    loop = asyncio.new_event_loop()
    threading.Thread(target=loop.run_forever, daemon=True, name="standalone-loop").start()

    def call(coro: Coroutine[Any, Any, R]) -> R:
        return asyncio.run_coroutine_threadsafe(coro, loop).result(120)

    import pulsar

    with tempfile.TemporaryDirectory(prefix="calls-") as data:
        running = call(start_standalone(StandaloneConfig(data_dir=data, broker_port=0, web_port=0, bookie_port=0)))
        assert running.broker is not None
        profile = cProfile.Profile()

        async def enable() -> None:
            profile.enable()

        async def disable() -> None:
            profile.disable()

        client = pulsar.Client(running.broker.service_url)
        try:
            producer = client.create_producer("calls", batching_enabled=False)
            for _ in range(200):
                producer.send(b"x" * 1024)
            call(enable())
            for _ in range(args.messages):
                producer.send(b"x" * 1024)
            call(disable())
        finally:
            client.close()
            call(running.stop())
    stats = pstats.Stats(profile)
    table: dict[Any, Any] = stats.stats  # type: ignore[attr-defined]
    total = sum(value[1] for value in table.values())
    print(f"calls per message: {total / args.messages:.1f}")
    for (path, line, name), value in sorted(table.items(), key=lambda kv: -kv[1][1])[: args.top]:
        print(f"{value[1] / args.messages:7.2f}  {name}  {path.rsplit('/', 1)[-1]}:{line}")
    if args.callers:
        stats.print_callers(args.callers)


if __name__ == "__main__":
    main()
