"""The compiled hot path and its pure-Python fallback (issue 22; ``src/magnetar/_compiled.py``).

``make test`` runs the suite twice: on the compiled build (``MAGNETAR_EXPECT_MODE=compiled`` when
``make compile`` made one) and a subset with ``MAGNETAR_PURE_PYTHON=1``
(``MAGNETAR_EXPECT_MODE=pure``). These tests say which mode is active and show it is real: in
compiled mode every compiled module is an extension module, in pure mode a ``.py`` file. The
negative controls run child interpreters: ``MAGNETAR_PURE_PYTHON=1`` or a missing or stale build
gives the ``.py`` modules.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from magnetar import _compiled
from tests.conftest import REPO

_PROBE = (
    "import json, importlib, magnetar._compiled as c\n"
    "files = {m: importlib.import_module(m).__file__ for m in c.COMPILED_MODULES}\n"
    "print(json.dumps({'mode': c.MODE, 'reason': c.REASON, 'files': files}))\n"
)


def _child(**env: str) -> dict[str, object]:
    environment = {k: v for k, v in os.environ.items() if k not in ("MAGNETAR_PURE_PYTHON", "MAGNETAR_COMPILED_DIR")}
    environment.update(env, PYTHONPATH=str(REPO / "src"))
    result = subprocess.run([sys.executable, "-c", _PROBE], env=environment, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    report: dict[str, object] = json.loads(result.stdout.strip().splitlines()[-1])
    report["stderr"] = result.stderr
    return report


def _is_extension(module_name: str) -> bool:
    module = importlib.import_module(module_name)
    return isinstance(module.__spec__.loader, importlib.machinery.ExtensionFileLoader) and not str(
        module.__file__
    ).endswith(".py")


def test_the_active_mode_is_the_one_the_run_expects() -> None:
    expected = os.environ.get("MAGNETAR_EXPECT_MODE")
    print(f"magnetar runs {_compiled.MODE}: {_compiled.REASON}")
    if expected is not None:
        assert expected == _compiled.MODE, _compiled.REASON
    if os.environ.get("MAGNETAR_PURE_PYTHON") == "1":
        assert _compiled.MODE == "pure"


def test_every_compiled_module_is_what_the_mode_says() -> None:
    kinds = {name: _is_extension(name) for name in _compiled.COMPILED_MODULES}
    if _compiled.MODE == "compiled":
        assert all(kinds.values()), [name for name, extension in kinds.items() if not extension]
        # a module outside the list stays Python
        assert not _is_extension("magnetar.runtime.disk")
    else:
        assert not any(kinds.values()), [name for name, extension in kinds.items() if extension]


def test_pure_python_switch_imports_the_py_modules() -> None:
    report = _child(MAGNETAR_PURE_PYTHON="1")
    assert report["mode"] == "pure"
    files = report["files"]
    assert isinstance(files, dict)
    assert all(str(path).endswith(".py") for path in files.values()), files


def test_without_a_build_the_py_modules_run(tmp_path: Path) -> None:
    report = _child(MAGNETAR_COMPILED_DIR=str(tmp_path / "none"))
    assert report["mode"] == "pure" and "no compiled build" in str(report["reason"])
    assert all(str(path).endswith(".py") for path in dict(report["files"]).values())  # type: ignore[call-overload]
    assert report["stderr"] == ""  # no build is the normal case: nothing to say


@pytest.mark.skipif(_compiled.MODE != "compiled", reason="needs a current build (make compile)")
def test_the_build_loads_extension_modules_and_a_stale_one_is_refused(tmp_path: Path) -> None:
    report = _child()
    assert report["mode"] == "compiled"
    files = dict(report["files"])  # type: ignore[call-overload]
    assert not any(str(path).endswith(".py") for path in files.values()), files
    # The same build with one module's recorded source changed: not used, and said so.
    stale = tmp_path / "build"
    shutil.copytree(_compiled.BUILD_DIR, stale)
    manifest = json.loads((stale / _compiled.MANIFEST).read_text())
    manifest["modules"]["magnetar.protocol.pulsar.fast"] = "0" * 64
    (stale / _compiled.MANIFEST).write_text(json.dumps(manifest))
    report = _child(MAGNETAR_COMPILED_DIR=str(stale))
    assert report["mode"] == "pure" and "magnetar.protocol.pulsar.fast changed" in str(report["reason"])
    assert all(str(path).endswith(".py") for path in dict(report["files"]).values())  # type: ignore[call-overload]
    assert "running pure Python" in str(report["stderr"])


def test_a_manifest_is_checked_against_the_sources() -> None:
    current = _compiled.manifest_for(_compiled.COMPILED_MODULES)
    assert _compiled.why_not_usable(current) is None
    changed = json.loads(json.dumps(current))
    changed["modules"]["magnetar.base.types"] = "0" * 64
    assert "magnetar.base.types changed" in str(_compiled.why_not_usable(changed))
    moved = dict(current, source_dir="/elsewhere/src/magnetar")
    assert "/elsewhere" in str(_compiled.why_not_usable(moved))
    other = dict(current, cache_tag="cpython-30")
    assert "cpython-30" in str(_compiled.why_not_usable(other))
    gone = json.loads(json.dumps(current))
    gone["modules"]["magnetar.base.no_such_module"] = "0" * 64
    assert "no longer in the source tree" in str(_compiled.why_not_usable(gone))


def _build_script() -> object:
    import importlib.util

    spec = importlib.util.spec_from_file_location("_build_compiled", REPO / "scripts" / "build_compiled.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class _RecordingCompiler:
    """distutils' compile steps, recorded: which object each thread compiled, in what order, and
    how many ran at once (a ``cc`` that takes a moment, waited on an event, not a sleep)."""

    def __init__(self, sources: dict[str, int], fail: str = "", pair: bool = False) -> None:
        import threading

        self.sources = sources
        self.fail = fail
        self.pair = pair  # the first two compiles wait for each other (they must run at once)
        self.started: list[str] = []
        self.running = 0
        self.most_at_once = 0
        self._lock = threading.Lock()
        self._both = threading.Barrier(2, timeout=10)

    def _setup_compile(self, output_dir, macros, include_dirs, sources, depends, extra):  # type: ignore[no-untyped-def]
        objects = [f"{src}.o" for src in sources]
        return macros, objects, extra, ["-Iinc"], {f"{src}.o": (src, ".c") for src in sources}

    def _get_cc_args(self, pp_opts, debug, before):  # type: ignore[no-untyped-def]
        return [*pp_opts, "-c"]

    def _compile(self, obj, src, ext, cc_args, extra_postargs, pp_opts):  # type: ignore[no-untyped-def]
        import threading

        with self._lock:
            self.started.append(src)
            self.running += 1
            self.most_at_once = max(self.most_at_once, self.running)
        if self.pair and len(self.started) <= 2:
            try:
                self._both.wait()  # the first two run at the same time, or this times out
            except threading.BrokenBarrierError:
                pass
        with self._lock:
            self.running -= 1
        if src == self.fail:
            raise RuntimeError(f"cc failed on {src}")


def test_the_build_compiles_the_c_files_of_one_library_in_parallel_largest_first(tmp_path: Path) -> None:
    script = _build_script()
    sizes = {"small.c": 10, "huge.c": 5000, "mid.c": 300}
    for name, size in sizes.items():
        (tmp_path / name).write_bytes(b"x" * size)
    sources = [str(tmp_path / name) for name in sizes]
    compiler = _RecordingCompiler(sizes, pair=True)
    script._compile_in_parallel(compiler, 2)  # type: ignore[attr-defined]
    objects = compiler.compile(sources, output_dir="out")  # type: ignore[attr-defined]
    assert objects == [f"{src}.o" for src in sources]  # every object, in the sources' order
    assert sorted(compiler.started) == sorted(sources)
    assert compiler.started[0].endswith("huge.c")
    assert compiler.most_at_once == 2
    # Negative control: one job compiles one file at a time; a failing cc fails the build.
    serial = _RecordingCompiler(sizes, fail=sources[0])
    script._compile_in_parallel(serial, 1)  # type: ignore[attr-defined]
    with pytest.raises(RuntimeError, match="cc failed"):
        serial.compile(sources)  # type: ignore[attr-defined]
    assert serial.most_at_once == 1


def test_a_compiled_run_has_the_journals_native_writer_built_where_cython_is_installed() -> None:
    """``make compile`` builds the journal's native writer (Cython, ``runtime/disk_cwriter.pyx``)
    beside the mypyc build: in a run that expects the compiled mode, with Cython installed (the dev
    extras), the build must be there and load, or ``tests/runtime/test_disk_native.py`` would skip
    its tests silently. The build's own probe once asked for the writer without enabling it
    (while ``MAGNETAR_NATIVE_WRITER`` was off by default) and so discarded every build: this test is the
    control for that (it fails on such a tree)."""
    import importlib.util

    from magnetar.runtime import disk_writer

    if os.environ.get("MAGNETAR_EXPECT_MODE") != "compiled" or importlib.util.find_spec("Cython") is None:
        pytest.skip("not a compiled run with Cython installed")
    assert disk_writer.available(), disk_writer.REASON
