"""The writers of one ledger client share one add window (``ledger.window``, issue 22, latency
isolation): a lone busy ledger fills the whole window; beside other busy ledgers each starts new
adds only up to its share, so the busiest stops refilling while a light ledger's add waits; the
share grows back (and waiting callers are woken) as soon as the other goes idle or fails.

Large adds (a batched producer's entries) may have more in flight while their writer is alone,
up to ``WINDOW_BYTES_MAX`` of them and ``LARGE_WINDOW_FACTOR`` times the window; small adds keep
the count window, and beside another busy writer the large one gets the count share.

Negative controls: writers of two separate clients do not share, the busy one keeps its whole
window beside the light one; small adds never get the large-add window.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence

from magnetar.base.errors import FencedError
from magnetar.base.rng import SeededRng
from magnetar.base.types import BookieId
from magnetar.ledger.config import LedgerClientConfig
from magnetar.ledger.handle import LedgerHandle, WriterState
from magnetar.ledger.manager import LedgerManager
from magnetar.ledger.placement import RandomPlacement
from magnetar.ledger.window import LARGE_ADD_BYTES_MIN, LARGE_WINDOW_FACTOR, WINDOW_BYTES_MAX, WindowShare
from magnetar.protocol.bookie.codec import EncodedEntry
from tests.ledger.fakes import Cluster, make_cluster
from tests.manual_clock import settle

WINDOW = 8
CONFIG = LedgerClientConfig(pending_adds_count_max=WINDOW, pending_adds_share_count_min=2, add_timeout_ms=0)


class _HeldTransport:
    """Adds are stored nowhere and answered only when the test says so, per ledger."""

    def __init__(self) -> None:
        self.runs: list[tuple[list[EncodedEntry], Callable[[int, BaseException | None], None]]] = []
        self._answered: set[tuple[int, int]] = set()

    def add_run(self, bookie: BookieId, entries: Sequence[EncodedEntry], recovery: bool, master_key: bytes,
                on_reply: Callable[[int, BaseException | None], None]) -> None:
        self.runs.append((list(entries), on_reply))

    def answer(self, ledger_id: int, count: int, error: BaseException | None = None) -> None:
        """Answer the oldest ``count`` unanswered adds of ``ledger_id``."""
        for entries, on_reply in self.runs:
            for index, entry in enumerate(entries):
                key = (entry.ledger_id, entry.entry_id)
                if count and entry.ledger_id == ledger_id and key not in self._answered:
                    self._answered.add(key)
                    count -= 1
                    on_reply(index, error)


def _manager(cluster: Cluster, transport: _HeldTransport) -> LedgerManager:
    return LedgerManager(store=cluster.store, transport=transport, directory=cluster.directory,  # type: ignore[arg-type]
                         placement=RandomPlacement(SeededRng(1)), clock=cluster.clock, config=CONFIG)


async def _two_ledgers() -> tuple[_HeldTransport, LedgerManager, LedgerHandle, LedgerHandle]:
    """One ledger client over held bookies, and two of its ledgers: the heavy and the light one."""
    transport = _HeldTransport()
    manager = _manager(make_cluster(1), transport)
    return transport, manager, await manager.create_ledger(1, 1, 1), await manager.create_ledger(1, 1, 1)


def _add(handle: LedgerHandle, count: int, payload: bytes = b"x") -> list[int | None]:
    told: list[int | None] = []
    handle.append_run([(payload, lambda entry_id, _error: told.append(entry_id))] * count)
    return told


LARGE = b"b" * (100 * 1024)  # a batched entry: 100 x 1 KiB


def test_the_share_is_the_whole_window_alone_and_a_part_beside_others() -> None:
    share = WindowShare(window_max=32, share_min=4)
    assert share.window() == 32
    share.occupy()
    assert share.window() == 32  # one busy writer: all of it
    share.occupy()
    assert share.window() == 16
    for _ in range(10):
        share.occupy()
    assert share.busy == 12 and share.window() == 4  # the floor
    for _ in range(11):
        share.release()
    assert share.window() == 32
    assert WindowShare(window_max=2, share_min=4).share_min == 2  # never above the window


async def test_a_lone_busy_ledger_fills_the_whole_window() -> None:
    transport = _HeldTransport()
    heavy = await _manager(make_cluster(1), transport).create_ledger(1, 1, 1)
    assert heavy.room() == WINDOW
    _add(heavy, WINDOW)
    assert heavy.room() == 0 and not heavy.has_room()
    transport.answer(heavy.ledger_id, 3)
    assert heavy.room() == 3


async def test_beside_a_light_ledger_the_busy_one_refills_only_to_its_share() -> None:
    transport, manager, heavy, light = await _two_ledgers()
    _add(heavy, WINDOW)
    light_told = _add(light, 1)
    assert manager.window.busy == 2 and manager.window.window() == WINDOW // 2
    transport.answer(heavy.ledger_id, 5)  # 3 left in flight: alone it could start 5 more
    assert heavy.room() == WINDOW // 2 - 3 == 1
    assert light.room() == WINDOW // 2 - 1  # the light one is never held below its share
    # The share limits admission only: a run already taken is never refused below the window.
    _add(heavy, 5)
    assert heavy.pending_count == WINDOW
    transport.answer(light.ledger_id, 1)
    assert light_told == [0] and manager.window.busy == 1
    transport.answer(heavy.ledger_id, 5)
    assert heavy.room() == WINDOW - 3  # alone again: the whole window


async def test_a_waiting_caller_is_woken_when_the_other_ledger_goes_idle() -> None:
    transport, _, heavy, light = await _two_ledgers()
    _add(heavy, WINDOW // 2)
    _add(light, 1)
    waiting = asyncio.ensure_future(heavy.wait_for_room())
    await settle()
    assert not waiting.done()  # at its share (4 of 8) while the light ledger has an add in flight
    transport.answer(light.ledger_id, 1)  # no heavy completion comes: the release itself wakes it
    await settle()
    assert waiting.done() and heavy.room() == WINDOW // 2


async def test_a_failed_ledger_gives_its_share_back() -> None:
    transport, manager, heavy, light = await _two_ledgers()
    _add(heavy, WINDOW)
    told = _add(light, 1)
    transport.answer(light.ledger_id, 1, FencedError("fenced by another writer"))
    assert light.state is WriterState.FAILED and told == [None]
    assert manager.window.busy == 1
    transport.answer(heavy.ledger_id, 4)
    assert heavy.room() == 4  # the whole window again, not the share beside a dead writer


async def test_negative_control_writers_of_separate_clients_do_not_share() -> None:
    transport = _HeldTransport()
    cluster = make_cluster(1)
    heavy = await _manager(cluster, transport).create_ledger(1, 1, 1)
    light = await _manager(cluster, transport).create_ledger(1, 1, 1)
    _add(heavy, WINDOW)
    _add(light, 1)
    transport.answer(heavy.ledger_id, 5)
    assert heavy.room() == 5  # not held to a share: the light ledger's add counts elsewhere


def test_the_large_add_window_arithmetic() -> None:
    share = WindowShare(window_max=32, share_min=4)
    share.occupy()
    small = 32 * 1024
    assert share.window_for(32, small) == 32  # 1 KiB adds: the count window
    assert share.window_for(0, 0) == 32
    large = 100 * 1024
    # 32 adds of 100 KiB in flight (3.2 MiB): as many more as fit below 8 MiB, at most 4x.
    assert share.window_for(32, 32 * large) == 32 + (WINDOW_BYTES_MAX - 32 * large) // large == 81
    assert share.window_for(81, 81 * large) == 81  # full in bytes: no more
    assert share.window_for(90, 90 * large) == 81  # beyond it in bytes: none until some complete
    assert share.window_for(4, 4 * LARGE_ADD_BYTES_MIN) == 32 * LARGE_WINDOW_FACTOR  # capped in count
    assert share.window_for(4, 4 * 5 * 1024 * 1024) == 32  # huge adds: never below the count window
    share.occupy()  # another writer is busy: the count share, whatever the size
    assert share.window_for(32, 32 * large) == 16


async def test_a_lone_writer_of_large_adds_has_more_in_flight() -> None:
    transport = _HeldTransport()
    heavy = await _manager(make_cluster(1), transport).create_ledger(1, 1, 1)
    _add(heavy, WINDOW, LARGE)
    grown = WINDOW + (WINDOW_BYTES_MAX - WINDOW * len(LARGE)) // len(LARGE)
    limit = min(grown, WINDOW * LARGE_WINDOW_FACTOR)
    assert limit > WINDOW
    assert heavy.room() == limit - WINDOW and heavy.has_room()
    _add(heavy, limit - WINDOW, LARGE)  # taken, not refused
    assert heavy.pending_count == limit and heavy.room() == 0


async def test_negative_control_small_adds_keep_the_count_window() -> None:
    transport = _HeldTransport()
    heavy = await _manager(make_cluster(1), transport).create_ledger(1, 1, 1)
    _add(heavy, WINDOW, b"s" * 1024)
    assert heavy.room() == 0 and not heavy.has_room()


async def test_beside_a_light_ledger_large_adds_get_the_count_share() -> None:
    transport, _, heavy, light = await _two_ledgers()
    _add(heavy, WINDOW, LARGE)
    _add(heavy, heavy.room(), LARGE)
    in_flight = heavy.pending_count
    assert in_flight > WINDOW
    _add(light, 1)
    assert heavy.room() == 0  # the light add waits behind what is in flight, no more
    transport.answer(heavy.ledger_id, in_flight - 2)
    assert heavy.room() == WINDOW // 2 - 2  # the count share beside a busy ledger
    transport.answer(light.ledger_id, 1)
    assert heavy.room() > WINDOW - 2  # alone again: the large-add window
