"""``magnetar standalone``: one process holding the embedded metadata store, the bookies, the
broker and the HTTP endpoint, in one data directory (the laptop and test deployment, like
``pulsar standalone``).

Layout of the data directory::

    <data_dir>/standalone.pid the PID of the standalone running on it (an exclusive flock:
                              a second standalone on the same directory refuses in one line)
    <data_dir>/metadata/      the embedded metadata store (RocksDB)
    <data_dir>/bookie-<i>/    bookie i (journal, entry logs, index, cookie)
    <data_dir>/offload/       offloaded ledgers (Parquet + Delta manifests), the default tiered storage

With one bookie (the default) ledgers are written with E=Qw=Qa=1; with ``--bookies 3`` the
replicated quorum (3, 3, 2). Start-up order: metadata, then every bookie (each replays its
journal before it serves), the ledger client, the broker (Pulsar protocol on ``broker_port``),
then the HTTP endpoint; a line ``magnetar standalone ready ...`` on
stdout says when clients may connect. On first start the metadata store gets cluster
``standalone``, tenant ``public`` and namespace ``public/default``; the HTTP port serves the admin
API at ``/admin/v2`` and per-topic metrics at ``/metrics``. SIGTERM or SIGINT stops everything in reverse order.
The bookies take the same ``MAGNETAR_BOOKIE_*`` settings as ``magnetar bookie`` (journal, caches,
GC); their address, data directory and metadata URL come from the standalone config. The broker
takes ``MAGNETAR_BROKER_*`` settings (``BrokerConfig``: policy defaults, check interval, bounds,
offload driver) and its managed ledgers ``MAGNETAR_MANAGED_LEDGER_*`` (``ManagedLedgerConfig``:
rollover sizes, retention; the quorum comes from the bookie count).
A SIGKILL loses nothing acknowledged: the bookies reply only after fsync and the metadata store
writes synchronously.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
import os
import sys
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from magnetar import faults
from magnetar.base.errors import InvalidArgumentError
from magnetar.broker import BrokerConfig
from magnetar.ledger.config import LedgerClientConfig
from magnetar.managed_ledger import ManagedLedgerConfig
from magnetar.metadata.api import MetadataStore
from magnetar.node.replication import start_replication
from magnetar.node.standalone import BookieParts, start_standalone_node
from magnetar.runtime.bookie import RunningBookie, wait_for_termination_signal
from magnetar.runtime.broker_server import BrokerServer, start_broker
from magnetar.runtime.clock import SystemClock, system_rng
from magnetar.runtime.config import load_config
from magnetar.runtime.disk import LocalDisk
from magnetar.runtime.gc_tuning import tune_gc_for_server
from magnetar.runtime.http import BrokerHttp, start_broker_http
from magnetar.runtime.kv import RocksKeyValueStore
from magnetar.runtime.lakehouse import open_offloader
from magnetar.runtime.metadata import open_metadata_store
from magnetar.runtime.network import TcpNetwork
from magnetar.runtime.startup_checks import DataDirLock, check_ports_free
from magnetar.runtime.tls import tls_files_from_config
from magnetar.storage import BookieConfig

log = logging.getLogger(__name__)

#: More bookies than this in one process is a cluster: use ``magnetar bookie`` processes.
STANDALONE_BOOKIES_COUNT_MAX = 9
#: In-flight adds per ledger in a standalone (the ledger client's default is 10,000). One
#: unbatched topic goes at most window / round trip; the window also bounds how much of the
#: shared journal and event loop one busy topic takes from the others. Measured on this 2-core
#: machine (docs/performance.md "Session 11: the ledger window and isolation"), a producer with
#: 500 in flight beside a synchronous one: window 8 (session 9's choice) ~2,900 msg/s with the
#: light producer's p99 6.4 / 10.3 / 13.6 ms (min / median / max); 32: ~10,700 msg/s, p99 11.3 /
#: 13.8 / 24.7 ms; 1,000: ~14,800 msg/s, p99 39 / 64 / 86 ms (the heavy producer saturates the
#: loop, and every light message waits in it). ``--blast``: 3,100 / 13,000 / 22,400 msg/s. So 32:
#: most of one topic's unbatched rate for a light-producer p99 near window 8's; a deployment for
#: one topic's peak rate sets ``MAGNETAR_STANDALONE_LEDGER_WINDOW=1000``.
STANDALONE_LEDGER_WINDOW = 32


@dataclass(frozen=True)
class StandaloneConfig:
    data_dir: str = "data/standalone"
    host: str = "127.0.0.1"
    broker_port: int = 6650
    web_port: int = 8080
    bookies_count: int = 1
    bookie_port: int = 3181  # bookie i listens on bookie_port + i; 0 picks free ports
    # The broker reaches this process's bookies by direct calls into their storage core
    # (``node.ledger.LocalFirstTransport``); false: over the bookie protocol on loopback, as
    # any other client does (the bookies serve it either way).
    local_bookie_calls: bool = True
    #: The cluster this standalone is (``--cluster-name``): what geo-replication calls it, and the
    #: cluster registered on first start. Two standalones with different names replicate to each
    #: other once each is registered in the other and a namespace lists both (docs/geo-replication.md).
    cluster_name: str | None = None  # None: the broker config's (default ``standalone``)
    #: TLS listeners (Pulsar's brokerServicePortTls 6651, webServicePortTls 8443; 0 picks free
    #: ports), served when the broker config has ``tls_enabled``; None: no TLS listener.
    broker_port_tls: int | None = None
    web_port_tls: int | None = None
    #: In-flight adds per ledger (``MAGNETAR_STANDALONE_LEDGER_WINDOW``): one unbatched topic
    #: goes at most this many adds per journal fsync; lower bounds one topic's share of a group.
    ledger_window: int = STANDALONE_LEDGER_WINDOW

    def __post_init__(self) -> None:
        if self.ledger_window < 1:
            raise InvalidArgumentError(f"ledger_window must be at least 1, got {self.ledger_window}")
        if not 1 <= self.bookies_count <= STANDALONE_BOOKIES_COUNT_MAX:
            raise InvalidArgumentError(f"bookies_count must be 1..{STANDALONE_BOOKIES_COUNT_MAX}, got {self.bookies_count}")
        for name in ("broker_port", "web_port", "bookie_port", "broker_port_tls", "web_port_tls"):
            port = getattr(self, name)
            if port is not None and not 0 <= port < 65536:
                raise InvalidArgumentError(f"{name} must be 0..65535, got {port}")

    @property
    def quorum(self) -> tuple[int, int, int]:
        """(E, Qw, Qa) for new ledgers: unreplicated with one bookie, (3, 3, 2) from three on."""
        if self.bookies_count >= 3:
            return (3, 3, 2)
        return (self.bookies_count, self.bookies_count, self.bookies_count)

    def metadata_url(self) -> str:
        return f"embedded:{os.path.join(os.path.abspath(self.data_dir), 'metadata')}"

    def bookie_config(self, index: int, environ: Mapping[str, str] | None = None) -> BookieConfig:
        """Bookie ``index``'s config: ``MAGNETAR_BOOKIE_*`` settings, with address and paths from here."""
        port = 0 if self.bookie_port == 0 else self.bookie_port + index
        return load_config(
            BookieConfig,
            "bookie",
            environ=environ,
            overrides={
                "host": self.host,
                "port": port,
                "data_dir": os.path.join(os.path.abspath(self.data_dir), f"bookie-{index}"),
                "metadata_url": self.metadata_url(),
            },
        )


