"""Composition of AutoRecovery: an auditor candidate plus a replication worker in one process.

``start_autorecovery(store, network=..., clock=..., rng=...)`` runs both in the current event
loop over one metadata session (``magnetar autorecovery`` runs it as its own process; several
such processes give auditor failover and parallel workers). ``run_autorecovery`` is that
process: it arms fault points from ``MAGNETAR_FAULTS``, opens the metadata store, prints
``magnetar-autorecovery running as OWNER`` once both loops run, and stops on SIGTERM/SIGINT.

Supervision: an auditor that loses its lock while the session lives campaigns again with a new
``Auditor``; a loop that fails with an operating error (metadata briefly unavailable) logs it
and starts over after ``RESTART_DELAY_S``. When the session has expired or closed, both loops
end: the process must be restarted (it owns no state, so nothing is lost).
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import sys
from collections.abc import Callable, Coroutine
from typing import Any

from magnetar import faults
from magnetar.base.clock import Clock
from magnetar.base.errors import MagnetarError
from magnetar.base.io import Network
from magnetar.base.rng import Rng
from magnetar.ledger.autorecovery import Auditor, AutoRecoveryConfig, ReplicationWorker
from magnetar.ledger.bookie_transport import BookieClientTransport
from magnetar.ledger.config import LedgerClientConfig
from magnetar.ledger.directory import MetadataBookieDirectory
from magnetar.ledger.metadata_adapter import MetadataStoreAdapter
from magnetar.ledger.metadata_ops import LedgerMetadataStore
from magnetar.ledger.rack_placement import RackAwarePlacement
from magnetar.ledger.racks import RackedBookieDirectory
from magnetar.metadata.api import MetadataStore
from magnetar.runtime.bookie import wait_for_termination_signal
from magnetar.runtime.clock import SystemClock, system_rng
from magnetar.runtime.metadata import open_metadata_store
from magnetar.runtime.network import TcpNetwork
from magnetar.runtime.tls import bookie_client_network

log = logging.getLogger(__name__)

RESTART_DELAY_S = 1.0
READY_PREFIX = "magnetar-autorecovery running as "


class RunningAutoRecovery:
    """The auditor and worker loops of one process; ``stop()`` ends them and closes connections."""

    def __init__(self, owner: str, worker: ReplicationWorker, transport: BookieClientTransport) -> None:
        self.owner = owner
        self.worker = worker
        self.auditor: Auditor | None = None
        self._transport = transport
        self._tasks: list[asyncio.Task[None]] = []

    def _start(self, name: str, loop: Callable[[], Coroutine[Any, Any, None]]) -> None:
        self._tasks.append(asyncio.get_running_loop().create_task(loop(), name=f"autorecovery-{name}-{self.owner}"))

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self._transport.close()


async def _supervise(store: MetadataStore, clock: Clock, what: str, body: Callable[[], Coroutine[Any, Any, None]]) -> None:
    while store.session.alive:
        try:
            await body()
        except MagnetarError as exc:
            if not store.session.alive:
                break
            log.warning("autorecovery %s failed, restarting: %s", what, exc)
            await clock.sleep(RESTART_DELAY_S)
    log.error("autorecovery %s stops: metadata session %s", what, store.session.state.value)


async def start_autorecovery(
    store: MetadataStore,
    *,
    network: Network,
    clock: Clock,
    rng: Rng,
    config: AutoRecoveryConfig | None = None,
    ledger_config: LedgerClientConfig | None = None,
    owner: str | None = None,
    master_key: bytes = b"",
) -> RunningAutoRecovery:
    """Run an auditor candidate and a replication worker over ``store`` (the caller keeps it)."""
    config = config or AutoRecoveryConfig()
    ledger_config = ledger_config or LedgerClientConfig()
    owner = owner or f"{socket.gethostname()}:{os.getpid()}"
    ledgers = LedgerMetadataStore(MetadataStoreAdapter(store))
    transport = BookieClientTransport(network, clock, ledger_config)
    directory = RackedBookieDirectory(MetadataBookieDirectory(store), store)
    worker = ReplicationWorker(
        store, ledgers=ledgers, transport=transport, directory=directory,
        placement=RackAwarePlacement(rng, directory), clock=clock, config=config, ledger_config=ledger_config, owner=owner,
        master_key=master_key,
    )
    running = RunningAutoRecovery(owner, worker, transport)

    async def audit() -> None:
        running.auditor = Auditor(store, ledgers=ledgers, clock=clock, config=config, owner=owner)
        await running.auditor.run()

    running._start("auditor", lambda: _supervise(store, clock, "auditor", audit))
    running._start("worker", lambda: _supervise(store, clock, "worker", worker.run))
    return running


async def run_autorecovery(
    metadata_url: str, config: AutoRecoveryConfig, *, ready: Callable[[str], None] | None = None,
    bookie_tls: tuple[str | None, str | None, str | None] = (None, None, None),
) -> None:
    """Run AutoRecovery until SIGTERM/SIGINT (composition root of ``magnetar autorecovery``)."""
    faults.arm_from_env()
    clock = SystemClock()
    store = await open_metadata_store(metadata_url, clock=clock)
    try:
        network = bookie_client_network(*bookie_tls) if bookie_tls[0] else TcpNetwork()
        running = await start_autorecovery(store, network=network, clock=clock, rng=system_rng(), config=config)
        try:
            print(f"{READY_PREFIX}{running.owner}", flush=True)
            if ready is not None:
                ready(running.owner)
            await wait_for_termination_signal()
        finally:
            await running.stop()
    finally:
        await store.close()


def main(metadata_url: str, config: AutoRecoveryConfig,
         bookie_tls: tuple[str | None, str | None, str | None] = (None, None, None)) -> None:
    """Run ``run_autorecovery`` on uvloop (plain asyncio if uvloop is missing)."""
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        import uvloop

        uvloop.run(run_autorecovery(metadata_url, config, bookie_tls=bookie_tls))
    except ImportError:
        asyncio.run(run_autorecovery(metadata_url, config, bookie_tls=bookie_tls))
