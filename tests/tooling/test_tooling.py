"""Ruff, mypy (strict on base, protocol, sim) and the import-linter layer contracts, as tests."""

from __future__ import annotations

import subprocess

from tests.conftest import REPO, tool


def _run(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=600)


def test_ruff_is_clean() -> None:
    paths = [p for p in ("src", "tests", "bench") if (REPO / p).exists()]
    result = _run(tool("ruff"), "check", *paths)
    assert result.returncode == 0, result.stdout + result.stderr


def test_mypy_is_clean() -> None:
    result = _run(tool("mypy"), "src/magnetar")
    assert result.returncode == 0, result.stdout + result.stderr


def test_import_layers_point_downwards() -> None:
    result = _run(tool("lint-imports"))
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr
