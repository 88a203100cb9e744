"""Reading a ledger: ``LedgerReader`` with speculative reads and quorum LAC reads.

* A reader of an OPEN ledger reads only up to the LAC it learned (``read_lac``), without fencing:
  every entry <= LAC is on Qa bookies. A reader of a CLOSED ledger reads up to its last entry.
* One entry is asked of the first bookie of its write set; if no answer arrives within
  ``speculative_read_timeout_ms`` (or an error arrives), the next bookie of the write set is
  asked too; the first digest-valid answer wins (``shared/reference`` 1.8).
* Every answer is checked: ledger id, entry id and CRC32C digest must match, else that bookie's
  answer counts as unavailable and the next one is tried.
"""

from __future__ import annotations

import asyncio

from magnetar.base.clock import Clock
from magnetar.base.errors import InvalidArgumentError, LimitExceededError, MagnetarError
from magnetar.base.types import NO_ENTRY, BookieId
from magnetar.ledger._deadline import with_deadline
from magnetar.ledger.config import LedgerClientConfig
from magnetar.ledger.errors import BookieUnavailableError, NoSuchEntryError
from magnetar.ledger.lac import read_lac_quorum
from magnetar.ledger.ledger_metadata import LedgerMetadata, LedgerState
from magnetar.ledger.quorum import read_order
from magnetar.ledger.transport import BookieTransport
from magnetar.protocol.bookie.codec import Entry

#: Entries one ``read_entries`` call may return (callers page through longer ranges).
READ_BATCH_COUNT_MAX = 10_000


def verified(entry: Entry, ledger_id: int, entry_id: int) -> bool:
    return entry.ledger_id == ledger_id and entry.entry_id == entry_id and entry.digest_ok()


class LedgerReader:
    """Reads entries of one ledger. Build through ``LedgerManager.open_*``."""

    def __init__(
        self,
        metadata: LedgerMetadata,
        *,
        transport: BookieTransport,
        clock: Clock,
        config: LedgerClientConfig,
        master_key: bytes = b"",
    ) -> None:
        self._metadata = metadata
        self._transport = transport
        self._clock = clock
        self._config = config
        self._master_key = master_key
        self._lac: int = metadata.last_entry_id if metadata.state is LedgerState.CLOSED else NO_ENTRY
        self._background: set[asyncio.Task[object]] = set()

    @property
    def metadata(self) -> LedgerMetadata:
        return self._metadata

    @property
    def ledger_id(self) -> int:
        return self._metadata.ledger_id

    @property
    def last_add_confirmed(self) -> int:
        """The highest entry this reader may read (LAC learned, or the closed last entry)."""
        return self._lac

    @property
    def is_closed(self) -> bool:
        return self._metadata.state is LedgerState.CLOSED

    async def read_lac(self) -> int:
        """Quorum read of the LAC over the last ensemble, without fencing; it only grows."""
        if self.is_closed:
            return self._lac
        result = await read_lac_quorum(
            self._transport,
            self._clock,
            self._metadata,
            fence=False,
            timeout_ms=self._config.read_timeout_ms,
            master_key=self._master_key,
            background=self._background,
        )
        self._lac = max(self._lac, result.lac)
        return self._lac

    def learn_lac(self, lac: int) -> int:
        """Raise the readable end to ``lac``, told by the ledger's writer (it acknowledged every
        entry up to ``lac`` on Qa bookies), without asking the bookies: a bookie learns the LAC
        only with the next entry or an explicit LAC, so it lags the writer by one entry."""
        if not self.is_closed:
            self._lac = max(self._lac, lac)
        return self._lac

    def learn_closed(self, metadata: LedgerMetadata) -> None:
        """The ledger was closed (its metadata says so): read up to its last entry from now on."""
        if metadata.ledger_id == self.ledger_id and metadata.state is LedgerState.CLOSED:
            self._metadata = metadata
            self._lac = metadata.last_entry_id

    async def read_entries(self, first_entry_id: int, last_entry_id: int) -> list[Entry]:
        """Entries ``first..last`` (inclusive, in order); all must be <= ``last_add_confirmed``."""
        if first_entry_id < 0 or last_entry_id < first_entry_id:
            raise InvalidArgumentError(f"bad entry range {first_entry_id}..{last_entry_id}")
        if last_entry_id > self._lac:
            raise InvalidArgumentError(
                f"entry {last_entry_id} of ledger {self.ledger_id} is beyond the readable end {self._lac}"
            )
        count = last_entry_id - first_entry_id + 1
        if count > READ_BATCH_COUNT_MAX:
            raise LimitExceededError("READ_BATCH_COUNT_MAX", count, READ_BATCH_COUNT_MAX)
        return list(
            await asyncio.gather(*(self.read_entry(e) for e in range(first_entry_id, last_entry_id + 1)))
        )

    async def read_entry(self, entry_id: int) -> Entry:
        """One entry, with speculative reads across its write set."""
        if entry_id < 0 or entry_id > self._lac:
            raise InvalidArgumentError(f"entry {entry_id} of ledger {self.ledger_id} is beyond the readable end {self._lac}")
        return await speculative_read(
            self._transport,
            self._clock,
            self._metadata,
            entry_id,
            config=self._config,
            master_key=self._master_key,
        )


