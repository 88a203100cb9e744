"""The journal's native writer (issue 22, session 22): loads ``runtime/disk_cwriter.pyx``'s build
(Cython, made by ``scripts/build_compiled.py`` into ``build/cython/`` beside the mypyc build) and
gives each event loop its ``Port``, the ``eventfd`` the loop reads the writer's answers from.

``runtime.disk_file`` hands a journal group's write and sync, and (session 24) the entry log's
chunk writes and syncs (``LocalFile.append_parts``, ``append_and_sync``, ``sync``), to the native
writer when it is loaded and enabled (the default: ``MODE == "native"``), and otherwise to Python's
threads (the journal's to ``runtime.disk_threads``, the entry log's to the default executor): with ``MAGNETAR_NATIVE_WRITER=0`` (``NATIVE_ENV``), without a
build, with a build of another source, or with ``MAGNETAR_PURE_PYTHON=1`` (the pure run of the test
suite). On by default since the lead's quiet runs of session 22 (docs/performance.md: 3 bookies /
1 bookie 1.25 and 1.65 in two runs, 3 of 4 repeats <= 1.5, against 2 of 5 with the threads; the
e2e p99 and isolation unchanged); the helper's runs on a saturated machine had shown a longer
round trip per group, hence the switch. ``python -c "import magnetar.runtime.disk_writer as w; print(w.MODE,
w.REASON)"`` says which one runs and why; a standalone logs it once, at its first journal group
on a writer (``magnetar.runtime.disk_writer``: "journal writes: ...").

The build is used if and only if its manifest names this source directory, this interpreter's
cache tag and the SHA-256 of today's ``disk_cwriter.pyx`` (as ``magnetar._compiled`` does for the
mypyc build): an edited source is never shadowed by a stale extension.
"""

from __future__ import annotations

import asyncio
import hashlib
import importlib.machinery
import importlib.util
import json
import logging
import os
import sys
import threading
import weakref
from pathlib import Path
from typing import Any, Protocol

from magnetar.base.limits import DISK_SYNC_THREADS_COUNT_MAX
from magnetar.runtime import disk_threads

log = logging.getLogger(__name__)

#: The extension module the Cython source builds.
NATIVE_MODULE = "magnetar.runtime.disk_cwriter"
#: Its source, and the build directory beside ``src/`` (``MAGNETAR_CYTHON_DIR`` names another one:
#: the build script checks a new build there before it replaces the old one).
SOURCE = Path(__file__).resolve().parent / "disk_cwriter.pyx"
BUILD_DIR = Path(os.environ.get("MAGNETAR_CYTHON_DIR") or SOURCE.parents[3] / "build" / "cython")
MANIFEST = "manifest.json"
PURE_ENV = "MAGNETAR_PURE_PYTHON"
#: Set to ``1`` to hand the journal's groups to the native writer where it is built; off by
#: default (session 22: on this VM it cut the writer threads' CPU by 30-60% but the unbatched
#: publish rate, a closed loop bound by each group's round trip, fell ~25%: docs/performance.md).
NATIVE_ENV = "MAGNETAR_NATIVE_WRITER"


class Answered(Protocol):
    """What a job answers to, on the loop's thread: ``error`` is an errno (0: every op done),
    ``failed`` the index of the op that failed, ``took_ns`` the thread's time for the job."""

    def written(self, error: int, failed: int, took_ns: int) -> None: ...


def source_digest() -> str:
    return hashlib.sha256(SOURCE.read_bytes()).hexdigest()


def manifest() -> dict[str, object]:
    """The manifest a build of today's source from this source directory records."""
    return {"source_dir": str(SOURCE.parent), "cache_tag": sys.implementation.cache_tag,
            "modules": {NATIVE_MODULE: source_digest()}}


