"""``ManagedLedgerFactory``: opens and caches managed ledgers by name; deletes them.

One factory per broker process, built by the composition root over a ``LedgerManager``, a
``MetadataStore`` and a ``Clock``. Managed ledger ``name`` is a topic's ``persistence_path``
(``tenant/ns/persistent/topic``); its info lives at ``{root}/{name}`` and its cursors below it.
Concurrent opens of one name share one open; a failed open is not cached.
"""

from __future__ import annotations

import asyncio

from magnetar.base.clock import Clock
from magnetar.base.errors import InvalidArgumentError, NotFoundError
from magnetar.base.types import TopicName
from magnetar.ledger.manager import LedgerManager
from magnetar.managed_ledger.config import ManagedLedgerConfig
from magnetar.managed_ledger.entry_reader import CacheBudget
from magnetar.managed_ledger.managed_ledger import ManagedLedger, MLState
from magnetar.managed_ledger.offload import LedgerOffloader
from magnetar.managed_ledger.rollover_timer import RolloverTimer
from magnetar.metadata.api import MetadataStore
from magnetar.metadata.paths import validate_node_path

DEFAULT_ROOT = "/managed-ledgers"


class ManagedLedgerFactory:
    def __init__(
        self,
        *,
        manager: LedgerManager,
        store: MetadataStore,
        clock: Clock,
        config: ManagedLedgerConfig | None = None,
        root: str = DEFAULT_ROOT,
        offloader: LedgerOffloader | None = None,
    ) -> None:
        self._manager = manager
        #: The object store sealed ledgers are offloaded to (None: offload is not configured).
        self.offloader = offloader
        self._store = store
        self._clock = clock
        self.config = config or ManagedLedgerConfig()
        self._root = root.rstrip("/")
        self._opening: dict[str, asyncio.Future[ManagedLedger]] = {}
        #: One bound on the entry cache of every managed ledger this factory opens.
        self.cache_budget = CacheBudget()
        #: One timer for the age-based rollover of all of them (not one task per managed ledger).
        self.rollover_timer = RolloverTimer(clock)

    @staticmethod
    def name_of(topic: TopicName) -> str:
        return topic.persistence_path

    def path_of(self, name: str) -> str:
        if not name or name.startswith("/") or name.count("/") != 3:
            raise InvalidArgumentError(f"managed ledger name must be tenant/ns/domain/topic, got {name!r}")
        return validate_node_path(f"{self._root}/{name}")

    async def open(self, name: str, config: ManagedLedgerConfig | None = None) -> ManagedLedger:
        """The open managed ledger ``name`` (opened, and taken over from any previous owner, once)."""
        path = self.path_of(name)
        pending = self._opening.get(name)
        if pending is not None:
            ml = await asyncio.shield(pending)
            if ml.state not in (MLState.CLOSED, MLState.FENCED):
                return ml
        future: asyncio.Future[ManagedLedger] = asyncio.get_running_loop().create_future()
        self._opening[name] = future
        try:
            ml = await ManagedLedger.open(
                name, path, manager=self._manager, store=self._store, clock=self._clock, config=config or self.config,
                cache_budget=self.cache_budget, offloader=self.offloader, rollover_timer=self.rollover_timer)
        except BaseException as exc:
            del self._opening[name]
            future.set_exception(exc)
            future.exception()
            raise
        future.set_result(ml)
        return ml

    def get_if_open(self, name: str) -> ManagedLedger | None:
        pending = self._opening.get(name)
        if pending is None or not pending.done() or pending.exception() is not None:
            return None
        return pending.result()

    async def delete(self, name: str) -> None:
        """Delete managed ledger ``name``: every ledger, every cursor, its metadata."""
        path = self.path_of(name)
        if not await self._store.exists(path):
            raise NotFoundError(f"managed ledger {name} does not exist")
        ml = self.get_if_open(name)
        if ml is None or ml.state is MLState.CLOSED:
            ml = await self.open(name)
        await ml.delete()
        self._opening.pop(name, None)

    async def close(self) -> None:
        for name in list(self._opening):
            ml = self.get_if_open(name)
            if ml is not None:
                await ml.close()
        self._opening.clear()
        self.rollover_timer.close()
