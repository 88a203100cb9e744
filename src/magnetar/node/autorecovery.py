"""The AutoRecovery node: an auditor candidate plus a replication worker, over capabilities.

``start_autorecovery(store, network=..., clock=..., rng=..., owner=...)`` runs both in the current
event loop over one metadata session (``magnetar autorecovery`` runs it as its own process, see
``runtime.autorecovery``; the simulator runs it as a simulated node; several give auditor
failover and parallel workers).

Supervision: an auditor that loses its lock while the session lives campaigns again with a new
``Auditor``; a loop that fails with an operating error (metadata briefly unavailable) logs it
and starts over after ``RESTART_DELAY_S``. When the session has expired or closed, both loops
end: the process must be restarted (it owns no state, so nothing is lost).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from typing import Any

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

log = logging.getLogger(__name__)

RESTART_DELAY_S = 1.0


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
    owner: str,
    master_key: bytes = b"",
) -> RunningAutoRecovery:
    """Run an auditor candidate and a replication worker over ``store`` (the caller keeps it)."""
    config = config or AutoRecoveryConfig()
    ledger_config = ledger_config or LedgerClientConfig()
    ledgers = LedgerMetadataStore(MetadataStoreAdapter(store))
    transport = BookieClientTransport(network, clock, ledger_config)
    directory = RackedBookieDirectory(MetadataBookieDirectory(store), store)
    worker = ReplicationWorker(
        store, ledgers=ledgers, transport=transport, directory=directory,
        placement=RackAwarePlacement(rng, directory), clock=clock, config=config, ledger_config=ledger_config,
        owner=owner, master_key=master_key,
    )
    running = RunningAutoRecovery(owner, worker, transport)

    async def audit() -> None:
        running.auditor = Auditor(store, ledgers=ledgers, clock=clock, config=config, owner=owner)
        await running.auditor.run()

    running._start("auditor", lambda: _supervise(store, clock, "auditor", audit))
    running._start("worker", lambda: _supervise(store, clock, "worker", worker.run))
    return running
