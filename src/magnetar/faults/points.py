"""Arming and firing fault points (the mechanism behind ``magnetar.faults``)."""

from __future__ import annotations

import asyncio
import contextvars
import enum
import os
import signal
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Generator
from dataclasses import dataclass
from typing import Any, Final, NoReturn, TypeVar

from mypy_extensions import mypyc_attr

from magnetar.base.errors import InvalidArgumentError, LimitExceededError, MagnetarError
from magnetar.base.limits import FAULT_SPECS_COUNT_MAX
from magnetar.faults import breaks
from magnetar.faults.registry import REGISTRY, FaultPoint

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

ENV_VAR = "MAGNETAR_FAULTS"
REPORT_ENV_VAR = "MAGNETAR_FAULTS_REPORT"

#: Which simulated node the running task belongs to; ``None`` in a real process.
current_node: contextvars.ContextVar[str | None] = contextvars.ContextVar("magnetar_node", default=None)


class Action(enum.Enum):
    CRASH = "crash"
    HANG = "hang"
    DELAY = "delay"
    ERROR = "error"
    PASS = "pass"  # count the hit and go on: what ``observe`` arms every point with


# Compiled (mypyc), a native class cannot derive from an interpreted one (``MagnetarError``).
@mypyc_attr(native_class=False)
class InjectedFaultError(MagnetarError):
    """Raised by a point armed with ``error``."""


@dataclass(frozen=True, slots=True)
class FaultSpec:
    name: str
    action: Action
    delay_ms: int = 0
    from_hit: int = 1
    node: str | None = None

    def __str__(self) -> str:
        action = f"delay:{self.delay_ms}" if self.action is Action.DELAY else self.action.value
        suffix = f"@{self.from_hit}" if self.from_hit != 1 else ""
        return f"{self.name}:{action}{suffix}"


class _Done:
    """A reusable, already-completed awaitable: the unarmed fast path allocates nothing."""

    __slots__ = ()

    def __await__(self) -> Generator[Any, None, None]:
        return
        yield


# The tables are ``Final`` (never rebound, only changed in place): compiled, a final module global
# is a static reference, so the unarmed path is one dictionary lookup with no globals lookup first.
_DONE: Final = _Done()
_armed: Final[dict[str, FaultSpec]] = {}
_hits: Final[dict[str, int]] = {}
_released: Final[dict[str, asyncio.Event]] = {}
_released_threads: Final[dict[str, threading.Event]] = {}
_crash_hook: Callable[[str], NoReturn] | None = None
#: Points that fired while armed (any action) since ``observe(True)``; survives ``disarm_all``.
_reached: Final[set[str]] = set()
_observing = False
#: Continuations of ``gate`` calls waiting out a hang or a delay (strong references).
_deferred: Final[set[asyncio.Task[None]]] = set()
_A = TypeVar("_A")


def point(name: str) -> Awaitable[None]:
    """Mark fault point ``name``; ``await`` the result. Does nothing unless ``name`` is armed."""
    spec = _armed.get(name)
    if spec is None:
        return _DONE
    return _fire(spec)


def _fires(spec: FaultSpec) -> bool:
    """Count a hit of armed ``spec``; whether its action is due now (crash, error, delay, hang)."""
    if spec.node is not None and spec.node != current_node.get():
        return False
    _reached.add(spec.name)
    count = _hits.get(spec.name, 0) + 1
    _hits[spec.name] = count
    if count < spec.from_hit or spec.action is Action.PASS:
        return False
    _report(spec, count)
    if spec.action is Action.CRASH:
        _crash(spec.name)
    if spec.action is Action.ERROR:
        raise InjectedFaultError(f"fault point {spec.name} armed with error")
    return True


async def _fire(spec: FaultSpec) -> None:
    if not _fires(spec):
        return
    await _wait(spec)


async def _wait(spec: FaultSpec) -> None:
    """What a due ``delay`` or ``hang`` does: sleep, or wait until ``release``."""
    if spec.action is Action.DELAY:
        await asyncio.sleep(spec.delay_ms / 1000)
    elif _armed.get(spec.name) is spec:  # else released before this wait began (a gate's task)
        event = _released.setdefault(spec.name, asyncio.Event())
        await event.wait()


def gate(name: str, then: Callable[..., object], *args: Any) -> None:
    """Pass point ``name`` on a callback path, then call ``then(None, *args)``: the same code runs
    after the point whether it is armed or not; only *when* it runs depends on the arming.

    Unarmed: one dictionary lookup and ``then`` inline. Armed: ``crash`` does not return (in a
    plain callback of a simulated node the crash unwinds only that callback: call ``gate`` last);
    ``error`` calls ``then(InjectedFaultError, *args)`` inline; a due ``delay`` or ``hang`` calls
    ``then(None, *args)`` later from the event loop, after the delay or once released. ``then``
    runs exactly once unless the point crashes.

    ``gate0`` and ``gate1`` are this gate for a ``then`` of no and of one argument besides the
    error, for the per-message passes: unarmed, they call ``then`` with no ``*args`` tuple and no
    star call (compiled, a vectorcall); armed, they take this path (``_gate_armed``).
    """
    spec = _armed.get(name)
    if spec is None:
        then(None, *args)
        return
    _gate_armed(spec, then, args)


