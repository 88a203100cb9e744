"""Child process for the kill -9 test: a stream of CAS writes on the embedded store.

Usage: python -m tests.metadata.cas_child DIR. Prints ``ok <path> <version> <value>`` after each
write returned (flushed), forever, until it is killed.
"""

from __future__ import annotations

import asyncio
import sys

from magnetar.runtime.metadata import open_metadata_store

KEYS_COUNT = 4


async def main(directory: str) -> None:
    store = await open_metadata_store(f"embedded:{directory}")
    versions = {}
    for key in range(KEYS_COUNT):
        path = f"/cas/k{key}"
        await store.put(path, b"0", -1)
        versions[path] = 0
        print(f"ok {path} 0 0", flush=True)
    sequence = 0
    while True:
        sequence += 1
        path = f"/cas/k{sequence % KEYS_COUNT}"
        value = str(sequence).encode()
        versions[path] = await store.put(path, value, versions[path])
        print(f"ok {path} {versions[path]} {sequence}", flush=True)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))
