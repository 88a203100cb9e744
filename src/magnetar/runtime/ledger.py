"""Composition of the production ledger client: ``open_ledger_manager`` / ``close_ledger_manager``.

Wires a ``LedgerManager`` from one metadata-store session: ledger metadata under ``/ledgers``
(``MetadataStoreAdapter``), the live writable bookies from ``/ledgers/available``
(``MetadataBookieDirectory``), random placement from the given ``Rng``, and pooled bookie
connections over the given ``Network`` (``BookieClientTransport``). It does no I/O of its own,
so the simulator composes the client the same way with its simulated network and clock.
The caller keeps owning ``store``; ``close_ledger_manager`` closes only the bookie connections.
"""

from __future__ import annotations

from magnetar.base.clock import Clock
from magnetar.base.io import Network
from magnetar.base.rng import Rng
from magnetar.ledger.bookie_transport import BookieClientTransport
from magnetar.ledger.config import LedgerClientConfig
from magnetar.ledger.directory import MetadataBookieDirectory
from magnetar.ledger.manager import LedgerManager
from magnetar.ledger.metadata_adapter import MetadataStoreAdapter
from magnetar.ledger.metadata_ops import LedgerMetadataStore
from magnetar.ledger.placement import RandomPlacement
from magnetar.metadata.api import MetadataStore


async def open_ledger_manager(
    store: MetadataStore,
    *,
    network: Network,
    clock: Clock,
    rng: Rng,
    config: LedgerClientConfig | None = None,
    master_key: bytes = b"",
) -> LedgerManager:
    """A ``LedgerManager`` over real bookies found through ``store``; close with ``close_ledger_manager``."""
    config = config or LedgerClientConfig()
    transport = BookieClientTransport(network, clock, config)
    return LedgerManager(
        store=LedgerMetadataStore(MetadataStoreAdapter(store)),
        transport=transport,
        directory=MetadataBookieDirectory(store),
        placement=RandomPlacement(rng),
        clock=clock,
        config=config,
        master_key=master_key,
        on_close=transport.close,
    )


async def close_ledger_manager(manager: LedgerManager) -> None:
    """Close the manager's bookie connections (the metadata store stays the caller's)."""
    await manager.close()
