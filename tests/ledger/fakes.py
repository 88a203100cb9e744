"""In-memory fakes for unit tests of the ledger client: a manual clock, fake bookies with a
model of durable vs. unsynced state, and a transport whose requests tests can hold, fail or drop.

``FakeBookie`` keeps the storage contract a real bookie keeps: an add is acknowledged only once
durable, a fence is durable before the fencing read is answered, and ``crash()`` loses only
what was never synced. The switches ``ack_before_sync`` and ``fence_not_durable`` break that
contract on purpose (negative controls).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial

from magnetar.base.errors import FencedError
from magnetar.base.rng import SeededRng
from magnetar.base.types import NO_ENTRY, BookieId
from magnetar.ledger.config import LedgerClientConfig
from magnetar.ledger.errors import BookieUnavailableError, NoSuchEntryError
from magnetar.ledger.handle import LedgerHandle
from magnetar.ledger.manager import LedgerManager
from magnetar.ledger.metadata_ops import LedgerMetadataStore, Versioned
from magnetar.ledger.placement import RandomPlacement, StaticBookieDirectory
from magnetar.ledger.transport import LastEntryReply
from magnetar.protocol.bookie.codec import EncodedEntry
from tests.manual_clock import ManualClock


class MemoryVersionedStore:
    def __init__(self) -> None:
        self.nodes: dict[str, tuple[bytes, int]] = {}

    async def get(self, path: str) -> Versioned | None:
        found = self.nodes.get(path)
        return None if found is None else Versioned(*found)

    async def create(self, path: str, value: bytes) -> int:
        from magnetar.base.errors import AlreadyExistsError

        if path in self.nodes:
            raise AlreadyExistsError(path)
        self.nodes[path] = (value, 0)
        return 0

    async def put(self, path: str, value: bytes, expected_version: int) -> int:
        from magnetar.base.errors import BadVersionError

        found = self.nodes.get(path)
        if found is None or found[1] != expected_version:
            raise BadVersionError(path)
        self.nodes[path] = (value, expected_version + 1)
        return expected_version + 1

    async def delete(self, path: str, expected_version: int) -> None:
        from magnetar.base.errors import BadVersionError, NotFoundError

        found = self.nodes.get(path)
        if found is None:
            raise NotFoundError(path)
        if found[1] != expected_version:
            raise BadVersionError(path)
        del self.nodes[path]

    async def children(self, path: str) -> list[str]:
        prefix = path.rstrip("/") + "/"
        return sorted({p[len(prefix):].split("/")[0] for p in self.nodes if p.startswith(prefix)})


@dataclass
class FakeBookie:
    bookie_id: BookieId
    alive: bool = True
    ack_before_sync: bool = False  # negative control: ack while the entry is only in page cache
    fence_not_durable: bool = False  # negative control: answer a fence before it is durable
    durable: dict[tuple[int, int], EncodedEntry] = field(default_factory=dict)
    unsynced: dict[tuple[int, int], EncodedEntry] = field(default_factory=dict)
    fenced: set[int] = field(default_factory=set)
    fenced_unsynced: set[int] = field(default_factory=set)
    explicit_lac: dict[int, int] = field(default_factory=dict)
    normal_adds_after_fence: list[tuple[int, int]] = field(default_factory=list)

    def crash(self) -> None:
        """Lose everything not synced; stay down until ``restart``."""
        self.alive = False
        self.unsynced.clear()
        self.fenced_unsynced.clear()

    def restart(self) -> None:
        self.alive = True

    def sync(self) -> None:
        self.durable.update(self.unsynced)
        self.unsynced.clear()
        self.fenced |= self.fenced_unsynced
        self.fenced_unsynced.clear()

    def _check(self) -> None:
        if not self.alive:
            raise BookieUnavailableError(f"{self.bookie_id} is down")

    def is_fenced(self, ledger_id: int) -> bool:
        return ledger_id in self.fenced or ledger_id in self.fenced_unsynced

    def _fence(self, ledger_id: int) -> None:
        if self.fence_not_durable:
            self.fenced_unsynced.add(ledger_id)
        else:
            self.fenced.add(ledger_id)

    def has(self, ledger_id: int, entry_id: int) -> EncodedEntry | None:
        key = (ledger_id, entry_id)
        return self.durable.get(key) or self.unsynced.get(key)

    def add(self, entry: EncodedEntry, recovery: bool) -> None:
        self._check()
        if not entry.digest_ok():
            raise BookieUnavailableError("bad digest")
        if self.is_fenced(entry.ledger_id) and not recovery:
            raise FencedError(f"ledger {entry.ledger_id} fenced on {self.bookie_id}")
        key = (entry.ledger_id, entry.entry_id)
        if self.ack_before_sync:
            self.unsynced[key] = entry
        else:
            self.durable[key] = entry

    def read(self, ledger_id: int, entry_id: int, fence: bool) -> EncodedEntry:
        self._check()
        if fence:
            self._fence(ledger_id)
        entry = self.has(ledger_id, entry_id)
        if entry is None:
            raise NoSuchEntryError(f"{ledger_id}:{entry_id} not on {self.bookie_id}")
        return entry

    def read_last(self, ledger_id: int, fence: bool) -> LastEntryReply:
        self._check()
        if fence:
            self._fence(ledger_id)
        ids = [e for (lid, e) in (*self.durable, *self.unsynced) if lid == ledger_id]
        if not ids:
            return LastEntryReply(NO_ENTRY, self.explicit_lac.get(ledger_id, NO_ENTRY))
        last = max(ids)
        entry = self.has(ledger_id, last)
        assert entry is not None
        return LastEntryReply(last, max(entry.lac, self.explicit_lac.get(ledger_id, NO_ENTRY)))


@dataclass
class Rule:
    """Hold or drop requests matching (bookie, op, entry id); ``release()`` lets held ones go."""

    bookie: BookieId
    op: str  # "add", "recovery_add", "read", "read_last", "write_lac"
    entry_id: int | None = None
    action: str = "hold_before"  # hold_before | hold_reply | fail | drop_fence
    event: asyncio.Event = field(default_factory=asyncio.Event)
    hits: int = 0

    def matches(self, bookie: BookieId, op: str, entry_id: int | None) -> bool:
        return self.bookie == bookie and self.op == op and (self.entry_id is None or self.entry_id == entry_id)

    def release(self) -> None:
        self.event.set()


def _reply(on_reply: Callable[[int, BaseException | None], None], index: int, sent: asyncio.Future[None]) -> None:
    on_reply(index, BookieUnavailableError("add cancelled") if sent.cancelled() else sent.exception())


class FakeTransport:
    def __init__(self, bookies: dict[BookieId, FakeBookie]) -> None:
        self.bookies = bookies
        self.rules: list[Rule] = []
        self.log: list[tuple[str, BookieId, int | None]] = []
        self.runs: list[tuple[BookieId, list[int]]] = []  # each ``add_run``: its bookie and entry ids

    def rule(self, bookie: BookieId, op: str, entry_id: int | None = None, action: str = "hold_before") -> Rule:
        rule = Rule(bookie, op, entry_id, action)
        self.rules.append(rule)
        return rule

    async def _run(self, bookie: BookieId, op: str, entry_id: int | None, call):  # type: ignore[no-untyped-def]
        self.log.append((op, bookie, entry_id))
        await asyncio.sleep(0)
        rule = next((r for r in self.rules if r.matches(bookie, op, entry_id) and not r.event.is_set()), None)
        if rule is not None:
            rule.hits += 1
            if rule.action == "fail":
                raise BookieUnavailableError(f"injected failure of {op} on {bookie}")
            if rule.action == "drop_fence":
                raise BookieUnavailableError(f"{op} to {bookie} lost")
            if rule.action == "hold_before":
                await rule.event.wait()
        fake = self.bookies.get(bookie)
        if fake is None:
            raise BookieUnavailableError(f"unknown bookie {bookie}")
        result = call(fake)
        if rule is not None and rule.action == "hold_reply":
            await rule.event.wait()
        await asyncio.sleep(0)
        return result

    def add(self, bookie: BookieId, entry: EncodedEntry, recovery: bool, master_key: bytes) -> asyncio.Future[None]:
        """A future, as the real transports give (the writer chains a callback on it)."""
        return asyncio.ensure_future(self._add(bookie, entry, recovery=recovery))

    def add_run(self, bookie: BookieId, entries: Sequence[EncodedEntry], recovery: bool, master_key: bytes,
                on_reply: Callable[[int, BaseException | None], None]) -> None:
        """Each entry as an ``add`` of its own (its rules apply), answered through ``on_reply``."""
        self.runs.append((bookie, [entry.entry_id for entry in entries]))
        for index, entry in enumerate(entries):
            sent = asyncio.ensure_future(self.add(bookie, entry, recovery=recovery, master_key=master_key))
            sent.add_done_callback(partial(_reply, on_reply, index))

    async def _add(self, bookie: BookieId, entry: EncodedEntry, *, recovery: bool) -> None:
        def call(fake: FakeBookie) -> None:
            was_fenced = fake.is_fenced(entry.ledger_id)
            fake.add(entry, recovery)
            if was_fenced and not recovery:
                fake.normal_adds_after_fence.append((entry.ledger_id, entry.entry_id))

        await self._run(bookie, "recovery_add" if recovery else "add", entry.entry_id, call)

    async def read(self, bookie: BookieId, ledger_id: int, entry_id: int, *, fence: bool, master_key: bytes) -> EncodedEntry:
        return await self._run(bookie, "read", entry_id, lambda f: f.read(ledger_id, entry_id, fence))

    async def read_last_entry(self, bookie: BookieId, ledger_id: int, *, fence: bool, master_key: bytes) -> LastEntryReply:
        return await self._run(bookie, "read_last", None, lambda f: f.read_last(ledger_id, fence))

    async def write_lac(self, bookie: BookieId, ledger_id: int, lac: int, *, master_key: bytes) -> None:
        def call(fake: FakeBookie) -> None:
            fake._check()
            fake.explicit_lac[ledger_id] = max(lac, fake.explicit_lac.get(ledger_id, NO_ENTRY))

        await self._run(bookie, "write_lac", None, call)


@dataclass
class Cluster:
    clock: ManualClock
    store: LedgerMetadataStore
    bookies: dict[BookieId, FakeBookie]
    transport: FakeTransport
    directory: StaticBookieDirectory
    config: LedgerClientConfig

    def manager(self, seed: int = 1) -> LedgerManager:
        return LedgerManager(
            store=self.store,
            transport=self.transport,
            directory=self.directory,
            placement=RandomPlacement(SeededRng(seed)),
            clock=self.clock,
            config=self.config,
        )

    def bookie(self, bookie_id: BookieId) -> FakeBookie:
        return self.bookies[bookie_id]


def make_cluster(bookie_count: int, config: LedgerClientConfig | None = None) -> Cluster:
    ids = [BookieId("127.0.0.1", 3181 + i) for i in range(bookie_count)]
    bookies = {b: FakeBookie(b) for b in ids}
    clock = ManualClock()
    return Cluster(
        clock=clock,
        store=LedgerMetadataStore(MemoryVersionedStore()),
        bookies=bookies,
        transport=FakeTransport(bookies),
        directory=StaticBookieDirectory(ids),
        config=config or LedgerClientConfig(speculative_read_timeout_ms=100),
    )


class HeldTransport:
    """Adds are stored nowhere: a test answers each bookie's runs itself (``runs``, ``take``)."""

    def __init__(self) -> None:
        self.runs: list[tuple[BookieId, list[int], Callable[[int, BaseException | None], None]]] = []

    def add_run(self, bookie: BookieId, entries: Sequence[EncodedEntry], recovery: bool, master_key: bytes,
                on_reply: Callable[[int, BaseException | None], None]) -> None:
        self.runs.append((bookie, [entry.entry_id for entry in entries], on_reply))

    def take(self) -> list[Callable[[int, BaseException | None], None]]:
        """The answers of the runs asked since the last ``take``."""
        runs, self.runs = self.runs, []
        return [on_reply for _, _, on_reply in runs]


async def held_writers(transport: HeldTransport, count: int) -> list[LedgerHandle]:
    """``count`` (3,3,2) ledgers over three bookies whose adds ``transport`` holds (no add timeout)."""
    cluster = make_cluster(3)
    manager = LedgerManager(store=cluster.store, transport=transport,  # type: ignore[arg-type]
                            directory=cluster.directory, placement=RandomPlacement(SeededRng(1)),
                            clock=cluster.clock, config=LedgerClientConfig(add_timeout_ms=0))
    return [await manager.create_ledger(3, 3, 2) for _ in range(count)]
