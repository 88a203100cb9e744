"""``LedgerManager``: the ledger client's entry point (create, open, recover, delete, list).

It owns nothing but the injected capabilities (metadata store, bookie transport, bookie
directory, placement policy, clock, config) and hands out ``LedgerHandle`` writers and
``LedgerReader``s. Creation refuses unless ``E >= Qw >= Qa >= 1``. Opening with recovery fences
the ledger (the previous writer can no longer add) and returns a reader of the CLOSED ledger;
opening without recovery never fences.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from magnetar.base.clock import Clock
from magnetar.base.limits import LEDGER_FRAGMENTS_COUNT_MAX
from magnetar.base.types import NO_ENTRY
from magnetar.ledger.add_timeouts import AddTimeouts
from magnetar.ledger.config import LedgerClientConfig
from magnetar.ledger.handle import LedgerHandle
from magnetar.ledger.ledger_metadata import Fragment, LedgerMetadata, LedgerState
from magnetar.ledger.metadata_ops import LedgerMetadataStore
from magnetar.ledger.placement import BookieDirectory, PlacementPolicy
from magnetar.ledger.quorum import validate_quorum
from magnetar.ledger.reader import LedgerReader
from magnetar.ledger.recovery import LedgerRecovery, RecoveryMode
from magnetar.ledger.transport import BookieTransport
from magnetar.ledger.window import WindowShare

__all__ = ["LEDGER_FRAGMENTS_COUNT_MAX", "LedgerManager"]


class LedgerManager:
    def __init__(
        self,
        *,
        store: LedgerMetadataStore,
        transport: BookieTransport,
        directory: BookieDirectory,
        placement: PlacementPolicy,
        clock: Clock,
        config: LedgerClientConfig | None = None,
        master_key: bytes = b"",
        on_close: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        self.store = store
        self._on_close = on_close
        self._transport = transport
        self._directory = directory
        self._placement = placement
        self._clock = clock
        self.config = config or LedgerClientConfig()
        self._master_key = master_key
        #: Every writer this client hands out shares one add window (issue 22, isolation): a
        #: lone busy ledger fills all of it, busy ledgers side by side a share each.
        self.window = WindowShare(self.config.pending_adds_count_max, self.config.pending_adds_share_count_min)
        #: ... and one add-timeout timer (issue 22: no task or timer per writer's busy spell).
        self.add_timeouts = AddTimeouts(clock)

    async def create_ledger(
        self,
        ensemble_size: int,
        write_quorum_size: int,
        ack_quorum_size: int,
        *,
        custom: tuple[tuple[str, str], ...] = (),
    ) -> LedgerHandle:
        """A new OPEN ledger on a fresh ensemble, and its writer."""
        validate_quorum(ensemble_size, write_quorum_size, ack_quorum_size)
        available = await self._directory.available_bookies()
        ensemble = self._placement.new_ensemble(available, ensemble_size, write_quorum_size)
        ledger_id = await self.store.allocate_id()
        metadata = LedgerMetadata(
            ledger_id=ledger_id,
            ensemble_size=ensemble_size,
            write_quorum_size=write_quorum_size,
            ack_quorum_size=ack_quorum_size,
            state=LedgerState.OPEN,
            last_entry_id=NO_ENTRY,
            fragments=(Fragment(0, ensemble),),
            ctime_ms=self._clock.now_ms(),
            custom=custom,
        )
        created = await self.store.create(metadata)
        return LedgerHandle(
            created,
            store=self.store,
            transport=self._transport,
            directory=self._directory,
            placement=self._placement,
            clock=self._clock,
            config=self.config,
            master_key=self._master_key,
            window=self.window,
            timeouts=self.add_timeouts,
        )

    async def recover_ledger(self, ledger_id: int, *, mode: RecoveryMode = RecoveryMode.CORRECT) -> LedgerMetadata:
        """Fence and close ``ledger_id`` at its true end (idempotent; a CLOSED ledger is returned as is)."""
        recovery = LedgerRecovery(
            ledger_id,
            store=self.store,
            transport=self._transport,
            clock=self._clock,
            config=self.config,
            master_key=self._master_key,
            mode=mode,
        )
        return await recovery.run()

    async def open_ledger(self, ledger_id: int) -> LedgerReader:
        """Open with recovery: the previous writer is fenced out; the reader sees the closed ledger."""
        metadata = await self.recover_ledger(ledger_id)
        return self._reader(metadata)

    async def open_ledger_no_recovery(self, ledger_id: int) -> LedgerReader:
        """Open without fencing: reads up to the LAC learned by ``read_lac`` (the writer keeps going)."""
        metadata = (await self.store.read(ledger_id)).metadata
        return self._reader(metadata)

    def _reader(self, metadata: LedgerMetadata) -> LedgerReader:
        return LedgerReader(
            metadata, transport=self._transport, clock=self._clock, config=self.config, master_key=self._master_key
        )

    async def delete_ledger(self, ledger_id: int) -> None:
        """Remove the ledger's metadata; bookies garbage-collect entries of ledgers that are gone."""
        await self.store.delete(ledger_id)

    async def list_ledgers(self) -> list[int]:
        return await self.store.list_ids()

    async def close(self) -> None:
        """Release what the composition root handed over (e.g. bookie connections). Idempotent."""
        on_close, self._on_close = self._on_close, None
        self.add_timeouts.close()
        if on_close is not None:
            await on_close()
