"""A deterministic, virtual-time asyncio event loop.

``SimLoop`` is asyncio's own ``BaseEventLoop`` (so ``Task``, ``Event``, ``Queue``, ``wait_for``,
``gather`` and ``asyncio.sleep`` behave exactly as in production) with two changes:

* ``time()`` returns virtual seconds, counted in integer nanoseconds from 0;
* the selector never waits: ``select(timeout)`` advances virtual time by ``timeout`` and reports
  no I/O. When nothing is runnable, time therefore jumps straight to the next timer; a one-hour
  sleep finishes at once. ``select(None)`` (nothing runnable, no timer, awaited coroutine not
  done) is a deadlock and raises ``SimDeadlockError``.

Invariants: there is no real I/O, no thread and no wall clock in a run (``run_in_executor``
refuses); callbacks run in the order asyncio schedules them, which depends only on the program
and on virtual time, so a run is a pure function of its inputs and seed. Every task is recorded
with the simulated node that created it (``magnetar.faults.current_node``), in creation order,
so a node's tasks can be cancelled in a deterministic order when it crashes.

Sets of tasks and futures iterate in the order of their hashes, and a plain ``asyncio.Task`` or
``Future`` hashes by its address, which differs between processes and with the garbage
collector's timing: code that awaits, cancels or reads a set of tasks in iteration order would
make a run's loop steps differ from one process to the next. The loop's tasks and futures
(``create_task``, ``create_future``) therefore hash by their creation serial, mixed with
``order_salt``: a run's set orders follow from the program and the seed. A different salt
reorders every such set, so a scenario run under two salts must still replay identically (a
check that it depends on no set order at all).

``watch(condition, action)``: ``condition()`` is asked between two loop iterations, before virtual
time moves on, and ``action()`` runs (once) the first time it holds. A controller that must act
the instant something happens (a fault point was hit) needs no timer ticking meanwhile.
"""

from __future__ import annotations

import asyncio
import contextvars
import math
from asyncio import base_events
from collections.abc import Callable, Coroutine, Generator
from typing import Any, TypeVar

from magnetar.base.limits import SIM_STEPS_MAX
from magnetar.faults import current_node
from magnetar.sim.errors import SimDeadlockError, SimLivelockError

T = TypeVar("T")

_NS_PER_S = 1_000_000_000
#: Tasks still running when a run ends get this many loop iterations to finish their cancellation.
SHUTDOWN_STEPS_MAX = 10_000
#: Finished tasks are dropped from the loop's task list once it holds this many (or twice as many
#: as were unfinished at the last purge).
TASKS_PURGE_COUNT_MIN = 256


class _SimTask(asyncio.Task):  # type: ignore[type-arg]
    """A task that hashes by its creation serial (see the module docstring), not by address."""

    def __init__(self, coro: Any, *, loop: SimLoop, name: str | None, context: contextvars.Context | None,
                 sim_hash: int) -> None:
        self._sim_hash = sim_hash  # before the base class puts the task in asyncio's task set
        super().__init__(coro, loop=loop, name=name, context=context)

    def __hash__(self) -> int:
        return self._sim_hash


class _SimFuture(asyncio.Future):  # type: ignore[type-arg]
    """A future that hashes by its creation serial (see the module docstring), not by address."""

    def __init__(self, *, loop: SimLoop, sim_hash: int) -> None:
        self._sim_hash = sim_hash
        super().__init__(loop=loop)

    def __hash__(self) -> int:
        return self._sim_hash


class _VirtualSelector:
    """Stands in for ``selectors.DefaultSelector``: no file descriptors, only the passage of time."""

    def __init__(self, loop: SimLoop) -> None:
        self._loop = loop

    def select(self, timeout: float | None = None) -> list[Any]:
        self._loop._on_select(timeout)
        return []

    def close(self) -> None:
        return None


