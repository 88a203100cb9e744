"""Compiled vs pure Python on single per-message operations (issue 22, the compiled hot path).

Runs each operation below in a child interpreter per mode, the modes alternating, ``--repeats``
times: ``pure`` (``MAGNETAR_PURE_PYTHON=1``) and ``compiled`` (the build ``make compile`` makes;
the child refuses to run if it is not active). Printed: microseconds per operation, best of
``--repeats``, and compiled/pure. The time is the child's CPU time (``time.process_time``), not
the wall clock: time spent waiting for a core on a busy machine is left out (a shared machine at
load 12 moved wall-clock best-ofs by 2-10x between runs).

* ``bookie_add_roundtrip``: encode a 1 KiB bookie ADD request (``EncodedEntry.build``, CRC32C
  digest) and decode it from the wire (``protocol/bookie/codec.py``);
* ``position_ops``: ``Position`` construction, comparisons and a dict lookup (``base/types.py``);
* ``send_receipt``: a SEND_RECEIPT frame encoded without protobuf (``protocol/pulsar/fast.py``);
* ``fault_points``: three unarmed fault points as the per-message path passes them
  (``faults.point``, ``faults.gate`` with its callback, ``faults.tears``; ``faults/points.py``);
* ``dispatch_entry``: a Shared dispatcher's pass over one stored 1 KiB entry to a consumer with
  permits (the entry's metadata parsed, the consumer chosen, the MESSAGE handed to the channel, the
  pending table) and its acknowledgement (``broker/dispatcher*.py``, ``broker/consumer.py``).

Run: ``PYTHONPATH=src .venv/bin/python bench/compiled_micro.py --repeats 5``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import timeit
from collections.abc import Callable
from pathlib import Path

SRC = Path(__file__).resolve().parent.parent / "src"
LOOPS = 20_000


def _child(mode: str) -> dict[str, float]:
    import magnetar._compiled as compiled
    from magnetar import faults
    from magnetar.base.types import Position
    from magnetar.protocol.bookie.codec import AddRequest, EncodedEntry, FrameDecoder, encode
    from magnetar.protocol.pulsar.fast import encode_send_receipt

    if mode != compiled.MODE:
        raise SystemExit(f"wanted {mode}, running {compiled.MODE}: {compiled.REASON}")
    payload = b"x" * 1024

    def bookie_add_roundtrip() -> None:
        frame = encode(AddRequest(7, EncodedEntry.build(5, 9, 8, payload), master_key=b"k"))
        FrameDecoder().feed(frame)

    table = {Position(1, i): i for i in range(64)}

    def position_ops() -> None:
        a, b = Position(1, 5), Position(1, 6)
        _ = (a < b, a <= b, a == b, b > a, table.get(a))

    def send_receipt() -> None:
        encode_send_receipt(3, 12345, 77, 4242)

    def passed(_error: object, _arg: object) -> None:
        return None

    def fault_points() -> None:
        faults.point("broker.after_persist_before_receipt")
        faults.gate("broker.after_receipt", passed, None)
        faults.tears("bookie.journal.mid_write")

    dispatch_entry = _dispatch_op(payload)
    return {
        name: min(timeit.repeat(fn, number=LOOPS, repeat=3, timer=time.process_time)) / LOOPS * 1e6
        for name, fn in (("bookie_add_roundtrip", bookie_add_roundtrip), ("position_ops", position_ops),
                         ("send_receipt", send_receipt), ("fault_points", fault_points),
                         ("dispatch_entry", dispatch_entry))
    }


def _dispatch_op(payload: bytes) -> Callable[[], None]:
    """One Shared-dispatcher pass over one entry and its ack, over stub log, cursor and channel."""
    import struct

    from magnetar import faults
    from magnetar.base.entry import Entry
    from magnetar.base.types import Position
    from magnetar.broker.config import BrokerConfig
    from magnetar.broker.consumer import Consumer, SubType
    from magnetar.broker.dispatcher_shared import SharedDispatcher
    from magnetar.protocol.pulsar import pb

    assert faults.armed() == {}
    metadata = pb.MessageMetadata(producer_name="p", sequence_id=1, publish_time=1).SerializeToString()
    position = Position(1, 0)
    entry = Entry(position, struct.pack(">I", len(metadata)) + metadata + payload)

    class Stub:
        name = "s"
        mark_delete_position = Position(1, -1)
        last_position = position

        def is_acked(self, _position: Position) -> bool:
            return False

        def batch_ack_set(self, _position: Position, _size: int) -> None:
            return None

        def send_message(self, *_args: object) -> None:
            return None

        def writable(self) -> bool:
            return True

        def is_open(self) -> bool:
            return True

    stub = Stub()
    dispatcher = SharedDispatcher(stub, stub, BrokerConfig(), -1)  # type: ignore[arg-type]
    consumer = Consumer(1, "c", SubType.SHARED, stub)
    dispatcher.consumers.append(consumer)

    def dispatch_entry() -> None:
        consumer.add_permits(1)
        dispatcher._send([entry], replay=False)
        dispatcher.acknowledged((position,))

    return dispatch_entry


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--child", default="")
    args = parser.parse_args()
    if args.child:
        print(json.dumps(_child(args.child)))
        return
    best: dict[str, dict[str, float]] = {"pure": {}, "compiled": {}}
    for _ in range(args.repeats):
        for mode in ("pure", "compiled"):
            env = dict(os.environ, PYTHONPATH=str(SRC))
            env.pop("MAGNETAR_PURE_PYTHON", None)
            if mode == "pure":
                env["MAGNETAR_PURE_PYTHON"] = "1"
            out = subprocess.run([sys.executable, __file__, "--child", mode], env=env, check=True,
                                 capture_output=True, text=True, timeout=300).stdout
            for name, us in json.loads(out).items():
                best[mode][name] = min(us, best[mode].get(name, us))
    print(f"bench/compiled_micro.py --repeats {args.repeats} (us per operation, best of the repeats)")
    for name in best["pure"]:
        pure, compiled = best["pure"][name], best["compiled"][name]
        print(f"{name:22s} pure {pure:8.2f}  compiled {compiled:8.2f}  compiled/pure {compiled / pure:.2f}")


if __name__ == "__main__":
    main()
