"""Arming and firing fault points (the mechanism behind ``magnetar.faults``)."""

from __future__ import annotations

import asyncio
import contextvars
import enum
import os
import signal
import sys
from collections.abc import Awaitable, Callable, Generator
from dataclasses import dataclass
from typing import Any, NoReturn

from magnetar.base.errors import InvalidArgument, LimitExceeded, MagnetarError
from magnetar.base.limits import FAULT_SPECS_COUNT_MAX
from magnetar.faults import breaks
from magnetar.faults.registry import REGISTRY, FaultPoint

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

ENV_VAR = "MAGNETAR_FAULTS"
REPORT_ENV_VAR = "MAGNETAR_FAULTS_REPORT"

#: Which simulated node the running task belongs to; ``None`` in a real process.
current_node: contextvars.ContextVar[str | None] = contextvars.ContextVar("magnetar_node", default=None)


class Action(enum.Enum):
    CRASH = "crash"
    HANG = "hang"
    DELAY = "delay"
    ERROR = "error"


class InjectedFault(MagnetarError):
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


_DONE = _Done()
_armed: dict[str, FaultSpec] = {}
_hits: dict[str, int] = {}
_released: dict[str, asyncio.Event] = {}
_crash_hook: Callable[[str], NoReturn] | None = None


def point(name: str) -> Awaitable[None]:
    """Mark fault point ``name``; ``await`` the result. Does nothing unless ``name`` is armed."""
    spec = _armed.get(name)
    if spec is None:
        return _DONE
    return _fire(spec)


async def _fire(spec: FaultSpec) -> None:
    if spec.node is not None and spec.node != current_node.get():
        return
    count = _hits.get(spec.name, 0) + 1
    _hits[spec.name] = count
    if count < spec.from_hit:
        return
    _report(spec, count)
    if spec.action is Action.CRASH:
        _crash(spec.name)
    elif spec.action is Action.ERROR:
        raise InjectedFault(f"fault point {spec.name} armed with error")
    elif spec.action is Action.DELAY:
        await asyncio.sleep(spec.delay_ms / 1000)
    else:
        event = _released.setdefault(spec.name, asyncio.Event())
        await event.wait()


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
        raise InvalidArgument(f"unknown fault point {name!r}; see magnetar.faults.REGISTRY")
    if from_hit < 1:
        raise InvalidArgument(f"from_hit must be >= 1, got {from_hit}")
    if len(_armed) >= FAULT_SPECS_COUNT_MAX and name not in _armed:
        raise LimitExceeded("FAULT_SPECS_COUNT_MAX", len(_armed) + 1, FAULT_SPECS_COUNT_MAX)
    spec = FaultSpec(name, Action(action), delay_ms, from_hit, node)
    _armed[name] = spec
    _hits.pop(name, None)
    return spec


def parse_specs(text: str) -> list[FaultSpec]:
    """Parse ``name:action[@N][,...]`` where action is crash, hang, error or delay:MS."""
    specs: list[FaultSpec] = []
    for raw in filter(None, (part.strip() for part in text.split(","))):
        body, _, hit_text = raw.partition("@")
        name, sep, action_text = body.partition(":")
        if not sep:
            raise InvalidArgument(f"fault spec {raw!r}: expected name:action[@N]")
        if name not in REGISTRY:
            raise InvalidArgument(f"fault spec {raw!r}: unknown fault point {name!r}")
        kind, _, arg = action_text.partition(":")
        try:
            action = Action(kind)
        except ValueError:
            raise InvalidArgument(f"fault spec {raw!r}: action must be crash, hang, error or delay:MS") from None
        delay_ms = 0
        if action is Action.DELAY:
            if not arg.isdigit():
                raise InvalidArgument(f"fault spec {raw!r}: delay needs milliseconds, e.g. delay:50")
            delay_ms = int(arg)
        elif arg:
            raise InvalidArgument(f"fault spec {raw!r}: {kind} takes no argument")
        from_hit = 1
        if hit_text:
            if not hit_text.isdigit() or int(hit_text) < 1:
                raise InvalidArgument(f"fault spec {raw!r}: @N needs a whole number >= 1")
            from_hit = int(hit_text)
        specs.append(FaultSpec(name, action, delay_ms, from_hit))
    if len(specs) > FAULT_SPECS_COUNT_MAX:
        raise LimitExceeded("FAULT_SPECS_COUNT_MAX", len(specs), FAULT_SPECS_COUNT_MAX)
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
    """Let every task hanging at ``name`` continue (and later hits pass through)."""
    _armed.pop(name, None)
    event = _released.pop(name, None)
    if event is not None:
        event.set()


def disarm_all() -> None:
    for name in list(_released):
        release(name)
    _armed.clear()
    _hits.clear()
    breaks.disable_all()


def armed() -> dict[str, FaultSpec]:
    return dict(_armed)


def any_armed(names: frozenset[str]) -> bool:
    """Whether one of ``names`` is armed (no copy: cheap enough for a per-message path)."""
    return bool(_armed) and not names.isdisjoint(_armed)


def hits(name: str) -> int:
    """How often the armed point ``name`` was reached (counted only while armed)."""
    return _hits.get(name, 0)


def set_crash_hook(hook: Callable[[str], NoReturn] | None) -> None:
    """The simulator installs a hook that crashes the current simulated node instead of the process."""
    global _crash_hook
    _crash_hook = hook


def registered(name: str) -> FaultPoint:
    return REGISTRY[name]
