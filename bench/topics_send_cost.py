"""Benchmark (issue 22): the broker's CPU per SEND at one topic and at many, and what an idle
topic holds in the broker.

At 100,000 topics round robin every SEND goes to a topic that got no other message in its
receive, so the broker's fixed cost per run (the producer and topic lookups, the dedup and
policy checks, the receipt) is paid per message, on objects out of cache. This measures that
part alone, in process: the production read loop (``node/broker.py`` ``_ConnectionLoop``),
session, producers and topics over the broker's ``MemoryLogStore`` (no ledger, no journal: the
ledger layers are measured elsewhere), on a uvloop loop. One connection holds ``--topics``
producers, one per topic; the SENDs go round robin over them, one SEND per receive, the next
read once the previous receipt was written (as ``bench/session_run_cost.py`` does for one topic).
One connection holds at most ``BROKER_HANDLES_PER_CONNECTION_COUNT_MAX`` (10,000) producers, so
10,000 topics is the largest count.

Printed per ``--topics`` count: thread CPU (``time.thread_time_ns``) per SEND, min / median /
max over ``--repeats`` processes, and, from the creation of the topics (each with its producer
and one message), the GC-tracked objects and the bytes (``tracemalloc``) per topic. The cyclic GC
is tuned as the standalone's (``runtime/gc_tuning.py``: frozen after start-up, the server
thresholds; ``MAGNETAR_GC_TUNING=off`` keeps the interpreter's). Each
``--src`` tree runs in its own process (its own compiled build, if it has one), alternating.
For instructions per SEND count the measured window alone with ``perf stat``'s control fifos
(``PERF_CTL=<control fifo>,<ack fifo>``; the set-up's loop passes vary with the machine's load):
``mkfifo /tmp/ctl /tmp/ack; PERF_CTL=/tmp/ctl,/tmp/ack PYTHONPATH=<tree> perf stat -D -1 --control
fifo:/tmp/ctl,/tmp/ack -e instructions:u,cycles:u .venv/bin/python bench/topics_send_cost.py --child
--topics 10000 --messages 40000`` (divide by ``--messages``).

Run: ``.venv/bin/python bench/topics_send_cost.py --topics 1,10000 --src /tmp/base21/src --src $PWD/src``.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent


def _feed(conn: Any, frames: list[bytes]) -> None:
    """``bench/session_run_cost.py``'s in-memory connection, to read ``frames`` from the start."""
    conn.frames, conn.next, conn.written, conn.passes = frames, 0, 0, 0


def _frames(topics: int, start: int, count: int) -> list[bytes]:
    """``count`` SEND frames round robin over the producers 1..``topics`` (1 KiB each), sequence
    ids from ``start // topics`` on."""
    from magnetar.protocol.pulsar import pb
    from magnetar.protocol.pulsar.frames import encode_payload_command

    payload = bytes(range(256)) * 4
    out = []
    for index in range(start, start + count):
        producer, sequence_id = index % topics + 1, index // topics
        command = pb.BaseCommand(type=pb.BaseCommand.SEND,
                                 send=pb.CommandSend(producer_id=producer, sequence_id=sequence_id, num_messages=1))
        metadata = pb.MessageMetadata(producer_name=f"p-{producer}", sequence_id=sequence_id,
                                      publish_time=1_700_000_000_000 + index, uncompressed_size=len(payload))
        out.append(encode_payload_command(command, metadata, payload))
    return out


def perf_control(command: str) -> None:
    """Tell ``perf stat --control`` (``PERF_CTL``: its control and ack fifos, comma-separated)
    to count from or stop counting at this point. Under ``--callgrind`` (``CALLGRIND_CTL=1``):
    callgrind's instrumentation on or off instead (``callgrind_control``)."""
    if os.environ.get("CALLGRIND_CTL") == "1":
        state = "on" if command == "enable" else "off"
        subprocess.run(["callgrind_control", f"--instr={state}", str(os.getpid())], check=True, capture_output=True)
        return
    fifos = os.environ.get("PERF_CTL")
    if not fifos:
        return
    control, ack = fifos.split(",")
    with open(control, "w") as out:
        out.write(command + "\n")
    with open(ack) as answer:
        answer.readline()


