"""``faults.gate`` and its per-message forms ``gate0``/``gate1``: one point, the same behaviour.

Each form is driven through the same arming (unarmed, ``error``, ``delay``, ``hang``, ``crash``,
``@N``) and must call ``then`` with the same arguments, exactly once, at the same moment (inline or
later), and count the same hits. A fast form that skipped the arming check (calling ``then`` inline
whatever is armed) fails every armed case here.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

from magnetar import faults

POINT = "broker.after_receipt"
Calls = list[tuple[str, object]]


def _pass(form: str, calls: Calls) -> None:
    """Pass ``POINT`` through ``form``; ``then`` records (its error's type name or None, its arg)."""

    def then0(error: BaseException | None) -> None:
        calls.append((type(error).__name__ if error else "ok", None))

    def then1(error: BaseException | None, arg: int) -> None:
        calls.append((type(error).__name__ if error else "ok", arg))

    def then2(error: BaseException | None, arg: int, more: str) -> None:
        calls.append((type(error).__name__ if error else "ok", (arg, more)))

    if form == "gate0":
        faults.gate0(POINT, then0)
    elif form == "gate1":
        faults.gate1(POINT, then1, 7)
    elif form == "gate":
        faults.gate(POINT, then2, 7, "x")
    else:
        faults.gate(POINT, then0)


FORMS = ["gate0", "gate1", "gate", "gate-no-args"]
ARG = {"gate0": None, "gate1": 7, "gate": (7, "x"), "gate-no-args": None}


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
        _pass(form, calls)
        assert calls == []  # held: not inline
        if action == "hang":
            for _ in range(5):
                await asyncio.sleep(0)
            assert calls == []
            faults.release(POINT)
        for _ in range(1000):  # bounded: the delay is 1 ms of the loop's clock
            if calls:
                break
            await asyncio.sleep(0.001)

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
            asyncio.get_running_loop().call_soon(plain_callback)
            await asyncio.sleep(0)
            await asyncio.sleep(0)

        asyncio.run(go())
        assert calls == []
        assert unwound == ["returned"]
    finally:
        faults.set_crash_hook(None)


@pytest.mark.parametrize("form", ["gate0", "gate1"])
def test_observe_records_the_fast_forms(form: str) -> None:
    faults.observe(True)
    try:
        calls: Calls = []
        _pass(form, calls)
        assert calls == [("ok", ARG[form])]
        assert POINT in faults.reached()
    finally:
        faults.observe(False)
