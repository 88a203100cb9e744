"""Named fault points, usable in the simulator and in real processes.

Owns: the registry of every moment where a crash matters (``REGISTRY``, see
``docs/faults.md``), arming and disarming them, and what an armed point does.

Code marks a point with ``await faults.point("bookie.after_fsync_before_reply")`` in a coroutine,
``faults.gate(name, then, *args)`` on a callback path (``then`` runs after the point: inline when
unarmed, later when a hang or delay holds it; ``gate0``/``gate1`` for a ``then`` of no or one
argument, without the ``*args`` tuple, on the per-message passes; ``faults.unarmed(name)`` first,
where compiled code then calls ``then`` natively itself) or ``faults.point_blocking(name)`` on a worker
thread. Unarmed, each is one dictionary lookup (and the await of a completed no-op). There is
one path per operation: a point is a gate on it, never a reason to take another path. Armed, the point can ``crash`` (a
real process SIGKILLs itself; a simulated node loses its unsynced state), ``hang`` until
released, ``delay`` by some milliseconds, or raise ``InjectedFaultError``.

Arming: ``faults.arm(name, action)`` in-process (the simulator, tests), or in a real process
through ``MAGNETAR_FAULTS=name:action[@N][,...]`` read by the composition root with
``faults.arm_from_env()``. ``@N`` makes the point fire from its N-th hit on (1-based).
"""

from magnetar.faults.points import (
    REGISTRY,
    Action,
    FaultPoint,
    FaultSpec,
    InjectedFaultError,
    arm,
    arm_from_env,
    armed,
    current_node,
    disarm_all,
    gate,
    gate0,
    gate1,
    hits,
    holding,
    never_reached,
    observe,
    parse_specs,
    point,
    point_blocking,
    reached,
    release,
    set_crash_hook,
    tears,
    unarmed,
)

__all__ = [
    "REGISTRY",
    "Action",
    "FaultPoint",
    "FaultSpec",
    "InjectedFaultError",
    "arm",
    "arm_from_env",
    "armed",
    "current_node",
    "disarm_all",
    "gate",
    "gate0",
    "gate1",
    "hits",
    "holding",
    "never_reached",
    "observe",
    "parse_specs",
    "point",
    "point_blocking",
    "reached",
    "release",
    "set_crash_hook",
    "tears",
    "unarmed",
]