class SimLoop(base_events.BaseEventLoop):
    """The event loop of a simulated world. Create one per run; it is not reusable after close."""

    def __init__(self, *, steps_max: int = SIM_STEPS_MAX, order_salt: int = 0) -> None:
        super().__init__()
        self._now_ns = 0
        self._steps = 0
        self._steps_max = steps_max
        self._task_serial = 0
        self._order_salt = order_salt
        self._hash_serial = 0  # tasks and futures created, for their hashes
        #: Every task by creation serial, with its node; finished ones are dropped lazily (no done
        #: callback per task: that would be one more loop callback for each task that ends).
        self._live_tasks: dict[int, tuple[str | None, asyncio.Task[Any]]] = {}
        self._purge_at = TASKS_PURGE_COUNT_MIN
        self._watches: list[tuple[Callable[[], bool], Callable[[], None]]] = []
        self._selector = _VirtualSelector(self)
        # Timers due within this much of "now" run now; one virtual nanosecond absorbs float
        # rounding in ``when - time()`` without ever running a timer visibly early.
        self._clock_resolution = 1e-9

    # --- virtual time -------------------------------------------------------------------------
    def time(self) -> float:
        return self._now_ns / _NS_PER_S

    @property
    def now_ns(self) -> int:
        """Virtual nanoseconds since the run began."""
        return self._now_ns

    @property
    def steps(self) -> int:
        """Loop iterations so far (each runs every callback that was ready)."""
        return self._steps

    def _on_select(self, timeout: float | None) -> None:
        self._steps += 1
        if self._steps > self._steps_max:
            raise SimLivelockError(f"more than {self._steps_max} loop iterations (SIM_STEPS_MAX)")
        if self._watches and self._fire_watches():
            return  # an action ran (and may have made callbacks ready): time stands still
        if timeout is None:
            raise SimDeadlockError(
                f"deadlock at t={self.time():.6f}s: no task can run and no timer is pending, "
                "but the awaited coroutine has not finished"
            )
        if timeout > 0:
            self._now_ns += max(1, math.ceil(timeout * _NS_PER_S))

    def watch(self, condition: Callable[[], bool], action: Callable[[], None]) -> Callable[[], None]:
        """Run ``action`` once, between two iterations, as soon as ``condition()`` holds; returns
        a function that removes the watch (if it has not fired)."""
        entry = (condition, action)
        self._watches.append(entry)

        def remove() -> None:
            if entry in self._watches:
                self._watches.remove(entry)

        return remove

    def _fire_watches(self) -> bool:
        fired = [entry for entry in self._watches if entry[0]()]
        for entry in fired:
            self._watches.remove(entry)
            entry[1]()
        return bool(fired)

    # --- what a selector loop would do with real I/O ------------------------------------------
    def _process_events(self, event_list: list[Any]) -> None:
        return None

    def _write_to_self(self) -> None:
        # Only called by call_soon_threadsafe: there are no other threads to wake us.
        return None

    def run_in_executor(self, executor: Any, func: Any, *args: Any) -> Any:  # type: ignore[override]
        raise RuntimeError("run_in_executor is not available in simulation: there are no threads")

    # --- task bookkeeping ---------------------------------------------------------------------
    def _next_hash(self) -> int:
        self._hash_serial += 1
        if self._order_salt == 0:
            return self._hash_serial
        return hash((self._order_salt, self._hash_serial))  # ints and tuples of ints: no hash seed

    def create_future(self) -> asyncio.Future[Any]:
        return _SimFuture(loop=self, sim_hash=self._next_hash())

    def create_task(  # type: ignore[override]
        self,
        coro: Coroutine[Any, Any, T] | Generator[Any, None, T],
        *,
        name: str | None = None,
        context: contextvars.Context | None = None,
    ) -> asyncio.Task[T]:
        if self.is_closed():
            raise RuntimeError("Event loop is closed")
        task: asyncio.Task[T] = _SimTask(coro, loop=self, name=name, context=context, sim_hash=self._next_hash())
        node = context.run(current_node.get) if context is not None else current_node.get()
        self._task_serial += 1
        self._live_tasks[self._task_serial] = (node, task)
        if len(self._live_tasks) >= self._purge_at:
            self._purge_finished()
        return task

    def _purge_finished(self) -> None:
        self._live_tasks = {serial: entry for serial, entry in self._live_tasks.items() if not entry[1].done()}
        self._purge_at = max(TASKS_PURGE_COUNT_MIN, 2 * len(self._live_tasks))

    def tasks_of(self, node: str | None) -> list[asyncio.Task[Any]]:
        """Unfinished tasks created by ``node`` (``None``: outside any node), oldest first."""
        self._purge_finished()
        return [task for owner, task in self._live_tasks.values() if owner == node]

    def live_tasks(self) -> list[asyncio.Task[Any]]:
        """Every unfinished task, oldest first."""
        self._purge_finished()
        return [task for _owner, task in self._live_tasks.values()]

    def cancel_all_and_close(self) -> None:
        """Cancel every remaining task (oldest first), let them unwind, and close the loop."""
        # The shutdown has its own budget, even after a run that ended by exhausting its own.
        self._steps_max = self._steps + 2 * SHUTDOWN_STEPS_MAX
        try:
            for _ in range(SHUTDOWN_STEPS_MAX):
                remaining = self.live_tasks()
                if not remaining:
                    break
                for task in remaining:
                    task.cancel()
                self._run_once_guarded()
            self.run_until_complete(self.shutdown_asyncgens())
        finally:
            self.close()

    def _run_once_guarded(self) -> None:
        # One iteration outside the caller's run: a future completed by the next callback.
        step: asyncio.Future[None] = self.create_future()
        self.call_soon(step.set_result, None)
        self.run_until_complete(step)


def run(main: Coroutine[Any, Any, T], *, steps_max: int = SIM_STEPS_MAX, order_salt: int = 0) -> T:
    """Run ``main`` to completion on a fresh ``SimLoop`` (like ``asyncio.run``), then close it.

    Tasks still running when ``main`` returns are cancelled. Raises ``SimDeadlockError`` if ``main``
    can never finish, ``SimLivelockError`` after ``steps_max`` loop iterations.
    """
    loop = SimLoop(steps_max=steps_max, order_salt=order_salt)
    previous = _swap_event_loop(loop)
    try:
        return loop.run_until_complete(main)
    finally:
        try:
            loop.cancel_all_and_close()
        finally:
            _swap_event_loop(previous)


def _swap_event_loop(loop: asyncio.AbstractEventLoop | None) -> asyncio.AbstractEventLoop | None:
    # Code that calls asyncio.get_event_loop() outside a task must find the simulated loop.
    policy = asyncio.get_event_loop_policy()
    try:
        previous: asyncio.AbstractEventLoop | None = policy.get_event_loop()
    except RuntimeError:
        previous = None
    policy.set_event_loop(loop)
    return previous
