"""``with_deadline``: one reaper per clock bounds every pending call; only its own cancellations
become ``OperationTimeoutError``."""

from __future__ import annotations

import asyncio

import pytest

from magnetar.base.errors import OperationTimeoutError
from magnetar.ledger import _deadline
from magnetar.ledger._deadline import with_deadline
from tests.manual_clock import ManualClock, settle


def test_result_before_the_deadline_and_nothing_left_pending() -> None:
    async def run() -> None:
        clock = ManualClock()
        assert await with_deadline(clock, 1000, asyncio.sleep(0, result=7), "quick") == 7
        reaper = _deadline._REAPERS[clock]
        assert reaper._active == 0 and not reaper._heap and reaper._reaper is None

    asyncio.run(run())


def test_expired_call_raises_timeout_and_others_keep_running() -> None:
    async def run() -> None:
        clock = ManualClock()
        slow_done = asyncio.get_running_loop().create_future()
        later = asyncio.get_running_loop().create_future()
        slow = asyncio.ensure_future(with_deadline(clock, 100, slow_done, "slow"))
        patient = asyncio.ensure_future(with_deadline(clock, 500, later, "patient"))
        await clock.advance(0.099)
        assert not slow.done()
        await clock.advance(0.002)
        await settle()
        with pytest.raises(OperationTimeoutError, match="slow took longer than 100 ms"):
            slow.result()
        assert slow_done.cancelled()  # the awaited future is cancelled with the call
        assert not patient.done()
        later.set_result("ok")
        assert await patient == "ok"

    asyncio.run(run())


def test_an_earlier_deadline_added_later_is_still_enforced() -> None:
    async def run() -> None:
        clock = ManualClock()
        loop = asyncio.get_running_loop()
        long_call = asyncio.ensure_future(with_deadline(clock, 10_000, loop.create_future(), "long"))
        await settle()
        short_call = asyncio.ensure_future(with_deadline(clock, 50, loop.create_future(), "short"))
        await clock.advance(0.06)
        await settle()
        assert isinstance(short_call.exception(), OperationTimeoutError)
        assert not long_call.done()
        long_call.cancel()
        await settle()

    asyncio.run(run())


def test_outside_cancellation_is_not_a_timeout() -> None:
    """Negative control: cancelling the caller must stay a cancellation, never an OperationTimeoutError."""
    async def run() -> None:
        clock = ManualClock()
        call = asyncio.ensure_future(with_deadline(clock, 1000, asyncio.get_running_loop().create_future(), "x"))
        await settle()
        call.cancel()
        await settle()
        assert call.cancelled()
        await clock.advance(2)  # the deadline passing later changes nothing
        assert _deadline._REAPERS[clock]._active == 0

    asyncio.run(run())


def test_zero_timeout_means_unbounded() -> None:
    async def run() -> None:
        clock = ManualClock()
        assert await with_deadline(clock, 0, asyncio.sleep(0, result="x"), "unbounded") == "x"
        assert clock not in _deadline._REAPERS

    asyncio.run(run())
