"""Shared test fixtures: paths and subprocess helpers. Tests never wait with sleep."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SRC = REPO / "src" / "magnetar"
BIN = Path(sys.executable).parent

#: Directories whose tests run first: their tests are the longest (real processes, Spark, many
#: simulation seeds), so with ``pytest -n 2`` (``make test``) the short tests fill in around them
#: instead of one long test starting last while the other worker idles. The rest keep their order.
SLOW_FIRST = ("sim", "integration", "cluster", "connectors", "compat", "chaos")


def _xdist_group(item: pytest.Item) -> str | None:
    """Tests that share a fixture wider than a test run on one ``pytest -n`` worker (``--dist
    loadgroup``), so it is set up once: a session's ZooKeeper server (its own group), the Spark
    tests' JVM (the directory is one group), a module's standalone process or cluster (the module)."""
    callspec = getattr(item, "callspec", None)
    fixture_info = getattr(item, "_fixtureinfo", None)
    definitions = fixture_info.name2fixturedefs if fixture_info is not None else {}
    scopes = {name: defs[-1].scope for name, defs in definitions.items()  # ours, not pytest's own
              if defs and getattr(defs[-1].func, "__module__", "").startswith("tests")}
    if "zookeeper_url" in scopes or (callspec is not None and callspec.params.get("backend") == "zookeeper"):
        return "zookeeper"
    if "connectors/spark/" in Path(str(item.path)).as_posix():
        return "spark"
    if any(scope in ("class", "module", "package", "session") for scope in scopes.values()):
        return item.nodeid.split("::", 1)[0]
    return None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    def rank(item: pytest.Item) -> int:
        path = Path(str(item.path))
        parts = path.relative_to(REPO / "tests").parts if path.is_relative_to(REPO / "tests") else ()
        return SLOW_FIRST.index(parts[0]) if parts and parts[0] in SLOW_FIRST else len(SLOW_FIRST)

    items.sort(key=rank)  # stable: the order within a directory (and so within a module) is kept
    for item in items:
        group = _xdist_group(item)
        if group is not None:
            item.add_marker(pytest.mark.xdist_group(group))


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
