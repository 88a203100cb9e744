"""``magnetar autorecovery``: the AutoRecovery process around ``node.autorecovery``.

``run_autorecovery`` arms fault points from ``MAGNETAR_FAULTS``, opens the metadata store, starts
the node (``node.autorecovery.start_autorecovery``) over TCP and the system clock as owner
``<hostname>:<pid>``, prints ``magnetar-autorecovery running as OWNER`` once both loops run, and
stops on SIGTERM/SIGINT.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import sys
from collections.abc import Callable

from magnetar import faults
from magnetar.ledger.autorecovery import AutoRecoveryConfig
from magnetar.node.autorecovery import RunningAutoRecovery, start_autorecovery
from magnetar.runtime.bookie import wait_for_termination_signal
from magnetar.runtime.clock import SystemClock, system_rng
from magnetar.runtime.metadata import open_metadata_store
from magnetar.runtime.network import TcpNetwork
from magnetar.runtime.tls import bookie_client_network

__all__ = ["READY_PREFIX", "RunningAutoRecovery", "main", "run_autorecovery", "start_autorecovery"]

READY_PREFIX = "magnetar-autorecovery running as "


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
        running = await start_autorecovery(store, network=network, clock=clock, rng=system_rng(), config=config,
                                           owner=f"{socket.gethostname()}:{os.getpid()}")
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
