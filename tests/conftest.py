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
#: simulation seeds), so with ``pytest -n 2 --dist loadscope`` (``make test``: a module's tests stay
#: on one worker) the short modules fill in around them instead of a long one starting last while
#: the other worker idles. The rest keep their order.
SLOW_FIRST = ("sim", "integration", "cluster", "connectors", "compat", "chaos")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    def rank(item: pytest.Item) -> int:
        path = Path(str(item.path))
        parts = path.relative_to(REPO / "tests").parts if path.is_relative_to(REPO / "tests") else ()
        return SLOW_FIRST.index(parts[0]) if parts and parts[0] in SLOW_FIRST else len(SLOW_FIRST)

    items.sort(key=rank)  # stable: the order within a directory (and so within a module) is kept


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


#: Test directories whose tests start real clusters and official clients of their own.
_CLIENT_CLOSING_DIRS = ("cluster", "integration")


@pytest.fixture(autouse=True)
def _close_official_clients(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    """Every official client a cluster or integration test made is closed when the test ends,
    also when it failed half-way: the C++ client has one log per process, and a client left
    reconnecting to a stopped cluster logs ERROR lines into the compat tests that run later in
    the same worker (their check fails on them)."""
    if Path(str(request.node.fspath)).parent.name not in _CLIENT_CLOSING_DIRS:
        yield
        return
    import pulsar

    made: list[pulsar.Client] = []

    class _Tracked(pulsar.Client):  # type: ignore[misc]
        def __init__(self, *args: object, **kwargs: object) -> None:
            super().__init__(*args, **kwargs)
            made.append(self)

    monkeypatch.setattr(pulsar, "Client", _Tracked)
    yield
    for client in made:
        try:
            client.close()
        except Exception:  # already closed by the test
            pass
