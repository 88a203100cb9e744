"""Every benchmark script in ``bench/`` imports (its ``main`` is not run): a script that imports a
name another change moved or renamed fails here rather than when someone runs ``make bench``.

Negative control: a script importing a name its module no longer has is reported.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO

SCRIPTS = sorted((REPO / "bench").glob("*.py"))


def _import(path: Path) -> None:
    spec = importlib.util.spec_from_file_location(f"_bench_{path.stem}", path)
    assert spec is not None and spec.loader is not None
    saved = list(sys.path)
    try:
        spec.loader.exec_module(importlib.util.module_from_spec(spec))
    finally:
        sys.path[:] = saved  # the scripts put bench/ and bench/peers/ first on the path


@pytest.mark.parametrize("path", SCRIPTS, ids=[path.name for path in SCRIPTS])
def test_the_benchmark_script_imports(path: Path) -> None:
    _import(path)


def test_negative_control_a_script_importing_a_moved_name_is_caught(tmp_path: Path) -> None:
    script = tmp_path / "stale_bench.py"
    script.write_text("from magnetar.protocol.bookie import Entry  # moved to magnetar.base.entry\n")
    with pytest.raises(ImportError):
        _import(script)
