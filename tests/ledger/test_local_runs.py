"""Many ledgers' adds of one loop pass through ``LocalFirstTransport`` into a real in-process
bookie (``Bookie.add_entries_runs``): per ledger in order, one ledger's failure or held fault
point neither fails nor holds the others (issue 22, "one receive, many topics")."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path

from magnetar import faults
from magnetar.base.errors import FencedError
from magnetar.base.rng import SeededRng
from magnetar.base.types import BookieId
from magnetar.broker.dispatcher import next_loop_pass
from magnetar.faults.points import InjectedFaultError
from magnetar.ledger.handle import LedgerHandle, WriterState
from magnetar.ledger.manager import LedgerManager
from magnetar.node.ledger import LocalFirstTransport, close_ledger_manager, open_ledger_manager
from magnetar.runtime.bookie import RunningBookie, start_bookie
from magnetar.runtime.clock import SystemClock
from magnetar.runtime.metadata import open_metadata_store
from magnetar.runtime.network import TcpNetwork
from magnetar.storage import BookieConfig

KEY = b"runs-key"
Outcomes = dict[int, list[tuple[int | None, str]]]


async def _with_ledgers(tmp_path: Path, count: int,
                        body: Callable[[RunningBookie, LedgerManager, list[LedgerHandle]], Awaitable[None]]) -> None:
    store = await open_metadata_store("memory:")
    config = BookieConfig(host="127.0.0.1", port=0, data_dir=str(tmp_path / "bookie"), gc_interval_ms=0,
                          disk_free_bytes_min=0)
    clock = SystemClock()
    running = await start_bookie(config, store=store, clock=clock, network=TcpNetwork())
    bookie = BookieId.parse(running.bookie_id)
    manager = await open_ledger_manager(store, network=TcpNetwork(), clock=clock, rng=SeededRng(7),
                                        master_key=KEY, local_bookies={bookie: running.bookie})
    try:
        handles = [await manager.create_ledger(1, 1, 1) for _ in range(count)]
        await body(running, manager, handles)
    finally:
        faults.disarm_all()
        await close_ledger_manager(manager)
        await running.stop()
        await store.close()


def _add(handle: LedgerHandle, outcomes: Outcomes, payload: bytes) -> None:
    """One add of ``handle``; its outcome lands in ``outcomes[ledger id]`` in completion order."""
    def on_done(entry_id: int | None, error: BaseException | None) -> None:
        outcomes.setdefault(handle.ledger_id, []).append((entry_id, "ok" if error is None else type(error).__name__))
    handle.append_then(payload, on_done)


async def _until(condition: Callable[[], bool], seconds: float = 10.0) -> None:
    """Wait for ``condition`` (journal fsyncs are real), failing after ``seconds``."""
    async def poll() -> None:
        while not condition():
            await next_loop_pass()  # the fsync completes on its own thread; its answer in a pass
    await asyncio.wait_for(poll(), seconds)


def _transport(manager: LedgerManager) -> LocalFirstTransport:
    transport = manager._transport  # the wiring under test
    assert isinstance(transport, LocalFirstTransport)
    return transport


def test_the_adds_of_many_ledgers_in_one_pass_go_together_and_complete_in_order_per_ledger(tmp_path: Path) -> None:
    async def body(running: RunningBookie, manager: LedgerManager, handles: list[LedgerHandle]) -> None:
        outcomes: Outcomes = {}
        for round_ in range(3):  # one pass: a receive's SENDs round-robin over 4 topics, 3 times
            for handle in handles:
                _add(handle, outcomes, b"%d-%d" % (handle.ledger_id, round_))
        await _until(lambda: sum(len(v) for v in outcomes.values()) == 12)
        assert _transport(manager).gathered_runs_count == 11  # all but the pass's first in one call
        for handle in handles:
            assert outcomes[handle.ledger_id] == [(0, "ok"), (1, "ok"), (2, "ok")]
            for entry_id in range(3):
                read = running.bookie.read_entry(handle.ledger_id, entry_id)
                assert read.raw is not None and bytes(read.raw).endswith(b"%d-%d" % (handle.ledger_id, entry_id))

    asyncio.run(_with_ledgers(tmp_path, 4, body))


def test_a_fenced_ledger_beside_good_ones_in_one_pass_fails_alone(tmp_path: Path) -> None:
    async def body(running: RunningBookie, manager: LedgerManager, handles: list[LedgerHandle]) -> None:
        good_a, fenced, good_b = handles
        await running.bookie.fence(fenced.ledger_id, KEY)  # another writer recovered it
        outcomes: Outcomes = {}
        for handle in (good_a, fenced, good_b):  # the fenced one's run between the others
            _add(handle, outcomes, b"x")
        _add(good_b, outcomes, b"y")
        await _until(lambda: len(outcomes.get(good_b.ledger_id, ())) == 2 and fenced.ledger_id in outcomes)
        assert outcomes[good_a.ledger_id] == [(0, "ok")]
        assert outcomes[good_b.ledger_id] == [(0, "ok"), (1, "ok")]
        assert outcomes[fenced.ledger_id] == [(None, FencedError.__name__)]
        assert fenced.state is WriterState.FAILED and good_a.state is good_b.state is WriterState.OPEN
        _add(good_a, outcomes, b"z")  # the bookie and the transport still serve the others
        await _until(lambda: len(outcomes[good_a.ledger_id]) == 2)
        assert outcomes[good_a.ledger_id][1] == (1, "ok")

    asyncio.run(_with_ledgers(tmp_path, 3, body))


def test_a_fault_point_held_on_one_ledger_holds_only_that_ledger(tmp_path: Path) -> None:
    async def body(_running: RunningBookie, _manager: LedgerManager, handles: list[LedgerHandle]) -> None:
        first, second, held = handles
        outcomes: Outcomes = {}
        faults.arm("ledger.before_send", "hang", from_hit=3)  # the third add of the pass: ``held``'s
        for handle in (first, second, held):
            _add(handle, outcomes, b"a")
        await _until(lambda: first.ledger_id in outcomes and second.ledger_id in outcomes)
        assert held.ledger_id not in outcomes and held.pending_count == 1  # control: it is held
        faults.release("ledger.before_send")
        _add(held, outcomes, b"b")  # behind the held one, in order
        await _until(lambda: len(outcomes.get(held.ledger_id, ())) == 2)
        assert outcomes[held.ledger_id] == [(0, "ok"), (1, "ok")]
        assert outcomes[first.ledger_id] == outcomes[second.ledger_id] == [(0, "ok")]

    asyncio.run(_with_ledgers(tmp_path, 3, body))


def test_an_error_injected_on_one_ledger_fails_only_that_ledger(tmp_path: Path) -> None:
    async def body(_running: RunningBookie, _manager: LedgerManager, handles: list[LedgerHandle]) -> None:
        first, second, failing = handles
        outcomes: Outcomes = {}
        faults.arm("ledger.before_send", "error", from_hit=3)
        for handle in (first, second, failing):
            _add(handle, outcomes, b"a")
        faults.disarm_all()
        await _until(lambda: len(outcomes) == 3)
        assert outcomes[first.ledger_id] == outcomes[second.ledger_id] == [(0, "ok")]
        assert outcomes[failing.ledger_id][0][0] is None and failing.state is WriterState.FAILED
        assert first.state is second.state is WriterState.OPEN
        assert isinstance(failing._failure, InjectedFaultError)

    asyncio.run(_with_ledgers(tmp_path, 3, body))
