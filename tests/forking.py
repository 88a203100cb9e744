"""A check shared by the tests of per-process writers (``runtime.disk_threads``' pool,
``runtime.disk_writer``'s native writer): what the parent used still works in a forked child."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Callable


def works_in_parent_then_forked_child(write_once: Callable[[str], Awaitable[None]]) -> None:
    """Run ``write_once("parent")``, fork, run ``write_once("child")`` in the child (on a fresh
    loop) and require the child to exit 0, which it does only if its write completed."""
    asyncio.run(write_once("parent"))
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            asyncio.run(write_once("child"))
            code = 0
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
