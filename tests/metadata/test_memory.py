"""Memory store specifics: session expiry driven by the injected clock (as the simulator does);
a large parent's children kept in order once listed, and the ledger list built from them."""

from __future__ import annotations

import asyncio

from magnetar.ledger.metadata_adapter import MetadataStoreAdapter
from magnetar.ledger.metadata_ops import DEFAULT_ROOT, LedgerMetadataStore
from magnetar.metadata import MemoryMetadataServer, SessionState
from magnetar.metadata._local import _SORTED_CHILDREN_COUNT_MIN
from magnetar.metadata.api import WatchEvent
from tests.manual_clock import ManualClock
from tests.metadata.conftest import run


def test_suspended_session_expires_after_its_timeout_on_the_injected_clock() -> None:
    async def body() -> None:
        clock = ManualClock()
        server = MemoryMetadataServer(clock)
        owner, observer = await server.connect(session_timeout_ms=5_000), await server.connect()
        states: list[SessionState] = []
        owner.session.add_listener(states.append)
        await owner.create("/e", b"", ephemeral=True)

        server.suspend_session(owner.session.session_id)
        await clock.advance(4_999 / 1000)
        assert owner.session.state is SessionState.SUSPENDED and await observer.exists("/e")
        server.resume_session(owner.session.session_id)
        await clock.advance(10_000 / 1000)
        assert owner.session.state is SessionState.CONNECTED and await observer.exists("/e")

        server.suspend_session(owner.session.session_id)
        await clock.advance(5_000 / 1000)
        assert owner.session.state is SessionState.EXPIRED
        assert not await observer.exists("/e")
        assert states == [SessionState.SUSPENDED, SessionState.CONNECTED, SessionState.SUSPENDED, SessionState.EXPIRED]

    run(body)


def test_node_times_come_from_the_injected_clock() -> None:
    async def body() -> None:
        clock = ManualClock()
        server = MemoryMetadataServer(clock)
        store = await server.connect()
        await store.put("/t", b"", -1)
        await clock.advance(1_500 / 1000)
        await store.put("/t", b"x", 0)
        node = server.node("/t")
        assert node is not None and node.mtime_ms - node.ctime_ms == 1_500

    run(body)


def test_a_large_parents_children_stay_in_order_after_it_was_listed() -> None:
    """``children`` keeps a large parent's names in order once listed (a bookie's GC round lists
    every ledger each minute): creates and deletes after that keep the kept order exact.
    Negative control: an ``_add_kid`` that does not insert into the kept order (or a
    ``_drop_kid`` that does not remove from it) fails the comparison after the first change."""
    async def body() -> None:
        server = MemoryMetadataServer(ManualClock())
        store = await server.connect()
        count = _SORTED_CHILDREN_COUNT_MIN + 8
        names = {f"n{i:05d}" for i in range(0, 2 * count, 2)}  # even numbers: room between them
        for name in sorted(names, reverse=True):
            await store.create(f"/p/{name}", b"")
        assert await store.children("/p") == sorted(names)
        for name in ("n00003", "a", "z", f"n{2 * count + 1:05d}"):  # middle, both ends, past the end
            await store.create(f"/p/{name}", b"")
            names.add(name)
            assert await store.children("/p") == sorted(names)
        for name in ("n00000", "z", "n00003", f"n{2 * count - 2:05d}"):
            await store.delete(f"/p/{name}")
            names.discard(name)
            assert await store.children("/p") == sorted(names)
        await store.create("/p/n00000", b"")  # deleted and created again
        names.add("n00000")
        listed = await store.children("/p")
        assert listed == sorted(names)
        listed.clear()  # a caller's list is its own copy
        assert await store.children("/p") == sorted(names)

    run(body)


