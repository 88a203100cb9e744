"""``LazyEvent``: ``asyncio.Event``'s behaviour without its per-instance deque.

``asyncio.Event`` makes a ``collections.deque`` for its waiters in ``__init__`` (~0.7 KiB with its
first block) whether anyone ever waits or not. Every loaded topic held several (a producer's send
room, the append pipeline's and the ledger handle's drained flags): at 100,000 idle topics that
was ~200 MiB of empty deques (issue 22). Here the waiters' list exists only while someone waits.

Same contract as ``asyncio.Event``: ``set`` wakes every waiter (each returns True), ``clear``
makes later ``wait`` calls block, a cancelled waiter leaves the list. Not thread-safe (one loop).
"""

from __future__ import annotations

import asyncio


class LazyEvent:
    __slots__ = ("_flag", "_waiters")

    def __init__(self, *, is_set: bool = False) -> None:
        self._flag = is_set
        self._waiters: list[asyncio.Future[None]] | None = None  # only while someone waits

    def is_set(self) -> bool:
        return self._flag

    def set(self) -> None:
        if self._flag:
            return
        self._flag = True
        waiters, self._waiters = self._waiters, None
        if waiters:
            for waiter in waiters:
                if not waiter.done():
                    waiter.set_result(None)

    def clear(self) -> None:
        self._flag = False

    async def wait(self) -> bool:
        if self._flag:
            return True
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if self._waiters is None:
            self._waiters = []
        self._waiters.append(waiter)
        try:
            await waiter
            return True
        finally:
            # Declared, not inferred: mypy keeps ``self._waiters`` narrowed to a list across the
            # ``await``, but ``set`` may have dropped it meanwhile (compiled, the inferred list
            # type made the read of None a TypeError).
            waiters: list[asyncio.Future[None]] | None = self._waiters
            if waiters is not None and waiter in waiters:
                waiters.remove(waiter)
                if not waiters:
                    self._waiters = None