def gate0(name: str, then: Callable[[BaseException | None], object]) -> None:
    """``gate(name, then)``: the same point, arming and order, without the ``*args`` tuple."""
    spec = _armed.get(name)
    if spec is None:
        then(None)
        return
    _gate_armed(spec, then, ())


def gate1(name: str, then: Callable[[BaseException | None, _A], object], arg: _A) -> None:
    """``gate(name, then, arg)``: the same point, arming and order, without the ``*args`` tuple."""
    spec = _armed.get(name)
    if spec is None:
        then(None, arg)
        return
    _gate_armed(spec, then, (arg,))


def unarmed(name: str) -> bool:
    """Whether point ``name`` is unarmed now (one dictionary lookup, as in ``gate1``): a per-message
    pass of compiled code then calls the gate's continuation itself, ``then(None, arg)`` as a
    native call, and calls ``gate1(name, then, arg)`` only when it is armed. The same point, the
    same continuation and the same order as ``gate1`` (whose unarmed branch is exactly this call):
    only the call's convention differs (``gate1`` calls ``then`` as a Python object, its
    arguments boxed and parsed per call)."""
    return not _armed or name not in _armed  # none armed (production): no lookup


def _gate_armed(spec: FaultSpec, then: Callable[..., object], args: tuple[Any, ...]) -> None:
    """What ``gate`` does at an armed point (``spec``): see ``gate``."""
    try:
        due = _fires(spec)
    except InjectedFaultError as fault:
        then(fault, *args)
        return
    except BaseException:
        if asyncio.current_task() is None and current_node.get() is not None:
            return  # a simulated crash in a plain callback: nothing after it runs
        raise
    if not due:
        then(None, *args)
        return
    task = asyncio.get_running_loop().create_task(_later(spec, then, args))
    _deferred.add(task)
    task.add_done_callback(_deferred.discard)


async def _later(spec: FaultSpec, then: Callable[..., object], args: tuple[Any, ...]) -> None:
    await _wait(spec)
    then(None, *args)


def tears(name: str) -> bool:
    """Whether a write that passes point ``name`` half-way must be split there (two writes with
    the point between them): only while ``name`` is armed, since an unarmed point in the middle
    of a write does nothing and one write costs less than two (one dictionary lookup)."""
    return name in _armed


def point_blocking(name: str) -> None:
    """``point`` for code on a worker thread (the real disk's write job): unarmed, one dictionary
    lookup; armed, ``crash`` kills the process, ``error`` raises ``InjectedFaultError``, ``delay``
    blocks the thread, ``hang`` blocks it until ``release``."""
    spec = _armed.get(name)
    if spec is None or not _fires(spec):
        return
    if spec.action is Action.DELAY:
        time.sleep(spec.delay_ms / 1000)
        return
    event = _released_threads.setdefault(name, threading.Event())
    if _armed.get(name) is spec:  # not released meanwhile
        event.wait()


def _crash(name: str) -> NoReturn:
    if _crash_hook is not None:
        _crash_hook(name)
    # A real process: die exactly as kill -9 would, with no cleanup, no flush, no atexit.
    os.kill(os.getpid(), signal.SIGKILL)
    raise SystemExit(137)  # unreachable; SIGKILL cannot be caught


def _report(spec: FaultSpec, count: int) -> None:
    if current_node.get() is not None:
        return  # a simulated node: the simulator records the point in its own trace
    line = f"magnetar-fault: {spec.action.value} at {spec.name} hit={count} pid={os.getpid()}"
    print(line, file=sys.stderr, flush=True)
    report_path = os.environ.get(REPORT_ENV_VAR)
    if report_path:
        with open(report_path, "a", encoding="utf-8") as report:
            report.write(line + "\n")
            report.flush()
            os.fsync(report.fileno())


def arm(name: str, action: Action | str, *, delay_ms: int = 0, from_hit: int = 1, node: str | None = None) -> FaultSpec:
    """Arm point ``name``; replaces an earlier arming of the same point."""
    if name not in REGISTRY:
        raise InvalidArgumentError(f"unknown fault point {name!r}; see magnetar.faults.REGISTRY")
    if from_hit < 1:
        raise InvalidArgumentError(f"from_hit must be >= 1, got {from_hit}")
    if len(_armed) >= FAULT_SPECS_COUNT_MAX and name not in _armed:
        raise LimitExceededError("FAULT_SPECS_COUNT_MAX", len(_armed) + 1, FAULT_SPECS_COUNT_MAX)
    spec = FaultSpec(name, Action(action), delay_ms, from_hit, node)
    _armed[name] = spec
    _hits.pop(name, None)
    _released_threads.pop(name, None)
    return spec


