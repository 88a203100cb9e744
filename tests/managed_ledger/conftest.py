"""Run ``async def`` tests of this directory on the simulator's virtual-time loop.

Every managed-ledger test is deterministic: time (rollover by age, cursor flush intervals, ledger
deadlines) is virtual, so a test that waits an hour finishes at once.
"""

from __future__ import annotations

import inspect

import pytest

from magnetar import sim


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> bool | None:
    if not inspect.iscoroutinefunction(pyfuncitem.obj):
        return None
    names = pyfuncitem._fixtureinfo.argnames
    kwargs = {name: pyfuncitem.funcargs[name] for name in names}
    sim.run(pyfuncitem.obj(**kwargs), steps_max=2_000_000)
    return True
