"""A cluster broker's *generation*: everything one metadata session carries, over capabilities.

One generation is the ledger client, the broker service with its bundle ownership, the Pulsar
listener and the load reporter, all built on one metadata session (``start_generation``). When
that session ends (expired after a pause or a partition) ownership has already stopped serving
every topic; the node stops the generation, closing every client connection, and builds a new one
on a new session on the same port, so clients look up again (``serve_generations``).

A read-only broker's generation (``read_only``) owns no bundle: it registers itself
(``ReadOnlyRegistration``), serves every topic it is asked for through the storage port the
caller builds (``log_store``), and reports no load. An owner's generation may run geo-replication
(``replication``) over the same network, clock and rng.

``runtime.broker_node`` (``magnetar broker``) adds the HTTP endpoint, admin API and console on
top and opens sessions on ZooKeeper or the embedded store; the simulator runs the same
generations on the simulated network and virtual clock over its in-memory metadata store.
Producer names stay unique across brokers and generations: the broker index in
``<cluster>-<index>-<counter>`` comes from a sequential node under ``/counters/producer-name``
(as Pulsar's distributed id generator).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from magnetar.base.clock import Clock
from magnetar.base.io import Network
from magnetar.base.limits import LOAD_REPORT_INTERVAL_MS, NAMESPACE_BUNDLES_COUNT_DEFAULT
from magnetar.base.rng import Rng
from magnetar.broker import BrokerConfig
from magnetar.broker.log import LogStore
from magnetar.broker.read_only import ReadOnlyRegistration
from magnetar.broker.service import BrokerService
from magnetar.catalog.resources import ClusterData
from magnetar.control.balancer import BalancerSettings
from magnetar.control.leader import BundleCommands, LoadBalancerLeader
from magnetar.control.ownership import BundleOwnership
from magnetar.ledger.config import LedgerClientConfig
from magnetar.managed_ledger import ManagedLedgerConfig
from magnetar.metadata.api import MetadataStore
from magnetar.node.broker import BrokerServer, start_broker
from magnetar.node.ledger import close_ledger_manager, open_ledger_manager
from magnetar.node.replication import start_replication
from magnetar.replication import ReplicationService

log = logging.getLogger(__name__)

PRODUCER_NAME_COUNTER = "/counters/producer-name/broker-"
#: Wait between attempts to build a generation (metadata flapping, bookies not up yet).
GENERATION_RETRY_S = 1.0


@dataclass(frozen=True, slots=True)
class GenerationConfig:
    """What every generation of one broker is built from (the runtime fills it from its config)."""

    broker: BrokerConfig = field(default_factory=BrokerConfig)
    managed_ledger: ManagedLedgerConfig = field(default_factory=ManagedLedgerConfig)
    ledger: LedgerClientConfig = field(default_factory=LedgerClientConfig)
    bundles_count: int = NAMESPACE_BUNDLES_COUNT_DEFAULT
    load_report_interval_ms: int = LOAD_REPORT_INTERVAL_MS


class Generation:
    """What one metadata session carries; ``stop()`` takes it down in reverse order."""

    def __init__(self, store: MetadataStore) -> None:
        self.store = store
        self.server: BrokerServer | None = None
        self.ownership: BundleOwnership | None = None
        #: A read-only broker's registration (it owns no bundle), instead of ``ownership``.
        self.registration: ReadOnlyRegistration | None = None
        self.report_task: asyncio.Task[None] | None = None
        self.manager: Any = None
        self.leader: LoadBalancerLeader | None = None
        self.balancer_tasks: list[asyncio.Task[None]] = []
        self.replication: ReplicationService | None = None
        #: Extra parts the runtime hangs on a generation (its console), stopped first.
        self.on_stop: list[Callable[[], Awaitable[None]]] = []
        #: What the storage port built for this generation uses (a read-only broker's position
        #: feed): closed after the server, before the ledger client.
        self.closers: list[Callable[[], Awaitable[None]]] = []

    @property
    def session_lost(self) -> asyncio.Event:
        """Set when this generation's metadata session ends (through ownership or registration)."""
        source = self.ownership if self.ownership is not None else self.registration
        assert source is not None
        return source.session_lost

    async def stop(self) -> None:
        if self.replication is not None:
            with contextlib.suppress(Exception):
                await self.replication.stop()
        for stop in reversed(self.on_stop):
            with contextlib.suppress(Exception):
                await stop()
        for task in [self.report_task, *self.balancer_tasks]:
            if task is None:
                continue
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        steps = [
            self.server.close if self.server else None,
            self.ownership.close if self.ownership else None,
            self.registration.close if self.registration else None,
            *self.closers,
            (lambda: close_ledger_manager(self.manager)) if self.manager is not None else None,
            self.store.close,
        ]
        for step in steps:
            if step is None:
                continue
            try:
                await step()
            except Exception:  # one part failing to stop must not keep the others running
                log.exception("error while stopping a broker generation")


