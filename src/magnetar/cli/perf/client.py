"""The official client as a perf run drives it: creating it, creating producers and consumers
in parallel, the thread-state pin and the cheap send path (see the package docstring).
"""

from __future__ import annotations

import ctypes
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from magnetar.base.errors import InvalidArgumentError
from magnetar.cli.perf.settings import SETUP_THREADS, PerfSettings

if TYPE_CHECKING:
    from magnetar.cli.perf.run import PerfRun


def _import_pulsar() -> Any:
    try:
        import pulsar
    except ImportError as exc:
        raise InvalidArgumentError("magnetar perf needs the official client: pip install 'magnetar[bench]'") from exc
    return pulsar


@contextmanager
def _official_client(settings: PerfSettings) -> Iterator[Any]:
    pulsar = _import_pulsar()
    client = pulsar.Client(settings.service_url, operation_timeout_seconds=settings.operation_timeout_s,
                           io_threads=1, message_listener_threads=1,
                           authentication=pulsar.AuthenticationToken(settings.token) if settings.token else None,
                           tls_trust_certs_file_path=settings.tls_trust_cert,
                           tls_validate_hostname=settings.tls_trust_cert is not None,
                           logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    try:
        yield client
    finally:
        try:
            client.close()
        except Exception as exc:  # already closed after a lost connection: the figures still stand
            print(f"perf: closing the client: {exc}", file=sys.stderr)


def _in_parallel(make: Callable[[str], Any], names: list[str]) -> list[Any]:
    if not names:
        return []
    with ThreadPoolExecutor(min(SETUP_THREADS, len(names))) as pool:
        return list(pool.map(make, names))


#: ``pinned`` is set in a thread state once it is kept (``_pin_thread_state``): thread-local, so
#: a new thread that reuses a dead one's identifier is not taken for it.
_THREAD = threading.local()


def _pin_thread_state() -> None:
    """Keep the calling thread's Python thread state until the process exits.

    The official client calls back from its own threads through pybind11, which creates a Python
    thread state for each call on a thread Python did not start and deletes it after, i.e. maps
    and unmaps (``mmap``/``munmap``) a 16 KiB frame stack per message (about 20 us/msg of this
    process's CPU, with the GIL handovers it lengthens). One ``PyGILState_Ensure`` that is never
    released keeps the count of the state pybind11 made above zero, so it is reused. Done only
    when that state is the thread's registered one (else ``Ensure`` would make another and
    block on the GIL this thread holds); one small state per client thread is left at exit."""
    _THREAD.pinned = True
    try:
        api = ctypes.pythonapi
        registered, current = api.PyGILState_GetThisThreadState, api.PyThreadState_Get
        registered.restype = current.restype = ctypes.c_void_p
        if registered() == current():
            api.PyGILState_Ensure()
    except (AttributeError, OSError):  # not CPython: no cost to save
        pass


def _sender(producer: Any) -> Callable[[bytes, Callable[[Any, Any], None]], None]:
    """``producer.send_async(data, callback)`` through the client's binding (``_pulsar``): the
    wrapper's per-message argument checks and keyword handling cost about 6 us/msg."""
    try:
        import _pulsar

        raw, builder = producer._producer.send_async, _pulsar.MessageBuilder
    except (ImportError, AttributeError):  # another client version: its public call
        return producer.send_async  # type: ignore[no-any-return]

    def send(data: bytes, callback: Callable[[Any, Any], None]) -> None:
        raw(builder().content(data).build(), callback)

    return send


class _Receipts:
    """The receipts of one producer. The client answers a producer's sends in the order they
    were made (batches in order, a batch's messages in order, failures too), so the send times
    wait in a FIFO and one bound method per producer is the callback of every send (no closure
    per message). ``push`` runs before the send: its callback may run at once."""

    def __init__(self, run: PerfRun, ok: Any, outstanding: threading.BoundedSemaphore | None) -> None:
        self._times: deque[int] = deque()
        self.push = self._times.append
        self._pop = self._times.popleft
        self._run = run
        self._side = run.published
        self._record = run.published.latency.record
        self._ok = ok
        self._release = outstanding.release if outstanding is not None else None

    def done(self, result: Any, _msg_id: Any) -> None:
        # An exception escaping a callback ends the process (the client's rule): none may.
        try:
            if not getattr(_THREAD, "pinned", False):
                _pin_thread_state()
            now = time.time_ns()
            sent_ns = self._pop() if self._times else now
            if self._release is not None:
                self._release()
            if self._run.draining:
                self._run.drained += 1  # answered after the measured window: counted apart
            elif result == self._ok:
                self._side.count += 1
                self._record((now - sent_ns) // 1000)
            elif self._run.closing:
                self._run.abandoned += 1  # still pending when the run ended: not a failure
            else:
                self._side.failed += 1
                if len(self._run.errors) < 10:
                    self._run.errors.append(str(result))
        except Exception as exc:
            self._run.errors.append(f"receipt: {type(exc).__name__}: {exc}")
