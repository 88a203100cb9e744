"""One conformance suite, run against the memory, embedded and ZooKeeper stores.

The ZooKeeper run talks to a real server (started by the session fixture). Each test states one
contract of ``magnetar.metadata.api``; the same assertions hold for every store.
"""

from __future__ import annotations

import asyncio

import pytest

from magnetar.base.errors import (
    AlreadyExistsError,
    BadVersionError,
    InvalidArgumentError,
    LimitExceededError,
    NotFoundError,
)
from magnetar.base.limits import METADATA_PATH_BYTES_MAX, METADATA_VALUE_BYTES_MAX
from magnetar.metadata import (
    EventKind,
    GetResult,
    LockState,
    MetadataLock,
    NoChildrenForEphemeralsError,
    NodeExistsError,
    NodeNotEmptyError,
    NoNodeError,
    SessionClosedError,
    SessionExpiredError,
    SessionState,
    WatchEvent,
)
from tests.metadata.conftest import Backend, Recorder, with_backend


def test_create_get_and_compare_and_set(backend: Backend) -> None:
    async def body() -> None:
        store = await backend.client()
        assert await store.get("/k") is None
        assert await store.put("/k", b"v0", -1) == 0
        assert await store.get("/k") == GetResult(b"v0", 0)
        assert await store.put("/k", b"v1", 0) == 1
        with pytest.raises(BadVersionError):
            await store.put("/k", b"stale", 0)
        with pytest.raises(NodeExistsError) as exists:
            await store.put("/k", b"again", -1)
        assert isinstance(exists.value, AlreadyExistsError) and isinstance(exists.value, BadVersionError)
        with pytest.raises(NoNodeError) as missing:
            await store.put("/absent", b"x", 3)
        assert isinstance(missing.value, NotFoundError) and isinstance(missing.value, BadVersionError)
        assert await store.get("/k") == GetResult(b"v1", 1)
        assert await store.exists("/k") and not await store.exists("/absent")

    with_backend(backend, body)


def test_delete_checks_version_and_children(backend: Backend) -> None:
    async def body() -> None:
        store = await backend.client()
        await store.put("/d", b"", -1)
        await store.put("/d/c", b"", -1)
        with pytest.raises(NodeNotEmptyError):
            await store.delete("/d")
        with pytest.raises(BadVersionError):
            await store.delete("/d/c", 5)
        await store.delete("/d/c", 0)
        await store.delete("/d")
        with pytest.raises(NoNodeError):
            await store.delete("/d")

    with_backend(backend, body)


def test_parents_are_created_implicitly_and_stay(backend: Backend) -> None:
    async def body() -> None:
        store = await backend.client()
        await store.put("/a/b/c", b"leaf", -1)
        assert await store.get("/a") == GetResult(b"", 0)
        assert await store.get("/a/b") == GetResult(b"", 0)
        assert await store.children("/a") == ["b"]
        await store.delete("/a/b/c")
        assert await store.exists("/a/b")
        assert await store.children("/a/b") == []
        assert await store.children("/nothing/here") == []
        for name in ("z", "m", "b2"):
            await store.put(f"/sorted/{name}", b"", -1)
        assert await store.children("/sorted") == ["b2", "m", "z"]

    with_backend(backend, body)


def test_cas_race_between_two_clients_loses_no_update(backend: Backend) -> None:
    increments_per_client = 25

    async def body() -> None:
        first, second = await backend.client(), await backend.client()
        await first.put("/counter", b"0", -1)
        winners: list[int] = []
        conflicts = 0

        async def increment(store) -> None:  # type: ignore[no-untyped-def]
            nonlocal conflicts
            done = 0
            while done < increments_per_client:
                current = await store.get("/counter")
                assert current is not None
                try:
                    version = await store.put("/counter", str(int(current.value) + 1).encode(), current.version)
                except BadVersionError:
                    conflicts += 1
                    continue
                winners.append(version)
                done += 1

        await asyncio.gather(increment(first), increment(second))
        total = 2 * increments_per_client
        assert await first.get("/counter") == GetResult(str(total).encode(), total)
        assert sorted(winners) == list(range(1, total + 1)), "each version was won exactly once"

    with_backend(backend, body)


