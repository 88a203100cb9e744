"""``magnetar broker``: a stateless cluster broker over a shared metadata store (ZooKeeper).

The broker keeps no data of its own: topics live in managed ledgers on the bookies registered
in the metadata store (``/ledgers/available``), and which broker serves which topic is decided by
bundle ownership (``control.ownership``) through that store. Adding a broker moves no data.

One *generation* is everything built on one metadata session (``node.broker_generation``, the
same class the simulator runs): the store client, the ledger client, the broker service with its
ownership, the Pulsar listener, the load reporter and geo-replication. When the session ends
(expired after a pause or a partition), ownership has already stopped serving every topic; the
node then stops that generation, closing every client connection, and starts a new one on a new
session on the same ports, so clients look up again. This module gives the generations their
real parts: ZooKeeper or the embedded store, TCP and TLS, the system clock, the CPU meter, the
tiered-storage offloader, a read-only broker's HTTP position feed, and the admin API and console
of each generation.

The HTTP endpoint (``/health``, ``/metrics``, bundle admin) lives across generations. A line
``magnetar broker ready broker=pulsar://... http=host:port metadata=...`` on stdout says when
clients may connect; SIGTERM or SIGINT stops the broker (its ephemeral nodes go with its session,
so other brokers take its bundles at once).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from prometheus_client import CollectorRegistry
from prometheus_client.core import Metric
from prometheus_client.registry import Collector
from starlette.applications import Starlette
from starlette.responses import JSONResponse
from starlette.routing import Mount
from starlette.types import ASGIApp, Receive, Scope, Send

from magnetar import faults
from magnetar.admin import ADMIN_PATH, AdminContext, build_admin_app
from magnetar.admin.lookup import LOOKUP_PATH, build_lookup_app
from magnetar.base.clock import Clock
from magnetar.base.errors import InvalidArgumentError
from magnetar.base.io import Network
from magnetar.base.limits import (
    LOAD_REPORT_INTERVAL_MS,
    METADATA_SESSION_TIMEOUT_MS_DEFAULT,
    NAMESPACE_BUNDLES_COUNT_DEFAULT,
    NAMESPACE_BUNDLES_COUNT_MAX,
)
from magnetar.broker import BrokerConfig
from magnetar.broker.metrics import BrokerCollector
from magnetar.broker.read_only import ReadOnlyLogStore
from magnetar.broker.service import BrokerService
from magnetar.control.ownership import BundleOwnership
from magnetar.managed_ledger import ManagedLedgerConfig
from magnetar.managed_ledger.read_only import OffloadedEntries
from magnetar.metadata.api import MetadataStore
from magnetar.node.broker_generation import Generation, GenerationConfig, serve_generations, start_generation
from magnetar.runtime.bookie import wait_for_termination_signal
from magnetar.runtime.broker_server import start_broker
from magnetar.runtime.clock import SystemClock, system_rng
from magnetar.runtime.config import load_config
from magnetar.runtime.console import start_console
from magnetar.runtime.cpu import CpuMeter
from magnetar.runtime.gc_tuning import tune_gc_for_server
from magnetar.runtime.http import HttpEndpoint, start_http
from magnetar.runtime.lakehouse import open_offloader
from magnetar.runtime.metadata import open_metadata_store
from magnetar.runtime.network import TcpNetwork
from magnetar.runtime.processes import free_port
from magnetar.runtime.read_only import (
    FOLLOW_PATH,
    HttpHolderProbe,
    HttpPositionFeed,
    build_follow_app,
    close_quietly,
)
from magnetar.runtime.tls import bookie_client_network, tls_files_from_config

log = logging.getLogger(__name__)

#: Wait between attempts to reach the metadata store (ZooKeeper down, restarting).
METADATA_RETRY_S = 1.0
READY_PREFIX = "magnetar broker ready"


@dataclass(frozen=True)
class BrokerNodeConfig:
    metadata_url: str = "zk://127.0.0.1:2181/magnetar"
    host: str = "127.0.0.1"
    port: int = 6650  # 0 picks a free port once; later generations keep it
    http_port: int = 8080
    advertised_address: str = "127.0.0.1"
    cluster_name: str = "magnetar"
    ensemble_size: int = 3
    write_quorum_size: int = 3
    ack_quorum_size: int = 2
    session_timeout_ms: int = METADATA_SESSION_TIMEOUT_MS_DEFAULT
    bundles_count: int = NAMESPACE_BUNDLES_COUNT_DEFAULT
    load_report_interval_ms: int = LOAD_REPORT_INTERVAL_MS
    #: TLS listeners (Pulsar's brokerServicePortTls / webServicePortTls), served when the broker
    #: settings have ``tls_enabled``; None: none. 0 picks a free port once.
    port_tls: int | None = None
    http_port_tls: int | None = None
    #: A read-only broker (``broker.read_only``): owns no bundle, serves reads of any topic from
    #: the bookies, refuses producers with the owner's URL.
    read_only: bool = False
    #: Entries before an owner rolls a topic's ledger over (Pulsar's managedLedgerMaxEntriesPerLedger).
    max_entries_per_ledger: int = 50_000

    def __post_init__(self) -> None:
        for name in ("port", "http_port", "port_tls", "http_port_tls"):
            if getattr(self, name) is not None and not 0 <= getattr(self, name) < 65536:
                raise InvalidArgumentError(f"{name} must be 0..65535, got {getattr(self, name)}")
        if not self.ensemble_size >= self.write_quorum_size >= self.ack_quorum_size >= 1:
            raise InvalidArgumentError("need ensemble_size >= write_quorum_size >= ack_quorum_size >= 1")
        if not 1 <= self.bundles_count <= NAMESPACE_BUNDLES_COUNT_MAX:
            raise InvalidArgumentError(f"bundles_count must be 1..{NAMESPACE_BUNDLES_COUNT_MAX}")
        if self.session_timeout_ms < 1000 or self.load_report_interval_ms < 100:
            raise InvalidArgumentError("session_timeout_ms must be >= 1000 and load_report_interval_ms >= 100")


class _CurrentAdmin:
    """The admin API of the current generation (its service), or 503 between generations."""

    def __init__(self) -> None:
        self.app: ASGIApp | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self.app is None:
            await JSONResponse({"reason": "broker is starting"}, status_code=503)(scope, receive, send)
            return
        await self.app(scope, receive, send)


class _CurrentCollector(Collector):
    """Per-topic metrics of the current generation's service."""

    def __init__(self, node: BrokerNode) -> None:
        self._node = node

    def collect(self) -> Iterator[Metric]:
        generation = self._node.generation
        if generation is not None and generation.server is not None:
            yield from BrokerCollector(generation.server.service).collect()


