"""``magnetar chaos``: fault schedules against real Magnetar processes, and a history checker.

Owns: the chaos workload (official ``pulsar`` client producers, consumers and a final drain with
readers), the fault schedules (arm a named fault point with ``hang`` in one process, wait for
the hit, kill -9, restart; kill -9 at random; SIGSTOP a process long enough to lose its
metadata session), the runner tying them to a cluster of processes, and the pure checker that
turns a recorded ``History`` into anomalies (lost, duplicated, reordered, unexpected, and the
invariants of ``docs/faults.md`` observable from outside). A tool above ``runtime``
(like ``cli``): cores never import it.
"""

from magnetar.sim.checker import Anomaly, AnomalyKind, CheckResult, check
from magnetar.sim.history import FaultEvent, History, Op, OpType, Outcome

__all__ = [
    "Anomaly",
    "AnomalyKind",
    "CheckResult",
    "FaultEvent",
    "History",
    "Op",
    "OpType",
    "Outcome",
    "check",
]
