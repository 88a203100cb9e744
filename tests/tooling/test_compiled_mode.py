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
