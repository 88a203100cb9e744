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

    def _add_waiter(self, waiter: asyncio.Future[None]) -> None:
        # Not inline in ``wait``: there mypy kept ``self._waiters`` narrowed to a list across the
        # ``await`` (the list made here), but ``set`` may drop it meanwhile; compiled, the read
        # after the ``await`` then checked for a list and raised ``TypeError`` on ``None``.
        waiters = self._waiters
        if waiters is None:
            waiters = self._waiters = []
        waiters.append(waiter)

    async def wait(self) -> bool:
        if self._flag:
            return True
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._add_waiter(waiter)
        try:
            await waiter
            return True
        finally:
            waiters = self._waiters
            if waiters is not None and waiter in waiters:
                waiters.remove(waiter)
                if not waiters:
                    self._waiters = None
