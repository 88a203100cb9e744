"""Embedded store specifics: durability across restart and across kill -9."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest

from magnetar.metadata import EmbeddedMetadataServer, GetResult
from magnetar.runtime import RocksKeyValueStore, SystemClock
from tests.conftest import REPO, child_env
from tests.metadata.conftest import run


async def _open(directory: Path) -> EmbeddedMetadataServer:
    return await EmbeddedMetadataServer.open(RocksKeyValueStore(str(directory)), SystemClock())


def test_restart_keeps_nodes_versions_and_counters_and_drops_ephemerals(tmp_path: Path) -> None:
    async def body() -> None:
        server = await _open(tmp_path)
        store = await server.connect()
        await store.put("/p/a", b"1", -1)
        await store.put("/p/a", b"2", 0)
        await store.create("/live/me", b"", ephemeral=True)
        first_seq = await store.create("/seq/n-", b"", sequential=True)
        first_session = store.session.session_id
        server._kv.close()  # simulate the process going away without closing its session

        server = await _open(tmp_path)
        store = await server.connect()
        assert await store.get("/p/a") == GetResult(b"2", 1)
        assert not await store.exists("/live/me"), "a previous process's ephemeral node is gone"
        assert await store.exists("/live")
        assert await store.create("/seq/n-", b"", sequential=True) > first_seq
        assert store.session.session_id > first_session
        assert await store.put("/p/a", b"3", 1) == 2
        await server.close()

    run(body)


def missing_writes(printed: list[str], lookup: dict[str, GetResult | None]) -> list[str]:
    """Every ``ok path version value`` line whose write is not in the store (or was overtaken wrongly)."""
    latest: dict[str, tuple[int, bytes]] = {}
    for line in printed:
        _, path, version, value = line.split()
        latest[path] = (int(version), value.encode())
    problems = []
    for path, (version, value) in latest.items():
        found = lookup.get(path)
        if found is None or found.version < version or (found.version == version and found.value != value):
            problems.append(f"{path}: acknowledged v{version}={value!r}, found {found}")
    return problems


def test_missing_write_checker_can_fail() -> None:
    printed = ["ok /cas/k0 3 9"]
    assert missing_writes(printed, {"/cas/k0": GetResult(b"9", 3)}) == []
    assert missing_writes(printed, {"/cas/k0": GetResult(b"5", 2)})
    assert missing_writes(printed, {"/cas/k0": GetResult(b"8", 3)})
    assert missing_writes(printed, {"/cas/k0": None})


@pytest.mark.integration
def test_kill_9_during_cas_stream_loses_no_acknowledged_write(tmp_path: Path) -> None:
    target_acks = 300
    child = subprocess.Popen(
        [sys.executable, "-m", "tests.metadata.cas_child", str(tmp_path)],
        cwd=REPO,
        env=child_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    printed: list[str] = []
    try:
        assert child.stdout is not None
        for line in child.stdout:
            printed.append(line.strip())
            if len(printed) >= target_acks:
                child.send_signal(signal.SIGKILL)
                break
        child.wait(timeout=30)
        printed += [line.strip() for line in child.stdout.read().splitlines() if line.startswith("ok ")]
    finally:
        if child.poll() is None:
            child.kill()
            child.wait(timeout=30)
    assert child.returncode == -signal.SIGKILL, child.stderr.read() if child.stderr else ""
    assert len(printed) >= target_acks

    async def check() -> list[str]:
        server = await _open(tmp_path)
        store = await server.connect()
        lookup = {f"/cas/k{i}": await store.get(f"/cas/k{i}") for i in range(4)}
        await server.close()
        return missing_writes(printed, lookup)

    assert run(check) == []
