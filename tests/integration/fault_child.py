"""A real process that passes a fault point in a loop, as production code does.

It prints ``progress N`` (flushed) before the N-th pass, arms faults from MAGNETAR_FAULTS exactly
as a composition root does, and exits 0 after 20 passes if nothing killed it.
"""

from __future__ import annotations

import asyncio
import sys

from magnetar import faults


async def main(point: str) -> None:
    faults.arm_from_env()
    for n in range(1, 21):
        print(f"progress {n}", flush=True)
        await faults.point(point)
    print("finished", flush=True)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))