async def unique_broker_index(store: MetadataStore) -> int:
    """A number no other broker (or earlier generation) got: the parent's sequential counter."""
    path = await store.create(PRODUCER_NAME_COUNTER, b"", sequential=True)
    with contextlib.suppress(Exception):
        await store.delete(path)  # the counter lives in the parent; the child is not needed
    return int(path[len(PRODUCER_NAME_COUNTER):])


#: Starts the Pulsar listener: ``node.broker.start_broker`` or the runtime's wrapper of it (TLS,
#: credential files), called with that function's keyword arguments.
StartServer = Callable[..., Awaitable[BrokerServer]]


#: Builds a generation's storage port once its ledger client is open (None: managed ledgers).
LogStoreFactory = Callable[[Generation], LogStore | None]


async def start_generation(
    store: MetadataStore, config: GenerationConfig, *, host: str, port: int, advertised_host: str,
    http_url: str, network: Network, clock: Clock, rng: Rng, bookie_network: Network | None = None,
    start_server: StartServer = start_broker, cpu_percent: Callable[[], float] | None = None,
    load_balancing: bool = True, read_only: bool = False, log_store: LogStoreFactory | None = None,
    replication: bool = False,
) -> Generation:
    """Build and start a generation on ``store`` (which it then owns and closes on ``stop``).

    ``network`` serves clients; ``bookie_network`` (default: the same) reaches the bookies.
    ``cpu_percent`` (the runtime's meter) goes into the load reports; with ``load_balancing`` the
    generation carries out bundle commands and runs for load-balancer leader. ``read_only``: a
    read-only broker (no ownership, no load reports, no replication) over ``log_store``'s port;
    ``replication``: an owner also replicates its topics to the clusters their policies name.
    """
    generation = Generation(store)
    try:
        index = await unique_broker_index(store)
        generation.manager = await open_ledger_manager(store, network=bookie_network or network, clock=clock,
                                                       rng=rng, config=config.ledger)
        broker_config = dataclasses.replace(config.broker, broker_index=index, advertised_host=advertised_host,
                                            advertised_port=port)
        generation.server = await start_server(
            broker_config, clock=clock, metadata=store, ledger_manager=generation.manager,
            managed_ledger_config=config.managed_ledger, network=network, host=host, port=port,
            before_listen=None if read_only else _ownership_installer(generation, config, port, advertised_host,
                                                                       http_url),
            log_store=log_store(generation) if log_store is not None else None,
        )
        service = generation.server.service
        if read_only:
            generation.registration = ReadOnlyRegistration(
                store, broker_id=f"{advertised_host}:{port}", service_url=service.config.service_url,
                http_url=http_url)
            await generation.registration.register()
        try:
            await bootstrap_cluster(service, web_url=http_url)
        except Exception as error:  # the admin resources are a convenience; serving goes on
            log.warning("could not create the default cluster/tenant/namespace: %s", error)
        if replication and not read_only:  # the owner replicates; a read-only broker only serves reads
            generation.replication = await start_replication(service, clock=clock, network=network, rng=rng)
        if generation.ownership is not None:  # a read-only broker reports no load and balances nothing
            _start_load_reports(generation, generation.ownership, clock, config, cpu_percent)
            if load_balancing:
                _start_balancer(generation, store, generation.ownership, service.config, clock, http_url)
    except BaseException:
        await generation.stop()
        raise
    return generation


