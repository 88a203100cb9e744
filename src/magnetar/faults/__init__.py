"""Named fault points, usable in the simulator and in real processes.

Owns: the registry of every moment where a crash matters (``REGISTRY``, see
``shared/design/FAULTS.md``), arming and disarming them, and what an armed point does.

Code marks a point with ``await faults.point("bookie.after_fsync_before_reply")``. Unarmed, that
is one dictionary lookup and the await of a completed no-op. Armed, the point can ``crash`` (a
real process SIGKILLs itself; a simulated node loses its unsynced state), ``hang`` until
released, ``delay`` by some milliseconds, or raise ``InjectedFault``.

Arming: ``faults.arm(name, action)`` in-process (the simulator, tests), or in a real process
through ``MAGNETAR_FAULTS=name:action[@N][,...]`` read by the composition root with
``faults.arm_from_env()``. ``@N`` makes the point fire from its N-th hit on (1-based).
"""

from magnetar.faults.points import (
    REGISTRY,
    Action,
    FaultPoint,
    FaultSpec,
    InjectedFault,
    any_armed,
    arm,
    arm_from_env,
    armed,
    current_node,
    disarm_all,
    hits,
    parse_specs,
    point,
    release,
    set_crash_hook,
)

__all__ = [
    "REGISTRY",
    "Action",
    "FaultPoint",
    "FaultSpec",
    "InjectedFault",
    "any_armed",
    "arm",
    "arm_from_env",
    "armed",
    "current_node",
    "disarm_all",
    "hits",
    "parse_specs",
    "point",
    "release",
    "set_crash_hook",
]