@dataclass
class Standalone:
    """Everything a running standalone holds, stopped in reverse order by ``stop()``."""

    config: StandaloneConfig
    store: MetadataStore
    bookies: list[RunningBookie] = dataclasses.field(default_factory=list)
    broker: BrokerServer | None = None
    http: BrokerHttp | None = None
    stoppers: list[Callable[[], Awaitable[None]]] = dataclasses.field(default_factory=list)

    def ready_line(self) -> str:
        bookies = ",".join(b.bookie_id for b in self.bookies)
        http = f"{self.config.host}:{self.http.port}" if self.http else "-"
        broker = self.broker.service_url if self.broker else "-"
        e, qw, qa = self.config.quorum
        line = (
            f"magnetar standalone ready broker={broker} metadata={self.config.metadata_url()} "
            f"bookies={bookies} quorum={e},{qw},{qa} ledger_window={self.config.ledger_window} http={http}"
        )
        tls_url = self.broker.service.config.service_url_tls if self.broker else None
        if tls_url:
            line += f" broker_tls={tls_url}"
        if self.http is not None and self.http.tls_port is not None:
            line += f" https={self.config.host}:{self.http.tls_port}"
        return line

    def security_line(self) -> str:
        """What a client must present; said at start so an open standalone is never a surprise."""
        config = self.broker.service.config if self.broker else None
        if config is None or not config.authentication_enabled:
            return ("magnetar standalone security: authentication is OFF - any client may produce, consume "
                    "and administer every tenant (turn it on with --pulsar-conf or a [broker] section: "
                    "authentication_enabled, authentication_providers, authorization_enabled)")
        anonymous = config.anonymous_user_role or "refused"
        return (f"magnetar standalone security: authentication providers={','.join(config.authentication_providers)} "
                f"anonymous={anonymous} authorization={'on' if config.authorization_enabled else 'OFF'} "
                f"tls={'on' if config.tls_enabled else 'off'}")

    async def stop(self) -> None:
        for stop in reversed(self.stoppers):
            try:
                await stop()
            except Exception:  # one part failing to stop must not keep the others running
                log.exception("error while stopping standalone")
        self.stoppers.clear()