async def _child(topics: int, messages: int) -> dict[str, Any]:
    from magnetar import _compiled
    from magnetar.broker import BrokerConfig, MemoryLogStore
    from magnetar.broker.service import BrokerService
    from magnetar.metadata import MemoryMetadataServer
    from magnetar.node.broker import BrokerServer, _ConnectionLoop
    from magnetar.node.broker_generation import bootstrap_cluster
    from magnetar.protocol.pulsar import encode_command, pb
    from magnetar.protocol.pulsar.client_connection import ClientConfig, connect_command
    from magnetar.runtime.clock import SystemClock

    clock = SystemClock()
    store = await MemoryMetadataServer(clock).connect()
    service = BrokerService(BrokerConfig(), MemoryLogStore(), store, clock=clock)
    await bootstrap_cluster(service, web_url="http://127.0.0.1:9")  # tenant public, namespace public/default
    server = BrokerServer(service, network=None, clock=clock)  # type: ignore[arg-type]
    sys.path.insert(0, str(REPO / "bench"))
    from session_run_cost import _Conn  # one frame per read, once every earlier one was answered

    conn = _Conn([encode_command(connect_command(ClientConfig()))])
    loop = _ConnectionLoop(server, conn)  # type: ignore[arg-type]
    await asyncio.wait_for(loop._read_loop(), 30)
    from magnetar.runtime.gc_tuning import tune_gc_for_server

    tune_gc_for_server()  # as the standalone does once started (MAGNETAR_GC_TUNING=off: the defaults)
    # Warm-up: one topic made and used before counting, so first-use objects are not per topic.
    producers = [encode_command(pb.BaseCommand(type=pb.BaseCommand.PRODUCER, producer=pb.CommandProducer(
        topic=f"persistent://public/default/t-{index}", producer_id=index, request_id=index,
        producer_name=f"p-{index}"))) for index in range(1, topics + 1)]
    _feed(conn, producers[:1] + _frames(1, 0, 1))
    await asyncio.wait_for(loop._read_loop(), 60)
    gc.collect()
    tracked = len(gc.get_objects())
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    _feed(conn, producers[1:])  # each topic loaded with its producer
    await asyncio.wait_for(loop._read_loop(), 1800)
    _feed(conn, [frame for index in range(1, topics) for frame in _frames(topics, index, 1)])  # one message each
    await asyncio.wait_for(loop._read_loop(), 1800)
    gc.collect()
    per_topic_bytes = (tracemalloc.get_traced_memory()[0] - before) / max(1, topics - 1)
    tracemalloc.stop()
    per_topic_objects = (len(gc.get_objects()) - tracked) / max(1, topics - 1)
    if len(service.topics) != topics:
        raise RuntimeError(f"{len(service.topics)} topics loaded for {topics}")
    _feed(conn, _frames(topics, topics, 4 * topics))  # every topic 4 times more (not --messages: perf stat's difference)
    await asyncio.wait_for(loop._read_loop(), 1800)
    frames = _frames(topics, 5 * topics, messages)
    _feed(conn, frames)
    perf_control("enable")
    started = time.thread_time_ns()
    await asyncio.wait_for(loop._read_loop(), 1800)
    cpu_ns = time.thread_time_ns() - started
    perf_control("disable")
    if conn.written != messages:
        raise RuntimeError(f"{conn.written} receipts written for {messages} SENDs")
    await service.close()
    return {"compiled": _compiled.MODE == "compiled", "us_per_send": cpu_ns / messages / 1000,
            "objects_per_topic": per_topic_objects, "bytes_per_topic": per_topic_bytes}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--src", action="append", default=[], help="a source tree (repeat for an A/B)")
    parser.add_argument("--topics", default="1,10000", help="topic counts, comma-separated")
    parser.add_argument("--messages", type=int, default=40_000, help="SENDs measured per process")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--child", action="store_true", help="one measure in this process (PYTHONPATH picks the tree)")
    parser.add_argument("--callgrind", action="store_true",
                        help="count the measured window under valgrind --tool=callgrind --cache-sim=yes: "
                             "instructions and last-level cache misses per SEND (deterministic, ~50x slower)")
    args = parser.parse_args()
    counts = [int(count) for count in args.topics.split(",")]
    if max(counts) > 10_000 or min(counts) < 1:
        parser.error("topic counts are 1..10,000 (the producers of one connection)")
    if args.child:
        import uvloop

        print(json.dumps(uvloop.run(_child(counts[0], args.messages))))
        return
    trees = args.src or [str(REPO / "src")]
    rows: dict[tuple[str, int], list[dict[str, Any]]] = {(tree, count): [] for tree in trees for count in counts}
    for repeat in range(args.repeats):
        for count in counts:
            for tree in trees:
                env = dict(os.environ, PYTHONPATH=str(Path(tree).resolve()))
                command = [sys.executable, __file__, "--child", "--topics", str(count), "--messages", str(args.messages)]
                with tempfile.TemporaryDirectory() as tmp:
                    if args.callgrind:
                        env["CALLGRIND_CTL"] = "1"
                        command = ["valgrind", "--tool=callgrind", "--cache-sim=yes", "--instr-atstart=no",
                                   f"--callgrind-out-file={tmp}/callgrind.out", *command]
                    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=7200, check=True)
                    result = json.loads(done.stdout.strip().splitlines()[-1])
                    if args.callgrind:
                        result.update(callgrind_counts(f"{tmp}/callgrind.out", args.messages))
                rows[tree, count].append(result)
                print(f"repeat {repeat + 1} topics {count} {tree}: {rows[tree, count][-1]}", flush=True)
    print(f"\ntopics_send_cost: {args.messages:,} SENDs round robin per process, {args.repeats} processes per "
          f"row; load {os.getloadavg()[0]:.1f}")
    for (tree, count), results in rows.items():
        modes = "/".join(sorted({"compiled" if r["compiled"] else "pure" for r in results}))
        cost = sorted(r["us_per_send"] for r in results)
        counted = ""
        if args.callgrind:
            counted = "; " + "; ".join(
                f"{key} {statistics.median(r[key] for r in results):,.0f}"
                for key in ("instructions", "data_reads", "data_writes", "ll_misses"))
        print(f"{tree} ({modes}) topics {count:,}: us per SEND {cost[0]:.2f} / {statistics.median(cost):.2f} / "
              f"{cost[-1]:.2f}; per topic {statistics.median(r['objects_per_topic'] for r in results):.1f} "
              f"tracked objects, {statistics.median(r['bytes_per_topic'] for r in results):,.0f} bytes{counted}")


def callgrind_counts(path: str, messages: int) -> dict[str, float]:
    """Per message, from a callgrind output file: instructions (``Ir``), data reads and writes,
    and last-level cache misses (reads and writes: ``DLmr`` + ``DLmw``)."""
    events: list[str] = []
    totals: list[float] = []
    for line in Path(path).read_text().splitlines():
        if line.startswith("events:"):
            events = line.split()[1:]
        elif line.startswith(("totals:", "summary:")):
            totals = [float(value) for value in line.split()[1:]]
    named = dict(zip(events, totals, strict=False))
    return {"instructions": named.get("Ir", 0) / messages, "data_reads": named.get("Dr", 0) / messages,
            "data_writes": named.get("Dw", 0) / messages,
            "ll_misses": (named.get("DLmr", 0) + named.get("DLmw", 0)) / messages}


if __name__ == "__main__":
    main()
