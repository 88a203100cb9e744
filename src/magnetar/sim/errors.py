"""What a simulated run can end with besides a normal return.

``SimCrashError`` unwinds the tasks of a simulated node that crashed. It is a ``BaseException`` so
that ``except Exception`` blocks in Magnetar code (which are right for operating errors) do not
swallow a crash: a crashed node runs no further code of its own, just as a process killed with
``kill -9`` runs no ``finally`` that reaches the disk or the network.
"""

from __future__ import annotations


class SimCrashError(BaseException):
    """The simulated node running this task has crashed; nothing after this point happens."""


class SimDeadlockError(RuntimeError):
    """No task can run and no timer is pending, but the awaited coroutine has not finished."""


class SimLivelockError(RuntimeError):
    """The run took more loop iterations than ``SIM_STEPS_MAX``: something spins without progress."""
