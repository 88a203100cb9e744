"""Issue 5 evidence over real processes: ZooKeeper, three ``magnetar bookie`` processes and a
``magnetar autorecovery`` process on 127.0.0.1; the writer runs in this test process.

The writer streams entries to a (3,3,2) ledger; meanwhile a fourth bookie is started and one
ensemble bookie is killed with SIGKILL. The writer replaces it (ensemble change) and goes on.
Then a fresh ledger manager opens the ledger with recovery: every acknowledged entry must be
readable. Once the killed bookie's ZooKeeper session expires its registration vanishes, the
auditor marks the ledger and the worker copies the dead bookie's fragment to a live bookie:
afterwards every entry is on Qw live bookies of its write set (asked one by one), no fragment
names the dead bookie, and no marker is left. The durations are printed (``-s``) for the report.

Every process is started on a free port with its own temporary directory and stopped by PID in
a ``finally``. The bound is dominated by the dead bookie's session timeout (30 s by default).
"""

from __future__ import annotations

import asyncio
import itertools
import os
import selectors
import signal
import subprocess
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from magnetar.base.rng import SeededRng
from magnetar.base.types import BookieId
from magnetar.ledger.handle import LedgerHandle
from magnetar.ledger.ledger_metadata import LedgerMetadata, LedgerState
from magnetar.ledger.metadata_adapter import MetadataStoreAdapter
from magnetar.ledger.metadata_ops import LedgerMetadataStore
from magnetar.ledger.quorum import write_set
from magnetar.ledger.reader import verified
from magnetar.ledger.underreplication import UNDERREPLICATED_PATH
from magnetar.metadata.api import MetadataStore
from magnetar.node.ledger import close_ledger_manager, open_ledger_manager
from magnetar.runtime.clock import SystemClock
from magnetar.runtime.metadata import open_metadata_store
from magnetar.runtime.network import TcpNetwork
from tests.conftest import REPO, child_env, tool
from tests.integration.bookie_proc import BookieProcess, start_bookie
from tests.metadata.conftest import zookeeper_url  # noqa: F401 - the session-scoped ZooKeeper fixture

pytestmark = pytest.mark.integration

TEST_DEADLINE_S = 55  # the run takes ~32 s, 30 of them waiting for the session to expire
PROCESS_START_TIMEOUT_S = 20.0
REPLICATION_DEADLINE_S = 45.0  # the dead bookie's session timeout (30 s) plus the copy
WINDOW_COUNT_MAX = 32  # adds the writer keeps in flight
#: Entries written before the kill: they are what AutoRecovery copies (more for a bigger figure).
ENTRIES_BEFORE_KILL = int(os.environ.get("MAGNETAR_REAL_CLUSTER_ENTRIES", "300"))
ENTRIES_AFTER_KILL = 300
PAYLOAD_BYTES = 512
_chroots = itertools.count(1)


def payload(entry_id: int) -> bytes:
    return (b"entry-%06d-" % entry_id).ljust(PAYLOAD_BYTES, b".")


class AutoRecoveryProcess:
    def __init__(self, metadata_url: str, log_path: Path) -> None:
        log_file = open(log_path, "w")  # noqa: SIM115 - the child owns the descriptor
        argv = [tool("magnetar"), "autorecovery", "--metadata", metadata_url, "--lost-bookie-delay-ms", "0",
                "--poll-interval-ms", "1000"]
        self.log_path = log_path
        self.process = subprocess.Popen(argv, env=child_env(PYTHONPATH=str(REPO / "src")), stdout=subprocess.PIPE,
                                        stderr=log_file, text=True, cwd=REPO)
        log_file.close()
        assert self.process.stdout is not None
        with selectors.DefaultSelector() as selector:
            selector.register(self.process.stdout, selectors.EVENT_READ)
            deadline = time.monotonic() + PROCESS_START_TIMEOUT_S
            while time.monotonic() < deadline:
                if selector.select(timeout=max(0.0, deadline - time.monotonic())):
                    line = self.process.stdout.readline()
                    if not line or line.startswith("magnetar-autorecovery running as "):
                        break
        if self.process.poll() is not None:
            raise RuntimeError(f"autorecovery did not start:\n{log_path.read_text()[-4000:]}")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)
        if self.process.stdout is not None:
            self.process.stdout.close()


async def until(condition: Callable[[], Awaitable[bool]], deadline_s: float, what: str,
                store: MetadataStore, *paths: str) -> float:
    """Wait until ``condition()`` holds, re-checking on every change of ``paths``; returns seconds taken."""
    started = time.monotonic()
    changed = asyncio.Event()
    watches = [await store.watch(p, lambda _e: changed.set()) for p in paths]
    try:
        while not await condition():
            remaining = deadline_s - (time.monotonic() - started)
            if remaining <= 0:
                raise AssertionError(f"timed out after {deadline_s} s waiting for {what}")
            changed.clear()
            # Re-check at least every second too: a process's progress is not always a watched change.
            with_timeout = asyncio.wait_for(changed.wait(), timeout=min(1.0, remaining))
            try:
                await with_timeout
            except TimeoutError:
                pass
    finally:
        for watch in watches:
            watch.cancel()
    return time.monotonic() - started


async def stream(handle: LedgerHandle, count: int, acked: dict[int, bytes]) -> None:
    """Append ``count`` entries, ``WINDOW_COUNT_MAX`` in flight; record each acknowledgement."""
    window = asyncio.Semaphore(WINDOW_COUNT_MAX)
    start = handle.last_add_pushed + 1

    async def one(expected_id: int) -> None:
        try:
            data = payload(expected_id)
            entry_id = await handle.add_entry(data)
            assert entry_id == expected_id
            acked[entry_id] = data
        finally:
            window.release()

    tasks = []
    for entry_id in range(start, start + count):
        await window.acquire()
        tasks.append(asyncio.ensure_future(one(entry_id)))
    await asyncio.gather(*tasks)


