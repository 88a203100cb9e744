"""Compiled vs pure Python on single per-message operations (issue 22, the compiled hot path).

Runs each operation below in a child interpreter per mode, the modes alternating, ``--repeats``
times: ``pure`` (``MAGNETAR_PURE_PYTHON=1``) and ``compiled`` (the build ``make compile`` makes;
the child refuses to run if it is not active). Printed: microseconds per operation, best of
``--repeats``, and compiled/pure. These do not move with the machine's load as much as the
standalone's CPU does (a best-of time of a loop on one core).

* ``bookie_add_roundtrip``: encode a 1 KiB bookie ADD request (``EncodedEntry.build``, CRC32C
  digest) and decode it from the wire (``protocol/bookie/codec.py``);
* ``position_ops``: ``Position`` construction, comparisons and a dict lookup (``base/types.py``);
* ``send_receipt``: a SEND_RECEIPT frame encoded without protobuf (``protocol/pulsar/fast.py``).

Run: ``PYTHONPATH=src .venv/bin/python bench/compiled_micro.py --repeats 5``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import timeit
from pathlib import Path

SRC = Path(__file__).resolve().parent.parent / "src"
LOOPS = 20_000


def _child(mode: str) -> dict[str, float]:
    import magnetar._compiled as compiled
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

    return {
        name: min(timeit.repeat(fn, number=LOOPS, repeat=3)) / LOOPS * 1e6
        for name, fn in (("bookie_add_roundtrip", bookie_add_roundtrip), ("position_ops", position_ops),
                         ("send_receipt", send_receipt))
    }


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
