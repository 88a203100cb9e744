"""``LoopRef`` answers the loop running on the caller's thread, and keeps it between calls (no
``asyncio.get_running_loop`` and its ``getpid`` per call) only while that loop runs on that
thread."""

from __future__ import annotations

import asyncio
import threading

import pytest

from magnetar.base.loop_ref import LoopRef


class _Kept:
    """Stands in for a kept loop: shows whether ``get`` answers from what it kept."""

    def __init__(self, running: bool) -> None:
        self.running = running

    def is_running(self) -> bool:
        return self.running


def test_the_running_loop_is_kept_while_it_runs_on_this_thread() -> None:
    ref = LoopRef()

    async def main() -> None:
        loop = asyncio.get_running_loop()
        assert ref.get() is loop and ref.get() is loop
        kept = _Kept(running=True)
        ref._loop = kept  # type: ignore[assignment]
        # Answered from what it kept, with no lookup (negative control: a ``get`` that looks the
        # loop up on every call answers ``loop`` here).
        assert ref.get() is kept  # type: ignore[comparison-overlap]
        kept.running = False  # the kept loop stopped: looked up again
        assert ref.get() is loop
    asyncio.run(main())


def test_one_loop_after_another_each_gets_its_own() -> None:
    ref = LoopRef()
    seen: list[asyncio.AbstractEventLoop] = []

    async def main() -> None:
        seen.append(ref.get())
        assert seen[-1] is asyncio.get_running_loop()
    asyncio.run(main())
    asyncio.run(main())  # the first loop is closed: not answered again
    assert seen[0] is not seen[1] and seen[0].is_closed()


def test_another_thread_gets_the_loop_running_there() -> None:
    ref = LoopRef()
    answers: list[bool] = []

    async def on_thread() -> None:
        answers.append(ref.get() is asyncio.get_running_loop())

    async def main() -> None:
        assert ref.get() is asyncio.get_running_loop()
        # While this loop runs (and is kept), another thread's loop asks the same ref.
        thread = threading.Thread(target=asyncio.run, args=(on_thread(),))
        thread.start()
        await asyncio.get_running_loop().run_in_executor(None, thread.join, 10.0)
        assert ref.get() is asyncio.get_running_loop()
    asyncio.run(main())
    assert answers == [True]


def test_no_running_loop_is_an_error() -> None:
    with pytest.raises(RuntimeError):
        LoopRef().get()
