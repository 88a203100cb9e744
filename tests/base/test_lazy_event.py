"""``LazyEvent`` behaves as ``asyncio.Event`` (set wakes every waiter, clear blocks later waits, a
cancelled waiter leaves) and holds no waiter list while nobody waits."""

from __future__ import annotations

import asyncio

from magnetar.base.lazy_event import LazyEvent


def test_set_wakes_every_waiter_and_clear_blocks_later_ones() -> None:
    async def main() -> None:
        event = LazyEvent()
        waiters = [asyncio.ensure_future(event.wait()) for _ in range(3)]
        await asyncio.sleep(0)  # one loop pass (no time passes): the waiters start waiting
        assert not any(w.done() for w in waiters) and event._waiters is not None
        event.set()
        assert await asyncio.gather(*waiters) == [True, True, True]
        assert event._waiters is None  # nobody waits: no list kept
        assert await event.wait() is True  # set: returns at once
        event.clear()
        late = asyncio.ensure_future(event.wait())
        await asyncio.sleep(0)  # one loop pass (no time passes): the waiters start waiting
        assert not late.done()
        event.set()
        assert await late is True
    asyncio.run(main())


def test_a_cancelled_waiter_leaves_the_list() -> None:
    async def main() -> None:
        event = LazyEvent()
        gone = asyncio.ensure_future(event.wait())
        kept = asyncio.ensure_future(event.wait())
        await asyncio.sleep(0)  # one loop pass (no time passes): the waiters start waiting
        gone.cancel()
        await asyncio.sleep(0)  # one loop pass (no time passes): the waiters start waiting
        assert event._waiters is not None and len(event._waiters) == 1
        event.set()
        assert await kept is True and gone.cancelled()
    asyncio.run(main())


def test_starts_set_when_asked() -> None:
    assert LazyEvent(is_set=True).is_set() and not LazyEvent().is_set()
