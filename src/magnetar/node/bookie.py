"""The bookie node: protocol server, registration and assembly over capabilities.

``start_bookie_node(config, disk=..., kv=..., store=..., clock=..., network=..., rng=...)`` builds one
bookie from the capabilities it is given (``base.io``: a ``Disk`` for the data directory, a
``KeyValueStore`` for the index, a ``Network``, a ``Clock``, an ``Rng``, a ``MetadataStore``) and
starts it in the running loop: it checks the cookie against the metadata store, replays the
journal, listens, and registers the bookie in the metadata store:

* ``/ledgers/available/<host:port>``           ephemeral, JSON ``{"address", "read_only": false}``
* ``/ledgers/available/readonly/<host:port>``  ephemeral, instead of the above while read-only
* ``/ledgers/cookies/<host:port>``             persistent, the instance cookie (see ``storage.cookie``)

(the BookKeeper layout; readers of ``/ledgers/available`` skip the child named ``readonly``).
Garbage collection asks the same store which ledgers still have metadata (the ledger layer's
``/ledgers/L<id>`` nodes, read through ``ledger.metadata_ops``): the core itself never imports
the ledger layer and only sees a ``LiveLedgers`` callable. ``runtime.bookie`` gives it a
``LocalDisk`` and RocksDB (the ``magnetar bookie`` process, standalone); ``sim`` gives it a
``SimDisk`` and a ``SimKeyValueStore`` (the whole-stack simulation): the same node in both worlds.

``BookieServer`` serves connections: each read chunk is decoded (``FrameDecoder``) and every
request dispatched without waiting for the previous one (pipelining); the adds of one read go to
the storage core in one call, a run per stretch of one ledger's adds (``Bookie.add_entries_runs``,
as the standalone's local transport hands them over), and each add's reply is written by the
journal's callback after its fsync. A malformed or oversized frame closes that connection
only, and so does a partial frame left idle for ``BOOKIE_PARTIAL_FRAME_IDLE_MS`` (one sweeper
task on the injected clock checks every connection). WRITE_LAC is answered after its journal
fsync. Replies produced in one event-loop pass are written with one socket write. Backpressure:
a connection stops reading while the bookie's journal queue or write cache is full, or while it
has ``BOOKIE_CONNECTION_INFLIGHT_COUNT_MAX`` requests in progress.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from functools import partial
from itertools import groupby
from typing import Any

from magnetar.base.clock import Clock
from magnetar.base.errors import CorruptDataError, LimitExceededError, MagnetarError
from magnetar.base.io import Bytes, Connection, Disk, KeyValueStore, Listener, Network
from magnetar.base.limits import (
    BOOKIE_CONNECTION_INFLIGHT_COUNT_MAX,
    BOOKIE_CONNECTIONS_COUNT_MAX,
    BOOKIE_PARTIAL_FRAME_IDLE_MS,
    BOOKIE_READ_CHUNK_BYTES,
)
from magnetar.base.rng import Rng
from magnetar.ledger.metadata_adapter import MetadataStoreAdapter
from magnetar.ledger.metadata_ops import LedgerMetadataStore
from magnetar.ledger.racks import BookieRack, rack_with_region, set_rack
from magnetar.metadata.api import MetadataStore
from magnetar.protocol.bookie import (
    AddRequest,
    AddResponse,
    FrameDecoder,
    GetInfoRequest,
    GetInfoResponse,
    Op,
    ReadLacRequest,
    ReadLacResponse,
    ReadLastEntryRequest,
    ReadRequest,
    Status,
    WriteLacRequest,
    WriteLacResponse,
    encode,
    encode_parts,
)
from magnetar.protocol.bookie.codec import Message, ServedReadResponse
from magnetar.storage import Bookie, BookieConfig, BookieStatus, verify_or_create_cookie
from magnetar.storage.bookie import AddRun, ReadResult
from magnetar.storage.garbage import LiveLedgers

#: What the server sends: any response, a read answer with its stored entry as the storage core gave it.
Reply = Message | ServedReadResponse

log = logging.getLogger(__name__)

AVAILABLE_PATH = "/ledgers/available"
READONLY_PATH = "/ledgers/available/readonly"
COOKIES_PATH = "/ledgers/cookies"
REGISTRATION_CHECK_INTERVAL_S = 1.0


class _ConnectionState:
    """Per connection: requests in progress, replies waiting to be written together, and when
    bytes last arrived (for the idle partial-frame limit).

    Replies produced in one event-loop pass (every add of a journal group completes at once, a
    window of pipelined reads is answered at once) go out in one socket write at the end of the
    pass instead of one write per reply. Over TCP that write is a ``writelines`` of the replies'
    parts (``encode_parts``): a READ answer's entry is handed to the socket as the bytes the
    bookie read, never copied into a joined frame or a joined pass (two copies of every byte
    served, and an allocation of the whole pass's size, before); other connections get the
    parts joined.
    """

    __slots__ = ("connection", "decoder", "inflight", "last_read_ns", "out", "out_scheduled", "reading", "room",
                 "writelines")

    def __init__(self, connection: Connection, now_ns: int) -> None:
        self.connection = connection
        self.decoder = FrameDecoder()
        self.inflight = 0
        self.room = asyncio.Event()
        self.room.set()
        self.out: list[Bytes] = []
        self.out_scheduled = False
        self.last_read_ns = now_ns
        self.reading = False
        self.writelines: Callable[[list[Bytes]], None] | None = getattr(connection, "writelines", None)

    def send(self, data: bytes) -> None:
        self.out.append(data)
        self._schedule()

    def send_parts(self, parts: tuple[Bytes, ...]) -> None:
        """Queue one reply given as ``encode_parts`` buffers."""
        self.out.extend(parts)
        self._schedule()

    def _schedule(self) -> None:
        if not self.out_scheduled:
            self.out_scheduled = True
            asyncio.get_running_loop().call_soon(self.flush)

    def flush(self) -> None:
        self.out_scheduled = False
        out, self.out = self.out, []
        if not out or self.connection.is_closing():
            return
        if len(out) == 1:
            self.connection.write(out[0])
        elif self.writelines is not None:
            self.writelines(out)
        else:
            self.connection.write(b"".join(out))


def _entry_id_of(message: ReadRequest | ReadLastEntryRequest) -> int | None:
    return message.entry_id if isinstance(message, ReadRequest) else None


def _read_response(message: ReadRequest | ReadLastEntryRequest, result: ReadResult) -> ServedReadResponse:
    """The answer with the stored entry as the storage core gave it (``bytes``, or a view of a
    mapped entry log): written to the socket without a parse or a copy."""
    op = Op.READ if isinstance(message, ReadRequest) else Op.READ_LAST_ENTRY
    return ServedReadResponse(message.request_id, result.status, message.ledger_id, result.entry_id,
                              result.known_lac, result.raw, op)


def _failed_read(message: ReadRequest | ReadLastEntryRequest, error: MagnetarError) -> ServedReadResponse:
    log.error("read of ledger %d failed: %s", message.ledger_id, error)
    return _read_response(message, ReadResult(Status.UNAVAILABLE, -1, -1))


class BookieServer:
    """Serves the bookie protocol for one ``Bookie`` on one listener."""

    def __init__(
        self,
        bookie: Bookie,
        network: Network,
        *,
        clock: Clock | None = None,
        partial_frame_idle_ms: int = BOOKIE_PARTIAL_FRAME_IDLE_MS,
    ) -> None:
        """``partial_frame_idle_ms`` (0 disables it): close a connection that holds part of a
        frame and sent nothing for that long, measured by ``clock`` (default: the bookie's)."""
        self.bookie = bookie
        self._network = network
        self._clock = clock or bookie.clock
        self._partial_frame_idle_ms = partial_frame_idle_ms
        self._listener: Listener | None = None
        self._connections: dict[Connection, _ConnectionState] = {}
        self._tasks: dict[asyncio.Task[None], None] = {}  # insertion-ordered: stopped in creation order
        self._sweeper: asyncio.Task[None] | None = None
        self.idle_partial_closed_count = 0

    async def start(self, host: str, port: int) -> int:
        self._listener = await self._network.listen(host, port, self._serve)
        if self._partial_frame_idle_ms > 0:
            self._sweeper = asyncio.get_running_loop().create_task(self._sweep_idle(), name="bookie-idle-sweeper")
        return self._listener.port

    async def _sweep_idle(self) -> None:
        # One timer for all connections (not one per read): every quarter of the limit, close the
        # connections that hold a partial frame and sent nothing for the whole limit.
        limit_ns = self._partial_frame_idle_ms * 1_000_000
        while True:
            await self._clock.sleep(self._partial_frame_idle_ms / 4000)
            now = self._clock.monotonic_ns()
            for connection, state in list(self._connections.items()):
                if state.reading and state.decoder.buffered_bytes and now - state.last_read_ns >= limit_ns:
                    log.warning("closing %s: a partial frame idle for BOOKIE_PARTIAL_FRAME_IDLE_MS", connection.peer)
                    self.idle_partial_closed_count += 1
                    connection.close()

    async def _serve(self, connection: Connection) -> None:
        if len(self._connections) >= BOOKIE_CONNECTIONS_COUNT_MAX:
            log.warning("refusing %s: BOOKIE_CONNECTIONS_COUNT_MAX reached", connection.peer)
            return
        state = _ConnectionState(connection, self._clock.monotonic_ns())
        decoder = state.decoder
        self._connections[connection] = state
        try:
            while True:
                if self.bookie.needs_backpressure():
                    await self.bookie.wait_for_room()
                if not state.room.is_set():
                    await state.room.wait()
                # Idle time counts only while waiting for the peer (not while backpressure
                # keeps this loop from reading).
                state.last_read_ns = self._clock.monotonic_ns()
                state.reading = True
                data = await connection.read(BOOKIE_READ_CHUNK_BYTES)
                state.reading = False
                if not data:
                    return
                try:
                    messages = decoder.feed(data)
                except (CorruptDataError, LimitExceededError) as exc:
                    log.warning("closing %s: %s", connection.peer, exc)
                    return
                adds: list[AddRequest] = []  # this read's adds since its last other request
                for message in messages:
                    if isinstance(message, AddRequest):
                        self._begin(state)
                        adds.append(message)
                        continue
                    if adds:  # the adds before it are handed over first: requests stay in order
                        self._add_runs(state, adds)
                        adds = []
                    if not self._dispatch(connection, state, message):
                        log.warning("closing %s: it sent a %s", connection.peer, type(message).__name__)
                        return
                if adds:
                    self._add_runs(state, adds)
        finally:
            self._connections.pop(connection, None)
            connection.close()

    def _reply(self, connection: Connection, state: _ConnectionState) -> Callable[[Reply], None]:
        def send(message: Reply) -> None:
            state.inflight -= 1
            if state.inflight < BOOKIE_CONNECTION_INFLIGHT_COUNT_MAX:
                state.room.set()
            state.send_parts(encode_parts(message))

        return send

    def _begin(self, state: _ConnectionState) -> None:
        state.inflight += 1
        if state.inflight >= BOOKIE_CONNECTION_INFLIGHT_COUNT_MAX:
            state.room.clear()

    def _add_runs(self, state: _ConnectionState, adds: list[AddRequest]) -> None:
        """The adds of one read (``_begin`` counted each) to the bookie in one call
        (``Bookie.add_entries_runs``, as the standalone's local transport hands them over): a run
        per stretch of adds of one ledger with one master key and recovery flag, so each ledger
        keeps its own journal reply lane and its replies come in order. Each add is answered
        with its own ADD response, once its status is known (OK after the journal's fsync)."""
        runs: list[AddRun] = []
        for (_, master_key, recovery), stretch in groupby(adds, _run_key):
            requests = list(stretch)
            runs.append(([request.entry for request in requests], master_key, recovery,
                         partial(self._added, state, requests)))
        self.bookie.add_entries_runs(runs)

    @staticmethod
    def _added(state: _ConnectionState, requests: list[AddRequest], indexes: Sequence[int], status: Status) -> None:
        for index in indexes:
            request = requests[index]
            entry = request.entry
            state.inflight -= 1
            state.send_parts(encode_parts(AddResponse(request.request_id, status, entry.ledger_id, entry.entry_id)))
        if state.inflight < BOOKIE_CONNECTION_INFLIGHT_COUNT_MAX:
            state.room.set()

    def _dispatch(self, connection: Connection, state: _ConnectionState, message: Message) -> bool:
        bookie = self.bookie
        if isinstance(message, ReadRequest | ReadLastEntryRequest):
            self._begin(state)
            send = self._reply(connection, state)
            if message.fence:
                self._spawn(self._fenced_read(message, send))
            else:
                send(self._read(message))
            return True
        if isinstance(message, ReadLacRequest):
            status, lac = bookie.read_lac(message.ledger_id)
            state.send(encode(ReadLacResponse(message.request_id, status, message.ledger_id, lac)))
            return True
        if isinstance(message, WriteLacRequest):
            self._begin(state)
            self._spawn(self._write_lac(message, self._reply(connection, state)))
            return True
        if isinstance(message, GetInfoRequest):
            info = GetInfoResponse(
                message.request_id, Status.OK, bookie.read_only, bookie.free_bytes(), bookie.ledger_count
            )
            state.send(encode(info))
            return True
        return False  # a response frame sent to a server: the peer is confused

    def _read(self, message: ReadRequest | ReadLastEntryRequest) -> ServedReadResponse:
        try:
            result = self.bookie.read_entry_or_last(message.ledger_id, _entry_id_of(message))
        except MagnetarError as exc:
            return _failed_read(message, exc)
        return _read_response(message, result)

    async def _fenced_read(self, message: ReadRequest | ReadLastEntryRequest, send: Callable[[Reply], None]) -> None:
        try:
            result = await self.bookie.fence_and_read(message.ledger_id, _entry_id_of(message), message.master_key)
        except MagnetarError as exc:
            send(_failed_read(message, exc))
            return
        send(_read_response(message, result))

    async def _write_lac(self, message: WriteLacRequest, send: Callable[[Reply], None]) -> None:
        status, lac = await self.bookie.write_lac(message.ledger_id, message.lac, message.master_key)
        send(WriteLacResponse(message.request_id, status, message.ledger_id, lac))

    def _spawn(self, coroutine: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(coroutine)
        self._tasks[task] = None
        task.add_done_callback(lambda done: self._tasks.pop(done, None))

    async def stop(self) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()
        if self._listener is not None:
            self._listener.close()
        for connection in list(self._connections):
            connection.close()
        for task in list(self._tasks):
            task.cancel()


class MetadataCookieRegistry:
    """``CookieRegistry`` over a ``MetadataStore``: cookies at ``/ledgers/cookies/<bookie id>``."""

    def __init__(self, store: object) -> None:
        self._store = store

    async def get_cookie(self, bookie_id: str) -> bytes | None:
        result = await self._store.get(f"{COOKIES_PATH}/{bookie_id}")  # type: ignore[attr-defined]
        return None if result is None else bytes(result[0])

    async def put_cookie(self, bookie_id: str, cookie: bytes) -> None:
        await self._store.put(f"{COOKIES_PATH}/{bookie_id}", cookie, -1)  # type: ignore[attr-defined]


StoreReopener = Callable[[], Awaitable[MetadataStore]]


class Registration:
    """Keeps the ephemeral registration node in step with the bookie's writable/read-only state.

    The node lives as long as the metadata session. When the session has ended (expired after a
    long pause or a partition) and a ``reopen`` function was given, the next round opens a new
    session and registers again, so a bookie that lost its session becomes visible to writers
    again without a restart; ``on_new_store`` tells the owner of the other users of the store.
    """

    def __init__(self, store: MetadataStore, bookie_id: str, bookie: Bookie, *,
                 reopen: StoreReopener | None = None,
                 on_new_store: Callable[[MetadataStore], None] | None = None) -> None:
        self._store = store
        self._bookie_id = bookie_id
        self._bookie = bookie
        self._registered_path: str | None = None
        self._reopen = reopen
        self._on_new_store = on_new_store

    @property
    def store(self) -> MetadataStore:
        return self._store

    async def renew_session(self) -> bool:
        """Open a new session if the current one has ended; True if it did."""
        if self._reopen is None or self._store.session.alive:
            return False
        old = self._store
        log.warning("bookie %s: metadata session %s, opening a new one", self._bookie_id, old.session.state.value)
        self._store = await self._reopen()
        self._registered_path = None
        if self._on_new_store is not None:
            self._on_new_store(self._store)
        try:
            await old.close()
        except MagnetarError:
            pass
        return True

    def _desired_path(self) -> str:
        base = READONLY_PATH if self._bookie.read_only else AVAILABLE_PATH
        return f"{base}/{self._bookie_id}"

    async def sync(self) -> None:
        desired = self._desired_path()
        if desired == self._registered_path:
            return
        store = self._store
        if self._registered_path is not None:
            try:
                await store.delete(self._registered_path)
            except MagnetarError:
                pass
        value = json.dumps({"address": self._bookie_id, "read_only": self._bookie.read_only}).encode()
        try:
            await store.create(desired, value, ephemeral=True)
        except MagnetarError:
            # A previous session's node may linger until its session expires: replace it.
            await store.delete(desired)
            await store.create(desired, value, ephemeral=True)
        self._registered_path = desired

    async def run(self) -> None:
        while self._bookie.status in (BookieStatus.WRITABLE, BookieStatus.READ_ONLY):
            try:
                await self.renew_session()
                await self.sync()
            except MagnetarError as exc:
                log.warning("bookie registration failed, will retry: %s", exc)
            await self._bookie.clock.sleep(REGISTRATION_CHECK_INTERVAL_S)


class RunningBookie:
    """A bookie serving in this event loop: storage core, server and registration.

    ``start_bookie`` builds one; ``stop()`` stops it. Several can share one process and one
    metadata store (``magnetar standalone --bookies 3``); the store is the caller's to close.
    """

    def __init__(
        self, bookie: Bookie, server: BookieServer, kv: KeyValueStore, bookie_id: str,
        registration_task: asyncio.Task[None], registration: Registration,
    ) -> None:
        self.bookie = bookie
        self.server = server
        self.bookie_id = bookie_id
        self._kv = kv
        self._registration_task = registration_task
        self._registration = registration

    @property
    def metadata_store(self) -> MetadataStore:
        """The store the bookie registers in now (a new one after its first session ended)."""
        return self._registration.store

    @property
    def port(self) -> int:
        return int(self.bookie_id.rsplit(":", 1)[1])

    async def stop(self) -> None:
        self._registration_task.cancel()
        await self.server.stop()
        await self.bookie.stop()
        self._kv.close()


def metadata_live_ledgers(store: MetadataStore | Callable[[], MetadataStore]) -> LiveLedgers:
    """The GC's source of truth: ids of ledgers whose metadata exists (the ledger layer's layout,
    ``ledger.metadata_ops``). It raises (and the GC round is skipped) if the store cannot answer
    or holds more than ``LEDGER_LIST_COUNT_MAX`` ledgers. ``store`` may be a function returning
    the current store (a bookie that renews its session asks it every round). One
    ``LedgerMetadataStore`` per store serves every round (it parses only the names new since the
    last listing: ``list_ids``), a new one only when the session's store changed."""
    current = store if callable(store) else (lambda: store)
    reader: list[tuple[MetadataStore, LedgerMetadataStore]] = []  # the store asked last, its ledger view

    async def live() -> list[int]:
        now = current()
        if not reader or reader[0][0] is not now:
            reader[:] = [(now, LedgerMetadataStore(MetadataStoreAdapter(now)))]
        return await reader[0][1].list_ids()

    return live


async def start_bookie_node(
    config: BookieConfig,
    *,
    disk: Disk,
    kv: KeyValueStore,
    store: MetadataStore,
    clock: Clock,
    network: Network,
    rng: Rng,
    live_ledgers: LiveLedgers | None = None,
    reopen_store: StoreReopener | None = None,
    bookie_class: type[Bookie] = Bookie,
) -> RunningBookie:
    """Check the cookie, replay the journal, listen and register, on the capabilities given.

    ``disk`` is the bookie's data directory, ``kv`` its index; ``stop()`` closes ``kv``.
    Garbage collection (every ``config.gc_interval_ms``; 0 disables it) deletes the ledgers
    ``live_ledgers`` does not list; by default that is the ledger metadata in the current store.
    With ``reopen_store``, a session that ends is replaced by a new one and the bookie registers
    again (the bookie process and the simulation do this; standalone's embedded store never
    expires). ``bookie_class`` is the storage core (a negative control's subclass in the simulator).
    """
    holder = [store]
    bookie = bookie_class(disk, kv, clock, config,
                          live_ledgers=live_ledgers or metadata_live_ledgers(lambda: holder[0]))
    server = BookieServer(bookie, network)
    try:
        has_data = bookie.has_data()
        # The port may be 0 (tests): the identity is known only once bound, so the cookie is
        # checked after listening; until the bookie started, every request answers UNAVAILABLE.
        port = await server.start(config.host, config.port)
        bookie_id = f"{config.host}:{port}"
        await verify_or_create_cookie(disk, MetadataCookieRegistry(store), bookie_id, rng, has_data=has_data)
        await bookie.start()
        registration = Registration(store, bookie_id, bookie, reopen=reopen_store,
                                    on_new_store=lambda new: holder.__setitem__(0, new))
        await registration.sync()
        if config.rack or config.region:
            await set_rack(store, bookie_id, BookieRack(rack_with_region(config.rack, config.region), config.host))
    except BaseException:
        await server.stop()
        await bookie.stop()
        kv.close()
        raise
    task = asyncio.get_running_loop().create_task(registration.run(), name=f"bookie-registration-{bookie_id}")
    return RunningBookie(bookie, server, kv, bookie_id, task, registration)


def _run_key(add: AddRequest) -> tuple[int, bytes, bool]:
    """What one run of adds shares: its ledger, master key and recovery flag."""
    return add.entry.ledger_id, add.master_key, add.recovery
