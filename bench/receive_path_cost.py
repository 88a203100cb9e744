"""CPU per large SEND on the receive path alone: socket reads to decoded events (issue 22, batched).

The official client's batches are SEND frames of up to 128 KiB, and they arrive in several
socket reads. This feeds a fixed stream of ``--frames`` such SENDs (``--batch`` 1 KiB messages
each, a checksum block) through the broker's receive path without sockets: the connection's
protocol (``runtime/network.py`` ``_ConnectionProtocol``) gets reads of ``--read-bytes`` as the
event loop delivers them, the reader takes what is buffered (``take``, the broker's whole-chunk
reads) and feeds it to a ``ServerConnection`` (``receive_data``: frame decoder, checksum,
events). The read itself is emulated as uvloop makes it: one ``memcpy`` into a 256 KiB buffer
standing for the kernel's copy, handed over as a new ``bytes`` (``data_received``).

Printed per tree: thread CPU (``time.thread_time_ns``) per SEND and per KiB received, min /
median / max over ``--repeats`` processes (trees alternate, each its own process, compiled when
its build is there). With ``--callgrind``, each process runs once under ``valgrind --tool=callgrind
--cache-sim=yes`` over the measured window and prints instructions, data reads and writes, and
last-level cache misses per SEND instead (deterministic: no noise from the shared machine).

Run: ``.venv/bin/python bench/receive_path_cost.py --src /tmp/base24/src --src $PWD/src``
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
_READ_SCRATCH_BYTES = 256 * 1024


def _child(frames: int, batch: int, read_bytes: int, warm: int) -> dict[str, Any]:
    sys.path.insert(0, str(REPO / "bench"))
    from send_path_cost import send_frames

    from magnetar import _compiled
    from magnetar.base.limits import PULSAR_READ_CHUNK_BYTES
    from magnetar.protocol.pulsar import ServerConnection, encode_command
    from magnetar.protocol.pulsar.client_connection import ClientConfig, connect_command
    from magnetar.runtime.network import _ConnectionProtocol

    class _Transport:
        def set_write_buffer_limits(self, high: int) -> None:
            pass

        def pause_reading(self) -> None:
            pass

        def resume_reading(self) -> None:
            pass

        def is_closing(self) -> bool:
            return False

    sends = send_frames(warm + frames, batch=batch)
    stream = b"".join(sends)
    warm_bytes = sum(map(len, sends[:warm]))

    def run(data: bytes) -> tuple[int, int]:
        protocol = _ConnectionProtocol()
        protocol.connection_made(_Transport())  # type: ignore[arg-type]
        connection = ServerConnection(0)
        connection.receive_data(encode_command(connect_command(ClientConfig())), 0)
        connection.data_to_send()
        scratch = memoryview(bytearray(_READ_SCRATCH_BYTES))
        source = memoryview(data)
        events = 0
        position = 0
        started = time.thread_time_ns()
        while position < len(data):
            count = min(read_bytes, _READ_SCRATCH_BYTES, len(data) - position)
            scratch[:count] = source[position:position + count]
            protocol.data_received(bytes(scratch[:count]))
            position += count
            while protocol.first is not None:
                events += len(connection.receive_data(protocol.take(PULSAR_READ_CHUNK_BYTES), 0))
        return events, time.thread_time_ns() - started

    if warm:
        run(stream[:warm_bytes])
    callgrind = os.environ.get("RECEIVE_COST_CALLGRIND") == "1"
    if callgrind:
        subprocess.run(["callgrind_control", "--instr=on", str(os.getpid())], check=True, capture_output=True)
    events, cpu_ns = run(stream[warm_bytes:])
    if callgrind:
        subprocess.run(["callgrind_control", "--instr=off", str(os.getpid())], check=True, capture_output=True)
    assert events == frames, (events, frames)
    kib = (len(stream) - warm_bytes) / 1024
    return {"compiled": _compiled.MODE == "compiled", "us_per_send": cpu_ns / frames / 1000,
            "ns_per_kib": cpu_ns / kib}


def _one(tree: str, args: argparse.Namespace) -> dict[str, Any]:
    sys.path.insert(0, str(REPO / "bench"))
    from topics_send_cost import callgrind_counts

    env = dict(os.environ, PYTHONPATH=str(Path(tree).resolve()))
    command = [sys.executable, __file__, "--child", "--frames", str(args.frames), "--batch", str(args.batch),
               "--read-bytes", str(args.read_bytes), "--warm", str(args.warm)]
    if not args.callgrind:
        done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=1200, check=True)
        return dict(json.loads(done.stdout.strip().splitlines()[-1]))
    with tempfile.TemporaryDirectory() as tmp:
        out = f"{tmp}/callgrind.out"
        env["RECEIVE_COST_CALLGRIND"] = "1"
        done = subprocess.run(["valgrind", "--tool=callgrind", "--cache-sim=yes", "--instr-atstart=no",
                               f"--callgrind-out-file={out}", *command], env=env, capture_output=True, text=True,
                              timeout=3600, check=True)
        result = dict(json.loads(done.stdout.strip().splitlines()[-1]))
        result.update(callgrind_counts(out, args.frames))
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--src", action="append", default=[], help="a source tree (repeat for an A/B)")
    parser.add_argument("--frames", type=int, default=2_000, help="SENDs measured per process")
    parser.add_argument("--warm", type=int, default=50, help="SENDs through a first connection, not measured")
    parser.add_argument("--batch", type=int, default=128, help="1 KiB messages per SEND")
    parser.add_argument("--read-bytes", type=int, default=65_536, help="bytes per socket read")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--callgrind", action="store_true", help="count with callgrind (one process per tree)")
    parser.add_argument("--child", action="store_true", help="the measured process (PYTHONPATH picks the tree)")
    args = parser.parse_args()
    if args.child:
        print(json.dumps(_child(args.frames, args.batch, args.read_bytes, args.warm)))
        return
    trees = args.src or [str(REPO / "src")]
    repeats = 1 if args.callgrind else args.repeats
    rows: dict[str, list[dict[str, Any]]] = {tree: [] for tree in trees}
    for repeat in range(repeats):
        for tree in trees:
            result = _one(tree, args)
            rows[tree].append(result)
            print(f"repeat {repeat + 1} {tree}: "
                  + ", ".join(f"{k} {v:.3f}" if isinstance(v, float) else f"{k} {v}" for k, v in result.items()),
                  flush=True)
    print(f"\nreceive_path_cost: {args.frames:,} SENDs of {args.batch} x 1 KiB, reads of {args.read_bytes:,} "
          f"bytes, {repeats} process(es) per tree; load {os.getloadavg()[0]:.1f}")
    for tree, results in rows.items():
        modes = "/".join(sorted({"compiled" if r["compiled"] else "pure" for r in results}))
        parts = []
        for key in ("us_per_send", "ns_per_kib", "instructions", "data_reads", "data_writes", "ll_misses"):
            values = sorted(r[key] for r in results if key in r)
            if values:
                fmt = ".2f" if key in ("us_per_send",) else ",.0f"
                parts.append(f"{key} {values[0]:{fmt}} / {statistics.median(values):{fmt}} / {values[-1]:{fmt}}")
        print(f"{tree} ({modes}): " + "; ".join(parts))


if __name__ == "__main__":
    main()