def _ports(config: StandaloneConfig) -> list[tuple[str, int, str]]:
    bookies = [(f"bookie-{i}", config.bookie_port + i if config.bookie_port else 0, "--bookie-port")
               for i in range(config.bookies_count)]
    tls = [(name, port, flag) for name, port, flag in (("Pulsar protocol over TLS", config.broker_port_tls,
                                                        "--broker-port-tls"),
                                                       ("HTTPS", config.web_port_tls, "--web-port-tls"))
           if port is not None]
    return [("Pulsar protocol", config.broker_port, "--broker-port"), ("HTTP", config.web_port, "--web-port"),
            *tls, *bookies]


async def start_standalone(config: StandaloneConfig, broker_values: Mapping[str, Any] | None = None) -> Standalone:
    """Start everything; ``StartupConflictError`` (one line to show) if the data directory or a port is taken.
    ``broker_values`` are ``BrokerConfig`` settings (a TOML ``[broker]`` section or a translated
    Pulsar conf), under ``MAGNETAR_BROKER_*`` variables."""
    clock = SystemClock()
    broker_config = load_config(BrokerConfig, "broker", file_values=broker_values,
                                overrides={"advertised_host": config.host, "advertised_port": config.broker_port,
                                           "cluster_name": config.cluster_name})
    tls = tls_files_from_config(broker_config)
    network = TcpNetwork()
    lock = DataDirLock(config.data_dir)
    lock.acquire()  # before the metadata store: its RocksDB lock error says nothing useful
    try:
        check_ports_free(config.host, _ports(config))
        store = await open_metadata_store(config.metadata_url(), clock=clock)
    except BaseException:
        lock.release()
        raise
    running = Standalone(config, store)
    running.stoppers.append(_async(lock.release))
    running.stoppers.append(store.close)
    try:
        def bookie_parts(index: int) -> Callable[[], BookieParts]:
            def open_parts() -> BookieParts:
                bookie_config = config.bookie_config(index)
                disk = LocalDisk(bookie_config.data_dir)
                return BookieParts(bookie_config, disk, RocksKeyValueStore(os.path.join(disk.root, "index")))

            return open_parts

        parts = [bookie_parts(index) for index in range(config.bookies_count)]
        e, qw, qa = config.quorum
        started = await start_standalone_node(
            store, parts, broker_config=broker_config, host=config.host,
            managed_ledger_config=load_config(
                ManagedLedgerConfig, "managed_ledger",
                overrides={"ensemble_size": e, "write_quorum_size": qw, "ack_quorum_size": qa}),
            broker_port=config.broker_port, web_url=f"http://{config.host}:{config.web_port}", network=network,
            clock=clock, rng=system_rng(), stoppers=running.stoppers, local_bookie_calls=config.local_bookie_calls,
            ledger_client_config=LedgerClientConfig(pending_adds_count_max=config.ledger_window),
            start_server=functools.partial(
                start_broker, tls_port=config.broker_port_tls if tls is not None else None, tls=tls,
                offloader=open_offloader(broker_config, os.path.join(os.path.abspath(config.data_dir), "offload"))))
        running.bookies, running.broker = started.bookies, started.broker
        replication = await start_replication(running.broker.service, clock=clock, network=network, rng=system_rng())
        running.stoppers.append(replication.stop)
        running.http = await start_broker_http(config.host, config.web_port, service=running.broker.service,
                                               health=lambda: _health(running), metadata_url=config.metadata_url(),
                                               tls_port=config.web_port_tls if tls is not None else None, tls=tls)
        running.stoppers.append(running.http.stop)
    except BaseException:
        await running.stop()
        raise
    return running


def _async(release: Callable[[], None]) -> Callable[[], Awaitable[None]]:
    async def run() -> None:
        release()

    return run


def _health(running: Standalone) -> dict[str, object]:
    return {
        "status": "ok",
        "broker": running.broker.service_url if running.broker else None,
        "bookies": [{"id": b.bookie_id, "status": b.bookie.status.name} for b in running.bookies],
    }


async def run_standalone(config: StandaloneConfig, broker_values: Mapping[str, Any] | None = None) -> None:
    faults.arm_from_env()
    running = await start_standalone(config, broker_values)
    try:
        tune_gc_for_server()
        # The signal handlers first: a SIGTERM right after the ready line must stop cleanly, not
        # kill the process (the task installs them in its first step, the pass ``sleep(0)`` yields).
        terminated = asyncio.get_running_loop().create_task(wait_for_termination_signal())
        await asyncio.sleep(0)
        print(running.security_line(), flush=True)
        print(running.ready_line(), flush=True)
        await terminated
        log.info("standalone stopping")
    finally:
        await running.stop()


def main(config: StandaloneConfig, broker_values: Mapping[str, Any] | None = None) -> None:
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        import uvloop
    except ImportError:
        asyncio.run(run_standalone(config, broker_values))
    else:
        uvloop.run(run_standalone(config, broker_values))
