"""What each of many idle objects keeps: tracked objects and bytes per item, measured the same way
by every layer's footprint test (``tests/broker/test_footprint.py``,
``tests/managed_ledger/test_footprint.py``; issue 22, 100,000 topics)."""

from __future__ import annotations

import gc
import tracemalloc
from collections.abc import Awaitable, Callable, Sequence


async def per_item(load: Callable[[list[str]], Awaitable[Sequence[object]]], prefix: str, warm: int,
                   measured: int) -> tuple[float, float]:
    """``load`` ``warm`` items first (the state they share: parents, caches, interned names), then
    ``measured`` more under ``tracemalloc``: (tracked objects, bytes) per measured item. Every
    loaded item is kept referenced until the counts are taken."""
    kept = list(await load([f"{prefix}warm-{i}" for i in range(warm)]))
    gc.collect()
    before = len(gc.get_objects())
    tracemalloc.start()
    try:
        kept += await load([f"{prefix}idle-{i}" for i in range(measured)])
        gc.collect()
        bytes_per = tracemalloc.get_traced_memory()[0] / measured
    finally:
        tracemalloc.stop()
    objects_per = (len(gc.get_objects()) - before) / measured
    assert len(kept) == warm + measured
    return objects_per, bytes_per