def test_watch_reports_changes_in_order(backend: Backend) -> None:
    async def body() -> None:
        writer, watcher = await backend.client(), await backend.client()
        recorder = Recorder()
        watch = await watcher.watch("/w", recorder)
        expected: list[WatchEvent] = []

        async def step(action, kind: EventKind) -> None:  # type: ignore[no-untyped-def]
            await action
            expected.append(WatchEvent(kind, "/w"))
            await recorder.wait_count(len(expected))

        await step(writer.put("/w", b"1", -1), EventKind.CREATED)
        await step(writer.put("/w", b"2", 0), EventKind.DATA_CHANGED)
        await step(writer.put("/w/child", b"", -1), EventKind.CHILDREN_CHANGED)
        await step(writer.delete("/w/child"), EventKind.CHILDREN_CHANGED)
        await step(writer.delete("/w"), EventKind.DELETED)
        assert recorder.events == expected
        watch.cancel()
        await writer.put("/w", b"after-cancel", -1)
        await writer.put("/marker", b"", -1)
        marker = Recorder()
        await watcher.watch("/marker", marker)
        await writer.put("/marker", b"x", 0)
        await marker.wait_count(1)
        assert recorder.events == expected, "a cancelled watch reports nothing"

    with_backend(backend, body)


def test_ephemeral_node_goes_when_its_session_closes(backend: Backend) -> None:
    async def body() -> None:
        owner, observer = await backend.client(), await backend.client()
        states: list[SessionState] = []
        owner.session.add_listener(states.append)
        assert await owner.create("/live/bookie-1", b"host:3181", ephemeral=True) == "/live/bookie-1"
        assert await observer.exists("/live/bookie-1")
        with pytest.raises(NoChildrenForEphemeralsError):
            await owner.put("/live/bookie-1/child", b"", -1)
        recorder = Recorder()
        await observer.watch("/live/bookie-1", recorder)
        await owner.close()
        assert states == [SessionState.CLOSED]
        await recorder.wait_for(lambda events: WatchEvent(EventKind.DELETED, "/live/bookie-1") in events)
        assert not await observer.exists("/live/bookie-1")
        assert await observer.exists("/live"), "the implicit persistent parent stays"
        with pytest.raises(SessionClosedError):
            await owner.get("/live")

    with_backend(backend, body)


def test_ephemeral_node_goes_when_its_session_expires(backend: Backend) -> None:
    async def body() -> None:
        owner, observer = await backend.client(), await backend.client()
        expired = asyncio.Event()
        owner.session.add_listener(lambda state: expired.set() if state is SessionState.EXPIRED else None)
        await owner.create("/live/bookie-2", b"", ephemeral=True)
        await owner.put("/persistent", b"stays", -1)
        await backend.expire(owner)
        await asyncio.wait_for(expired.wait(), 20)
        assert owner.session.state is SessionState.EXPIRED
        assert not await observer.exists("/live/bookie-2")
        assert await observer.get("/persistent") == GetResult(b"stays", 0)
        with pytest.raises(SessionExpiredError):
            await owner.put("/after", b"", -1)
        await owner.close()
        assert owner.session.state is SessionState.CLOSED

    with_backend(backend, body)


def test_sequential_nodes_are_ordered(backend: Backend) -> None:
    async def body() -> None:
        first, second = await backend.client(), await backend.client()
        created = []
        for index in range(6):
            store = first if index % 2 == 0 else second
            created.append(await store.create("/queue/item-", str(index).encode(), sequential=True))
        assert created == sorted(created)
        assert all(len(path.rsplit("-", 1)[1]) == 10 for path in created)
        assert len(set(created)) == 6
        await first.delete(created[-1])
        later = await first.create("/queue/item-", b"", sequential=True, ephemeral=True)
        assert later > created[-1], "a deletion never lets a counter go back"
        names = await first.children("/queue")
        assert [f"/queue/{n}" for n in names] == [*created[:-1], later]

    with_backend(backend, body)