def _load() -> tuple[Any, str]:
    """(the extension module or None, why)."""
    if os.environ.get(PURE_ENV, "") == "1":
        return None, f"{PURE_ENV}=1"
    try:
        built = json.loads((BUILD_DIR / MANIFEST).read_text())
    except FileNotFoundError:
        return None, f"no native writer build in {BUILD_DIR} (`make compile` makes one)"
    except (OSError, ValueError) as exc:
        return None, f"the native writer's manifest is unreadable: {exc}"
    if built != manifest():
        return None, f"the native writer's build in {BUILD_DIR} is not of today's {SOURCE.name}"
    parts = NATIVE_MODULE.split(".")
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        file = BUILD_DIR.joinpath(*parts[:-1], parts[-1] + suffix)
        if file.is_file():
            break
    else:
        return None, f"the native writer's build in {BUILD_DIR} has no extension"
    loader = importlib.machinery.ExtensionFileLoader(NATIVE_MODULE, str(file))
    spec = importlib.util.spec_from_file_location(NATIVE_MODULE, file, loader=loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    try:
        loader.exec_module(module)
    except ImportError as exc:
        return None, f"the native writer does not load: {exc}"
    sys.modules[NATIVE_MODULE] = module
    return module, f"native writer from {file}"


_native, _LOADED = _load()
_ENABLED = os.environ.get(NATIVE_ENV, "1") != "0"
#: ``native``: the journal's synced writes go to the Cython writer; ``threads``: to Python's
#: writer threads (``runtime.disk_threads``); ``REASON`` says why.
MODE = "native" if _native is not None and _ENABLED else "threads"
REASON = _LOADED if _ENABLED or _native is None else f"{NATIVE_ENV}=0 (the writer is built: {_LOADED})"

_writer: Any = None
_writer_lock = threading.Lock()
_ports: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Any] = weakref.WeakKeyDictionary()
_logged = [False]


def available() -> bool:
    """Whether the native writer is built and loaded (used only if ``enabled()``; tests use it either way)."""
    return _native is not None


def enabled() -> bool:
    """Whether the journal's groups and the entry log's chunks go to the native writer (``MODE == "native"``)."""
    return MODE == "native"


def writer() -> Any:
    """The process's native writer (made on first use); only while ``available()``."""
    global _writer
    current = _writer
    if current is not None:
        return current
    with _writer_lock:
        if _writer is None:
            # As with Python's writer threads (``disk_threads._sync_workers``): the process's other
            # Python threads (the zeros of ``preallocate``, the entry log's and the index's jobs)
            # wait for the GIL the event loop holds at most this long.
            if sys.getswitchinterval() > disk_threads.SYNC_SWITCH_INTERVAL_S:
                sys.setswitchinterval(disk_threads.SYNC_SWITCH_INTERVAL_S)
            _writer = _native.Writer(DISK_SYNC_THREADS_COUNT_MAX, "magnetar-disk-native")
        return _writer


def port_for(loop: asyncio.AbstractEventLoop) -> Any:
    """``loop``'s port (made on first use, its ``eventfd`` read by ``loop``); on the loop's thread."""
    port = _ports.get(loop)
    if port is not None:
        return port
    if not _logged[0]:
        _logged[0] = True
        log.info("journal writes: native writer (%s)", REASON)
    fd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
    try:
        port = writer().port(fd)
    except BaseException:
        os.close(fd)
        raise
    loop.add_reader(fd, _drain, port, loop)
    _ports[loop] = port
    return port


def _drain(port: Any, loop: asyncio.AbstractEventLoop) -> None:
    """The port's eventfd is readable: answer every job done (one failing answer does not lose
    the others)."""
    owner: Answered
    for owner, error, failed, took_ns in port.drain():
        try:
            owner.written(error, failed, took_ns)
        except Exception as exc:  # the owner's own bug: reported, the other answers still go
            loop.call_exception_handler({"message": "native writer answer failed", "exception": exc})


def _forget_in_child() -> None:
    # A forked child has none of the parent's threads, and the writer's lock may have been held.
    global _writer, _writer_lock, _ports
    _writer = None
    _writer_lock = threading.Lock()
    _ports = weakref.WeakKeyDictionary()


os.register_at_fork(after_in_child=_forget_in_child)
