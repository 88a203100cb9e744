"""CPU per receive of one SEND through a connection's read loop, the session, producer and topic,
and back to its receipt's write (issue 22: the per-run work at a modest rate).

At 2,000 msg/s unbatched every SEND is a receive of its own, so whatever the broker does per
receive or per run (coroutine frames, a flush callback, loop passes) is paid per message. This
drives the production ``_ConnectionLoop._read_loop`` (``node/broker.py``) over an in-memory
connection whose ``read`` returns one SEND frame at a time after the previous receipt was written
(the loop passes a memory log's completion takes), on a uvloop loop; the topic's log is the
broker's ``MemoryLogStore`` (no ledger, no journal: those are measured elsewhere). Printed: the
thread's CPU time per message (``time.thread_time_ns``), min / median / max over ``--repeats``,
with the loop passes per message. Compiled or pure, whichever ``magnetar._compiled`` chose;
compare two trees by running each with its ``src`` first on ``PYTHONPATH``.

Run: ``PYTHONPATH=src .venv/bin/python bench/session_run_cost.py``
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path

import uvloop

sys.path.insert(0, str(Path(__file__).resolve().parent))

from send_path_cost import send_frames

from magnetar import _compiled
from magnetar.broker import BrokerConfig, MemoryLogStore
from magnetar.broker.service import BrokerService
from magnetar.metadata import MemoryMetadataServer
from magnetar.node.broker import BrokerServer, _ConnectionLoop
from magnetar.node.broker_generation import bootstrap_cluster
from magnetar.protocol.pulsar import encode_command, pb
from magnetar.protocol.pulsar.client_connection import ClientConfig, connect_command
from magnetar.protocol.pulsar.frames import Buffer
from magnetar.runtime.clock import SystemClock

_PASSES_MAX = 1000  # loop passes one receipt may take before the run is declared stuck


class _Conn:
    """Hands the read loop one frame per ``read`` once the previous receipt was written."""

    peer = "127.0.0.1:9"
    writing_paused = False

    def __init__(self, frames: list[bytes]) -> None:
        self.frames = frames
        self.next = 0
        self.written = 0  # writes (each a receipt here)
        self.passes = 0

    async def read(self, _max_bytes: int) -> bytes:
        while self.written < self.next:  # the previous SEND's receipt not written yet
            self.passes += 1
            if self.passes > _PASSES_MAX * (self.next + 1):
                raise RuntimeError("a receipt never came")
            await asyncio.sleep(0)
        if self.next == len(self.frames):
            return b""
        self.next += 1
        return self.frames[self.next - 1]

    def write(self, _data: Buffer) -> None:
        self.written += 1

    def writelines(self, _parts: list[Buffer]) -> None:
        self.written += 1

    async def drain(self) -> None:
        return None

    def is_closing(self) -> bool:
        return False

    def close(self) -> None:
        return None


async def _setup_frames() -> list[bytes]:
    producer = pb.BaseCommand(type=pb.BaseCommand.PRODUCER, producer=pb.CommandProducer(
        topic="persistent://public/default/cost", producer_id=1, request_id=1, producer_name="standalone-0-1"))
    return [encode_command(connect_command(ClientConfig())), encode_command(producer)]


async def one_repeat(messages: int) -> tuple[float, float]:
    clock = SystemClock()
    store = await MemoryMetadataServer(clock).connect()
    service = BrokerService(BrokerConfig(), MemoryLogStore(), store, clock=clock)
    await bootstrap_cluster(service, web_url="http://127.0.0.1:9")  # tenant public, namespace public/default
    server = BrokerServer(service, network=None, clock=clock)  # type: ignore[arg-type]
    conn = _Conn(await _setup_frames())
    loop = _ConnectionLoop(server, conn)  # type: ignore[arg-type]
    await asyncio.wait_for(loop._read_loop(), 30)  # CONNECT and PRODUCER read; their answers written
    for _ in range(_PASSES_MAX):  # the producer is created by a request task of its own
        if 1 in loop.session.producers:
            break
        await asyncio.sleep(0)
    conn.frames, conn.next, conn.written = send_frames(200), 0, 0  # warm-up
    await asyncio.wait_for(loop._read_loop(), 30)
    conn.frames, conn.next, conn.written, conn.passes = send_frames(messages), 0, 0, 0
    started = time.thread_time_ns()
    await asyncio.wait_for(loop._read_loop(), 120)
    cpu_ns = time.thread_time_ns() - started
    if conn.written != messages:
        raise RuntimeError(f"{conn.written} receipts written for {messages} SENDs")
    await service.close()
    return cpu_ns / messages / 1000, conn.passes / messages


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    results = [uvloop.run(one_repeat(args.messages)) for _ in range(args.repeats)]
    costs = sorted(cost for cost, _ in results)
    print(f"{_compiled.MODE}, {args.messages} SENDs x {args.repeats}: thread CPU us per receive of one SEND, "
          f"min / median / max {costs[0]:.2f} {statistics.median(costs):.2f} {costs[-1]:.2f}; "
          f"extra loop passes per message {statistics.median(p for _, p in results):.2f}")


if __name__ == "__main__":
    main()