class BrokerNode:
    def __init__(self, config: BrokerNodeConfig, *, clock: Clock | None = None, network: Network | None = None,
                 broker_values: Mapping[str, Any] | None = None) -> None:
        self.config = config
        self.clock = clock or SystemClock()
        self.network = network or TcpNetwork()
        self.port = config.port or free_port(config.host)
        #: BrokerConfig settings (a TOML [broker] section's broker keys, a translated Pulsar conf)
        #: under MAGNETAR_BROKER_* variables; identity and address come from the node.
        self.broker_config = load_config(BrokerConfig, "broker", file_values=broker_values, overrides={
            "cluster_name": config.cluster_name, "advertised_host": config.advertised_address,
            "advertised_port": self.port})
        self.tls = tls_files_from_config(self.broker_config)
        self.port_tls = ((config.port_tls or free_port(config.host))
                         if self.tls is not None and config.port_tls is not None else None)
        self.https: HttpEndpoint | None = None
        bk = self.broker_config
        self.bookie_network = (bookie_client_network(bk.bookkeeper_tls_trust_certs_file_path,
                                                     bk.bookkeeper_tls_certificate_file_path,
                                                     bk.bookkeeper_tls_key_file_path)
                               if bk.bookkeeper_tls_trust_certs_file_path else self.network)
        self.http: HttpEndpoint | None = None
        self.generation: Generation | None = None
        #: The generation being taken down: still asked whether it serves a read-only subscription,
        #: since it may flush that subscription's cursor until it has stopped.
        self.stopping: Generation | None = None
        self.generations = 0
        self._admin = _CurrentAdmin()
        self._cpu = CpuMeter()
        self._lookup = _CurrentAdmin()
        self._console = _CurrentAdmin()  # the web console of the current generation

    @property
    def service_url(self) -> str:
        return f"pulsar://{self.config.advertised_address}:{self.port}"

    @property
    def http_url(self) -> str:
        port = self.http.port if self.http is not None else self.config.http_port
        return f"http://{self.config.advertised_address}:{port}"

    @property
    def https_url(self) -> str:
        if self.https is None:
            return ""
        return f"https://{self.config.advertised_address}:{self.https.port}"

    @property
    def ownership(self) -> BundleOwnership | None:
        return self.generation.ownership if self.generation is not None else None

    def ready_line(self) -> str:
        http = f"{self.config.advertised_address}:{self.http.port}" if self.http else "-"
        line = f"{READY_PREFIX} broker={self.service_url} http={http} metadata={self.config.metadata_url}"
        if self.config.read_only:
            line += " read_only=true"
        if self.port_tls is not None:
            line += f" broker_tls=pulsar+ssl://{self.config.advertised_address}:{self.port_tls}"
        if self.https is not None:
            line += f" https={self.config.advertised_address}:{self.https.port}"
        return line

    def health(self) -> dict[str, object]:
        if self.config.read_only:
            generation = self.generation
            server = generation.server if generation is not None else None
            return {"status": "ok" if server is not None else "starting", "broker": self.service_url,
                    "generation": self.generations, "readOnly": True, "bundles": [],
                    "topics": len(server.service.topics) if server is not None else 0}
        ownership = self.ownership
        serving = ownership is not None and ownership.state.value == "active"
        return {
            "status": "ok" if serving else "starting",
            "broker": self.service_url,
            "generation": self.generations,
            "bundles": [o.key for o in ownership.owned()] if ownership is not None else [],
            "topics": len(ownership.service.topics) if ownership is not None else 0,
        }

    async def _open_store(self, stop: asyncio.Event) -> MetadataStore | None:
        while not stop.is_set():
            try:
                return await open_metadata_store(self.config.metadata_url, clock=self.clock,
                                                 session_timeout_ms=self.config.session_timeout_ms)
            except Exception as error:
                log.warning("metadata store %s not reachable (%s); retrying", self.config.metadata_url, error)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), METADATA_RETRY_S)
        return None

    async def start_generation(self, store: MetadataStore) -> Generation:
        """Build a generation on the new session ``store`` (which it then owns)."""
        config = self.config
        offloader = open_offloader(self.broker_config)  # tiered storage, when configured
        generation = await start_generation(
            store, self._generation_config(), host=config.host, port=self.port,
            advertised_host=config.advertised_address, http_url=self.http_url, network=self.network,
            clock=self.clock, rng=system_rng(), bookie_network=self.bookie_network,
            start_server=functools.partial(start_broker, tls_port=self.port_tls, tls=self.tls, offloader=offloader),
            cpu_percent=self._cpu.percent, read_only=config.read_only,
            log_store=functools.partial(self._read_only_store, offloaded=offloader) if config.read_only else None,
            replication=not config.read_only)
        try:
            assert generation.server is not None
            context = self._admin_context(generation.server.service)
            self._admin.app = build_admin_app(context)
            self._lookup.app = build_lookup_app(context)
            console = start_console(context, metadata_url=config.metadata_url, http_url=self.http_url)
            generation.on_stop.append(console.stop)
            self._console.app = console.app
        except BaseException:
            await generation.stop()
            raise
        self.generations += 1
        return generation

    def _generation_config(self) -> GenerationConfig:
        config = self.config
        return GenerationConfig(
            broker=self.broker_config,
            managed_ledger=ManagedLedgerConfig(ensemble_size=config.ensemble_size,
                                               write_quorum_size=config.write_quorum_size,
                                               ack_quorum_size=config.ack_quorum_size,
                                               max_entries_per_ledger=config.max_entries_per_ledger),
            bundles_count=config.bundles_count, load_report_interval_ms=config.load_report_interval_ms)

    def _read_only_store(self, generation: Generation, *, offloaded: OffloadedEntries | None) -> ReadOnlyLogStore:
        """A read-only broker's storage port: the owners' positions (and fresh entries) followed
        over HTTP; offloaded ledgers read from ``offloaded``, the tiered store the owners use."""
        feed = HttpPositionFeed(generation.store)
        probe = HttpHolderProbe()
        generation.closers.append(lambda: close_quietly(feed))
        generation.closers.append(lambda: close_quietly(probe))
        return ReadOnlyLogStore(manager=generation.manager, metadata=generation.store, clock=self.clock,
                                feed=feed, holder=lambda: self.service_url, offloaded=offloaded,
                                holder_http=lambda: self.http_url, probe=probe)

    def _admin_context(self, service: BrokerService) -> AdminContext:
        return AdminContext(service, cluster=self.config.cluster_name, service_url=self.http_url,
                            service_url_tls=self.https_url, broker_service_url=self.service_url)

    async def run(self, stop: asyncio.Event, *, on_ready: Any = None) -> None:
        """Serve until ``stop`` is set, starting a new generation whenever the session is lost."""
        registry = CollectorRegistry()
        registry.register(_CurrentCollector(self))
        admin = Starlette(routes=[Mount("", app=self._admin)])
        lookup = Starlette(routes=[Mount("", app=self._lookup)])
        follow = build_follow_app(self._serving)
        mounts = {ADMIN_PATH: admin, LOOKUP_PATH: lookup, FOLLOW_PATH: follow,
                  "": Starlette(routes=[Mount("", app=self._console)])}
        self.http = await start_http(self.config.host, self.config.http_port, health=self.health,
                                     mounts=mounts, registries=[registry])
        if self.tls is not None and self.config.http_port_tls is not None:
            self.https = await start_http(self.config.host, self.config.http_port_tls, health=self.health,
                                          mounts=mounts, registries=[registry], tls=self.tls,
                                          tls_handshake_timeout_s=self.broker_config.tls_handshake_timeout_s)
        try:
            await serve_generations(lambda: self._open_store(stop), self.start_generation, self.clock,
                                    stop=stop, on_generation=functools.partial(self._on_generation, on_ready))
        finally:
            await self.http.stop()
            if self.https is not None:
                await self.https.stop()

    def _serving(self) -> BrokerService | None:
        """The service the follow and serves endpoints answer for: the current generation's, else
        the one being taken down (None before the first)."""
        for generation in (self.generation, self.stopping):
            if generation is not None and generation.server is not None:
                return generation.server.service
        return None

    def _on_generation(self, on_ready: Any, generation: Generation | None) -> None:
        """A generation started (the first one: the broker is ready) or is being taken down."""
        self.stopping = self.generation if generation is None else None
        self.generation = generation
        if generation is None:
            self._admin.app = None
            self._lookup.app = None
            self._console.app = None
        elif self.generations == 1 and on_ready is not None:
            on_ready(self)


def _ready(node: BrokerNode) -> None:
    tune_gc_for_server()
    print(node.ready_line(), flush=True)


async def run_broker_node(config: BrokerNodeConfig, broker_values: Mapping[str, Any] | None = None) -> None:
    faults.arm_from_env()
    stop = asyncio.Event()
    node = BrokerNode(config, broker_values=broker_values)

    async def signals() -> None:
        await wait_for_termination_signal()
        log.info("broker stopping")
        stop.set()

    watcher = asyncio.get_running_loop().create_task(signals())
    try:
        await node.run(stop, on_ready=_ready)
    finally:
        watcher.cancel()


def main(config: BrokerNodeConfig, broker_values: Mapping[str, Any] | None = None) -> None:
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("kazoo").setLevel(logging.WARNING)
    try:
        import uvloop
    except ImportError:
        asyncio.run(run_broker_node(config, broker_values))
    else:
        uvloop.run(run_broker_node(config, broker_values))
