"""The ledger client node wiring (both worlds): ``open_ledger_manager`` / ``close_ledger_manager``.

Wires a ``LedgerManager`` from one metadata-store session: ledger metadata under ``/ledgers``
(``MetadataStoreAdapter``), the live writable bookies from ``/ledgers/available``
(``MetadataBookieDirectory``), rack-aware placement (``ledger.rack_placement``; random among equals, from the given ``Rng``), and pooled bookie
connections over the given ``Network`` (``BookieClientTransport``). It does no I/O of its own,
so the simulator composes the client the same way with its simulated network and clock.
The caller keeps owning ``store``; ``close_ledger_manager`` closes only the bookie connections.

``LocalFirstTransport``: a process that runs bookies itself (``magnetar standalone``) reaches
them by direct calls into their storage core, as BookKeeper's client does for bookies in its own
JVM (``LocalBookiesRegistry``): no frames encoded and decoded twice, no loopback socket, no event
loop passes for the socket in each direction. The storage core is the same one the bookie
server calls, so every status (fenced, read-only, unauthorized, too large), the journal fsync
before an OK and every storage fault point are unchanged, and entries read back are digest
checked as over the network. Every other bookie is reached over the network.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from typing import Any

from magnetar.base.clock import Clock
from magnetar.base.errors import MagnetarError
from magnetar.base.io import Network
from magnetar.base.rng import Rng
from magnetar.base.types import BookieId
from magnetar.ledger._deadline import keep_in_background
from magnetar.ledger.bookie_client import checked_entry
from magnetar.ledger.bookie_transport import BookieClientTransport, entry_of, last_entry_of, status_error
from magnetar.ledger.config import LedgerClientConfig
from magnetar.ledger.directory import MetadataBookieDirectory
from magnetar.ledger.errors import BookieUnavailableError
from magnetar.ledger.manager import LedgerManager
from magnetar.ledger.metadata_adapter import MetadataStoreAdapter
from magnetar.ledger.metadata_ops import LedgerMetadataStore
from magnetar.ledger.rack_placement import RackAwarePlacement
from magnetar.ledger.racks import RackedBookieDirectory
from magnetar.ledger.transport import AddReplyCallback, LastEntryReply
from magnetar.metadata.api import MetadataStore
from magnetar.protocol.bookie.codec import EncodedEntry, ReadResponse, Status
from magnetar.storage import Bookie

#: An add waiting for room on a local bookie: who is told its status, entry, recovery flag, master key.
_LocalAdd = tuple[Callable[[Status], None], EncodedEntry, bool, bytes]


class _LocalRun:
    """The replies of one ``add_run`` to a local bookie, as ``on_reply(index, error)``: one the
    bookie gives while the run is being handed over (a refusal) waits for the next loop pass."""

    __slots__ = ("bookie", "entries", "handing_over", "on_reply")

    def __init__(self, bookie: BookieId, entries: Sequence[EncodedEntry], on_reply: AddReplyCallback) -> None:
        self.bookie = bookie
        self.entries = entries
        self.on_reply = on_reply
        self.handing_over = True

    def done(self, index: int, status: Status) -> None:
        error: BaseException | None = None
        if status is not Status.OK:
            entry = self.entries[index]
            error = status_error(self.bookie, status, f"add {entry.ledger_id}:{entry.entry_id}")
        if self.handing_over:
            asyncio.get_running_loop().call_soon(self.on_reply, index, error)
        else:
            self.on_reply(index, error)


def _settle_local(result: asyncio.Future[None], bookie: BookieId, entry: EncodedEntry, status: Status) -> None:
    if result.done():
        return
    if status is Status.OK:
        result.set_result(None)
    else:
        result.set_exception(status_error(bookie, status, f"add {entry.ledger_id}:{entry.entry_id}"))
        result.exception()


class LocalFirstTransport:
    """``BookieTransport``: the bookies in ``local`` by direct calls into
    their storage core, every other one through ``remote``."""

    def __init__(self, local: Mapping[BookieId, Bookie], remote: BookieClientTransport) -> None:
        self._local = dict(local)
        self._remote = remote
        self._waiting: dict[BookieId, deque[_LocalAdd]] = {}
        self._background: set[asyncio.Task[Any]] = set()

    @property
    def local_bookies(self) -> frozenset[BookieId]:
        return frozenset(self._local)

    async def close(self) -> None:
        for task in list(self._background):
            task.cancel()
        self._local.clear()  # the bookies are their runner's to stop
        await self._remote.close()

    def add(self, bookie: BookieId, entry: EncodedEntry, *, recovery: bool, master_key: bytes) -> asyncio.Future[None]:
        """The one add operation: a local bookie stores it at once, or once it has room again
        (adds to it wait in call order, as the server stops reading while the bookie is full)."""
        core = self._local.get(bookie)
        if core is None:
            return self._remote.add(bookie, entry, recovery=recovery, master_key=master_key)
        result: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        add = (partial(_settle_local, result, bookie, entry), entry, recovery, master_key)
        if (self._waiting and bookie in self._waiting) or core.needs_backpressure():
            self._wait_for_room(core, bookie, add)
        else:
            core.add_entry(entry, master_key, recovery, add[0])
        return result

    def add_run(self, bookie: BookieId, entries: Sequence[EncodedEntry], *, recovery: bool, master_key: bytes,
                on_reply: AddReplyCallback) -> None:
        """``add`` of a run in one call: a local bookie with room takes every entry of the run
        now (its journal groups them); otherwise they wait in line as ``add``s do."""
        core = self._local.get(bookie)
        if core is None:
            self._remote.add_run(bookie, entries, recovery=recovery, master_key=master_key, on_reply=on_reply)
            return
        run = _LocalRun(bookie, entries, on_reply)
        if (self._waiting and bookie in self._waiting) or core.needs_backpressure():
            for index, entry in enumerate(entries):
                self._wait_for_room(core, bookie, (partial(run.done, index), entry, recovery, master_key))
        else:
            add_entry = core.add_entry
            for index, entry in enumerate(entries):
                add_entry(entry, master_key, recovery, partial(run.done, index))
        run.handing_over = False

    def _wait_for_room(self, core: Bookie, bookie: BookieId, add: _LocalAdd) -> None:
        waiting = self._waiting.get(bookie)
        if waiting is None:
            waiting = self._waiting[bookie] = deque()
            task = asyncio.get_running_loop().create_task(self._add_when_room(core, bookie, waiting))
            keep_in_background(task, self._background)
        waiting.append(add)

    def _add_local(self, core: Bookie, bookie: BookieId, add: _LocalAdd) -> None:
        on_done, entry, recovery, master_key = add
        core.add_entry(entry, master_key, recovery, on_done)

    async def _add_when_room(self, core: Bookie, bookie: BookieId, waiting: deque[_LocalAdd]) -> None:
        try:
            while waiting:
                if core.needs_backpressure():
                    await core.wait_for_room()
                    continue
                self._add_local(core, bookie, waiting.popleft())
        finally:
            if self._waiting.get(bookie) is waiting:
                del self._waiting[bookie]
            for on_done, *_ in waiting:  # cancelled: the transport closed
                on_done(Status.UNAVAILABLE)

    async def read(self, bookie: BookieId, ledger_id: int, entry_id: int, *, fence: bool,
                   master_key: bytes) -> EncodedEntry:
        core = self._local.get(bookie)
        if core is None:
            return await self._remote.read(bookie, ledger_id, entry_id, fence=fence, master_key=master_key)
        what = f"read {ledger_id}:{entry_id}"
        return entry_of(bookie, what, await _read_local(core, bookie, what, ledger_id, entry_id, fence, master_key))

    async def read_last_entry(self, bookie: BookieId, ledger_id: int, *, fence: bool,
                              master_key: bytes) -> LastEntryReply:
        core = self._local.get(bookie)
        if core is None:
            return await self._remote.read_last_entry(bookie, ledger_id, fence=fence, master_key=master_key)
        what = f"read_last_entry {ledger_id}"
        return last_entry_of(bookie, what, await _read_local(core, bookie, what, ledger_id, None, fence, master_key))

    async def write_lac(self, bookie: BookieId, ledger_id: int, lac: int, *, master_key: bytes) -> None:
        core = self._local.get(bookie)
        if core is None:
            await self._remote.write_lac(bookie, ledger_id, lac, master_key=master_key)
            return
        status, _ = await core.write_lac(ledger_id, lac, master_key)
        if status is not Status.OK:
            raise status_error(bookie, status, f"write_lac {ledger_id}")


async def _read_local(core: Bookie, bookie: BookieId, what: str, ledger_id: int, entry_id: int | None,
                      fence: bool, master_key: bytes) -> ReadResponse:
    """The storage core's answer as the bookie server gives it, checked as ``BookieClient``
    checks a received one (ids, digest): a damaged entry is the bookie's failure."""
    try:
        if fence:
            result = await core.fence_and_read(ledger_id, entry_id, master_key)
        else:
            result = core.read_entry_or_last(ledger_id, entry_id)
        raw = result.raw
        # a view of a mapped entry log is copied here: the broker keeps entries (its cache)
        entry = EncodedEntry.parse(raw if isinstance(raw, bytes) else bytes(raw)) if raw is not None else None
        response = ReadResponse(0, result.status, ledger_id, result.entry_id, result.known_lac, entry)
        checked_entry(response, ledger_id, entry_id)
    except MagnetarError as exc:
        raise BookieUnavailableError(f"{what}: bookie {bookie}: {exc}") from exc
    return response


async def open_ledger_manager(
    store: MetadataStore,
    *,
    network: Network,
    clock: Clock,
    rng: Rng,
    config: LedgerClientConfig | None = None,
    master_key: bytes = b"",
    local_bookies: Mapping[BookieId, Bookie] | None = None,
) -> LedgerManager:
    """A ``LedgerManager`` over real bookies found through ``store``; close with
    ``close_ledger_manager``. ``local_bookies``: bookies this process runs (see
    ``LocalFirstTransport``)."""
    config = config or LedgerClientConfig()
    remote = BookieClientTransport(network, clock, config)
    transport: BookieClientTransport | LocalFirstTransport = (
        LocalFirstTransport(local_bookies, remote) if local_bookies else remote)
    directory = RackedBookieDirectory(MetadataBookieDirectory(store), store)
    return LedgerManager(
        store=LedgerMetadataStore(MetadataStoreAdapter(store)),
        transport=transport,
        directory=directory,
        placement=RackAwarePlacement(rng, directory),
        clock=clock,
        config=config,
        master_key=master_key,
        on_close=transport.close,
    )


async def close_ledger_manager(manager: LedgerManager) -> None:
    """Close the manager's bookie connections (the metadata store stays the caller's)."""
    await manager.close()