async def speculative_read(
    transport: BookieTransport,
    clock: Clock,
    metadata: LedgerMetadata,
    entry_id: int,
    *,
    config: LedgerClientConfig,
    master_key: bytes,
) -> Entry:
    """Read ``entry_id`` from its write set, moving to the next bookie on error or slowness."""
    return await _SpeculativeRead(transport, clock, metadata, entry_id, config, master_key).run()


class _SpeculativeRead:
    """One entry read across its write set: the first bookie is asked at once; the next one when
    an asked bookie answered "no such entry" or failed, or after ``speculative_read_timeout_ms``
    without an answer. The first digest-valid answer wins; the reads still running are cancelled."""

    def __init__(self, transport: BookieTransport, clock: Clock, metadata: LedgerMetadata, entry_id: int,
                 config: LedgerClientConfig, master_key: bytes) -> None:
        self._transport = transport
        self._clock = clock
        self._metadata = metadata
        self._entry_id = entry_id
        self._config = config
        self._master_key = master_key
        ensemble = metadata.ensemble_for(entry_id)
        self._order: list[BookieId] = [
            ensemble[i] for i in read_order(entry_id, metadata.ensemble_size, metadata.write_quorum_size)
        ]
        self._running: set[asyncio.Task[Entry]] = set()
        self._negatives = 0
        self._failures = 0
        self._next_index = 0
        self._timer: asyncio.Task[None] | None = None
        self._speculative_s = config.speculative_read_timeout_ms / 1000
        self._launch_now = True

    async def _ask(self, bookie: BookieId) -> Entry:
        ledger_id, entry_id = self._metadata.ledger_id, self._entry_id
        entry = await with_deadline(
            self._clock,
            self._config.read_timeout_ms,
            self._transport.read(bookie, ledger_id, entry_id, fence=False, master_key=self._master_key),
            f"read {ledger_id}:{entry_id} from {bookie}",
        )
        if not verified(entry, ledger_id, entry_id):
            raise BookieUnavailableError(f"bookie {bookie} returned a corrupt copy of {ledger_id}:{entry_id}")
        return entry

    def _launch(self) -> None:
        """Ask the next bookie of the order (if one is left) and restart the speculative timer."""
        self._launch_now = False
        if self._next_index < len(self._order):
            self._running.add(asyncio.ensure_future(self._ask(self._order[self._next_index])))
            self._next_index += 1
        if self._timer is not None:
            self._timer.cancel()
        self._timer = (
            asyncio.ensure_future(self._clock.sleep(self._speculative_s))
            if self._speculative_s > 0 and self._next_index < len(self._order)
            else None
        )

    def _answer(self) -> Entry | None:
        """The first valid answer among the finished reads, or None; a negative or failed one
        is counted and makes the next bookie be asked at once."""
        for task in [t for t in self._running if t.done()]:
            self._running.discard(task)
            try:
                return task.result()
            except NoSuchEntryError:
                self._negatives += 1
                self._launch_now = True
            except MagnetarError:
                self._failures += 1
                self._launch_now = True
        return None

    async def run(self) -> Entry:
        try:
            while self._running or self._next_index < len(self._order):
                if self._launch_now or not self._running or (self._timer is not None and self._timer.done()):
                    self._launch()
                waiting: set[asyncio.Future[object]] = set(self._running)  # type: ignore[arg-type]
                if self._timer is not None:
                    waiting.add(self._timer)  # type: ignore[arg-type]
                await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
                entry = self._answer()
                if entry is not None:
                    return entry
        finally:
            for task in self._running:
                task.cancel()
            if self._timer is not None:
                self._timer.cancel()
        name = f"{self._metadata.ledger_id}:{self._entry_id}"
        if self._failures == 0:
            raise NoSuchEntryError(f"no bookie of the write set has {name}")
        raise BookieUnavailableError(
            f"could not read {name}: {self._negatives} said no such entry, {self._failures} failed"
        )