def parse_specs(text: str) -> list[FaultSpec]:
    """Parse ``name:action[@N][,...]`` where action is crash, hang, error or delay:MS."""
    specs: list[FaultSpec] = []
    for raw in filter(None, (part.strip() for part in text.split(","))):
        body, _, hit_text = raw.partition("@")
        name, sep, action_text = body.partition(":")
        if not sep:
            raise InvalidArgumentError(f"fault spec {raw!r}: expected name:action[@N]")
        if name not in REGISTRY:
            raise InvalidArgumentError(f"fault spec {raw!r}: unknown fault point {name!r}")
        kind, _, arg = action_text.partition(":")
        try:
            action = Action(kind)
        except ValueError:
            raise InvalidArgumentError(f"fault spec {raw!r}: action must be crash, hang, error or delay:MS") from None
        delay_ms = 0
        if action is Action.DELAY:
            if not arg.isdigit():
                raise InvalidArgumentError(f"fault spec {raw!r}: delay needs milliseconds, e.g. delay:50")
            delay_ms = int(arg)
        elif arg:
            raise InvalidArgumentError(f"fault spec {raw!r}: {kind} takes no argument")
        from_hit = 1
        if hit_text:
            if not hit_text.isdigit() or int(hit_text) < 1:
                raise InvalidArgumentError(f"fault spec {raw!r}: @N needs a whole number >= 1")
            from_hit = int(hit_text)
        specs.append(FaultSpec(name, action, delay_ms, from_hit))
    if len(specs) > FAULT_SPECS_COUNT_MAX:
        raise LimitExceededError("FAULT_SPECS_COUNT_MAX", len(specs), FAULT_SPECS_COUNT_MAX)
    return specs


def arm_from_env(environ: dict[str, str] | None = None) -> list[FaultSpec]:
    """Arm what ``MAGNETAR_FAULTS`` names; called once by a real process's composition root."""
    text = (environ if environ is not None else os.environ).get(ENV_VAR, "")
    specs = parse_specs(text)
    breaks.enable_from_env(environ)  # negative controls (MAGNETAR_BREAK), read at the same moment
    for spec in specs:
        arm(spec.name, spec.action, delay_ms=spec.delay_ms, from_hit=spec.from_hit)
    return specs


def release(name: str) -> None:
    """Let every task (and worker thread) hanging at ``name`` continue (and later hits pass through)."""
    _armed.pop(name, None)
    event = _released.pop(name, None)
    if event is not None:
        event.set()
    thread_event = _released_threads.pop(name, None)
    if thread_event is not None:
        thread_event.set()
    if _observing:
        _observe_point(name)


def disarm_all() -> None:
    for name in [*_released, *_released_threads]:
        release(name)
    _armed.clear()
    _hits.clear()
    breaks.disable_all()
    if _observing:
        for name in REGISTRY:
            _observe_point(name)


def armed() -> dict[str, FaultSpec]:
    """The points armed with an action (the ``pass`` arming of ``observe`` left out)."""
    return {name: spec for name, spec in _armed.items() if spec.action is not Action.PASS}


def _observe_point(name: str) -> None:
    if name not in _armed:
        _armed[name] = FaultSpec(name, Action.PASS)


def observe(on: bool) -> None:
    """``on``: record every registered point that is reached (``reached``), from now on and across
    ``disarm_all``, by arming each point not armed otherwise with ``pass``; starts a fresh record.
    Off: those ``pass`` armings go. For tests that check every point is reached; production never
    observes (an unarmed point stays one dictionary lookup)."""
    global _observing
    _observing = on
    for name in [n for n, spec in _armed.items() if spec.action is Action.PASS]:
        del _armed[name]
    if on:
        _reached.clear()
        for name in REGISTRY:
            _observe_point(name)


def reached() -> frozenset[str]:
    """The points that fired (armed in any way, ``pass`` included) since ``observe(True)``."""
    return frozenset(_reached)


def holding(name: str) -> bool:
    """Whether a task or a worker thread waits at point ``name`` (a ``hang``) until ``release``."""
    return name in _released or name in _released_threads


def never_reached(registry: dict[str, FaultPoint] | None = None) -> list[str]:
    """The registered points not reached since ``observe(True)``, in registry order."""
    return [name for name in (REGISTRY if registry is None else registry) if name not in _reached]


def hits(name: str) -> int:
    """How often the armed point ``name`` was reached (counted only while armed)."""
    return _hits.get(name, 0)


def set_crash_hook(hook: Callable[[str], NoReturn] | None) -> None:
    """The simulator installs a hook that crashes the current simulated node instead of the process."""
    global _crash_hook
    _crash_hook = hook


def registered(name: str) -> FaultPoint:
    return REGISTRY[name]