def test_acked_entries_survive_a_killed_bookie_and_autorecovery_restores_qw_copies(
    zookeeper_url: str, tmp_path: Path  # noqa: F811
) -> None:
    url = f"{zookeeper_url}/realcluster{os.getpid()}x{next(_chroots)}"
    bookies: list[BookieProcess] = []
    recovery: AutoRecoveryProcess | None = None
    try:
        for i in range(3):
            bookies.append(start_bookie(tmp_path / f"bookie{i}", url))
        recovery = AutoRecoveryProcess(url, tmp_path / "autorecovery.log")
        asyncio.run(asyncio.wait_for(_scenario(url, tmp_path, bookies), TEST_DEADLINE_S))
    finally:
        if recovery is not None:
            recovery.stop()
        for bookie in bookies:
            bookie.stop()


async def _scenario(url: str, tmp_path: Path, bookies: list[BookieProcess]) -> None:
    clock = SystemClock()
    store = await open_metadata_store(url, clock=clock)
    manager = await open_ledger_manager(store, network=TcpNetwork(), clock=clock, rng=SeededRng(5))
    fresh = None
    try:
        handle = await manager.create_ledger(3, 3, 2)
        acked: dict[int, bytes] = {}
        await stream(handle, ENTRIES_BEFORE_KILL, acked)
        bookies.append(start_bookie(tmp_path / "bookie3", url))  # blocks the loop ~1 s: the writer is between phases
        victim = next(b for b in bookies if BookieId("127.0.0.1", b.port) == handle.ensemble[1])
        victim_id = BookieId("127.0.0.1", victim.port)
        killed_at = time.monotonic()
        os.kill(victim.pid, signal.SIGKILL)
        await stream(handle, ENTRIES_AFTER_KILL, acked)  # through an ensemble change to bookie3
        assert victim_id not in handle.ensemble
        assert sorted(acked) == list(range(ENTRIES_BEFORE_KILL + ENTRIES_AFTER_KILL))

        # Every acknowledged entry is readable after recovery, from a fresh client.
        fresh = await open_ledger_manager(store, network=TcpNetwork(), clock=clock, rng=SeededRng(6))
        reader = await fresh.open_ledger(handle.ledger_id)
        assert reader.is_closed and reader.last_add_confirmed >= max(acked)
        for first in range(0, reader.last_add_confirmed + 1, 500):
            last = min(first + 499, reader.last_add_confirmed)
            for entry in await reader.read_entries(first, last):
                if entry.entry_id in acked:
                    assert entry.payload == acked[entry.entry_id]
        recovered_at = time.monotonic()

        # AutoRecovery: once the dead bookie's registration is gone, Qw live copies again.
        ledgers = LedgerMetadataStore(MetadataStoreAdapter(store))
        ledger_path = ledgers.path(handle.ledger_id)

        async def registration_gone() -> bool:
            return str(victim_id) not in await store.children("/ledgers/available")

        async def replicated() -> bool:
            meta = (await ledgers.read(handle.ledger_id)).metadata
            return victim_id not in meta.bookies() and not await store.children(UNDERREPLICATED_PATH)

        await until(registration_gone, REPLICATION_DEADLINE_S, "the registration to expire", store,
                    "/ledgers/available")
        expired_at = time.monotonic()
        await until(replicated, REPLICATION_DEADLINE_S, "re-replication", store, ledger_path, UNDERREPLICATED_PATH)
        done_at = time.monotonic()
        meta = (await ledgers.read(handle.ledger_id)).metadata
        await _check_qw_live_copies(fresh, meta)
        checked_at = time.monotonic()
        copied = sum(1 for e in range(meta.last_entry_id + 1) if e < meta.fragments[1].first_entry_id)
        print(
            f"\nreal-cluster: ledger {handle.ledger_id} (3,3,2) {len(acked)} acked entries of {PAYLOAD_BYTES} B, "
            f"last entry {meta.last_entry_id}, fragments {[f.first_entry_id for f in meta.fragments]}; "
            f"kill -> recovered read of all acked: {recovered_at - killed_at:.2f} s; "
            f"kill -> registration expired: {expired_at - killed_at:.2f} s; "
            f"registration expired -> Qw copies restored ({copied} entries copied): {done_at - expired_at:.2f} s; "
            f"verification of {(meta.last_entry_id + 1) * 3} copies: {checked_at - done_at:.2f} s"
        )
    finally:
        await close_ledger_manager(manager)
        if fresh is not None:
            await close_ledger_manager(fresh)
        await store.close()


async def _check_qw_live_copies(manager: object, meta: LedgerMetadata) -> None:
    """Ask every bookie of every entry's write set for its copy: all Qw must answer with it."""
    assert meta.state is LedgerState.CLOSED
    transport = manager._transport  # type: ignore[attr-defined]
    window = asyncio.Semaphore(WINDOW_COUNT_MAX)

    async def ask(bookie: BookieId, entry_id: int) -> None:
        async with window:
            entry = await transport.read(bookie, meta.ledger_id, entry_id, fence=False, master_key=b"")
            assert verified(entry, meta.ledger_id, entry_id), f"{bookie} has a bad copy of {entry_id}"

    checks = []
    for entry_id in range(meta.last_entry_id + 1):
        ensemble = meta.ensemble_for(entry_id)
        for slot in write_set(entry_id, meta.ensemble_size, meta.write_quorum_size):
            checks.append(ask(ensemble[slot], entry_id))
    await asyncio.gather(*checks)