def test_ledger_ids_are_listed_in_order_and_foreign_names_skipped() -> None:
    """``LedgerMetadataStore.list_ids``: every ledger node's id, ascending; names that are not a
    ledger's (another prefix, no digits, a suffix) are not ids."""
    async def body() -> None:
        server = MemoryMetadataServer(ManualClock())
        store = await server.connect()
        ledgers = LedgerMetadataStore(MetadataStoreAdapter(store))
        ids = [7, 0, 10**12, 42, 3]
        for ledger_id in ids:
            await store.create(ledgers.path(ledger_id), b"")
        for foreign in ("idgen", "L", "Lx1", "L12x", "M0000000000000000005", "L٣"):
            await store.create(f"{DEFAULT_ROOT}/{foreign}", b"")
        assert await ledgers.list_ids() == sorted(ids)

    run(body)


class _OwnListStore:
    """A ``VersionedStore`` slice whose ``children`` hands out its own list (and changes it
    later): a store may, so ``list_ids`` must not keep the caller's list as its record."""

    def __init__(self, names: list[str]) -> None:
        self.names = names

    async def children(self, path: str) -> list[str]:
        return self.names


def test_ledger_ids_listed_again_follow_creates_and_deletes() -> None:
    """``list_ids`` parses only the names new since its last listing when the listing starts
    with the last one's names; every other change is parsed whole. Each listing equals a fresh
    store's. Negative controls (run while writing it): keeping the store's own list as the
    record (no copy) misses the ledger created after the first listing (``[1, 2]`` instead of
    ``[1, 2, 5]``); reusing the last ids whenever the prefix matches by length alone lists the
    deleted ledger 1 after ``L...2`` took its place."""
    async def body() -> None:
        server = MemoryMetadataServer(ManualClock())
        store = await server.connect()
        ledgers = LedgerMetadataStore(MetadataStoreAdapter(store))

        async def expect(ids: list[int]) -> None:
            assert await ledgers.list_ids() == ids
            assert await LedgerMetadataStore(MetadataStoreAdapter(store)).list_ids() == ids

        for ledger_id in (1, 2, 4):
            await store.create(ledgers.path(ledger_id), b"")
        await expect([1, 2, 4])
        await expect([1, 2, 4])  # unchanged: nothing parsed again
        await store.create(ledgers.path(9), b"")
        await store.create(f"{DEFAULT_ROOT}/idgen", b"")  # a foreign name after the known ones
        await expect([1, 2, 4, 9])
        await store.delete(ledgers.path(2))  # in the middle: parsed whole
        await expect([1, 4, 9])
        await store.create(ledgers.path(2), b"")
        await store.delete(ledgers.path(1))
        await expect([2, 4, 9])

        own = _OwnListStore([LedgerMetadataStore(_OwnListStore([])).path(i)[len(DEFAULT_ROOT) + 1:] for i in (1, 2)])
        mutable = LedgerMetadataStore(own)
        assert await mutable.list_ids() == [1, 2]
        own.names.append(mutable.path(5)[len(DEFAULT_ROOT) + 1:])  # the store's own list changes
        assert await mutable.list_ids() == [1, 2, 5]

    run(body)


def test_a_watch_keeps_its_state_in_slots() -> None:
    """One watch per watched node (the broker watches each topic's policies: 100,000 of them at
    100,000 topics): no instance dict each, and it still delivers and cancels. Negative control
    (shown): without ``__slots__ = ()`` on ``Watch`` (or on ``_LocalWatch``) the watch has a
    ``__dict__``."""
    async def body() -> None:
        server = MemoryMetadataServer(ManualClock())
        client = await server.connect()
        seen: list[str] = []
        delivered: asyncio.Future[None] = asyncio.get_running_loop().create_future()

        def changed(event: WatchEvent) -> None:
            seen.append(event.path)
            if not delivered.done():
                delivered.set_result(None)

        watch = await client.watch("/w", changed)
        assert not hasattr(watch, "__dict__")
        await client.create("/w", b"")
        await asyncio.wait_for(delivered, 10)  # bounded: the event is delivered by the next loop pass
        assert seen == ["/w"]
        watch.cancel()
        await client.create("/w/x", b"")
        await client.delete("/w/x")
        assert seen == ["/w"] and not watch.active  # type: ignore[attr-defined]

    run(body)
