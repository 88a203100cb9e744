"""Benchmark (issue 22, session 21): ``EncodedEntry.build`` per entry, trees side by side.

``EncodedEntry.build`` runs once per add in the ledger client (``LedgerHandle._send_batch``):
the digest (CRC32C over the ledger, entry and LAC fields and the payload), the header and one
copy of the payload. Each ``--src`` tree runs in a process of its own (``PYTHONPATH=<tree>``, so
its own compiled build if it has one; the mode is printed), the trees alternating per repeat;
per tree and payload size, min / median / max of the repeats' ns per build.

    .venv/bin/python bench/encoded_entry_cost.py --src /tmp/base21/src --src $PWD/src
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

# One process per tree and repeat: the build loop over ``--builds`` entries of each size, after
# a warm-up of a tenth of them; prints {"mode": ..., "<size>": ns per build, ...}.
_CHILD = """
import json, sys, time
import magnetar._compiled as compiled
from magnetar.protocol.bookie.codec import EncodedEntry
builds, sizes = int(sys.argv[1]), [int(s) for s in sys.argv[2].split(",")]
out = {"mode": compiled.MODE}
for size in sizes:
    payload = bytes(range(256)) * (size // 256) + bytes(size % 256)
    count = max(1, builds * 1024 // max(size, 1024))
    build = EncodedEntry.build
    for i in range(count // 10 + 1):
        build(7, i, i - 1, payload)
    start = time.perf_counter_ns()
    for i in range(count):
        build(7, i, i - 1, payload)
    out[str(size)] = (time.perf_counter_ns() - start) / count
print(json.dumps(out))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--src", action="append", required=True, help="a tree's src directory (repeatable)")
    parser.add_argument("--builds", type=int, default=200_000, help="1 KiB builds per repeat (fewer for larger sizes)")
    parser.add_argument("--sizes", default="1024,102400", help="payload bytes, comma-separated")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    results: dict[str, dict[str, list[float]]] = {src: {} for src in args.src}
    modes: dict[str, str] = {}
    for _ in range(args.repeats):
        for src in args.src:
            env = dict(os.environ, PYTHONPATH=src)
            done = subprocess.run([sys.executable, "-c", _CHILD, str(args.builds), args.sizes], env=env,
                                  capture_output=True, text=True, check=True, timeout=600)
            row = json.loads(done.stdout.strip().splitlines()[-1])
            modes[src] = row.pop("mode")
            for size, ns in row.items():
                results[src].setdefault(size, []).append(ns)
    for src in args.src:
        for size, values in results[src].items():
            print(f"{src} ({modes[src]}) {size} B: ns per build min {min(values):.0f} / median "
                  f"{statistics.median(values):.0f} / max {max(values):.0f} ({len(values)} repeats)")


if __name__ == "__main__":
    main()
