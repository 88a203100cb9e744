"""Benchmark (issue 22, session 22): the broker's fixed cost of a lone SEND, end to end over TCP.

At a modest rate (2,000 msg/s unbatched, the batched bench's ~650 entries/s, 100,000 topics round
robin) each SEND arrives alone: the broker pays its per-read and per-run steps per message (the
connection's read, the frame decode, the session, the topic's run, dedup and policy, the
receipt's encoding, the writer's wake-up and ``writev``, the loop passes and their system calls).
This measures that part of the broker alone: a broker (``node/broker.py`` ``start_broker``) on the
production TCP network (``runtime/network.py``) and uvloop, over the broker's ``MemoryLogStore``
(no ledger, no journal: an append completes one loop pass later), the cyclic GC tuned as the
standalone's; a client process sends pre-encoded 1 KiB SENDs of one producer ``--group`` at a time
(one write) and waits for their receipts before the next group. ``--group 1`` is the lone SEND;
``--group 8`` the same messages eight per read. ``--batch 128``: each SEND a batch of 128 1 KiB
messages (a 128 KiB frame, as the official client's batches), its bytes arriving in several reads
(the receive path's copies per byte: issue 22, batched CPU; use ``--messages 1000 --warm 100``).

Printed per tree and group: the loop thread's CPU per message (``time.thread_time_ns``) and, with
``--count`` (``perf stat --no-inherit`` on the broker process (its loop thread, not the client), counting the measured window alone through its
control fifos), user instructions, cycles, and the system calls ``read``, ``epoll_pwait`` (loop
passes), ``writev``/``write``/``sendto`` per message; min / median / max over ``--repeats``
processes. Trees alternate (``--src``; each its own compiled build, if it has one).

Run: ``.venv/bin/python bench/lone_send_cost.py --groups 1,8 --count --src /tmp/base22/src --src $PWD/src``
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
SYSCALLS = ("read", "epoll_pwait", "writev", "write", "sendto")
EVENTS = "instructions:u,cycles:u," + ",".join(f"syscalls:sys_enter_{name}" for name in SYSCALLS)


def _frames(count: int) -> list[bytes]:
    sys.path.insert(0, str(REPO / "bench"))
    from send_path_cost import send_frames

    return send_frames(count)


def _batch_frames(start: int, count: int, batch: int) -> list[bytes]:
    """``count`` SENDs from ``start``, each a batch of ``batch`` 1 KiB messages (as the official
    client's batches: ``--batch 128`` is a 128 KiB frame; ``cli.blast.SendTemplate``'s batch
    format), made as they are sent (held at once, the measured window's would take gigabytes)."""
    from magnetar.cli.blast import SendTemplate

    template = SendTemplate(1, "standalone-0-1", bytes(range(256)) * 4, batch_count=batch)
    return [template.frame(sequence_id) for sequence_id in range(start, start + count)]


def _client(port: int, group: int, warm: int, messages: int, batch: int = 1) -> None:
    """The client process: CONNECT, PRODUCER, ``warm`` SENDs, then ``ready`` on stdout; on ``go``
    from stdin the ``messages`` measured SENDs, ``group`` per write, each group's receipts awaited;
    then ``done``."""
    from magnetar.protocol.pulsar import encode_command, pb
    from magnetar.protocol.pulsar.client_connection import ClientConfig, connect_command

    sock = socket.create_connection(("127.0.0.1", port))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    buffer = bytearray()

    def frames_in(count: int) -> None:  # read until ``count`` whole frames came
        nonlocal buffer
        while count:
            while len(buffer) >= 4 and len(buffer) >= 4 + int.from_bytes(buffer[:4], "big"):
                del buffer[:4 + int.from_bytes(buffer[:4], "big")]
                count -= 1
                if not count:
                    return
            data = sock.recv(1 << 16)
            if not data:
                raise RuntimeError("the broker closed the connection")
            buffer += data

    sock.sendall(encode_command(connect_command(ClientConfig())))
    frames_in(1)
    sock.sendall(encode_command(pb.BaseCommand(type=pb.BaseCommand.PRODUCER, producer=pb.CommandProducer(
        topic="persistent://public/default/lone", producer_id=1, request_id=1, producer_name="standalone-0-1"))))
    frames_in(1)
    if batch > 1:
        for start in range(0, warm, group):
            sock.sendall(b"".join(_batch_frames(start, group, batch)))
            frames_in(group)
        ahead = b"".join(_batch_frames(warm, group, batch))
        print("ready", flush=True)
        sys.stdin.readline()
        for start in range(warm, warm + messages, group):
            sock.sendall(ahead)
            ahead = b"".join(_batch_frames(start + group, group, batch))  # made while the broker works
            frames_in(group)
        print("done", flush=True)
        sock.close()
        return
    sends = _frames(warm + messages)
    groups = [b"".join(sends[start:start + group]) for start in range(0, len(sends), group)]
    warm_groups = warm // group
    for data in groups[:warm_groups]:
        sock.sendall(data)
        frames_in(group)
    print("ready", flush=True)
    sys.stdin.readline()
    for data in groups[warm_groups:]:
        sock.sendall(data)
        frames_in(group)
    print("done", flush=True)
    sock.close()


def _perf(command: str) -> None:
    """``bench/topics_send_cost.py``'s ``perf stat --control`` hand-off (``PERF_CTL``)."""
    sys.path.insert(0, str(REPO / "bench"))
    from topics_send_cost import perf_control

    perf_control(command)


async def _broker(group: int, messages: int, warm: int, batch: int) -> dict[str, Any]:
    from magnetar import _compiled
    from magnetar.broker import BrokerConfig, MemoryLogStore
    from magnetar.metadata import MemoryMetadataServer
    from magnetar.node.broker import start_broker
    from magnetar.node.broker_generation import bootstrap_cluster
    from magnetar.runtime.clock import SystemClock
    from magnetar.runtime.gc_tuning import tune_gc_for_server
    from magnetar.runtime.network import TcpNetwork

    clock = SystemClock()
    store = await MemoryMetadataServer(clock).connect()
    server = await start_broker(BrokerConfig(), clock=clock, metadata=store, log_store=MemoryLogStore(),
                                network=TcpNetwork(), port=0)
    await bootstrap_cluster(server.service, web_url="http://127.0.0.1:9")
    tune_gc_for_server()
    env = dict(os.environ, PYTHONPATH=os.environ.get("PYTHONPATH", ""))
    client = await asyncio.create_subprocess_exec(
        sys.executable, __file__, "--client", "--port", str(server.port), "--groups", str(group),
        "--messages", str(messages), "--warm", str(warm), "--batch", str(batch), env=env,
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE)
    assert client.stdout is not None and client.stdin is not None
    if (await asyncio.wait_for(client.stdout.readline(), 120)).strip() != b"ready":
        raise RuntimeError("the client did not get ready")
    _perf("enable")
    started = time.thread_time_ns()
    client.stdin.write(b"go\n")
    line = await asyncio.wait_for(client.stdout.readline(), 600)
    cpu_ns = time.thread_time_ns() - started
    _perf("disable")
    if line.strip() != b"done":
        raise RuntimeError(f"the client ended with {line!r}")
    await client.wait()
    await server.close()
    return {"compiled": _compiled.MODE == "compiled", "us_per_msg": cpu_ns / messages / 1000}


def _counts(path: str) -> dict[str, float]:
    counts: dict[str, float] = {}
    for line in Path(path).read_text().splitlines():
        parts = line.split(",")
        if len(parts) > 3 and parts[0].strip().isdigit():
            counts[parts[2].strip()] = float(parts[0])
    return counts


def _one(tree: str, group: int, messages: int, warm: int, count: bool, batch: int) -> dict[str, Any]:
    env = dict(os.environ, PYTHONPATH=str(Path(tree).resolve()))
    command = [sys.executable, __file__, "--child", "--groups", str(group), "--messages", str(messages),
               "--warm", str(warm), "--batch", str(batch)]
    if not count:
        done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=1200, check=True)
        return dict(json.loads(done.stdout.strip().splitlines()[-1]))
    with tempfile.TemporaryDirectory() as tmp:
        control, ack, out = f"{tmp}/ctl", f"{tmp}/ack", f"{tmp}/perf.csv"
        os.mkfifo(control)
        os.mkfifo(ack)
        env["PERF_CTL"] = f"{control},{ack}"
        done = subprocess.run(["perf", "stat", "--no-inherit", "-x,", "-o", out, "-D", "-1", "--control", f"fifo:{control},{ack}",
                               "-e", EVENTS, "--", *command], env=env, capture_output=True, text=True,
                              timeout=1200, check=True)
        result = dict(json.loads(done.stdout.strip().splitlines()[-1]))
        for name, value in _counts(out).items():
            short = name.replace("syscalls:sys_enter_", "").replace(":u", "")
            result[short] = value / messages
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--src", action="append", default=[], help="a source tree (repeat for an A/B)")
    parser.add_argument("--groups", default="1,8", help="SENDs per client write, comma-separated")
    parser.add_argument("--messages", type=int, default=20_000, help="SENDs measured per process")
    parser.add_argument("--warm", type=int, default=2_000, help="SENDs before the measured window")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--count", action="store_true", help="count instructions and system calls (perf stat)")
    parser.add_argument("--batch", type=int, default=1,
                        help="1 KiB messages per SEND (a batch; 128: the official client's 128 KiB entries)")
    parser.add_argument("--child", action="store_true", help="the broker process (PYTHONPATH picks the tree)")
    parser.add_argument("--client", action="store_true", help="the client process")
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args()
    groups = [int(group) for group in args.groups.split(",")]
    if any(args.messages % group or args.warm % group for group in groups):
        parser.error("--messages and --warm must be multiples of every group")
    if args.client:
        _client(args.port, groups[0], args.warm, args.messages, args.batch)
        return
    if args.child:
        import uvloop

        print(json.dumps(uvloop.run(_broker(groups[0], args.messages, args.warm, args.batch))))
        return
    trees = args.src or [str(REPO / "src")]
    rows: dict[tuple[str, int], list[dict[str, Any]]] = {(tree, group): [] for tree in trees for group in groups}
    for repeat in range(args.repeats):
        for group in groups:
            for tree in trees:
                result = _one(tree, group, args.messages, args.warm, args.count, args.batch)
                rows[tree, group].append(result)
                print(f"repeat {repeat + 1} group {group} {tree}: "
                      + ", ".join(f"{k} {v:.3f}" if isinstance(v, float) else f"{k} {v}" for k, v in result.items()),
                      flush=True)
    print(f"\nlone_send_cost: {args.messages:,} SENDs of {args.batch} message(s) per process, "
          f"{args.repeats} processes per row; "
          f"load {os.getloadavg()[0]:.1f}")
    for (tree, group), results in rows.items():
        modes = "/".join(sorted({"compiled" if r["compiled"] else "pure" for r in results}))
        parts = []
        for key in ("us_per_msg", "instructions", "cycles", *SYSCALLS):
            values = sorted(r[key] for r in results if key in r)
            if values:
                fmt = ",.0f" if key in ("instructions", "cycles") else ".2f"
                parts.append(f"{key} {values[0]:{fmt}} / {statistics.median(values):{fmt}} / {values[-1]:{fmt}}")
        print(f"{tree} ({modes}) group {group}: " + "; ".join(parts))


if __name__ == "__main__":
    main()
