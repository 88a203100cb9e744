from __future__ import annotations

import asyncio

import pytest

from magnetar import faults
from magnetar.base import InvalidArgumentError


def test_unarmed_point_is_a_completed_awaitable() -> None:
    async def go() -> None:
        for _ in range(3):
            await faults.point("bookie.after_reply")

    asyncio.run(go())
    assert faults.hits("bookie.after_reply") == 0


def test_parse_specs() -> None:
    specs = faults.parse_specs("bookie.after_reply:crash, ledger.before_send:delay:25@3,bookie.after_fsync_before_reply:hang")
    assert [str(s) for s in specs] == [
        "bookie.after_reply:crash",
        "ledger.before_send:delay:25@3",
        "bookie.after_fsync_before_reply:hang",
    ]
    assert faults.parse_specs("") == []


@pytest.mark.parametrize(
    "bad",
    ["nope:crash", "bookie.after_reply", "bookie.after_reply:explode", "bookie.after_reply:delay",
     "bookie.after_reply:crash@0", "bookie.after_reply:crash:5", "bookie.after_reply:crash@x"],
)
def test_parse_specs_rejects_bad_input(bad: str) -> None:
    with pytest.raises(InvalidArgumentError):
        faults.parse_specs(bad)


def test_error_fires_from_the_nth_hit() -> None:
    faults.arm("bookie.after_reply", "error", from_hit=3)

    async def go() -> int:
        passed = 0
        for _ in range(5):
            try:
                await faults.point("bookie.after_reply")
                passed += 1
            except faults.InjectedFaultError:
                return passed
        return passed

    assert asyncio.run(go()) == 2


def test_hang_blocks_only_the_task_until_released() -> None:
    faults.arm("bookie.after_fsync_before_reply", "hang")
    log: list[str] = []

    async def hanging() -> None:
        await faults.point("bookie.after_fsync_before_reply")
        log.append("released")

    async def go() -> None:
        task = asyncio.create_task(hanging())
        for _ in range(10):
            await asyncio.sleep(0)
        log.append("others ran")
        faults.release("bookie.after_fsync_before_reply")
        await task

    asyncio.run(go())
    assert log == ["others ran", "released"]


def test_crash_calls_the_simulator_hook_in_a_simulated_node() -> None:
    class Crashed(BaseException):
        pass

    def hook(name: str):  # type: ignore[no-untyped-def]
        raise Crashed(name)

    faults.set_crash_hook(hook)
    try:
        faults.arm("ledger.before_send", "crash", node="broker-1")

        async def on(node: str) -> str:
            token = faults.current_node.set(node)
            try:
                await faults.point("ledger.before_send")
                return "survived"
            except Crashed as crashed:
                return f"crashed at {crashed}"
            finally:
                faults.current_node.reset(token)

        assert asyncio.run(on("broker-2")) == "survived"
        assert asyncio.run(on("broker-1")) == "crashed at ledger.before_send"
    finally:
        faults.set_crash_hook(None)


def test_arm_rejects_unknown_points() -> None:
    with pytest.raises(InvalidArgumentError):
        faults.arm("no.such.point", "crash")


def test_registry_codes_are_unique() -> None:
    codes = [p.code for p in faults.REGISTRY.values()]
    assert len(codes) == len(set(codes))