def test_lock_passes_to_the_next_waiter_when_the_holder_closes(backend: Backend) -> None:
    async def body() -> None:
        holder_store, waiter_store = await backend.client(), await backend.client()
        holder = MetadataLock(holder_store, "/locks/bundle-1", b"broker-a")
        await holder.acquire()
        assert holder.state is LockState.HELD
        assert not await MetadataLock(waiter_store, "/locks/bundle-1", b"broker-x").try_acquire()
        waiter = MetadataLock(waiter_store, "/locks/bundle-1", b"broker-b")
        waiting = asyncio.ensure_future(waiter.acquire())
        await asyncio.sleep(0)
        assert not waiting.done()
        assert await waiter.holder() == b"broker-a"
        await holder_store.close()
        await asyncio.wait_for(waiting, 20)
        assert waiter.state is LockState.HELD and holder.state is LockState.LOST
        assert holder.lost.is_set()
        assert await waiter.holder() == b"broker-b"
        await waiter.release()
        assert waiter.state is LockState.RELEASED
        assert not await waiter_store.exists("/locks/bundle-1")

    with_backend(backend, body)


def test_lock_holder_is_told_when_its_session_expires(backend: Backend) -> None:
    async def body() -> None:
        holder_store, waiter_store = await backend.client(), await backend.client()
        holder = MetadataLock(holder_store, "/locks/auditor", b"a")
        told: list[str] = []
        holder.on_lost(lambda: told.append("lost"))
        await holder.acquire()
        waiter = MetadataLock(waiter_store, "/locks/auditor", b"b")
        waiting = asyncio.ensure_future(waiter.acquire())
        await backend.expire(holder_store)
        await asyncio.wait_for(holder.lost.wait(), 20)
        assert told == ["lost"] and holder.state is LockState.LOST
        await asyncio.wait_for(waiting, 20)
        assert waiter.state is LockState.HELD
        assert await waiter.holder() == b"b"
        with pytest.raises(SessionExpiredError):
            await MetadataLock(holder_store, "/locks/other", b"a").acquire()

    with_backend(backend, body)


def test_lock_holder_loses_the_lock_when_its_node_is_deleted(backend: Backend) -> None:
    async def body() -> None:
        holder_store, other = await backend.client(), await backend.client()
        holder = MetadataLock(holder_store, "/locks/l", b"a")
        await holder.acquire()
        await other.delete("/locks/l")
        await asyncio.wait_for(holder.lost.wait(), 20)
        assert holder.state is LockState.LOST

    with_backend(backend, body)


BAD_PATHS = ["", "relative", "/trailing/", "//double", "/a//b", "/a/./b", "/a/../b", "/nul\x00", "/ctl\x1f"]


@pytest.mark.parametrize("path", BAD_PATHS)
def test_invalid_paths_are_rejected(backend: Backend, path: str) -> None:
    async def body() -> None:
        store = await backend.client()
        for call in (store.get(path), store.put(path, b"", -1), store.children(path), store.exists(path)):
            with pytest.raises(InvalidArgumentError):
                await call

    with_backend(backend, body)


def test_limits_and_bad_arguments_are_typed_errors(backend: Backend) -> None:
    async def body() -> None:
        store = await backend.client()
        with pytest.raises(LimitExceededError) as too_big:
            await store.put("/big", b"x" * (METADATA_VALUE_BYTES_MAX + 1), -1)
        assert too_big.value.limit_name == "METADATA_VALUE_BYTES_MAX"
        assert await store.put("/big", b"x" * METADATA_VALUE_BYTES_MAX, -1) == 0, "the limit itself is allowed"
        with pytest.raises(LimitExceededError) as too_long:
            await store.get("/" + "p" * METADATA_PATH_BYTES_MAX)
        assert too_long.value.limit_name == "METADATA_PATH_BYTES_MAX"
        with pytest.raises(InvalidArgumentError):
            await store.put("/", b"", -1)
        with pytest.raises(InvalidArgumentError):
            await store.delete("/")
        with pytest.raises(InvalidArgumentError):
            await store.put("/v", b"", -2)
        with pytest.raises(InvalidArgumentError):
            await store.put("/v", "text", -1)  # type: ignore[arg-type]

    with_backend(backend, body)
