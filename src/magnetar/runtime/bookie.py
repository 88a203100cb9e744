"""The bookie process: real adapters under the ``node.bookie`` node.

``start_bookie(config, store=..., clock=..., network=...)`` opens the data directory
(``LocalDisk``) and the index (RocksDB at ``<data_dir>/index``) and starts the bookie node
(``node.bookie.start_bookie_node``: cookie, journal replay, server, registration) in the running
loop (used by ``magnetar standalone`` for one or more bookies); ``run_bookie(config)`` is the
bookie process around it: it arms fault points from ``MAGNETAR_FAULTS``, opens the metadata
store, prints ``magnetar-bookie listening on HOST:PORT`` once serving, and stops on SIGTERM/SIGINT.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys
from collections.abc import Callable

from magnetar import faults
from magnetar.base.clock import Clock
from magnetar.base.io import Network
from magnetar.metadata.api import MetadataStore
from magnetar.node.bookie import (
    AVAILABLE_PATH,
    COOKIES_PATH,
    READONLY_PATH,
    BookieServer,
    Registration,
    RunningBookie,
    StoreReopener,
    metadata_live_ledgers,
    start_bookie_node,
)
from magnetar.runtime.clock import SystemClock, system_rng
from magnetar.runtime.disk import LocalDisk
from magnetar.runtime.gc_tuning import tune_gc_for_server
from magnetar.runtime.kv import RocksKeyValueStore
from magnetar.runtime.metadata import open_metadata_store
from magnetar.runtime.network import TcpNetwork
from magnetar.runtime.tls import TlsFiles
from magnetar.storage import BookieConfig
from magnetar.storage.garbage import LiveLedgers

__all__ = [
    "AVAILABLE_PATH", "COOKIES_PATH", "READONLY_PATH", "BookieServer", "Registration", "RunningBookie",
    "metadata_live_ledgers", "run_bookie", "start_bookie", "wait_for_termination_signal",
]

log = logging.getLogger(__name__)


async def start_bookie(
    config: BookieConfig,
    *,
    store: MetadataStore,
    clock: Clock,
    network: Network,
    live_ledgers: LiveLedgers | None = None,
    reopen_store: StoreReopener | None = None,
) -> RunningBookie:
    """The bookie node on ``config.data_dir`` (files with fsync) and its RocksDB index."""
    disk = LocalDisk(config.data_dir)
    kv = RocksKeyValueStore(os.path.join(disk.root, "index"))
    return await start_bookie_node(config, disk=disk, kv=kv, store=store, clock=clock, network=network,
                                   rng=system_rng(), live_ledgers=live_ledgers, reopen_store=reopen_store)


async def run_bookie(config: BookieConfig, *, ready: Callable[[int], None] | None = None) -> None:
    """Run a bookie until SIGTERM/SIGINT (composition root of the bookie process)."""
    faults.arm_from_env()
    clock = SystemClock()
    store = await open_metadata_store(config.metadata_url, clock=clock)

    async def reopen() -> MetadataStore:
        return await open_metadata_store(config.metadata_url, clock=clock)

    try:
        network = TcpNetwork()
        if config.tls_certificate_file_path and config.tls_key_file_path:
            tls = TlsFiles(config.tls_certificate_file_path, config.tls_key_file_path,
                           config.tls_trust_certs_file_path, require_client_cert=config.tls_require_client_cert)
            network = TcpNetwork(tls.context)
        running = await start_bookie(config, store=store, clock=clock, network=network, reopen_store=reopen)
        # What start-up loaded and built lives as long as the process: moved out of the
        # collector's generations, a full collection no longer walks it (one took 7-8 ms on the
        # event loop, an add latency spike; ``bench/bookie_append.py``, docs/performance.md).
        tune_gc_for_server()
        try:
            print(f"magnetar-bookie listening on {running.bookie_id}", flush=True)
            if ready is not None:
                ready(running.port)
            await wait_for_termination_signal()
        finally:
            store = running.metadata_store  # a renewed session's store, if the first one ended
            await running.stop()
    finally:
        await store.close()


async def wait_for_termination_signal() -> None:
    """Return on the first SIGTERM or SIGINT."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        await stop.wait()
    finally:
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(sig)


def main(config: BookieConfig) -> None:
    """Run ``run_bookie`` on uvloop (plain asyncio if uvloop is missing)."""
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        import uvloop

        uvloop.run(run_bookie(config))
    except ImportError:
        asyncio.run(run_bookie(config))
