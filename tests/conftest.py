"""Shared test fixtures: paths and subprocess helpers. Tests never wait with sleep."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SRC = REPO / "src" / "magnetar"
BIN = Path(sys.executable).parent


@pytest.fixture
def repo_root() -> Path:
    return REPO


@pytest.fixture(autouse=True)
def _disarm_faults():
    from magnetar import faults

    faults.disarm_all()
    yield
    faults.disarm_all()


def tool(name: str) -> str:
    """Path of a console script installed in the test's virtual environment."""
    candidate = BIN / name
    return str(candidate) if candidate.exists() else name


def child_env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update(extra)
    return env
