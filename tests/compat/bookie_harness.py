"""A broker over real storage for compat tests: embedded metadata + one bookie + managed ledgers.

All in the broker thread's event loop, data in a temporary directory; ``restart()`` of the broker
keeps the bookie and metadata (a broker restart over the same bookies: the new broker fences and
recovers the topic's ledgers before writing).
"""

from __future__ import annotations

from typing import Any

from magnetar.base.rng import SeededRng
from magnetar.broker import BrokerConfig
from magnetar.managed_ledger import ManagedLedgerConfig
from magnetar.node.broker_generation import bootstrap_cluster
from magnetar.node.ledger import close_ledger_manager, open_ledger_manager
from magnetar.runtime.bookie import start_bookie
from magnetar.runtime.broker_server import BrokerServer, start_broker
from magnetar.runtime.clock import SystemClock
from magnetar.runtime.metadata import open_metadata_store
from magnetar.runtime.network import TcpNetwork
from magnetar.storage.config import BookieConfig
from tests.compat.harness import BrokerThread


class BookieBrokerThread(BrokerThread):
    def __init__(self, data_dir: str) -> None:
        super().__init__(BrokerConfig(advertised_port=0))
        self.data_dir = data_dir
        self.bookie: Any = None
        self.manager: Any = None

    def start(self) -> BookieBrokerThread:
        clock = SystemClock()

        async def _start() -> BrokerServer:
            if self.metadata is None:
                self.metadata = await open_metadata_store(f"embedded:{self.data_dir}/metadata", clock=clock)
                bookie_config = BookieConfig(host="127.0.0.1", port=0, data_dir=f"{self.data_dir}/bookie-0",
                                             metadata_url=f"embedded:{self.data_dir}/metadata")
                self.bookie = await start_bookie(bookie_config, store=self.metadata, clock=clock, network=TcpNetwork())
            self.manager = await open_ledger_manager(self.metadata, network=TcpNetwork(), clock=clock, rng=SeededRng(7))
            server = await start_broker(
                self.config, clock=clock, metadata=self.metadata, ledger_manager=self.manager,
                managed_ledger_config=ManagedLedgerConfig(ensemble_size=1, write_quorum_size=1, ack_quorum_size=1,
                                                          cursor_flush_interval_ms=0),
                network=TcpNetwork(), port=self.port,
            )
            # public/default exists as on a standalone: topics are only created in namespaces that exist
            await bootstrap_cluster(server.service, web_url="http://127.0.0.1:0")
            return server

        self.server = self.call(_start())
        self.port = self.server.port
        return self

    def stop_server(self) -> None:
        super().stop_server()
        if self.manager is not None:
            manager, self.manager = self.manager, None
            self.call(close_ledger_manager(manager))

    def stop(self) -> None:
        try:
            self.stop_server()
            if self.bookie is not None:
                self.call(self.bookie.stop())
            if self.metadata is not None:
                self.call(self.metadata.close())
        finally:
            super().stop()
