"""A managed-ledger test world: fake bookies (``tests/ledger/fakes``), the memory metadata store
and a ``SimClock``, and ``broker()`` to build a fresh owner (a new factory over new clients), as a
restarted or second broker would. Dropping a broker object without closing it is a crash.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from magnetar.base.rng import SeededRng
from magnetar.base.types import BookieId
from magnetar.ledger.config import LedgerClientConfig
from magnetar.ledger.manager import LedgerManager
from magnetar.ledger.metadata_ops import LedgerMetadataStore
from magnetar.ledger.placement import RandomPlacement, StaticBookieDirectory
from magnetar.managed_ledger import ManagedLedger, ManagedLedgerConfig, ManagedLedgerFactory
from magnetar.metadata.memory import MemoryMetadataServer
from magnetar.sim import SimClock
from tests.ledger.fakes import FakeBookie, FakeTransport, MemoryVersionedStore

TOPIC = "public/default/persistent/t1"


@dataclass
class World:
    clock: SimClock
    ledger_store: LedgerMetadataStore
    bookies: dict[BookieId, FakeBookie]
    transport: FakeTransport
    directory: StaticBookieDirectory
    metadata: MemoryMetadataServer
    seed: int = 0

    def manager(self) -> LedgerManager:
        self.seed += 1
        return LedgerManager(
            store=self.ledger_store,
            transport=self.transport,
            directory=self.directory,
            placement=RandomPlacement(SeededRng(self.seed)),
            clock=self.clock,
            config=LedgerClientConfig(speculative_read_timeout_ms=100),
        )

    async def broker(self, config: ManagedLedgerConfig | None = None) -> ManagedLedgerFactory:
        store = await self.metadata.connect()
        return ManagedLedgerFactory(manager=self.manager(), store=store, clock=self.clock, config=config)

    def stored_entries(self, ledger_id: int) -> int:
        """Entries of ``ledger_id`` on any bookie (to spot writes after fencing)."""
        ids = {e for bookie in self.bookies.values() for (lid, e) in (*bookie.durable, *bookie.unsynced) if lid == ledger_id}
        return len(ids)


def make_world(bookie_count: int = 3) -> World:
    ids = [BookieId("127.0.0.1", 3181 + i) for i in range(bookie_count)]
    bookies = {b: FakeBookie(b) for b in ids}
    clock = SimClock()
    return World(
        clock=clock,
        ledger_store=LedgerMetadataStore(MemoryVersionedStore()),
        bookies=bookies,
        transport=FakeTransport(bookies),
        directory=StaticBookieDirectory(ids),
        metadata=MemoryMetadataServer(clock),
    )


def config(**overrides: object) -> ManagedLedgerConfig:
    base: dict[str, object] = {"cursor_flush_interval_ms": 0, "retention_time_s": -1, "retention_size_bytes": -1}
    base.update(overrides)
    return ManagedLedgerConfig(**base)  # type: ignore[arg-type]


async def until(condition: Callable[[], bool], rounds: int = 10_000) -> None:
    """Run other tasks until ``condition()`` holds (no time passes)."""
    for _ in range(rounds):
        if condition():
            return
        await asyncio.sleep(0)
    raise AssertionError("condition never became true")


def crash(ml: ManagedLedger, *tasks: asyncio.Task[Any]) -> None:
    """The owner process dies: its tasks stop where they are; nothing is closed or flushed."""
    for task in tasks:
        task.cancel()
    ml._cancel_tasks()
    for cursor in ml.cursors.values():
        if cursor._flusher is not None:
            cursor._flusher.cancel()
