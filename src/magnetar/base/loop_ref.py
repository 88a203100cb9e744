"""``LoopRef``: the running event loop without a system call per lookup.

``asyncio.get_running_loop()`` (and everything that calls it: ``asyncio.Future()`` without a
loop, ``asyncio.create_task``) checks that the loop it cached belongs to this process with a
``getpid()`` system call each time (CPython 3.11, ``_asynciomodule.c``; glibc does not cache the
pid). On the bench VM a ``getpid`` costs ~1-2.6 us (its kernel entry pays the CPU's speculation
mitigations), and the message path called it ~2 times per message at a steady 2,000 msg/s
(``perf record -e syscalls:sys_enter_getpid``, docs/performance.md, session 21): the local bookie
transport's answer, the broker's writer wake-up, the journal's group write and its group timer.

An object that lives on one loop holds a ``LoopRef`` and asks it instead: the loop is looked up
once per thread and kept while it runs. A different thread, or a loop that stopped (tests run one
loop after another), looks it up again, so the answer is always a loop running on the caller's
thread. Like asyncio's own futures and locks, an object is not meant to be shared by loops running
at the same time in different threads; if it is, each thread's lookups are correct but uncached.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Final

_GET_IDENT: Final = threading.get_ident
_GET_RUNNING_LOOP: Final = asyncio.get_running_loop


class LoopRef:
    __slots__ = ("_loop", "_thread")

    def __init__(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread = 0

    def get(self) -> asyncio.AbstractEventLoop:
        """The loop running on this thread (``RuntimeError`` when none is, like asyncio's)."""
        loop = self._loop
        if loop is not None and self._thread == _GET_IDENT() and loop.is_running():
            return loop
        loop = _GET_RUNNING_LOOP()
        self._loop, self._thread = loop, _GET_IDENT()
        return loop