def _ownership_installer(generation: Generation, config: GenerationConfig, port: int, advertised_host: str,
                         http_url: str) -> Callable[[BrokerService], None]:
    """Installs bundle ownership on the service before it listens (LOOKUP, owned log store)."""

    def install(service: BrokerService) -> None:
        ownership = BundleOwnership(generation.store, service, broker_id=f"{advertised_host}:{port}",
                                    http_url=http_url, bundles_count=config.bundles_count)
        ownership.install()
        generation.ownership = ownership

    return install


def _start_load_reports(generation: Generation, ownership: BundleOwnership, clock: Clock, config: GenerationConfig,
                        cpu_percent: Callable[[], float] | None) -> None:
    server = generation.server
    assert server is not None
    generation.report_task = asyncio.get_running_loop().create_task(
        ownership.run_load_reports(clock, lambda: server.connection_count, config.load_report_interval_ms,
                                   cpu_percent), name="load-reports")


def _start_balancer(generation: Generation, store: MetadataStore, ownership: BundleOwnership,
                    broker_config: BrokerConfig, clock: Clock, http_url: str) -> None:
    """The bundle commands every broker carries out, and this broker's leader candidacy."""
    loop = asyncio.get_running_loop()
    commands = BundleCommands(store, ownership, clock, poll_ms=broker_config.load_balancer_shedding_interval_ms)
    generation.balancer_tasks.append(loop.create_task(commands.run(), name="bundle-commands"))
    generation.leader = LoadBalancerLeader(
        store, ownership, clock, BalancerSettings.from_config(broker_config),
        interval_ms=broker_config.load_balancer_shedding_interval_ms, broker_id=ownership.loads.broker_id,
        web_url=http_url)
    generation.balancer_tasks.append(loop.create_task(generation.leader.run(), name="load-balancer-leader"))


async def bootstrap_cluster(service: BrokerService, *, web_url: str) -> None:
    """First start: the broker's cluster, tenant ``public`` and namespace ``public/default``."""
    if service.resources is not None:
        await service.resources.bootstrap(service.config.cluster_name, ClusterData(
            service_url=web_url, broker_service_url=service.config.service_url))


async def serve_generations(
    connect: Callable[[], Awaitable[MetadataStore | None]],
    build: Callable[[MetadataStore], Awaitable[Generation]],
    clock: Clock,
    *,
    stop: asyncio.Event | None = None,
    on_generation: Callable[[Generation | None], None] | None = None,
) -> None:
    """Serve generation after generation until ``stop`` is set (forever without one).

    ``connect`` opens a new metadata session (None: ``stop`` was set while it tried); ``build``
    starts a generation on it. A generation
    that fails to start is retried after ``GENERATION_RETRY_S``; one whose session is lost is
    stopped and replaced. ``on_generation`` hears of each new generation and of ``None`` when
    the current one is taken down.
    """
    stop = stop or asyncio.Event()
    while not stop.is_set():
        try:
            store = await connect()
            if store is None:
                return
            generation = await build(store)
        except Exception as error:  # metadata flapping, bookies not up yet
            log.warning("broker generation failed to start: %s; retrying", error)
            await clock.sleep(GENERATION_RETRY_S)
            continue
        if on_generation is not None:
            on_generation(generation)
        try:
            lost = asyncio.get_running_loop().create_task(generation.session_lost.wait())
            stopping = asyncio.get_running_loop().create_task(stop.wait())
            try:
                await asyncio.wait({lost, stopping}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for task in (lost, stopping):
                    task.cancel()
            if not stop.is_set():
                log.warning("metadata session lost: restarting the broker on a new session")
        finally:
            if on_generation is not None:
                on_generation(None)
            await generation.stop()
