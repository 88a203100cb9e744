"""The garbage collector tuned for a long-running server (standalone, broker, bookie processes).

After start-up, everything loaded and built so far (modules, classes, configuration, the metadata
cache, connection pools) lives as long as the process. ``gc.freeze()`` moves it out of the
collector's generations, so a full collection no longer walks it; the thresholds make the young
generation larger and full collections rarer, so the per-message garbage (frames, futures,
entries) is mostly freed by reference counting before a collection ever looks at it.
Measured in docs/performance.md ("Session 7 (issue 22)").

``MAGNETAR_GC_TUNING`` overrides the default for measurements and for a process that must keep
the interpreter's defaults: ``off`` (no freeze, CPython's thresholds), or ``T0,T1,T2`` (freeze
and these thresholds).

``MAGNETAR_GC_LOG=<file>`` (measurements: how long a collection stops the process, issue 22)
appends one line per collection to that file, ``<wall clock s> <generation> <pause ms> <CPU ms>
<collected> <uncollectable>``, timed by ``gc.callbacks`` (the ``start`` and ``stop`` phases; the
pause is elapsed time, the CPU the collecting thread's own: on a busy machine they differ).
"""

from __future__ import annotations

import gc
import logging
import os
import time
from typing import Any, TextIO

log = logging.getLogger(__name__)

#: Thresholds for a server: a young generation of 50,000 container objects (CPython: 700) and
#: full collections after 20 x 100 young ones (CPython: 10 x 10).
SERVER_GC_THRESHOLDS: tuple[int, int, int] = (50_000, 20, 100)
GC_TUNING_ENV = "MAGNETAR_GC_TUNING"
GC_LOG_ENV = "MAGNETAR_GC_LOG"


def server_gc_thresholds(setting: str | None) -> tuple[int, int, int] | None:
    """The thresholds ``setting`` (the environment value) asks for; None for ``off``."""
    if setting is None or not setting.strip():
        return SERVER_GC_THRESHOLDS
    text = setting.strip().lower()
    if text in ("off", "0", "false", "no"):
        return None
    parts = text.split(",")
    try:
        values = tuple(int(part) for part in parts)
    except ValueError:
        values = ()
    if len(values) != 3 or values[0] < 1 or min(values) < 0:
        raise ValueError(f"{GC_TUNING_ENV} must be 'off' or three thresholds 'T0,T1,T2' (T0 >= 1), got {setting!r}")
    return values[0], values[1], values[2]


def tune_gc_for_server() -> tuple[int, int, int] | None:
    """Call once start-up is done: collect, freeze what exists, set the server thresholds.
    Returns the thresholds set (None when ``MAGNETAR_GC_TUNING=off`` left the defaults). With
    ``MAGNETAR_GC_LOG`` set, collections are logged either way (the log measures ``off`` too)."""
    path = os.environ.get(GC_LOG_ENV)
    if path:
        record_collections(open(path, "a", buffering=1))  # noqa: SIM115 (the process's life)
    thresholds = server_gc_thresholds(os.environ.get(GC_TUNING_ENV))
    if thresholds is None:
        return None
    gc.collect()
    gc.freeze()
    gc.set_threshold(*thresholds)
    log.debug("gc: %d start-up objects frozen, thresholds %s", gc.get_freeze_count(), thresholds)
    return thresholds


class _CollectionLog:
    """A ``gc.callbacks`` entry writing each collection's pause to ``out`` (``MAGNETAR_GC_LOG``)."""

    def __init__(self, out: TextIO) -> None:
        self.out = out
        self.started_ns = 0
        self.started_cpu_ns = 0

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self.started_ns = time.perf_counter_ns()
            self.started_cpu_ns = time.thread_time_ns()
            return
        cpu_ms = (time.thread_time_ns() - self.started_cpu_ns) / 1e6
        pause_ms = (time.perf_counter_ns() - self.started_ns) / 1e6
        self.out.write(f"{time.time():.3f} {info['generation']} {pause_ms:.3f} {cpu_ms:.3f} "
                       f"{info['collected']} {info['uncollectable']}\n")


def record_collections(out: TextIO) -> None:
    """Write every collection's generation and pause to ``out`` from now on (``MAGNETAR_GC_LOG``)."""
    gc.callbacks.append(_CollectionLog(out))
