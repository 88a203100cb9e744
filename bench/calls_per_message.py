"""Python function calls per unbatched message on a standalone's event-loop thread (issue 22).

A deterministic measure beside the noisy CPU figures: a standalone (1 bookie, fsync before every
ack) runs in this process on a plain asyncio loop in its own thread; the official client sends
``--messages`` 1 KiB messages one at a time (each ``send()`` waits for its receipt) after a
warm-up, with ``cProfile`` enabled on the loop thread only. Printed: all calls (Python functions
and builtins, the loop's own included) per message, and the functions called most per message.
The journal's sync threads are not counted. Compare two trees by running it with each one's
``src`` first on ``PYTHONPATH``. Compiled, what runs inside the compiled modules is invisible here,
constructors included (a frozen dataclass built in a compiled module and the plain class that
replaced it count the same: nothing; docs/performance.md, session 13): for the cost of those
objects use ``bench/send_path_cost.py`` (the protocol and codec layers alone) or
``bench/module_profile.py --cpu`` (the loop thread's CPU per message).

Run: ``PYTHONPATH=src .venv/bin/python bench/calls_per_message.py --messages 2000 --top 30``
(``--callers NAME`` also prints who calls the functions matching NAME; ``--bookies 3``: three
bookies, quorum (3,3,2)). ``--in-flight N``: the
messages go in rounds of N sent without waiting (``send_async``), each round awaited before the
next, so a receive carries several SENDs (the pipelined case; how the client packs them into
TCP segments depends on timing, so this figure moves a little from run to run).
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
    parser.add_argument("--in-flight", type=int, default=1, help="messages per round sent without waiting")
    parser.add_argument("--bookies", type=int, default=1, help="the standalone's bookies (3: quorum 3,3,2)")
    args = parser.parse_args()
    loop = asyncio.new_event_loop()
    threading.Thread(target=loop.run_forever, daemon=True, name="standalone-loop").start()

    def call(coro: Coroutine[Any, Any, R]) -> R:
        return asyncio.run_coroutine_threadsafe(coro, loop).result(120)

    import pulsar

    with tempfile.TemporaryDirectory(prefix="calls-") as data:
        running = call(start_standalone(StandaloneConfig(data_dir=data, broker_port=0, web_port=0, bookie_port=0,
                                                    bookies_count=args.bookies)))
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
            if args.in_flight <= 1:
                for _ in range(args.messages):
                    producer.send(b"x" * 1024)
            else:
                send_rounds(producer, args.messages, args.in_flight)
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


def send_rounds(producer: Any, messages: int, in_flight: int) -> None:
    """``messages`` sends in rounds of ``in_flight`` ``send_async``s, each round awaited (bounded)."""
    import pulsar

    sent = 0
    while sent < messages:
        count = min(in_flight, messages - sent)
        done = threading.Semaphore(0)
        errors: list[object] = []

        def receipt(result: object, _message_id: object, errors: list[object] = errors,
                    done: threading.Semaphore = done) -> None:
            if result != pulsar.Result.Ok:
                errors.append(result)
            done.release()

        for _ in range(count):
            producer.send_async(b"x" * 1024, receipt)
        for _ in range(count):
            if not done.acquire(timeout=60):
                raise TimeoutError("a round of sends was not acknowledged within 60 s")
        if errors:
            raise RuntimeError(f"sends failed: {errors[:3]}")
        sent += count


if __name__ == "__main__":
    main()
