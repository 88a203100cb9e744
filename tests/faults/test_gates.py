"""``faults.gate`` and its per-message forms ``gate0``/``gate1`` (and ``faults.unarmed`` before
``gate1``, the continuation then called by the caller): one point, the same behaviour.

Each form is driven through the same arming (unarmed, ``error``, ``delay``, ``hang``, ``crash``,
``@N``) and must call ``then`` with the same arguments, exactly once, at the same moment (inline or
later), and count the same hits. A fast form that skipped the arming check (calling ``then`` inline
whatever is armed) fails every armed case here; so does an ``unarmed`` that answers True while the
point is armed (run: every armed case of the ``unarmed-first`` form fails).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

from magnetar import faults
from tests.managed_ledger.harness import until

POINT = "broker.after_receipt"
Calls = list[tuple[str, object]]


def _pass(form: str, calls: Calls, called: asyncio.Event | None = None) -> None:
    """Pass ``POINT`` through ``form``; ``then`` records (its error's type name or None, its arg)
    and sets ``called``."""

    def record(error: BaseException | None, arg: object) -> None:
        calls.append((type(error).__name__ if error else "ok", arg))
        if called is not None:
            called.set()

    def then0(error: BaseException | None) -> None:
        record(error, None)

    def then1(error: BaseException | None, arg: int) -> None:
        record(error, arg)

    def then2(error: BaseException | None, arg: int, more: str) -> None:
        record(error, (arg, more))

    if form == "gate0":
        faults.gate0(POINT, then0)
    elif form == "gate1":
        faults.gate1(POINT, then1, 7)
    elif form == "unarmed-first":  # the per-message pattern of compiled callers (``ledger/handle.py``)
        if faults.unarmed(POINT):
            then1(None, 7)
        else:
            faults.gate1(POINT, then1, 7)
    elif form == "gate":
        faults.gate(POINT, then2, 7, "x")
    else:
        faults.gate(POINT, then0)


FORMS = ["gate0", "gate1", "unarmed-first", "gate", "gate-no-args"]
ARG = {"gate0": None, "gate1": 7, "unarmed-first": 7, "gate": (7, "x"), "gate-no-args": None}


@pytest.mark.parametrize("form", FORMS)
def test_unarmed_calls_then_inline(form: str) -> None:
    calls: Calls = []
    _pass(form, calls)
    assert calls == [("ok", ARG[form])]
    assert faults.hits(POINT) == 0


@pytest.mark.parametrize("form", FORMS)
def test_error_from_the_nth_hit_calls_then_with_the_fault(form: str) -> None:
    faults.arm(POINT, "error", from_hit=2)
    calls: Calls = []
    for _ in range(3):
        _pass(form, calls)
    assert calls == [("ok", ARG[form]), ("InjectedFaultError", ARG[form]), ("InjectedFaultError", ARG[form])]
    assert faults.hits(POINT) == 3


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("action", ["delay", "hang"])
def test_delay_and_hang_call_then_later_once(form: str, action: str) -> None:
    faults.arm(POINT, action, delay_ms=1)
    calls: Calls = []

    async def go() -> None:
        called = asyncio.Event()
        _pass(form, calls, called)
        assert calls == []  # held: not inline
        if action == "hang":
            await until(lambda: faults.holding(POINT))  # the held continuation waits for release
            assert calls == []
            faults.release(POINT)
        await asyncio.wait_for(called.wait(), 10)  # the delay is 1 ms of the loop's clock

    asyncio.run(go())
    assert calls == [("ok", ARG[form])]


@pytest.mark.parametrize("form", FORMS)
def test_a_hang_released_before_its_continuation_ran_lets_it_through(form: str) -> None:
    """``release`` right after the pass, before the held continuation's task first ran: it must not
    then wait for a release that already happened (it did, forever: the control, without the
    armed check in ``points._wait``)."""
    faults.arm(POINT, "hang")
    calls: Calls = []

    async def go() -> None:
        called = asyncio.Event()
        _pass(form, calls, called)
        faults.release(POINT)  # no loop pass in between
        await asyncio.wait_for(called.wait(), 5)

    asyncio.run(go())
    assert calls == [("ok", ARG[form])]


@pytest.mark.parametrize("form", FORMS)
def test_crash_never_calls_then(form: str) -> None:
    class Crashed(BaseException):
        pass

    def hook(name: str):  # type: ignore[no-untyped-def]
        raise Crashed(name)

    crashed: Callable[[str], object] = hook
    faults.set_crash_hook(crashed)  # type: ignore[arg-type]
    try:
        faults.arm(POINT, "crash")
        calls: Calls = []
        unwound: list[str] = []

        def plain_callback() -> None:  # a simulated node's plain callback (no task)
            token = faults.current_node.set("broker-1")
            try:
                _pass(form, calls)
                unwound.append("returned")  # the crash unwinds only this callback
            finally:
                faults.current_node.reset(token)

        async def go() -> None:
            with pytest.raises(Crashed):  # in a task: the crash propagates
                _pass(form, calls)
            loop = asyncio.get_running_loop()
            after: asyncio.Future[None] = loop.create_future()
            loop.call_soon(plain_callback)
            loop.call_soon(after.set_result, None)  # runs after it (the ready queue is FIFO)
            await after

        asyncio.run(go())
        assert calls == []
        assert unwound == ["returned"]
    finally:
        faults.set_crash_hook(None)


@pytest.mark.parametrize("form", ["gate0", "gate1", "unarmed-first"])
def test_observe_records_the_fast_forms(form: str) -> None:
    faults.observe(True)
    try:
        calls: Calls = []
        _pass(form, calls)
        assert calls == [("ok", ARG[form])]
        assert POINT in faults.reached()
    finally:
        faults.observe(False)
