"""The standalone composition: bookies, the ledger client and a broker in one node, over capabilities.

``start_standalone_node`` starts, in order, every bookie (each replays its journal before it
serves, ``node.bookie.start_bookie_node``), the ledger client (reaching this node's own bookies by
direct calls when ``local_bookie_calls``, see ``node.ledger.LocalFirstTransport``), the broker
with its managed ledgers configured by ``managed_ledger_config`` (E, Qw, Qa among them), and the first-start cluster/tenant/namespace. Each part's ``stop``
is appended to ``stoppers`` as soon as it runs (``bookies`` are functions opening each bookie's
disk and index when its turn comes), so the caller stops what did start (in reverse
order) when a later part fails. ``runtime.standalone`` (``magnetar standalone``) gives it the data
directory's disks, RocksDB, TCP and the system clock and adds the HTTP endpoint; the simulator
can give it simulated ones.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from magnetar.base.clock import Clock
from magnetar.base.io import Disk, KeyValueStore, Network
from magnetar.base.rng import Rng
from magnetar.base.types import BookieId
from magnetar.broker import BrokerConfig
from magnetar.ledger.config import LedgerClientConfig
from magnetar.managed_ledger import ManagedLedgerConfig
from magnetar.metadata.api import MetadataStore
from magnetar.node.bookie import RunningBookie, start_bookie_node
from magnetar.node.broker import BrokerServer
from magnetar.node.broker_generation import StartServer, bootstrap_cluster
from magnetar.node.ledger import close_ledger_manager, open_ledger_manager
from magnetar.storage import BookieConfig


@dataclass(frozen=True, slots=True)
class BookieParts:
    """One bookie's config and the capabilities it runs on (its data directory and index)."""

    config: BookieConfig
    disk: Disk
    kv: KeyValueStore


@dataclass
class StandaloneParts:
    bookies: list[RunningBookie]
    broker: BrokerServer


async def start_standalone_node(
    store: MetadataStore,
    bookies: Sequence[Callable[[], BookieParts]],
    *,
    broker_config: BrokerConfig,
    managed_ledger_config: ManagedLedgerConfig,
    host: str,
    broker_port: int,
    web_url: str,
    network: Network,
    clock: Clock,
    rng: Rng,
    start_server: StartServer,
    stoppers: list[Callable[[], Awaitable[None]]],
    local_bookie_calls: bool = True,
    ledger_client_config: LedgerClientConfig | None = None,
) -> StandaloneParts:
    """Start the bookies, the ledger client and the broker (see the module docstring)."""
    running: list[RunningBookie] = []
    for open_parts in bookies:
        parts = open_parts()  # opened one at a time: a bookie that fails to start leaves no other open
        bookie = await start_bookie_node(parts.config, disk=parts.disk, kv=parts.kv, store=store, clock=clock,
                                         network=network, rng=rng)
        running.append(bookie)
        stoppers.append(bookie.stop)
    local = {BookieId.parse(b.bookie_id): b.bookie for b in running} if local_bookie_calls else None
    manager = await open_ledger_manager(store, network=network, clock=clock, rng=rng, local_bookies=local,
                                        config=ledger_client_config)
    stoppers.append(lambda: close_ledger_manager(manager))
    broker = await start_server(
        broker_config, clock=clock, metadata=store, ledger_manager=manager, managed_ledger_config=managed_ledger_config,
        network=network, host=host, port=broker_port,
    )
    stoppers.append(broker.close)
    await bootstrap_cluster(broker.service, web_url=web_url)
    return StandaloneParts(running, broker)
